//! The ingest pipeline shared by every entry point (HTTP now, Kafka as well): a verdict from
//! `hub-core`, the record to store, and the count by verdict.

use chrono::{DateTime, Utc};
use hub_core::{IngestPolicy, QuarantineReason, Verdict, judge};
use hub_store::{AcceptedEvent, IngestRecord, Origin, QuarantinedRecord, WriteOutcome};

use crate::telemetry::metric;

pub mod dlq;
pub mod kafka;

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

/// The ingest consumer's writer: each partition batch is judged and written in one transaction.
#[derive(Debug, Clone)]
pub struct KafkaEvents {
    pub store: std::sync::Arc<dyn hub_store::Store>,
    pub policy: std::sync::Arc<IngestPolicy>,
    pub clock: std::sync::Arc<dyn crate::clock::Clock>,
    /// Woken when the batch created work.
    pub wake: std::sync::Arc<tokio::sync::Notify>,
}

impl kafka::BatchWriter for KafkaEvents {
    async fn write(&self, records: &[rdkafka::message::OwnedMessage]) -> Result<(), String> {
        use rdkafka::Message;
        let now = self.clock.now();
        let judged: Vec<Judged> = records
            .iter()
            .map(|m| {
                let origin =
                    Origin::Kafka { topic: m.topic().to_owned(), partition: m.partition(), offset: m.offset() };
                judge_record(
                    &kafka::headers(m),
                    m.payload().unwrap_or_default(),
                    Some(m.topic()),
                    origin,
                    &self.policy,
                    now,
                )
            })
            .collect();
        let batch: Vec<IngestRecord> = judged.iter().filter_map(|j| j.record.clone()).collect();
        let written = self.store.write_batch(&batch).await.map_err(|e| e.to_string())?;
        let mut written = written.into_iter();
        let mut inserted = false;
        for j in judged {
            let w = if j.record.is_some() { written.next() } else { None };
            inserted |= matches!(w, Some(WriteOutcome::Inserted { .. }));
            outcome(j.reason, w);
        }
        if inserted {
            self.wake.notify_one();
        }
        Ok(())
    }
}
