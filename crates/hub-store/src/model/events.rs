//! What ingest writes and reads back: accepted and quarantined records, stored events, the
//! leases taken at ingest and the quarantine listing.

use super::{ClaimedJob, JobState, NewJob, SubscriptionRecord};
use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use hub_core::routing::{Accepted, Context, EventView, Filters};
use hub_core::{Envelope, QuarantineReason};
use serde::Serialize;
use uuid::Uuid;

/// How much of a quarantined body is kept.
pub const QUARANTINE_BODY_CAP: usize = hub_core::capture::BODY_CAP;

/// Where a record entered the hub.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    Http,
    Kafka { topic: String, partition: i32, offset: i64 },
}

impl Origin {
    pub fn kind(&self) -> &'static str {
        match self {
            Origin::Http => "http",
            Origin::Kafka { .. } => "kafka",
        }
    }

    pub(crate) fn kafka_parts(&self) -> (Option<&str>, Option<i32>, Option<i64>) {
        match self {
            Origin::Http => (None, None, None),
            Origin::Kafka { topic, partition, offset } => (Some(topic), Some(*partition), Some(*offset)),
        }
    }

    pub(crate) fn from_parts(kind: &str, topic: Option<String>, partition: Option<i32>, offset: Option<i64>) -> Self {
        match (kind, topic, partition, offset) {
            ("kafka", Some(topic), Some(partition), Some(offset)) => Origin::Kafka { topic, partition, offset },
            _ => Origin::Http,
        }
    }
}

/// One record to write in a batch.
#[derive(Debug, Clone)]
pub enum IngestRecord {
    Accepted(AcceptedEvent),
    Quarantined(QuarantinedRecord),
}

/// An accepted event: its envelope and its body exactly as received.
#[derive(Debug, Clone)]
pub struct AcceptedEvent {
    pub envelope: Envelope,
    pub payload: Vec<u8>,
    pub origin: Origin,
    pub received_at: DateTime<Utc>,
    /// The hub's own trace context for the event's jobs (the W3C `traceparent` of its write
    /// span), when traces are exported: each attempt's span continues that trace.
    pub trace: Option<String>,
}

/// A quarantined record as operators will see it: capped headers and body, and the reason.
#[derive(Debug, Clone)]
pub struct QuarantinedRecord {
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub body_bytes: usize,
    pub reason: QuarantineReason,
    pub origin: Origin,
    pub received_at: DateTime<Utc>,
}

impl QuarantinedRecord {
    /// Builds the record from the raw header list and body by the core's capture policy
    /// (`hub_core::capture`): only the CloudEvents and trace headers, capped and storable, and a
    /// capped body. Nothing else (such as credentials) is ever stored.
    pub fn capture<I, K, V>(
        headers: I,
        body: &[u8],
        reason: QuarantineReason,
        origin: Origin,
        received_at: DateTime<Utc>,
    ) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<[u8]>,
    {
        let kept = hub_core::capture::headers(headers, hub_core::capture::is_event_header);
        Self {
            headers: kept,
            body: hub_core::capture::body(body).to_vec(),
            body_bytes: body.len(),
            reason,
            origin,
            received_at,
        }
    }

    /// The header value usable as a filter column: short, printable text only.
    pub(crate) fn column(&self, header: &str, max: usize) -> Option<&str> {
        self.headers
            .get(header)
            .map(String::as_str)
            .filter(|v| !v.is_empty() && v.len() <= max && !v.chars().any(char::is_control))
    }
}

/// What writing one record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// A new event, stored with this seq.
    Inserted { seq: i64 },
    /// The tenant already had this ce-id (stored earlier, or earlier in the same batch) at seq.
    Duplicate { seq: i64 },
    /// A quarantine record, stored with this id.
    Quarantined { id: i64 },
}

/// An event as stored in a tenant's inbox.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    pub tenant_id: String,
    pub seq: i64,
    pub ce_id: Uuid,
    pub source: String,
    pub ce_type: String,
    pub resource_type: String,
    pub event_type: String,
    pub event_time: String,
    pub schema_version: String,
    pub subject: Option<String>,
    pub data_content_type: Option<String>,
    pub data_schema: Option<String>,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub extensions: BTreeMap<String, String>,
    #[serde(skip)]
    pub payload: Vec<u8>,
    pub origin: Origin,
    pub received_at: DateTime<Utc>,
    /// See [`AcceptedEvent::trace`].
    #[serde(skip)]
    pub trace: Option<String>,
    /// The erasure that replaced its payload with a tombstone, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erasure_id: Option<Uuid>,
}

impl Accepted for StoredEvent {
    fn context(&self, attribute: Context) -> Option<Cow<'_, str>> {
        let borrowed = match attribute {
            Context::SpecVersion => Some("1.0"),
            Context::Id => return Some(Cow::Owned(self.ce_id.hyphenated().to_string())),
            Context::Source => Some(self.source.as_str()),
            Context::Type => Some(self.ce_type.as_str()),
            Context::Time => Some(self.event_time.as_str()),
            Context::Subject => self.subject.as_deref(),
            Context::DataContentType => self.data_content_type.as_deref(),
            Context::DataSchema => self.data_schema.as_deref(),
            Context::SchemaVersion => Some(self.schema_version.as_str()),
            Context::ResourceType => Some(self.resource_type.as_str()),
            Context::EventType => Some(self.event_type.as_str()),
            Context::TenantId => Some(self.tenant_id.as_str()),
            Context::TraceParent => self.traceparent.as_deref(),
            Context::TraceState => self.tracestate.as_deref(),
        };
        borrowed.map(Cow::Borrowed)
    }

    fn extension(&self, name: &str) -> Option<&str> {
        self.extensions.get(name).map(String::as_str)
    }
}

impl StoredEvent {
    /// Whether these filters let the event through.
    pub fn passes(&self, filters: &Filters) -> bool {
        // Within the same budget as at ingest (a replay walks the inbox through it).
        filters.is_empty()
            || filters.matches_within(&EventView::new(self, &self.payload), super::filter_budget()).matches
    }

    /// The event key `<resourcetype>.<eventtype>`.
    pub fn event_key(&self) -> String {
        format!("{}.{}", self.resource_type, self.event_type)
    }

    /// The event as the store holds it once `accepted` was written with `seq`: what a read of it
    /// would give, without the read.
    pub fn from_accepted(seq: i64, accepted: &AcceptedEvent) -> Self {
        use chrono::SubsecRound;
        let env = &accepted.envelope;
        Self {
            tenant_id: env.tenant().as_str().to_owned(),
            seq,
            ce_id: env.id().as_uuid(),
            source: env.source().to_string(),
            ce_type: env.ce_type().to_owned(),
            resource_type: env.key().resource().to_owned(),
            event_type: env.key().event().to_owned(),
            event_time: env.time().to_owned(),
            schema_version: env.schema_version().to_owned(),
            subject: env.subject().map(str::to_owned),
            data_content_type: env.data_content_type().map(str::to_owned),
            data_schema: env.data_schema().map(str::to_owned),
            traceparent: env.traceparent().map(str::to_owned),
            tracestate: env.tracestate().map(str::to_owned),
            extensions: env.extensions().clone(),
            payload: accepted.payload.clone(),
            origin: accepted.origin.clone(),
            // The stores keep microseconds.
            received_at: accepted.received_at.trunc_subsecs(6),
            trace: accepted.trace.clone(),
            erasure_id: None,
        }
    }
}

/// Jobs a replica's own ingest leases to its own workers as it writes them (the fast path): the
/// jobs a write creates for deliverable subscriptions are inserted already leased, up to `limit`,
/// and handed over in memory, with no claim and no read.
#[derive(Debug, Clone)]
pub struct IngestLease {
    pub token: Uuid,
    pub until: DateTime<Utc>,
    /// At most this many jobs are leased.
    pub limit: usize,
    /// Subscriptions whose jobs are not leased (their destination has all it can take here);
    /// theirs are written `pending`, for claims.
    pub exclude_subscriptions: Vec<Uuid>,
    /// The destination buckets the leasing replica paces (see [`Owned`]).
    pub owned: Owned,
}

/// The destinations a replica paces: the buckets it owns, sorted (`None`: all of them, as the
/// only delivering replica), and the subscriptions of hot destinations other replicas pace and
/// share with it (`shared`, sorted). A replica leases only jobs of those; a subscription not yet
/// given its bucket counts as bucket 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    pub buckets: Option<Vec<i32>>,
    pub shared: Vec<Uuid>,
}

impl Owned {
    /// No bucket and no shared subscription: claims nothing.
    pub fn nothing() -> Self {
        Self { buckets: Some(Vec::new()), shared: Vec::new() }
    }
    /// Whether a job of `subscription`, in `bucket`, is this replica's to lease.
    pub fn owns(&self, bucket: Option<i32>, subscription: Uuid) -> bool {
        self.buckets.as_ref().is_none_or(|b| b.binary_search(&bucket.unwrap_or(0)).is_ok())
            || self.shared.binary_search(&subscription).is_ok()
    }
}

/// What a write under an [`IngestLease`] leased, and what it left for claims.
#[derive(Debug, Default)]
pub struct LeasedAtIngest {
    /// The jobs leased, as a claim would have returned them.
    pub jobs: Vec<ClaimedJob>,
    /// Deliverable jobs the write left `pending` for want of room: what this process's claimers
    /// are to be woken for. Those of excluded subscriptions are not counted (its claimers skip
    /// them too, until their destination has room again).
    pub pending: usize,
    /// The subscriptions of the leased jobs, as the write read them.
    pub subscriptions: Vec<SubscriptionRecord>,
}

/// A new job as it is written: its id and, when the fast path takes it, its lease.
#[derive(Debug)]
pub(crate) struct JobToWrite {
    pub id: Uuid,
    pub job: NewJob,
    pub leased: Option<(Uuid, DateTime<Utc>)>,
    /// Deliverable but left `pending` for want of room: counted in `LeasedAtIngest::pending`.
    pub waits_for_room: bool,
}

impl JobToWrite {
    pub fn state(&self) -> JobState {
        if self.leased.is_some() { JobState::Leased } else { self.job.state }
    }
}

/// Gives a batch's new jobs of `tenant` their ids and leases the deliverable ones (`pending`, of
/// subscriptions not excluded) while `room` lasts, noting them in `leased`; returns the jobs to
/// write.
pub(crate) fn lease_new_jobs(
    tenant: &str,
    jobs: Vec<NewJob>,
    lease: Option<&IngestLease>,
    room: &mut usize,
    leased: &mut LeasedAtIngest,
) -> Vec<JobToWrite> {
    jobs.into_iter()
        .map(|job| {
            let id = Uuid::now_v7();
            let excluded = lease.is_some_and(|l| {
                l.exclude_subscriptions.contains(&job.subscription) || !l.owned.owns(job.bucket, job.subscription)
            });
            // An ordered job is never leased at ingest: a claim leases it once no earlier job of
            // its key is waiting (`hub_core::Ordering`).
            let take = lease
                .filter(|_| *room > 0 && job.state == JobState::Pending && !excluded && job.ordering_key.is_none());
            let Some(lease) = take else {
                let waits_for_room = job.state == JobState::Pending && !excluded;
                leased.pending += usize::from(waits_for_room);
                return JobToWrite { id, job, leased: None, waits_for_room };
            };
            *room -= 1;
            leased.jobs.push(ClaimedJob {
                id,
                tenant_id: tenant.to_owned(),
                subscription_id: job.subscription,
                event_seq: job.seq,
                attempts: 0,
                recoveries: 0,
                window_start: job.received_at,
                event_received_at: job.received_at,
                token: lease.token,
            });
            JobToWrite { id, job, leased: Some((lease.token, lease.until)), waits_for_room: false }
        })
        .collect()
}

/// Filters of the quarantine listing; every present field must match.
#[derive(Debug, Clone, Default)]
pub struct QuarantineFilter {
    pub tenant: Option<String>,
    pub source: Option<String>,
    pub reason_code: Option<String>,
    /// `http` or `kafka`.
    pub origin: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// Only ids below this one (the cursor of the previous page).
    pub before_id: Option<i64>,
    pub limit: u32,
}

/// A stored quarantine record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuarantineEntry {
    pub id: i64,
    pub tenant_id: Option<String>,
    pub source: Option<String>,
    pub ce_id: Option<String>,
    pub reason_code: String,
    pub reason_field: String,
    pub reason: String,
    pub headers: BTreeMap<String, String>,
    #[serde(skip)]
    pub body: Vec<u8>,
    pub body_bytes: i64,
    pub origin: Origin,
    pub received_at: DateTime<Utc>,
}

/// The accepted events of a batch grouped by tenant, in tenant order (so that concurrent batches
/// lock tenant sequences in one order and never deadlock), each with its batch index.
pub(crate) fn accepted_by_tenant(batch: &[IngestRecord]) -> BTreeMap<&str, Vec<(usize, &AcceptedEvent)>> {
    let mut groups: BTreeMap<&str, Vec<(usize, &AcceptedEvent)>> = BTreeMap::new();
    for (i, record) in batch.iter().enumerate() {
        if let IngestRecord::Accepted(event) = record {
            groups.entry(event.envelope.tenant().as_str()).or_default().push((i, event));
        }
    }
    groups
}

/// Assigns seqs to one tenant's accepted events: an id already stored, or seen earlier in the
/// batch, is a duplicate of that seq; every other event takes the next seq. Returns the
/// outcomes by batch index, the events to insert with their seq, and the new last seq.
pub(crate) fn assign_seqs<'a>(
    events: &[(usize, &'a AcceptedEvent)],
    existing: &std::collections::HashMap<Uuid, i64>,
    mut last_seq: i64,
) -> (Vec<(usize, WriteOutcome)>, Vec<(i64, &'a AcceptedEvent)>, i64) {
    let mut seen: std::collections::HashMap<Uuid, i64> = std::collections::HashMap::new();
    let mut outcomes = Vec::with_capacity(events.len());
    let mut inserts = Vec::with_capacity(events.len());
    for (index, event) in events {
        let id = event.envelope.id().as_uuid();
        if let Some(seq) = existing.get(&id).or_else(|| seen.get(&id)) {
            outcomes.push((*index, WriteOutcome::Duplicate { seq: *seq }));
            continue;
        }
        last_seq += 1;
        seen.insert(id, last_seq);
        outcomes.push((*index, WriteOutcome::Inserted { seq: last_seq }));
        inserts.push((last_seq, *event));
    }
    (outcomes, inserts, last_seq)
}

/// Turns per-index outcomes into the batch's ordered result.
pub(crate) fn ordered(
    len: usize,
    outcomes: Vec<(usize, WriteOutcome)>,
) -> Result<Vec<WriteOutcome>, crate::StoreError> {
    let mut slots = vec![None; len];
    for (i, outcome) in outcomes {
        slots[i] = Some(outcome);
    }
    slots
        .into_iter()
        .map(|s| s.ok_or_else(|| crate::StoreError::Corrupt("a batch record got no outcome".into())))
        .collect()
}
