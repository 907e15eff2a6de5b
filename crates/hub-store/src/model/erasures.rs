//! Erasures (SPEC §10) as stored: the request, its progress over the inbox, and its counts. The
//! match is kept sealed while the erasure runs and dropped when it is done; the record stays as
//! the erasure's audit trail.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

/// A new erasure.
#[derive(Debug, Clone)]
pub struct NewErasure {
    pub id: Uuid,
    pub tenant_id: String,
    /// `subject`, `partitionkey` or `data`.
    pub match_kind: String,
    /// The match's value, sealed.
    pub sealed_match: Vec<u8>,
    pub reason: String,
    /// Who asked (the admin token, or an admin key by id and name).
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
}

/// What an erasure changed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErasureCounts {
    /// Inbox events read.
    pub scanned: i64,
    /// Events whose payload became a tombstone.
    pub events: i64,
    /// Their pending or held jobs, cancelled.
    pub jobs_cancelled: i64,
    /// Recorded response bodies of their attempts, removed.
    pub responses: i64,
    /// Records of the Kafka DLQ plane made tombstones.
    pub dlq_records: i64,
    /// Quarantined records made tombstones.
    pub quarantined: i64,
}

impl std::ops::AddAssign for ErasureCounts {
    fn add_assign(&mut self, o: Self) {
        self.scanned += o.scanned;
        self.events += o.events;
        self.jobs_cancelled += o.jobs_cancelled;
        self.responses += o.responses;
        self.dlq_records += o.dlq_records;
        self.quarantined += o.quarantined;
    }
}

/// A stored erasure.
#[derive(Debug, Clone, PartialEq)]
pub struct ErasureRecord {
    pub id: Uuid,
    pub tenant_id: String,
    pub match_kind: String,
    /// `None` once done.
    pub sealed_match: Option<Vec<u8>>,
    pub reason: String,
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
    /// `running` or `done`.
    pub state: String,
    /// Every inbox event up to this seq has been judged.
    pub scanned_to: i64,
    pub counts: ErasureCounts,
    pub finished_at: Option<DateTime<Utc>>,
}

/// One step of an erasure over the inbox: the events of a page it matched, where the page ended.
#[derive(Debug, Clone)]
pub struct ErasureStep<'a> {
    pub erasure: Uuid,
    pub tenant_id: &'a str,
    /// The matched events' seqs.
    pub seqs: &'a [i64],
    /// What an erased payload becomes.
    pub tombstone: &'a [u8],
    /// The last seq the page read, and how many it read.
    pub scanned_to: i64,
    pub scanned: i64,
    pub now: DateTime<Utc>,
    /// The runner's lease, renewed.
    pub lease_until: DateTime<Utc>,
}

/// The records of the DLQ plane or the quarantine an erasure turns into tombstones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeptRecords {
    Dlq,
    Quarantine,
}
