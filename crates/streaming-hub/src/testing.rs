//! What `hub-bench` and the integration suite reach inside the hub, and nothing else: clocks they
//! move, keys and sealed credentials they write straight to a store, the event catalog's parts
//! and the Kafka batch writer they drive without a broker, and the rollup of delivery figures.
//! The rest of the crate is `pub(crate)`.

pub use crate::catalog::EventCatalog;
pub use crate::catalog::learn::Learner;
pub use crate::catalog::payloads;
pub use crate::clock::{Clock, ShiftedClock, SystemClock};
pub use crate::delivery::stats::Rollup;
pub use crate::ingest::KafkaEvents;
pub use crate::ingest::kafka;
pub use crate::keys::{API_KEY_PREFIX, generate as generate_key, hash as hash_key};
pub use crate::secrets::{Purpose, Sealer, load_kek};
