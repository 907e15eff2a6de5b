//! Delivery jobs: claims, attempts, recoveries, dead-letter records and pruning.

use super::JobState;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

fn job_state_str<S: serde::Serializer>(state: &JobState, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(state.as_str())
}

/// One delivery job: an event to push to one subscription.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeliveryJob {
    pub id: Uuid,
    pub tenant_id: String,
    pub subscription_id: Uuid,
    pub event_seq: i64,
    #[serde(serialize_with = "job_state_str")]
    pub state: JobState,
    pub attempts: i32,
    pub recoveries: i32,
    pub due_at: DateTime<Utc>,
    pub event_received_at: DateTime<Utc>,
    pub window_start: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// An ordering key with jobs waiting behind its head (the earliest job not yet settled).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockedKey {
    pub key: String,
    /// Jobs waiting behind the head.
    pub waiting: i64,
    pub head: DeliveryJob,
}

/// A request for due jobs.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub now: DateTime<Utc>,
    pub lease_until: DateTime<Utc>,
    /// Marks this claim: only its holder can complete or release the jobs.
    pub token: Uuid,
    pub limit: u32,
    /// Tenants are visited in order starting after this one (fair rotation).
    pub after_tenant: Option<String>,
    /// Subscriptions whose destination is saturated: none of their jobs is claimed.
    pub exclude_subscriptions: Vec<Uuid>,
    /// Who claims, and the destination buckets it paces: only their jobs are claimed.
    pub owned: crate::Owned,
}

/// What one claim leased, and where the tenant rotation stands after it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claim {
    pub jobs: Vec<ClaimedJob>,
    /// The last tenant the claim visited; `None` when no tenant had due work.
    pub visited: Option<String>,
}

/// A job leased to one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedJob {
    pub id: Uuid,
    pub tenant_id: String,
    pub subscription_id: Uuid,
    pub event_seq: i64,
    /// Attempts already made.
    pub attempts: i32,
    pub recoveries: i32,
    pub window_start: DateTime<Utc>,
    pub event_received_at: DateTime<Utc>,
    pub token: Uuid,
}

/// One delivery attempt as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRecord {
    /// The delivery id (`X-Lerian-Delivery-Id`).
    pub id: Uuid,
    pub job_id: Uuid,
    pub tenant_id: String,
    pub subscription_id: Uuid,
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    pub latency_ms: i64,
    /// `delivered` or `failed`.
    pub outcome: String,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub response_body: Option<String>,
    /// Its entry in the tenant's ledger (set when it is recorded).
    pub ledger_index: Option<i64>,
}

pub use hub_core::delivery::{HealthChange, JobTransition};

/// The outcome of one attempt, written in one transaction.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub token: Uuid,
    pub record: AttemptRecord,
    pub transition: JobTransition,
    pub health: HealthChange,
    pub now: DateTime<Utc>,
    /// Its ledger entry (SPEC §11), appended to the tenant's log with it.
    pub ledger: Option<crate::NewLedgerEntry>,
}

/// What writing an attempt changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    /// False when the lease had been lost: the attempt is recorded, the job left to its new holder.
    pub job_updated: bool,
    /// The subscription was disabled by this attempt.
    pub disabled: bool,
}

/// Expired leases handled by one recovery pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    pub recovered: u64,
    pub poisoned: u64,
}

/// A record observed on a `.dlq` topic.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDlqRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The producing application (the `<source>` of `lerian.streaming.<source>.dlq`).
    pub source: String,
    pub tenant_id: Option<String>,
    pub ce_id: Option<String>,
    pub ce_type: Option<String>,
    pub error_class: Option<String>,
    pub error_message: Option<String>,
    /// The record's `ce-*` and `x-lerian-dlq-*` headers.
    pub headers: BTreeMap<String, String>,
    /// The body, capped like a quarantined one; empty when the producer omitted it.
    pub body: Vec<u8>,
    pub body_bytes: i64,
    pub payload_omitted: bool,
    pub record_timestamp: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
}

/// A stored DLQ-plane record.
#[derive(Debug, Clone, PartialEq)]
pub struct DlqEntry {
    pub id: i64,
    pub record: NewDlqRecord,
}

/// Filters of the DLQ listing; every present field must match.
#[derive(Debug, Clone, Default)]
pub struct DlqFilter {
    pub source: Option<String>,
    pub tenant: Option<String>,
    pub error_class: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub before_id: Option<i64>,
    pub limit: u32,
}

/// What a retention pass deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneKind {
    /// Quarantined records by arrival.
    Quarantine,
    /// Succeeded, dead and cancelled jobs (with their attempts) by when they finished.
    FinishedJobs,
    /// Inbox events by arrival that no job refers to any more (with their pull entries).
    Events,
    /// DLQ-plane records by arrival.
    Dlq,
    /// Types seen in an inbox, by when they were last seen.
    SeenTypes,
    /// Subscriptions' per-minute statistics, by minute.
    Minutes,
    /// Portal sessions and people's console sessions, by when they expired.
    Sessions,
    /// Each log's oldest ledger entries, with the nodes and checkpoints over them, by when they
    /// were recorded (a month at a time on PostgreSQL, see docs/LEDGER.md).
    Ledger,
}

impl PruneKind {
    pub const ALL: [PruneKind; 8] = [
        Self::Quarantine,
        Self::FinishedJobs,
        Self::Events,
        Self::Dlq,
        Self::SeenTypes,
        Self::Minutes,
        Self::Sessions,
        Self::Ledger,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Quarantine => "quarantine",
            Self::FinishedJobs => "finished_jobs",
            Self::Events => "events",
            Self::Dlq => "dlq",
            Self::SeenTypes => "seen_types",
            Self::Minutes => "subscription_minutes",
            Self::Sessions => "sessions",
            Self::Ledger => "ledger",
        }
    }
}

/// One minute of a subscription's deliveries, or a roll-up of attempts to add to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinuteStats {
    pub tenant_id: String,
    pub subscription_id: Uuid,
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Attempts that delivered.
    pub delivered: i64,
    /// Attempts that failed (a dead letter's last attempt included).
    pub failed: i64,
    /// Jobs dead-lettered.
    pub dead: i64,
    /// Deliveries the subscription's transform skipped (SPEC §10).
    pub skipped: i64,
    /// Attempt latencies by bucket (`hub_core::delivery::stats`).
    pub latency: hub_core::delivery::stats::Histogram,
    /// Pending and held jobs when the minute was sampled; `None` when it was not.
    pub backlog: Option<i64>,
}

/// A subscription's open jobs (pending and held), for the backlog sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    pub tenant_id: String,
    pub subscription_id: Uuid,
    pub jobs: i64,
}
