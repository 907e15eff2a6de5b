//! The records the store reads and writes.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

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
        filters.is_empty() || filters.matches(&EventView::new(self, &self.payload))
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
            let excluded = lease.is_some_and(|l| l.exclude_subscriptions.contains(&job.subscription));
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

/// A key to store: only its hash and a short displayable prefix, never the key itself.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub id: Uuid,
    /// The tenant the key belongs to; `None` for an operator's admin key.
    pub tenant_id: Option<String>,
    pub name: String,
    pub key_hash: Vec<u8>,
    pub key_prefix: String,
    pub created_at: DateTime<Utc>,
    /// When the key stops working; `None` never.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A stored API key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiKeyRecord {
    pub id: Uuid,
    /// `None` for an operator's admin key.
    pub tenant_id: Option<String>,
    pub name: String,
    pub key_prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// When the key stops working; `None` never.
    pub expires_at: Option<DateTime<Utc>>,
}

impl ApiKeyRecord {
    /// Whether the key has expired at `now` (a revoked key is never returned as live at all).
    pub fn expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
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

/// A subscription as stored. Secrets and credentials are sealed bytes (see `hub_core::seal`);
/// this crate never sees them in clear.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionRecord {
    pub id: Uuid,
    pub tenant_id: String,
    pub name: String,
    pub event_types: Vec<String>,
    pub origin: Option<String>,
    /// The content filters as written (a JSON array, `[]` for none), compiled by
    /// `hub_core::routing::Filters::compile` when matching reads them.
    pub filters: serde_json::Value,
    /// `key`: per ordering key one delivery at a time, in seq order (push sinks only).
    pub ordering: hub_core::Ordering,
    pub sink: hub_core::SinkKind,
    /// The destination without secrets, as the API shows it.
    pub sink_config: serde_json::Value,
    pub signing_secret: Option<Vec<u8>>,
    pub previous_secret: Option<Vec<u8>>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub credentials: Option<Vec<u8>>,
    pub enabled: bool,
    pub verification: hub_core::VerificationState,
    pub verification_error: Option<String>,
    pub disabled_reason: Option<String>,
    /// When it was last disabled (by a PATCH or automatically); kept after it is enabled again.
    pub disabled_at: Option<DateTime<Utc>>,
    /// The open failure period: first and last failure since the last success.
    pub failing_since: Option<DateTime<Utc>>,
    pub last_failure_at: Option<DateTime<Utc>>,
    pub pull_cursor: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl SubscriptionRecord {
    /// Its content filters compiled, from the cache matching uses; `None` when the stored text
    /// does not compile.
    pub fn compiled_filters(&self) -> Option<Arc<Filters>> {
        compiled_filters(&self.filters.to_string()).ok()
    }
}

/// A change a `PATCH` asks for: `None` leaves a field as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubscriptionPatch {
    pub name: Option<String>,
    pub event_types: Option<Vec<String>>,
    /// `Some(None)` removes the origin.
    pub origin: Option<Option<String>>,
    /// New content filters (already compiled once by the caller to be known valid).
    pub filters: Option<serde_json::Value>,
    /// A new ordering, for jobs created after the change.
    pub ordering: Option<hub_core::Ordering>,
    pub destination: Option<DestinationChange>,
    /// `Some(false)` disables with `disabled_reason` (when enabled); `Some(true)` enables and
    /// clears the reason.
    pub enabled: Option<bool>,
    pub disabled_reason: Option<String>,
    pub now: DateTime<Utc>,
}

/// A new destination of the same sink type.
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationChange {
    /// The destination without secrets, as the API shows it.
    pub sink_config: serde_json::Value,
    /// `Some(None)` removes the credentials; `None` keeps them.
    pub credentials: Option<Option<Vec<u8>>>,
    /// Where or how to connect changed: the subscription must be verified again.
    pub reverify: bool,
}

/// A new signing secret, the current one kept as the previous until `previous_expires_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretRotation {
    /// The sealed secret being replaced, as read: the rotation applies only if it is still stored.
    pub replaces: Vec<u8>,
    pub signing_secret: Vec<u8>,
    pub previous_secret: Vec<u8>,
    pub previous_expires_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// The result of probing a destination.
#[derive(Debug, Clone, PartialEq)]
pub struct VerificationResult {
    /// The destination probed: the result is recorded only if it is still the stored one.
    pub probed_config: serde_json::Value,
    pub probed_credentials: Option<Vec<u8>>,
    /// `None` when the probe succeeded; otherwise the reason, shown to the tenant.
    pub error: Option<String>,
    /// On success, also enable the subscription and clear its failure period and disabled
    /// reason (the recovery of an auto-disabled subscription).
    pub reenable: bool,
    pub now: DateTime<Utc>,
}

pub use hub_core::delivery::JobState;

fn job_state_str<S: serde::Serializer>(state: &JobState, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(state.as_str())
}

/// A patch's values in the form both backends bind them.
pub(crate) struct PatchColumns {
    pub event_types: Option<String>,
    pub filters: Option<String>,
    pub ordering: Option<&'static str>,
    pub sink_config: Option<String>,
    pub credentials_set: bool,
    pub credentials: Option<Vec<u8>>,
    pub reverify: bool,
}

impl PatchColumns {
    pub(crate) fn of(patch: &SubscriptionPatch) -> Result<Self, crate::StoreError> {
        let event_types = patch
            .event_types
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| crate::StoreError::Corrupt(e.to_string()))?;
        let destination = patch.destination.as_ref();
        Ok(Self {
            event_types,
            filters: patch.filters.as_ref().map(serde_json::Value::to_string),
            ordering: patch.ordering.map(hub_core::Ordering::as_str),
            sink_config: destination.map(|d| d.sink_config.to_string()),
            credentials_set: destination.is_some_and(|d| d.credentials.is_some()),
            credentials: destination.and_then(|d| d.credentials.clone().flatten()),
            reverify: destination.is_some_and(|d| d.reverify),
        })
    }
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

/// A subscription as matching sees it: its filter and its state, as stored.
#[derive(Debug, Clone)]
pub(crate) struct MatchTarget {
    pub id: Uuid,
    pub sink: hub_core::SinkKind,
    pub patterns: Vec<hub_core::EventPattern>,
    pub origin: Option<String>,
    /// Its content filters, compiled (shared by every target with the same text).
    pub filters: Arc<Filters>,
    pub ordering: hub_core::Ordering,
    pub enabled: bool,
    pub verification: hub_core::VerificationState,
    pub verified_before: bool,
}

/// The columns matching reads of a subscription, as both backends return them.
pub(crate) struct MatchRow {
    pub id: Uuid,
    pub sink: String,
    pub event_types: String,
    pub origin: Option<String>,
    /// The filters as stored JSON text.
    pub filters: String,
    pub ordering: String,
    pub enabled: bool,
    pub verification: String,
    pub verified_before: bool,
}

impl MatchTarget {
    pub(crate) fn new(row: MatchRow) -> Result<Self, crate::StoreError> {
        let id = row.id;
        let corrupt = |what: &str| crate::StoreError::Corrupt(format!("subscription {id}: {what}"));
        let sink = hub_core::SinkKind::parse(&row.sink).ok_or_else(|| corrupt("unknown sink type"))?;
        let types: Vec<String> = serde_json::from_str(&row.event_types).map_err(|_| corrupt("event_types"))?;
        let patterns = types
            .iter()
            .map(|t| hub_core::EventPattern::parse(t))
            .collect::<Result<_, _>>()
            .map_err(|_| corrupt("event_types"))?;
        let verification =
            hub_core::VerificationState::parse(&row.verification).ok_or_else(|| corrupt("verification_state"))?;
        let filters = compiled_filters(&row.filters).map_err(|e| corrupt(&format!("filters: {e}")))?;
        let ordering = hub_core::Ordering::parse(&row.ordering).ok_or_else(|| corrupt("ordering"))?;
        Ok(Self {
            id,
            sink,
            patterns,
            origin: row.origin,
            filters,
            ordering,
            enabled: row.enabled,
            verification,
            verified_before: row.verified_before,
        })
    }
}

/// The filters compiled from their stored text, from a bounded cache keyed by the text: matching
/// reads subscriptions per batch (or once per change, when remembered), and a filter is compiled
/// once per distinct text, never per event.
pub(crate) fn compiled_filters(text: &str) -> Result<Arc<Filters>, String> {
    static EMPTY: LazyLock<Arc<Filters>> = LazyLock::new(|| Arc::new(Filters::default()));
    static CACHE: LazyLock<Mutex<HashMap<String, Arc<Filters>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
    const MAX_CACHED: usize = 4096;
    if text == "[]" {
        return Ok(Arc::clone(&EMPTY));
    }
    if let Some(f) = CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(text) {
        return Ok(Arc::clone(f));
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let filters = Arc::new(Filters::compile(&value).map_err(|e| e.to_string())?);
    let mut cache = CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if cache.len() >= MAX_CACHED {
        cache.clear();
    }
    cache.insert(text.to_owned(), Arc::clone(&filters));
    Ok(filters)
}

/// A push job matching creates: for this subscription and seq, received then, in this state.
#[derive(Debug)]
pub(crate) struct NewJob {
    pub subscription: Uuid,
    pub seq: i64,
    pub received_at: DateTime<Utc>,
    pub state: JobState,
    /// The event's ordering key when the subscription orders by key (and the event has one).
    pub ordering_key: Option<String>,
}

/// The work matching creates for one tenant's newly inserted events: pull entries
/// `(subscription, seq)` and push jobs.
#[derive(Debug, Default)]
pub(crate) struct MatchedWork {
    pub pulls: Vec<(Uuid, i64)>,
    pub jobs: Vec<NewJob>,
}

/// Splits expired leases `(job, recoveries so far)` into all of them and those that this expiry
/// makes poison, by the core's rule.
pub(crate) fn split_poison<Id: Clone>(expired: &[(Id, i32)], threshold: u32) -> (Vec<Id>, Vec<Id>) {
    let all = expired.iter().map(|(id, _)| id.clone()).collect();
    let poison = expired
        .iter()
        .filter(|(_, recoveries)| {
            hub_core::delivery::is_poison(u32::try_from(*recoveries).unwrap_or(0).saturating_add(1), threshold)
        })
        .map(|(id, _)| id.clone())
        .collect();
    (all, poison)
}

/// Matches one tenant's new events against its subscriptions by the core's rule
/// (`hub_core::admission`; an operational event saying a subscription fails never goes to that
/// subscription, `hub_core::operational::excluded`): a pull subscription gets stream entries, a push one jobs, `pending`
/// to deliver or `held` while its destination is verified again.
pub(crate) fn match_events(tenant: &str, targets: &[MatchTarget], inserts: &[(i64, &AcceptedEvent)]) -> MatchedWork {
    let mut work = MatchedWork::default();
    // Each event is viewed once for every target; a body is parsed only if a filter reads it.
    let views: Vec<EventView<'_, hub_core::Envelope>> =
        inserts.iter().map(|(_, e)| EventView::new(&e.envelope, &e.payload)).collect();
    for target in targets {
        let rule = hub_core::MatchRule {
            tenant,
            patterns: &target.patterns,
            origin: target.origin.as_deref(),
            enabled: target.enabled,
            verification: target.verification,
            verified_before: target.verified_before,
        };
        for ((seq, event), view) in inserts.iter().zip(&views) {
            let env = &event.envelope;
            if hub_core::operational::excluded(env.key(), env.extensions(), target.id) {
                continue;
            }
            let state = match hub_core::admission(&rule, tenant, env.key(), env.source().as_str()) {
                hub_core::Admission::No => continue,
                hub_core::Admission::Deliver => JobState::Pending,
                hub_core::Admission::Hold => JobState::Held,
            };
            if !target.filters.is_empty() && !target.filters.matches(view) {
                continue;
            }
            if target.sink.is_push() {
                let ordering_key = match target.ordering {
                    hub_core::Ordering::Key => hub_core::routing::ordering_key(env),
                    hub_core::Ordering::None => None,
                };
                work.jobs.push(NewJob {
                    subscription: target.id,
                    seq: *seq,
                    received_at: event.received_at,
                    state,
                    ordering_key,
                });
            } else if state == JobState::Pending {
                work.pulls.push((target.id, *seq));
            }
        }
    }
    work
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
}

impl PruneKind {
    pub const ALL: [PruneKind; 4] = [Self::Quarantine, Self::FinishedJobs, Self::Events, Self::Dlq];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Quarantine => "quarantine",
            Self::FinishedJobs => "finished_jobs",
            Self::Events => "events",
            Self::Dlq => "dlq",
        }
    }
}

/// A page of a tenant's inbox: events with `seq > after`, ascending, matching every filter given.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub after: i64,
    pub limit: u32,
    /// The event key's resource type, when the pattern names one (not `*`).
    pub resource_type: Option<String>,
    /// The event key's event type, when the pattern names one (not `*`).
    pub event_type: Option<String>,
    pub source: Option<String>,
    /// Received at or after.
    pub since: Option<DateTime<Utc>>,
    /// Received before.
    pub until: Option<DateTime<Utc>>,
}

/// One event read from a pull stream, at its position in the stream (the cursor's unit: the
/// event's own seq for an entry written at ingest, a later position for a replayed one).
#[derive(Debug, Clone, PartialEq)]
pub struct PulledEvent {
    pub position: i64,
    pub event: StoredEvent,
}

/// A store's connection pool at a moment ([`crate::Operations::connections`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Connections {
    pub open: u32,
    pub idle: u32,
    pub max: u32,
}

/// What one pull read gave ([`crate::Inbox::read_pull_page`]).
#[derive(Debug, Clone, PartialEq)]
pub enum PullRead {
    /// The tenant has no such subscription.
    NoSubscription,
    /// `after` lies beyond the tenant's newest seq: nothing was read and the cursor did not move.
    AfterBeyondNewest { newest: i64 },
    /// A page, in position order, and the cursor after it.
    Page { events: Vec<PulledEvent>, cursor: i64 },
}

/// A pull stream entry of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamEntry {
    pub subscription_id: Uuid,
    pub position: i64,
    /// The stream's cursor is at or past it.
    pub read: bool,
}

pub use hub_core::replay::{ReplayState, TimeWindow};

/// A replay to start: its window as asked. The store resolves it to seqs.
#[derive(Debug, Clone)]
pub struct NewReplay {
    pub id: Uuid,
    pub tenant_id: String,
    pub subscription_id: Uuid,
    pub window: TimeWindow,
    pub from_seq: Option<i64>,
    pub to_seq: Option<i64>,
    pub include_delivered: bool,
    /// Wanted events given per second at most (`hub_core::replay::next_step`).
    pub rate: u32,
    pub now: DateTime<Utc>,
}

/// A stored replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayRecord {
    pub id: Uuid,
    pub tenant_id: String,
    pub subscription_id: Uuid,
    pub window: TimeWindow,
    /// The seqs the window was resolved to at creation: what arrived later reaches the
    /// subscription live.
    pub from_seq: i64,
    pub to_seq: i64,
    pub include_delivered: bool,
    pub state: ReplayState,
    /// The last seq walked.
    pub walked_to: i64,
    pub progress: hub_core::replay::Progress,
    pub created_at: DateTime<Utc>,
    /// When it last walked (or started): its rate counts from here.
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Wanted events given per second at most.
    pub rate: u32,
}

/// What asking for a replay did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayStart {
    Started(ReplayRecord),
    /// This replay of the subscription is still running (one at a time).
    Busy(ReplayRecord),
    /// The tenant has no such subscription.
    NoSubscription,
}

/// How far one step of a replay may go.
#[derive(Debug, Clone, Copy)]
pub struct ReplayLimits {
    /// Events walked per step (one transaction), and the most a step gives.
    pub batch: u32,
    /// A push subscription with this many jobs waiting (pending or leased) gets no more until
    /// its destination took some (see `hub_core::replay::next_step`).
    pub pace: u64,
    pub now: DateTime<Utc>,
}

/// What one step of a replay did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayStep {
    /// It walked on (and may have finished).
    Walked(ReplayRecord),
    /// Its destination has enough waiting work; nothing done this time.
    Paced,
    /// It is not running (finished, cancelled, or unknown).
    Idle,
}

/// An event as a replay walks it: what its window and the filter look at.
#[derive(Debug, Clone)]
pub(crate) struct WalkedEvent {
    pub seq: i64,
    pub resource_type: String,
    pub event_type: String,
    pub source: String,
    pub received_at: DateTime<Utc>,
    /// The whole event, read only when the subscription has content filters.
    pub event: Option<StoredEvent>,
}

impl WalkedEvent {
    /// A walked event read whole.
    pub(crate) fn whole(event: StoredEvent) -> Self {
        Self {
            seq: event.seq,
            resource_type: event.resource_type.clone(),
            event_type: event.event_type.clone(),
            source: event.source.clone(),
            received_at: event.received_at,
            event: Some(event),
        }
    }
}

/// The seqs of the walked events that lie in the replay's time window and that the subscription's
/// filter wants (`hub_core::wants`, then its content filters on the whole event).
pub(crate) fn wanted(target: &MatchTarget, window: &TimeWindow, walked: &[WalkedEvent]) -> Vec<i64> {
    walked
        .iter()
        .filter(|e| window.contains(e.received_at))
        .filter(|e| {
            hub_core::EventKey::new(&e.resource_type, &e.event_type)
                .is_ok_and(|key| hub_core::wants(&target.patterns, target.origin.as_deref(), &key, &e.source))
        })
        .filter(|e| target.filters.is_empty() || e.event.as_ref().is_some_and(|ev| ev.passes(&target.filters)))
        .map(|e| e.seq)
        .collect()
}

/// Of the wanted seqs, those the replay gives the subscription again, and its counts: by the
/// core's rules (`hub_core::replay::decide`), given what the subscription already has of each.
pub(crate) fn plan_replay(
    wanted: &[i64],
    include_delivered: bool,
    existing: &std::collections::HashMap<i64, Vec<hub_core::replay::Existing>>,
) -> (Vec<i64>, hub_core::replay::Progress) {
    let mut progress = hub_core::replay::Progress::default();
    let mut create = Vec::new();
    for seq in wanted {
        let has = existing.get(seq).map_or(&[][..], Vec::as_slice);
        let decision = hub_core::replay::decide(has, include_delivered);
        progress.count(decision);
        if decision == hub_core::replay::Decision::Create {
            create.push(*seq);
        }
    }
    (create, progress)
}

/// One tenant as the operator's listing shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantSummary {
    pub tenant_id: String,
    /// Events in its inbox.
    pub events: i64,
    pub subscriptions: i64,
    /// API keys not revoked.
    pub api_keys: i64,
    /// Jobs by state: only pending, leased, held and dead are counted.
    pub jobs: Vec<(JobState, i64)>,
}
