//! The records the store reads and writes, one file per concept; every type is re-exported here.

mod catalog;
mod erasures;
mod events;
mod jobs;
mod keys;
mod ledger;
mod matching;
mod reads;
mod replicas;
mod subscriptions;

pub use catalog::*;
pub use erasures::*;
pub use events::*;
pub use jobs::*;
pub use keys::*;
pub use ledger::*;
pub(crate) use matching::*;
pub use matching::{FILTER_BUDGET_EXCEEDED, filter_budget, set_filter_budget};
pub use reads::*;
pub use replicas::*;
pub use subscriptions::*;
