//! The delivery job lifecycle (SPEC §3), pure: the clock and the randomness are inputs.
//!
//! - [`JobState`]: the states a job moves through; [`settle`] decides, from one attempt's facts
//!   and its classified outcome, the job's next state and the subscription's health change.
//! - [`RetryPolicy`]: the delay before each attempt (full jitter over a fixed curve), the attempt
//!   limit, and the last-attempt rule (an attempt that starts `deadline` or more after the job's
//!   window opened — the event's arrival — is its last).
//! - [`Breaker`]: one per (tenant, destination); opens after consecutive failures, lets a job's
//!   last attempt through anyway, and half-opens after a cool-down that doubles while probes fail.
//! - [`should_auto_disable`]: a failure period that is both continuous for the window and spread
//!   over at least the spread disables the subscription; any success clears the period.
//! - [`is_poison`]: a job whose lease expired without an outcome too many times.
//! - [`fair_shares`]: how one claim spreads over the tenants with due work.
//! - [`inflight`]: attempts in flight: a destination's adaptive allowance, a subscription's
//!   limits and pace, a tenant's share of the slots.
//! - [`owners`]: which replica paces a destination when several deliver.
//!
//! The store and the dispatcher only carry these decisions out.

mod breaker;
mod health;
pub mod inflight;
mod job;
pub mod owners;
mod retry;
mod settle;
pub mod stats;

use std::time::Duration;

use chrono::{DateTime, Utc};

pub use breaker::{Breaker, BreakerConfig, Permit, Transition};
pub use health::should_auto_disable;
pub use job::{JobState, fair_shares, is_poison, waiting_state};
pub use retry::{AfterFailure, DeadReason, RetryPolicy};
pub use settle::{AttemptFacts, AutoDisable, HealthChange, JobTransition, OutcomeClass, Settlement, settle};

/// `t + d`, saturating instead of overflowing.
fn add(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}
