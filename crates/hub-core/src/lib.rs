//! The Streaming Hub domain, with no I/O.
//!
//! Everything here is a pure function of its inputs: envelopes are parsed from header lists and
//! bodies, verdicts are decided, and (as the product grows) filters are matched and delivery
//! decisions are taken with the clock and randomness passed in. No async runtime, database, HTTP
//! or broker crate is a dependency of this crate; keep it that way.
#![forbid(unsafe_code)]

pub mod capture;
pub mod catalog;
pub mod delivery;
pub mod envelope;
pub mod filter;
pub mod ids;
pub mod ledger;
pub mod netpolicy;
pub mod oidc;
pub mod operational;
pub mod pull;
pub mod ratelimit;
pub mod replay;
pub mod routing;
pub mod seal;
pub mod signature;
pub mod structured;
pub mod subscription;

pub use structured::structured_to_binary;

pub use envelope::{
    DiscardReason, Envelope, IngestPolicy, MAX_BODY_BYTES, QuarantineReason, ReasonCode, Verdict, judge,
};
pub use filter::{Admission, EventPattern, MatchRule, admission, admits, patterns_matching, wants};
pub use ids::{CeId, EventKey, IdError, Source, TenantId, topic_source};
pub use subscription::{Ordering, SinkKind, VerificationState};
