//! The ingest pipeline shared by every entry point (HTTP now, Kafka as well): a verdict from
//! `hub-core`, the record to store, and the count by verdict.

use chrono::{DateTime, Utc};
use hub_core::{IngestPolicy, QuarantineReason, Verdict, judge};
use hub_store::{AcceptedEvent, IngestRecord, Origin, QuarantinedRecord, WriteOutcome};

use crate::telemetry::metric;

/// What happened to one record, as the producer is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Accepted { seq: i64 },
    Duplicate { seq: i64 },
    Discarded,
    Quarantined(QuarantineReason),
}

impl Outcome {
    pub fn verdict_label(&self) -> &'static str {
        match self {
            Outcome::Accepted { .. } => "accepted",
            Outcome::Duplicate { .. } => "duplicate",
            Outcome::Discarded => "discarded",
            Outcome::Quarantined(_) => "quarantined",
        }
    }
}

/// A judged record: what to store (nothing for a discard) and what to report once it is stored.
#[derive(Debug)]
pub struct Judged {
    pub record: Option<IngestRecord>,
    pub reason: Option<QuarantineReason>,
}

/// Judges one record and builds what is to be stored.
pub fn judge_record<K, V>(
    headers: &[(K, V)],
    body: &[u8],
    topic: Option<&str>,
    origin: Origin,
    policy: &IngestPolicy,
    received_at: DateTime<Utc>,
) -> Judged
where
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let pairs = headers.iter().map(|(k, v)| (k.as_ref(), v.as_ref()));
    match judge(pairs.clone(), body, topic, policy) {
        Verdict::Accept(envelope) => Judged {
            record: Some(IngestRecord::Accepted(AcceptedEvent {
                envelope: *envelope,
                payload: body.to_vec(),
                origin,
                received_at,
            })),
            reason: None,
        },
        Verdict::Discard(_) => Judged { record: None, reason: None },
        Verdict::Quarantine(reason) => quarantine_record(headers, body, reason, origin, received_at),
    }
}

/// A record that is malformed before the envelope rules apply (a structured-mode document that
/// is not a CloudEvent): quarantined with the given reason.
pub fn quarantine_record<K, V>(
    headers: &[(K, V)],
    body: &[u8],
    reason: QuarantineReason,
    origin: Origin,
    received_at: DateTime<Utc>,
) -> Judged
where
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let pairs = headers.iter().map(|(k, v)| (k.as_ref(), v.as_ref()));
    Judged {
        record: Some(IngestRecord::Quarantined(QuarantinedRecord::capture(
            pairs,
            body,
            reason.clone(),
            origin,
            received_at,
        ))),
        reason: Some(reason),
    }
}

/// Turns a stored outcome into the producer-facing one and counts it.
pub fn outcome(judged_reason: Option<QuarantineReason>, written: Option<WriteOutcome>) -> Outcome {
    let outcome = match (judged_reason, written) {
        (Some(reason), _) => Outcome::Quarantined(reason),
        (None, Some(WriteOutcome::Inserted { seq })) => Outcome::Accepted { seq },
        (None, Some(WriteOutcome::Duplicate { seq })) => Outcome::Duplicate { seq },
        (None, _) => Outcome::Discarded,
    };
    metrics::counter!(metric::INGEST_RECORDS, "verdict" => outcome.verdict_label()).increment(1);
    outcome
}
