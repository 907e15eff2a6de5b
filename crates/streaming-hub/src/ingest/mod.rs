//! The ingest pipeline shared by every entry point (HTTP now, Kafka as well): a verdict from
//! `hub-core`, the record to store, and the count by verdict.

use chrono::{DateTime, Utc};
use hub_core::{IngestPolicy, QuarantineReason, Verdict, judge};
use hub_store::{AcceptedEvent, IngestRecord, Origin, QuarantinedRecord, WriteOutcome};

use crate::telemetry::metric;

pub mod dlq;
pub mod kafka;
pub mod outage;
mod room;

pub(crate) use room::{Handle, start};

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
    /// While traces are exported, an accepted record's spans (`crate::trace`): they end when
    /// this is dropped, after the write.
    pub spans: Option<Spans>,
}

/// An accepted record's `ingest` span and the `write` span under it.
#[derive(Debug)]
pub struct Spans {
    pub ingest: tracing::Span,
    pub write: tracing::Span,
}

impl Spans {
    /// Opens the spans of an accepted event, the ingest span under the producer's trace context
    /// when it sent a valid one, and stores the write span's context with the event.
    fn open(event: &mut AcceptedEvent) -> Option<Self> {
        if !crate::trace::on() {
            return None;
        }
        let env = &event.envelope;
        let ingest = tracing::info_span!(
            target: "streaming_hub::trace",
            "ingest",
            otel.kind = "consumer",
            tenant = %env.tenant(),
            ce_id = %env.id().as_uuid(),
            event_key = %env.key(),
            origin = event.origin.kind(),
            verdict = tracing::field::Empty,
            seq = tracing::field::Empty,
        );
        crate::trace::continue_from(&ingest, &[crate::trace::remote(env.traceparent(), env.tracestate())]);
        let write = tracing::info_span!(target: "streaming_hub::trace", parent: &ingest, "write");
        event.trace = crate::trace::traceparent(&write);
        Some(Self { ingest, write })
    }

    /// Ends both spans with what became of the record.
    pub fn finish(self, outcome: &Outcome) {
        self.ingest.record("verdict", outcome.verdict_label());
        if let Outcome::Accepted { seq } | Outcome::Duplicate { seq } = outcome {
            self.ingest.record("seq", seq);
        }
        drop(self.write);
    }
}

/// Judges one record and builds what is to be stored; an accepted event's body is checked
/// against its declared schema when `payloads` asks for it.
pub fn judge_record<K, V>(
    headers: &[(K, V)],
    body: &[u8],
    topic: Option<&str>,
    origin: Origin,
    policy: &IngestPolicy,
    payloads: &crate::catalog::payloads::Payloads,
    received_at: DateTime<Utc>,
) -> Judged
where
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let pairs = headers.iter().map(|(k, v)| (k.as_ref(), v.as_ref()));
    match judge(pairs.clone(), body, topic, policy) {
        Verdict::Accept(envelope) => {
            if let Some(reason) = payloads.check(&envelope, body) {
                return quarantine_record(headers, body, reason, origin, received_at);
            }
            let mut event =
                AcceptedEvent { envelope: *envelope, payload: body.to_vec(), origin, received_at, trace: None };
            let spans = Spans::open(&mut event);
            Judged { record: Some(IngestRecord::Accepted(event)), reason: None, spans }
        }
        Verdict::Discard(_) => Judged { record: None, reason: None, spans: None },
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
        spans: None,
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
    /// Payload checks, and the types learned from what is written.
    pub catalog: std::sync::Arc<crate::catalog::EventCatalog>,
    pub clock: std::sync::Arc<dyn crate::clock::Clock>,
    /// Woken when the batch created work.
    pub wake: std::sync::Arc<tokio::sync::Notify>,
    /// This process's dispatcher, which takes the batch's jobs as they are written while it has
    /// room (see [`GroupWriter::start`]).
    pub fast: Option<crate::delivery::Handoff>,
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
                let body = m.payload().unwrap_or_default();
                match kafka::headers(m) {
                    Ok(headers) => {
                        judge_record(&headers, body, Some(m.topic()), origin, &self.policy, &self.catalog.payloads, now)
                    }
                    Err(bad) => {
                        let reason = QuarantineReason::new(
                            hub_core::ReasonCode::InvalidHeader,
                            "headers",
                            format!("the key of header {} is not UTF-8 text", bad.index),
                        );
                        quarantine_record::<&str, &[u8]>(&[], body, reason, origin, now)
                    }
                }
            })
            .collect();
        // The records move into the batch (not copied: a batch's payloads are its bulk); what is
        // told of each once written stays behind, in the same order.
        let mut batch: Vec<IngestRecord> = Vec::with_capacity(judged.len());
        let told: Vec<(bool, Option<QuarantineReason>, Option<Spans>)> = judged
            .into_iter()
            .map(|j| {
                let stored = j.record.map(|r| batch.push(r)).is_some();
                (stored, j.reason, j.spans)
            })
            .collect();
        let (written, wake) = write_leasing(self.store.as_ref(), self.fast.as_ref(), &self.catalog.learner, &batch)
            .await
            .map_err(|e| e.to_string())?;
        drop(batch);
        let mut written = written.into_iter();
        for (stored, reason, spans) in told {
            let w = if stored { written.next() } else { None };
            let said = outcome(reason, w);
            if let Some(spans) = spans {
                spans.finish(&said);
            }
        }
        if wake {
            self.wake.notify_one();
        }
        Ok(())
    }
}

/// Requests waiting for the group writer, at most; further posts wait for room.
const GROUP_QUEUE: usize = 4096;
/// Records written in one transaction, at most.
const GROUP_BATCH: usize = 512;

struct Pending {
    record: IngestRecord,
    reply: tokio::sync::oneshot::Sender<hub_store::StoreResult<WriteOutcome>>,
}

/// Group commit for HTTP ingest: concurrent posts share one transaction. A writer takes every
/// record waiting when it starts a write (up to [`GROUP_BATCH`]), writes them with
/// [`hub_store::Store::write_batch`] and answers each post only after the commit, so a 202 still
/// means the event is durable. Records are routed to one of several writers by tenant: one
/// tenant's writes take turns on its sequence lock anyway, while different tenants' run in
/// parallel. When a group's write fails its records are written one by one, so one bad record
/// fails only its own post.
#[derive(Debug, Clone)]
pub struct GroupWriter {
    shards: std::sync::Arc<[tokio::sync::mpsc::Sender<Pending>]>,
}

impl GroupWriter {
    /// Starts `writers` writers (at least one). With `fast`, this process's dispatcher, each
    /// group's jobs are leased to its workers as they are written while it has room for them
    /// (the fast path: no claim and no read for a lone event); the rest are claimed.
    pub fn start(
        store: std::sync::Arc<dyn hub_store::Store>,
        wake: std::sync::Arc<tokio::sync::Notify>,
        writers: usize,
        fast: Option<crate::delivery::Handoff>,
        learner: std::sync::Arc<crate::catalog::learn::Learner>,
    ) -> Self {
        let mut shards = Vec::new();
        for _ in 0..writers.max(1) {
            let (queue, mut rx) = tokio::sync::mpsc::channel::<Pending>(GROUP_QUEUE);
            let (store, wake, fast, learner) = (
                std::sync::Arc::clone(&store),
                std::sync::Arc::clone(&wake),
                fast.clone(),
                std::sync::Arc::clone(&learner),
            );
            tokio::spawn(async move {
                let mut group: Vec<Pending> = Vec::with_capacity(GROUP_BATCH);
                // Ends when every sender is gone and the queue is empty.
                while rx.recv_many(&mut group, GROUP_BATCH).await > 0 {
                    gather(&mut rx, &mut group).await;
                    let (records, replies): (Vec<IngestRecord>, Vec<_>) =
                        group.drain(..).map(|p| (p.record, p.reply)).unzip();
                    if write_group(store.as_ref(), fast.as_ref(), &learner, &records, replies).await {
                        wake.notify_one();
                    }
                }
            });
            shards.push(queue);
        }
        Self { shards: shards.into() }
    }

    /// Writes one record; returns once its group is committed.
    pub async fn write(&self, record: IngestRecord) -> hub_store::StoreResult<WriteOutcome> {
        let tenant = match &record {
            IngestRecord::Accepted(e) => e.envelope.tenant().as_str(),
            IngestRecord::Quarantined(q) => q.headers.get("ce-tenantid").map_or("", String::as_str),
        };
        let shard = &self.shards[shard_of(tenant, self.shards.len())];
        let (reply, answer) = tokio::sync::oneshot::channel();
        let closed = || hub_store::StoreError::Database(sqlx::Error::PoolClosed);
        shard.send(Pending { record, reply }).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

/// Posts that arrive together (a producer's burst, several producers at once) are spread over a
/// few tens of microseconds; the first would otherwise be written alone and the others wait for
/// that whole write before theirs. So the writer gives the others up to [`GATHER`] to arrive,
/// yielding to the tasks that are reading them, before it writes: one commit instead of two, and
/// the later posts' answers come one write sooner. It stops waiting once none has come for
/// [`QUIET`]: a post that came alone, or the last of its burst, is not held the whole time.
async fn gather(rx: &mut tokio::sync::mpsc::Receiver<Pending>, group: &mut Vec<Pending>) {
    let started = std::time::Instant::now();
    let mut last = started;
    while group.len() < GROUP_BATCH {
        tokio::task::yield_now().await;
        let before = group.len();
        while group.len() < GROUP_BATCH {
            match rx.try_recv() {
                Ok(pending) => group.push(pending),
                Err(_) => break,
            }
        }
        let now = std::time::Instant::now();
        if group.len() > before {
            last = now;
        }
        if now - started >= GATHER || now - last >= QUIET {
            break;
        }
    }
}

/// The longest a group writer waits for posts arriving with the first one (see [`gather`]).
const GATHER: std::time::Duration = std::time::Duration::from_micros(150);

/// How long without a new post ends the wait (see [`gather`]).
const QUIET: std::time::Duration = std::time::Duration::from_micros(50);

/// A stable shard for a tenant (FNV-1a).
fn shard_of(tenant: &str, shards: usize) -> usize {
    let hash = tenant.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    (hash % shards.max(1) as u64) as usize
}

/// Writes `records` in one transaction, their jobs leased to this process's dispatcher (`fast`)
/// while it has room and handed over in the background, and notes the types inserted
/// (`learner`); returns the outcomes and whether the claimers must be woken: an event was
/// inserted and a deliverable job was left `pending`.
async fn write_leasing(
    store: &dyn hub_store::Store,
    fast: Option<&crate::delivery::Handoff>,
    learner: &crate::catalog::learn::Learner,
    records: &[IngestRecord],
) -> hub_store::StoreResult<(Vec<WriteOutcome>, bool)> {
    let reservation = fast.and_then(|d| d.reserve(records.len()));
    let started = std::time::Instant::now();
    let (outcomes, leased) = match &reservation {
        Some(r) => store.write_batch_leased(records, &r.lease).await?,
        None => (store.write_batch(records).await?, hub_store::LeasedAtIngest::default()),
    };
    metrics::histogram!(metric::INGEST_WRITE_SECONDS).record(started.elapsed().as_secs_f64());
    learner.note(records, &outcomes);
    let inserted = outcomes.iter().any(|o| matches!(o, WriteOutcome::Inserted { .. }));
    let wake = inserted && (reservation.is_none() || leased.pending > 0);
    if let (Some(handoff), Some(reservation)) = (fast, reservation) {
        let events = leased_events(records, &outcomes, &leased.jobs);
        handoff.hand_over(reservation, leased, events);
    }
    Ok((outcomes, wake))
}

/// How long a group writer keeps trying a write while the database is out of reach (a
/// restart, a failover), before its posts are answered 503 with `Retry-After`: a restart of a
/// few seconds costs producers some latency, never an error.
const TRANSIENT_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// [`write_leasing`], tried again with a growing pause (50 ms to 1 s) while it fails for a
/// transient reason, for at most [`TRANSIENT_RETRY`]. A write whose commit was lost on its way
/// back is found again by dedup: its posts are then answered `duplicate`, with the stored seq.
async fn write_leasing_patiently(
    store: &dyn hub_store::Store,
    fast: Option<&crate::delivery::Handoff>,
    learner: &crate::catalog::learn::Learner,
    records: &[IngestRecord],
) -> hub_store::StoreResult<(Vec<WriteOutcome>, bool)> {
    let deadline = std::time::Instant::now() + TRANSIENT_RETRY;
    let mut pause = std::time::Duration::from_millis(50);
    loop {
        match write_leasing(store, fast, learner, records).await {
            Err(e) if e.is_transient() && std::time::Instant::now() + pause < deadline => {
                tracing::debug!(error = %e, retry_in = ?pause, "ingest write failed for want of the database; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
            done => return done,
        }
    }
}

/// Writes a group (see [`write_leasing`]) and answers each record; true when the claimers must
/// be woken.
async fn write_group(
    store: &dyn hub_store::Store,
    fast: Option<&crate::delivery::Handoff>,
    learner: &crate::catalog::learn::Learner,
    records: &[IngestRecord],
    replies: Vec<tokio::sync::oneshot::Sender<hub_store::StoreResult<WriteOutcome>>>,
) -> bool {
    match write_leasing_patiently(store, fast, learner, records).await {
        Ok((outcomes, wake)) if outcomes.len() == records.len() => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
            wake
        }
        Ok(_) => {
            for reply in replies {
                let _ = reply.send(Err(hub_store::StoreError::Corrupt(
                    "a write reported the wrong number of outcomes".to_owned(),
                )));
            }
            false
        }
        Err(e) if records.len() == 1 || e.is_transient() => {
            // One record, or a database still out of reach: each post gets the error (a 503
            // with Retry-After for the transient one), not a write of its own.
            if records.len() > 1 {
                tracing::warn!(error = %e, records = records.len(), "the database stayed out of reach; answering 503");
            }
            for reply in replies {
                let _ = reply.send(Err(clone_error(&e)));
            }
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, records = records.len(), "a grouped ingest write failed; writing its records one by one");
            let mut inserted = false;
            for (record, reply) in records.iter().zip(replies) {
                let one = store.write_batch(std::slice::from_ref(record)).await.and_then(|mut w| {
                    w.pop().ok_or_else(|| hub_store::StoreError::Corrupt("a write reported no outcome".to_owned()))
                });
                if let Ok(outcome) = &one {
                    learner.note(std::slice::from_ref(record), std::slice::from_ref(outcome));
                }
                inserted |= matches!(one, Ok(WriteOutcome::Inserted { .. }));
                let _ = reply.send(one);
            }
            inserted
        }
    }
}

/// The same error again, for each post of a group: the transient kinds keep their kind (so each
/// is answered 503), anything else becomes the message it carried.
fn clone_error(e: &hub_store::StoreError) -> hub_store::StoreError {
    if e.is_transient() {
        hub_store::StoreError::Unreachable(e.to_string())
    } else {
        hub_store::StoreError::Corrupt(e.to_string())
    }
}

/// The events of jobs leased at ingest, as stored, by tenant and seq: built from the records
/// just written (`outcomes` in the same order), so the workers need no read.
pub(crate) fn leased_events(
    records: &[IngestRecord],
    outcomes: &[WriteOutcome],
    jobs: &[hub_store::ClaimedJob],
) -> std::collections::HashMap<(String, i64), std::sync::Arc<hub_store::StoredEvent>> {
    let wanted: std::collections::HashSet<(&str, i64)> =
        jobs.iter().map(|j| (j.tenant_id.as_str(), j.event_seq)).collect();
    records
        .iter()
        .zip(outcomes)
        .filter_map(|(record, outcome)| match (record, outcome) {
            (IngestRecord::Accepted(e), WriteOutcome::Inserted { seq })
                if wanted.contains(&(e.envelope.tenant().as_str(), *seq)) =>
            {
                let event = hub_store::StoredEvent::from_accepted(*seq, e);
                Some(((event.tenant_id.clone(), *seq), std::sync::Arc::new(event)))
            }
            _ => None,
        })
        .collect()
}
