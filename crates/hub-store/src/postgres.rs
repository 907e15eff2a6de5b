//! The PostgreSQL backend: production, shared by any number of replicas.
//!
//! A batch locks the sequence rows of its tenants (in tenant order, so two batches never
//! deadlock), checks which ids they already have, and inserts the new events with their pull
//! entries and jobs in one `UNNEST` statement: a fixed number of round trips per batch, however
//! many tenants it holds.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::PruneKind;
use crate::model::{MatchTarget, accepted_by_tenant, assign_seqs, match_events, ordered};
use crate::{
    AcceptedEvent, ApiKeyRecord, AttemptRecord, AttemptResult, ClaimRequest, ClaimedJob, Completed, DeliveryJob,
    DlqEntry, DlqFilter, HealthUpdate, IngestRecord, JobTransition, NewApiKey, NewDlqRecord, Origin, QuarantineEntry,
    QuarantineFilter, QuarantinedRecord, Recovery, Store, StoreError, StoreResult, StoredEvent, SubscriptionRecord,
    WriteOutcome,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// `NOTIFY` channel for new jobs; per schema, so hubs sharing a server do not wake each other.
    channel: String,
}

impl PgStore {
    /// Connects a pool; with `schema`, every connection works inside that schema.
    pub async fn connect(dsn: &str, schema: Option<&str>, max_connections: u32) -> StoreResult<Self> {
        let mut options = PgConnectOptions::from_str(dsn)?.application_name("streaming-hub");
        if let Some(schema) = schema {
            options = options.options([("search_path", schema)]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let channel = match schema {
            Some(schema) => format!("streaming_hub_jobs_{schema}"),
            None => "streaming_hub_jobs".to_owned(),
        };
        Ok(Self { pool, channel })
    }

    /// The pool, for the service's own PostgreSQL-only needs (notifications, advisory locks).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Writes a batch's accepted events in a fixed number of statements whatever its tenants:
    /// lock the tenants' sequence rows (in tenant order, so concurrent batches never deadlock),
    /// find the ids already stored, read the tenants' deliverable subscriptions, then insert the
    /// events, pull entries and jobs and move the sequences in one statement. Returns the
    /// outcomes by batch index and whether jobs were created.
    async fn insert_accepted(
        tx: &mut Transaction<'_, Postgres>,
        batch: &[IngestRecord],
        channel: &str,
    ) -> StoreResult<Vec<(usize, WriteOutcome)>> {
        let groups = accepted_by_tenant(batch);
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let tenants: Vec<&str> = groups.keys().copied().collect();
        // Each tenant's writers take turns on its sequence row until commit.
        let last: HashMap<String, i64> = sqlx::query_as(
            "INSERT INTO tenant_sequences (tenant_id, last_seq)
             SELECT t, 0 FROM UNNEST($1::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n
             ON CONFLICT (tenant_id) DO UPDATE SET last_seq = tenant_sequences.last_seq
             RETURNING tenant_id, last_seq",
        )
        .bind(&tenants)
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .collect();
        // One unique-index probe per id, whatever the table's statistics say: only the
        // `(tenant_id, ce_id)` index can serve this row comparison in its order (see
        // `events_by_seqs`).
        let (probe_tenants, probe_ids): (Vec<&str>, Vec<Uuid>) = groups
            .iter()
            .flat_map(|(t, events)| events.iter().map(move |(_, e)| (*t, e.envelope.id().as_uuid())))
            .unzip();
        let mut existing: HashMap<&str, HashMap<Uuid, i64>> = HashMap::new();
        let found: Vec<(String, Uuid, i64)> = sqlx::query_as(
            "SELECT e.tenant_id, e.ce_id, e.seq FROM UNNEST($1::text[], $2::uuid[]) AS u(tenant_id, ce_id)
             CROSS JOIN LATERAL (SELECT tenant_id, ce_id, seq FROM events
                                 WHERE (tenant_id, ce_id) >= (u.tenant_id, u.ce_id)
                                 ORDER BY tenant_id, ce_id LIMIT 1) e
             WHERE e.tenant_id = u.tenant_id AND e.ce_id = u.ce_id",
        )
        .bind(&probe_tenants)
        .bind(&probe_ids)
        .fetch_all(&mut **tx)
        .await?;
        for (tenant, id, seq) in &found {
            if let Some(t) = tenants.iter().find(|t| **t == tenant.as_str()) {
                existing.entry(*t).or_default().insert(*id, *seq);
            }
        }
        let subs: Vec<(String, Uuid, String, String, Option<String>)> = sqlx::query_as(
            "SELECT tenant_id, id, sink_type, event_types::text, origin FROM subscriptions
             WHERE tenant_id = ANY($1) AND enabled AND verification_state = 'active'",
        )
        .bind(&tenants)
        .fetch_all(&mut **tx)
        .await?;
        let mut targets: HashMap<&str, Vec<MatchTarget>> = HashMap::new();
        for (tenant, id, sink, types, origin) in subs {
            if let Some(t) = tenants.iter().find(|t| **t == tenant.as_str()) {
                targets.entry(*t).or_default().push(MatchTarget::new(id, &sink, &types, origin)?);
            }
        }

        let mut outcomes = Vec::new();
        let mut cols = EventColumns::default();
        let (mut pull_subs, mut pull_seqs, mut pull_tenants) = (Vec::new(), Vec::new(), Vec::new());
        let mut jobs = JobColumns::default();
        let (mut seq_tenants, mut seq_last) = (Vec::new(), Vec::new());
        let none = HashMap::new();
        for (tenant, events) in &groups {
            let start = last
                .get(*tenant)
                .copied()
                .ok_or_else(|| StoreError::Corrupt(format!("no sequence row came back for tenant {tenant}")))?;
            let (tenant_outcomes, inserts, new_last) =
                assign_seqs(events, existing.get(tenant).unwrap_or(&none), start);
            outcomes.extend(tenant_outcomes);
            if inserts.is_empty() {
                continue;
            }
            for (seq, event) in &inserts {
                cols.push(tenant, *seq, event);
            }
            let work = match_events(tenant, targets.get(tenant).map_or(&[][..], Vec::as_slice), &inserts);
            for (sub, seq) in work.pulls {
                pull_subs.push(sub);
                pull_seqs.push(seq);
                pull_tenants.push(*tenant);
            }
            for (sub, seq, received) in work.jobs {
                jobs.push(tenant, sub, seq, received);
            }
            seq_tenants.push(*tenant);
            seq_last.push(new_last);
        }
        if cols.seq.is_empty() {
            return Ok(outcomes);
        }
        let notify = !jobs.id.is_empty();
        sqlx::query(
            "WITH new_events AS (
                INSERT INTO events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
                    event_time, schema_version, subject, data_content_type, data_schema, traceparent,
                    tracestate, extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset,
                    received_at)
                SELECT t.tenant_id, t.seq, t.ce_id, t.source, t.ce_type, t.resource_type, t.event_type,
                    t.event_time, t.schema_version, t.subject, t.data_content_type, t.data_schema,
                    t.traceparent, t.tracestate, t.extensions::jsonb, t.payload, t.origin, t.kafka_topic,
                    t.kafka_partition, t.kafka_offset, t.received_at
                FROM UNNEST($1::text[], $2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                    $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                    $13::text[], $14::text[], $15::text[], $16::bytea[], $17::text[], $18::text[],
                    $19::int[], $20::bigint[], $21::timestamptz[])
                AS t(tenant_id, seq, ce_id, source, ce_type, resource_type, event_type, event_time,
                    schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
                    extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset, received_at)
             ), new_pulls AS (
                INSERT INTO pull_entries (subscription_id, seq, tenant_id)
                SELECT * FROM UNNEST($22::uuid[], $23::bigint[], $24::text[])
             ), new_jobs AS (
                INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at,
                    event_received_at, window_start, created_at, updated_at)
                SELECT t.id, t.tenant_id, t.sub, t.seq, 'pending', t.received, t.received, t.received, now(), now()
                FROM UNNEST($25::uuid[], $26::text[], $27::uuid[], $28::bigint[], $29::timestamptz[])
                AS t(id, tenant_id, sub, seq, received)
             ), sequences AS (
                UPDATE tenant_sequences s SET last_seq = u.last_seq
                FROM UNNEST($30::text[], $31::bigint[]) AS u(tenant_id, last_seq)
                WHERE s.tenant_id = u.tenant_id
             )
             -- Delivered at commit: other replicas' dispatchers wake at once.
             SELECT pg_notify($32, '') WHERE $33",
        )
        .bind(cols.tenant_id)
        .bind(cols.seq)
        .bind(cols.ce_id)
        .bind(cols.source)
        .bind(cols.ce_type)
        .bind(cols.resource_type)
        .bind(cols.event_type)
        .bind(cols.event_time)
        .bind(cols.schema_version)
        .bind(cols.subject)
        .bind(cols.data_content_type)
        .bind(cols.data_schema)
        .bind(cols.traceparent)
        .bind(cols.tracestate)
        .bind(cols.extensions)
        .bind(cols.payload)
        .bind(cols.origin)
        .bind(cols.kafka_topic)
        .bind(cols.kafka_partition)
        .bind(cols.kafka_offset)
        .bind(cols.received_at)
        .bind(pull_subs)
        .bind(pull_seqs)
        .bind(pull_tenants)
        .bind(jobs.id)
        .bind(jobs.tenant_id)
        .bind(jobs.sub)
        .bind(jobs.seq)
        .bind(jobs.received)
        .bind(seq_tenants)
        .bind(seq_last)
        .bind(channel)
        .bind(notify)
        .execute(&mut **tx)
        .await?;
        Ok(outcomes)
    }

    /// A subscription's health after one attempt; true when this attempt disabled it.
    async fn apply_health(
        tx: &mut Transaction<'_, Postgres>,
        subscription: Uuid,
        health: &HealthUpdate,
    ) -> StoreResult<bool> {
        Ok(match health {
            HealthUpdate::Success => {
                sqlx::query(
                    "UPDATE subscriptions SET failing_since = NULL, last_failure_at = NULL
                     WHERE id = $1 AND failing_since IS NOT NULL",
                )
                .bind(subscription)
                .execute(&mut **tx)
                .await?;
                false
            }
            HealthUpdate::Failure { at, disable } => {
                let done = sqlx::query(
                    "UPDATE subscriptions SET failing_since = COALESCE(failing_since, $2), last_failure_at = $2,
                        enabled = CASE WHEN $3::text IS NULL THEN enabled ELSE false END,
                        disabled_reason = COALESCE($3, disabled_reason),
                        updated_at = CASE WHEN $3::text IS NULL THEN updated_at ELSE $2 END
                     WHERE id = $1
                     RETURNING ($3::text IS NOT NULL)",
                )
                .bind(subscription)
                .bind(at)
                .bind(disable)
                .fetch_optional(&mut **tx)
                .await?;
                matches!(done.map(|row| row.try_get::<bool, _>(0)).transpose()?, Some(true))
            }
        })
    }

    async fn insert_quarantine(tx: &mut Transaction<'_, Postgres>, record: &QuarantinedRecord) -> StoreResult<i64> {
        let (topic, partition, offset) = record.origin.kafka_parts();
        let headers = serde_json::to_value(&record.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let id = sqlx::query_scalar(
            "INSERT INTO quarantine (tenant_id, source, ce_id, reason_code, reason_field, reason,
                headers, body, body_bytes, origin, kafka_topic, kafka_partition, kafka_offset,
                received_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
             RETURNING id",
        )
        .bind(record.column("ce-tenantid", hub_core::TenantId::MAX_LEN))
        .bind(record.column("ce-source", hub_core::Source::MAX_LEN))
        .bind(record.column("ce-id", 64))
        .bind(record.reason.code.as_str())
        .bind(&record.reason.field)
        .bind(record.reason.to_string())
        .bind(headers)
        .bind(&record.body)
        .bind(record.body_bytes as i64)
        .bind(record.origin.kind())
        .bind(topic)
        .bind(partition)
        .bind(offset)
        .bind(record.received_at)
        .fetch_one(&mut **tx)
        .await?;
        Ok(id)
    }
}

/// Column arrays for one `UNNEST` insert.
#[derive(Default)]
struct EventColumns {
    tenant_id: Vec<String>,
    seq: Vec<i64>,
    ce_id: Vec<Uuid>,
    source: Vec<String>,
    ce_type: Vec<String>,
    resource_type: Vec<String>,
    event_type: Vec<String>,
    event_time: Vec<String>,
    schema_version: Vec<String>,
    subject: Vec<Option<String>>,
    data_content_type: Vec<Option<String>>,
    data_schema: Vec<Option<String>>,
    traceparent: Vec<Option<String>>,
    tracestate: Vec<Option<String>>,
    extensions: Vec<String>,
    payload: Vec<Vec<u8>>,
    origin: Vec<String>,
    kafka_topic: Vec<Option<String>>,
    kafka_partition: Vec<Option<i32>>,
    kafka_offset: Vec<Option<i64>>,
    received_at: Vec<DateTime<Utc>>,
}

impl EventColumns {
    fn push(&mut self, tenant: &str, seq: i64, event: &AcceptedEvent) {
        let env = &event.envelope;
        let (topic, partition, offset) = event.origin.kafka_parts();
        self.tenant_id.push(tenant.to_owned());
        self.seq.push(seq);
        self.ce_id.push(env.id().as_uuid());
        self.source.push(env.source().to_string());
        self.ce_type.push(env.ce_type().to_owned());
        self.resource_type.push(env.key().resource().to_owned());
        self.event_type.push(env.key().event().to_owned());
        self.event_time.push(env.time().to_owned());
        self.schema_version.push(env.schema_version().to_owned());
        self.subject.push(env.subject().map(str::to_owned));
        self.data_content_type.push(env.data_content_type().map(str::to_owned));
        self.data_schema.push(env.data_schema().map(str::to_owned));
        self.traceparent.push(env.traceparent().map(str::to_owned));
        self.tracestate.push(env.tracestate().map(str::to_owned));
        self.extensions.push(serde_json::to_string(env.extensions()).unwrap_or_else(|_| "{}".to_owned()));
        self.payload.push(event.payload.clone());
        self.origin.push(event.origin.kind().to_owned());
        self.kafka_topic.push(topic.map(str::to_owned));
        self.kafka_partition.push(partition);
        self.kafka_offset.push(offset);
        self.received_at.push(event.received_at);
    }
}

/// `limit` split over `tenants` as evenly as it goes, the first ones taking the remainder.
fn shares(limit: u32, tenants: usize) -> Vec<i64> {
    let n = tenants.max(1) as u32;
    (0..n).map(|i| i64::from(limit / n + u32::from(i < limit % n))).collect()
}

/// Column arrays for inserting delivery jobs with `UNNEST`.
#[derive(Default)]
struct JobColumns {
    id: Vec<Uuid>,
    tenant_id: Vec<String>,
    sub: Vec<Uuid>,
    seq: Vec<i64>,
    received: Vec<DateTime<Utc>>,
}

impl JobColumns {
    fn push(&mut self, tenant: &str, sub: Uuid, seq: i64, received: DateTime<Utc>) {
        self.id.push(Uuid::now_v7());
        self.tenant_id.push(tenant.to_owned());
        self.sub.push(sub);
        self.seq.push(seq);
        self.received.push(received);
    }
}

/// Column arrays for recording a batch of attempts with `UNNEST`.
#[derive(Default)]
struct AttemptColumns {
    id: Vec<Uuid>,
    job_id: Vec<Uuid>,
    tenant_id: Vec<String>,
    subscription_id: Vec<Uuid>,
    attempt: Vec<i32>,
    started_at: Vec<DateTime<Utc>>,
    latency_ms: Vec<i64>,
    outcome: Vec<String>,
    status_code: Vec<Option<i32>>,
    error: Vec<Option<String>>,
    response_body: Vec<Option<String>>,
    token: Vec<Uuid>,
    state: Vec<&'static str>,
    due_at: Vec<Option<DateTime<Utc>>>,
    job_error: Vec<Option<String>>,
    finished_at: Vec<Option<DateTime<Utc>>>,
    now: Vec<DateTime<Utc>>,
}

impl AttemptColumns {
    fn push(&mut self, r: &AttemptResult) {
        let a = &r.record;
        self.id.push(a.id);
        self.job_id.push(a.job_id);
        self.tenant_id.push(a.tenant_id.clone());
        self.subscription_id.push(a.subscription_id);
        self.attempt.push(a.attempt);
        self.started_at.push(a.started_at);
        self.latency_ms.push(a.latency_ms);
        self.outcome.push(a.outcome.clone());
        self.status_code.push(a.status_code);
        self.error.push(a.error.clone());
        self.response_body.push(a.response_body.clone());
        let (state, due_at, error, finished) = match &r.transition {
            JobTransition::Succeeded => ("succeeded", None, None, Some(r.now)),
            JobTransition::Retry { due_at } => ("pending", Some(*due_at), a.error.clone(), None),
            JobTransition::Dead { reason } => ("dead", None, Some(reason.clone()), Some(r.now)),
        };
        self.token.push(r.token);
        self.state.push(state);
        self.due_at.push(due_at);
        self.job_error.push(error);
        self.finished_at.push(finished);
        self.now.push(r.now);
    }
}

const EVENT_COLUMNS: &str = "tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
    event_time, schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
    extensions::text AS extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset,
    received_at";

fn event_from_row(row: &PgRow) -> StoreResult<StoredEvent> {
    let extensions: String = row.try_get("extensions")?;
    Ok(StoredEvent {
        tenant_id: row.try_get("tenant_id")?,
        seq: row.try_get("seq")?,
        ce_id: row.try_get("ce_id")?,
        source: row.try_get("source")?,
        ce_type: row.try_get("ce_type")?,
        resource_type: row.try_get("resource_type")?,
        event_type: row.try_get("event_type")?,
        event_time: row.try_get("event_time")?,
        schema_version: row.try_get("schema_version")?,
        subject: row.try_get("subject")?,
        data_content_type: row.try_get("data_content_type")?,
        data_schema: row.try_get("data_schema")?,
        traceparent: row.try_get("traceparent")?,
        tracestate: row.try_get("tracestate")?,
        extensions: serde_json::from_str(&extensions).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        payload: row.try_get("payload")?,
        origin: Origin::from_parts(
            row.try_get("origin")?,
            row.try_get("kafka_topic")?,
            row.try_get("kafka_partition")?,
            row.try_get("kafka_offset")?,
        ),
        received_at: row.try_get("received_at")?,
    })
}

fn quarantine_from_row(row: &PgRow) -> StoreResult<QuarantineEntry> {
    let headers: String = row.try_get("headers")?;
    Ok(QuarantineEntry {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        source: row.try_get("source")?,
        ce_id: row.try_get("ce_id")?,
        reason_code: row.try_get("reason_code")?,
        reason_field: row.try_get("reason_field")?,
        reason: row.try_get("reason")?,
        headers: serde_json::from_str::<BTreeMap<String, String>>(&headers)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        body: row.try_get("body")?,
        body_bytes: row.try_get("body_bytes")?,
        origin: Origin::from_parts(
            row.try_get("origin")?,
            row.try_get("kafka_topic")?,
            row.try_get("kafka_partition")?,
            row.try_get("kafka_offset")?,
        ),
        received_at: row.try_get("received_at")?,
    })
}

/// `$1` tenant, `$2` id, `$3`..`$18` every field a write sets: shared by create and update.
const UPDATE_SUBSCRIPTION: &str = "UPDATE subscriptions SET name = $3, event_types = $4::jsonb, origin = $5,
    sink_type = $6, sink_config = $7::jsonb, signing_secret = $8, previous_secret = $9,
    previous_secret_expires_at = $10, credentials = $11, enabled = $12, verification_state = $13,
    verification_error = $14, disabled_reason = $15, updated_at = $16, failing_since = $17,
    last_failure_at = $18
    WHERE tenant_id = $1 AND id = $2";

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, <Postgres as sqlx::Database>::Arguments>;

/// Binds `$1`..`$18` of a subscription write (see [`UPDATE_SUBSCRIPTION`]).
fn bind_subscription<'q>(q: PgQuery<'q>, sub: &SubscriptionRecord) -> StoreResult<PgQuery<'q>> {
    let event_types = serde_json::to_string(&sub.event_types).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(q.bind(sub.tenant_id.clone())
        .bind(sub.id)
        .bind(sub.name.clone())
        .bind(event_types)
        .bind(sub.origin.clone())
        .bind(sub.sink.as_str())
        .bind(sub.sink_config.to_string())
        .bind(sub.signing_secret.clone())
        .bind(sub.previous_secret.clone())
        .bind(sub.previous_secret_expires_at)
        .bind(sub.credentials.clone())
        .bind(sub.enabled)
        .bind(sub.verification.as_str())
        .bind(sub.verification_error.clone())
        .bind(sub.disabled_reason.clone())
        .bind(sub.updated_at)
        .bind(sub.failing_since)
        .bind(sub.last_failure_at))
}

const SUBSCRIPTION_COLUMNS: &str = "id, tenant_id, name, event_types::text AS event_types, origin,
    sink_type, sink_config::text AS sink_config, signing_secret, previous_secret,
    previous_secret_expires_at, credentials, enabled, verification_state, verification_error,
    disabled_reason, failing_since, last_failure_at, pull_cursor, created_at, updated_at";

fn subscription_from_row(row: &PgRow) -> StoreResult<SubscriptionRecord> {
    let id: Uuid = row.try_get("id")?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("subscription {id}: {what}"));
    let event_types: String = row.try_get("event_types")?;
    let sink_config: String = row.try_get("sink_config")?;
    let sink: String = row.try_get("sink_type")?;
    let verification: String = row.try_get("verification_state")?;
    Ok(SubscriptionRecord {
        id,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        event_types: serde_json::from_str(&event_types).map_err(|_| corrupt("event_types"))?,
        origin: row.try_get("origin")?,
        sink: hub_core::SinkKind::parse(&sink).ok_or_else(|| corrupt("sink_type"))?,
        sink_config: serde_json::from_str(&sink_config).map_err(|_| corrupt("sink_config"))?,
        signing_secret: row.try_get("signing_secret")?,
        previous_secret: row.try_get("previous_secret")?,
        previous_secret_expires_at: row.try_get("previous_secret_expires_at")?,
        credentials: row.try_get("credentials")?,
        enabled: row.try_get("enabled")?,
        verification: hub_core::VerificationState::parse(&verification).ok_or_else(|| corrupt("verification_state"))?,
        verification_error: row.try_get("verification_error")?,
        disabled_reason: row.try_get("disabled_reason")?,
        failing_since: row.try_get("failing_since")?,
        last_failure_at: row.try_get("last_failure_at")?,
        pull_cursor: row.try_get("pull_cursor")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

const JOB_COLUMNS: &str = "id, tenant_id, subscription_id, event_seq, state, attempts, recoveries, due_at,
    event_received_at, window_start, last_error, created_at, updated_at, finished_at";

fn job_from_row(row: &PgRow) -> StoreResult<DeliveryJob> {
    Ok(DeliveryJob {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: row.try_get("subscription_id")?,
        event_seq: row.try_get("event_seq")?,
        state: row.try_get("state")?,
        attempts: row.try_get("attempts")?,
        recoveries: row.try_get("recoveries")?,
        due_at: row.try_get("due_at")?,
        event_received_at: row.try_get("event_received_at")?,
        window_start: row.try_get("window_start")?,
        last_error: row.try_get("last_error")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        finished_at: row.try_get("finished_at")?,
    })
}

const CLAIMED_COLUMNS: &str =
    "id, tenant_id, subscription_id, event_seq, attempts, recoveries, window_start, event_received_at, lease_token";

fn claimed_from_row(row: &PgRow) -> StoreResult<ClaimedJob> {
    let token: Option<Uuid> = row.try_get("lease_token")?;
    Ok(ClaimedJob {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: row.try_get("subscription_id")?,
        event_seq: row.try_get("event_seq")?,
        attempts: row.try_get("attempts")?,
        recoveries: row.try_get("recoveries")?,
        window_start: row.try_get("window_start")?,
        event_received_at: row.try_get("event_received_at")?,
        token: token.ok_or_else(|| StoreError::Corrupt("a claimed job has no lease token".into()))?,
    })
}

fn attempt_from_row(row: &PgRow) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        id: row.try_get("id")?,
        job_id: row.try_get("job_id")?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: row.try_get("subscription_id")?,
        attempt: row.try_get("attempt")?,
        started_at: row.try_get("started_at")?,
        latency_ms: row.try_get("latency_ms")?,
        outcome: row.try_get("outcome")?,
        status_code: row.try_get("status_code")?,
        error: row.try_get("error")?,
        response_body: row.try_get("response_body")?,
    })
}

fn api_key_from_row(row: &PgRow) -> StoreResult<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        key_prefix: row.try_get("key_prefix")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

#[async_trait]
impl Store for PgStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn pending_migrations(&self) -> StoreResult<Vec<i64>> {
        let applied = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::from);
        crate::pending(&MIGRATOR, applied)
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn write_batch(&self, batch: &[IngestRecord]) -> StoreResult<Vec<WriteOutcome>> {
        let mut tx = self.pool.begin().await?;
        let mut outcomes = Self::insert_accepted(&mut tx, batch, &self.channel).await?;
        for (i, record) in batch.iter().enumerate() {
            if let IngestRecord::Quarantined(q) = record {
                let id = Self::insert_quarantine(&mut tx, q).await?;
                outcomes.push((i, WriteOutcome::Quarantined { id }));
            }
        }
        tx.commit().await?;
        ordered(batch.len(), outcomes)
    }

    async fn event_by_ce_id(&self, tenant: &str, ce_id: Uuid) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND ce_id = $2");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(ce_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn events_after(&self, tenant: &str, after: i64, limit: u32) -> StoreResult<Vec<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn create_subscription(&self, sub: &SubscriptionRecord) -> StoreResult<()> {
        let insert = sqlx::query(
            "INSERT INTO subscriptions (tenant_id, id, name, event_types, origin, sink_type, sink_config,
                signing_secret, previous_secret, previous_secret_expires_at, credentials, enabled,
                verification_state, verification_error, disabled_reason, updated_at, failing_since,
                last_failure_at, pull_cursor, created_at)
             VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::jsonb, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)",
        );
        bind_subscription(insert, sub)?.bind(sub.pull_cursor).bind(sub.created_at).execute(&self.pool).await?;
        Ok(())
    }

    async fn subscription(&self, tenant: &str, id: Uuid) -> StoreResult<Option<SubscriptionRecord>> {
        let sql = format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE tenant_id = $1 AND id = $2");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(subscription_from_row)
            .transpose()
    }

    async fn list_subscriptions(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions
             WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn update_subscription(&self, sub: &SubscriptionRecord) -> StoreResult<bool> {
        let update = sqlx::query(UPDATE_SUBSCRIPTION);
        let done = bind_subscription(update, sub)?.execute(&self.pool).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_subscription(&self, tenant: &str, id: Uuid) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query("DELETE FROM subscriptions WHERE tenant_id = $1 AND id = $2")
            .bind(tenant)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE delivery_jobs SET state = 'cancelled', lease_expires_at = NULL, updated_at = now()
             WHERE subscription_id = $1 AND state IN ('pending', 'leased')",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM pull_entries WHERE subscription_id = $1").bind(id).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn pull_events(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<StoredEvent>> {
        // `USING` merges tenant_id and seq; every other column exists only in events.
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM pull_entries p
             JOIN events e USING (tenant_id, seq)
             WHERE p.subscription_id = $1 AND p.tenant_id = $2 AND p.seq > $3
             ORDER BY p.seq LIMIT $4"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(subscription)
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn advance_pull_cursor(&self, tenant: &str, subscription: Uuid, to: i64) -> StoreResult<i64> {
        let cursor: Option<i64> = sqlx::query_scalar(
            "UPDATE subscriptions SET pull_cursor = GREATEST(pull_cursor, $3)
             WHERE tenant_id = $1 AND id = $2 RETURNING pull_cursor",
        )
        .bind(tenant)
        .bind(subscription)
        .bind(to)
        .fetch_optional(&self.pool)
        .await?;
        Ok(cursor.unwrap_or(to))
    }

    async fn list_jobs(
        &self,
        tenant: &str,
        subscription: Uuid,
        state: Option<&str>,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryJob>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM delivery_jobs
             WHERE tenant_id = $1 AND subscription_id = $2 AND ($3::text IS NULL OR state = $3)
               AND ($4::uuid IS NULL OR id > $4)
             ORDER BY id LIMIT $5"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(subscription)
            .bind(state)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(job_from_row)
            .collect()
    }

    async fn event_by_seq(&self, tenant: &str, seq: i64) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND seq = $2");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(seq)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn events_by_seqs(&self, keys: &[(String, i64)]) -> StoreResult<Vec<StoredEvent>> {
        let (tenants, seqs): (Vec<&str>, Vec<i64>) = keys.iter().map(|(t, s)| (t.as_str(), *s)).unzip();
        // One primary-key probe per event, whatever the table's statistics say: only the primary
        // key can serve a row comparison on `(tenant_id, seq)` in its order, so the planner cannot
        // walk the `(tenant_id, ce_id)` index over the tenant's every event instead (it did, when
        // it believed the table small). A missing event probes to the next one, which the outer
        // condition drops.
        let sql = format!(
            "SELECT e.* FROM UNNEST($1::text[], $2::bigint[]) AS k(tenant_id, seq)
             CROSS JOIN LATERAL (SELECT {EVENT_COLUMNS} FROM events
                                 WHERE (tenant_id, seq) >= (k.tenant_id, k.seq)
                                 ORDER BY tenant_id, seq LIMIT 1) e
             WHERE e.tenant_id = k.tenant_id AND e.seq = k.seq"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenants)
            .bind(seqs)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn subscriptions_by_ids(&self, ids: &[Uuid]) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE id = ANY($1)");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(ids)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn claim_jobs(&self, req: &ClaimRequest) -> StoreResult<Vec<ClaimedJob>> {
        let limit = i64::from(req.limit.max(1));
        // The jobs of each chosen tenant, up to its share, locked and leased; the claimed rows are
        // updated by their row address, so the plan does not depend on how fresh the job table's
        // statistics are. `wants` lists the tenants as `t(tenant_id, want)`.
        let lease = |wants: &str| {
            format!(
                "UPDATE delivery_jobs j SET state = 'leased', lease_expires_at = $3, lease_token = $4, updated_at = $2
                 FROM (SELECT c.row, t.want FROM {wants}
                       CROSS JOIN LATERAL (
                           SELECT d.ctid AS row FROM delivery_jobs d JOIN subscriptions s ON s.id = d.subscription_id
                           WHERE d.tenant_id = t.tenant_id AND d.state = 'pending' AND d.due_at <= $2
                             AND s.enabled AND s.verification_state = 'active'
                             AND NOT (d.subscription_id = ANY($5))
                           ORDER BY d.due_at LIMIT t.want
                           FOR UPDATE OF d SKIP LOCKED) c
                       WHERE t.want > 0) x
                 WHERE j.ctid = x.row
                 RETURNING {CLAIMED_COLUMNS}, x.want"
            )
        };
        // First round, one statement: the tenants with due work in order after the last one
        // served, wrapping around to those before it (two skip scans of the index), each given an
        // even share of the limit.
        let first = format!(
            "WITH RECURSIVE a(tenant_id) AS (
                SELECT (SELECT tenant_id FROM delivery_jobs
                        WHERE state = 'pending' AND due_at <= $2 AND tenant_id > $1
                        ORDER BY tenant_id LIMIT 1)
                UNION ALL
                SELECT (SELECT d.tenant_id FROM delivery_jobs d
                        WHERE d.state = 'pending' AND d.due_at <= $2 AND d.tenant_id > a.tenant_id
                        ORDER BY d.tenant_id LIMIT 1)
                FROM a WHERE a.tenant_id IS NOT NULL
             ), b(tenant_id) AS (
                SELECT (SELECT tenant_id FROM delivery_jobs
                        WHERE state = 'pending' AND due_at <= $2 AND $1 <> ''
                        ORDER BY tenant_id LIMIT 1)
                UNION ALL
                SELECT (SELECT d.tenant_id FROM delivery_jobs d
                        WHERE d.state = 'pending' AND d.due_at <= $2 AND d.tenant_id > b.tenant_id
                          AND d.tenant_id <= $1
                        ORDER BY d.tenant_id LIMIT 1)
                FROM b WHERE b.tenant_id IS NOT NULL
             ), picked AS (
                SELECT tenant_id, row_number() OVER (ORDER BY part, tenant_id) AS rn FROM (
                    (SELECT tenant_id, 0 AS part FROM a WHERE tenant_id IS NOT NULL LIMIT $6)
                    UNION ALL
                    (SELECT tenant_id, 1 FROM b WHERE tenant_id IS NOT NULL AND tenant_id <= $1 LIMIT $6)
                ) p
             ), chosen AS (
                SELECT tenant_id, rn FROM picked ORDER BY rn LIMIT $6
             ), wants AS (
                SELECT tenant_id, $6 / n.c + CASE WHEN rn <= $6 % n.c THEN 1 ELSE 0 END AS want
                FROM chosen, (SELECT count(*) AS c FROM chosen) n
             )
             {}",
            lease("wants t")
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(first))
            .bind(req.after_tenant.clone().unwrap_or_default())
            .bind(req.now)
            .bind(req.lease_until)
            .bind(req.token)
            .bind(&req.exclude_subscriptions)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        // What a tenant could not use goes round again to those that filled their share, so one
        // claim is both fair and full.
        let again = lease("UNNEST($1::text[], $6::bigint[]) AS t(tenant_id, want)");
        let mut claimed: Vec<ClaimedJob> = Vec::new();
        let mut rows = rows;
        loop {
            let mut got: BTreeMap<String, (i64, i64)> = BTreeMap::new();
            for row in &rows {
                let job = claimed_from_row(row)?;
                let want: i64 = row.try_get("want")?;
                let entry = got.entry(job.tenant_id.clone()).or_insert((0, want));
                entry.0 += 1;
                claimed.push(job);
            }
            let filled: Vec<String> = got.into_iter().filter(|(_, (n, want))| n >= want).map(|(t, _)| t).collect();
            if filled.is_empty() || (claimed.len() as u32) >= req.limit {
                break;
            }
            let wants = shares(req.limit - claimed.len() as u32, filled.len());
            rows = sqlx::query(sqlx::AssertSqlSafe(again.clone()))
                .bind(&filled)
                .bind(req.now)
                .bind(req.lease_until)
                .bind(req.token)
                .bind(&req.exclude_subscriptions)
                .bind(&wants)
                .fetch_all(&self.pool)
                .await?;
            if rows.is_empty() {
                break;
            }
        }
        Ok(claimed)
    }

    async fn release_job(&self, job: Uuid, token: Uuid, due_at: DateTime<Utc>) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE delivery_jobs SET state = 'pending', due_at = $3, lease_expires_at = NULL, lease_token = NULL,
                updated_at = now()
             WHERE id = $1 AND lease_token = $2 AND state = 'leased'",
        )
        .bind(job)
        .bind(token)
        .bind(due_at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn complete_attempts(&self, results: &[AttemptResult]) -> StoreResult<Vec<Completed>> {
        if results.is_empty() {
            return Ok(Vec::new());
        }
        let mut cols = AttemptColumns::default();
        for r in results {
            cols.push(r);
        }
        // The usual case, every attempt delivered: one statement (so one transaction) records
        // them, moves their jobs and clears their subscriptions' failure marks. Otherwise the
        // subscriptions' health changes follow, in order, in the same transaction.
        let all_delivered = results.iter().all(|r| matches!(r.health, HealthUpdate::Success));
        let healthy = if all_delivered {
            ", healthy AS (
                UPDATE subscriptions SET failing_since = NULL, last_failure_at = NULL
                WHERE id = ANY($4) AND failing_since IS NOT NULL)"
        } else {
            ""
        };
        // Each job changes only while its lease is held: the held jobs are found and locked by
        // primary key, one probe each, and updated by their row address, so the plan does not
        // depend on how fresh the fast-changing job table's statistics are.
        let sql = format!(
            "WITH held AS MATERIALIZED (
                SELECT u.*, l.row FROM UNNEST($2::uuid[], $12::uuid[], $13::text[], $14::timestamptz[],
                    $15::text[], $16::timestamptz[], $17::timestamptz[])
                    AS u(id, token, state, due_at, error, finished_at, now)
                CROSS JOIN LATERAL (SELECT ctid AS row FROM delivery_jobs
                                    WHERE id = u.id AND lease_token = u.token AND state = 'leased'
                                    LIMIT 1 FOR UPDATE) l
             ), done AS (
                UPDATE delivery_jobs j SET state = h.state, attempts = j.attempts + 1,
                    due_at = COALESCE(h.due_at, j.due_at), last_error = h.error, finished_at = h.finished_at,
                    lease_expires_at = NULL, lease_token = NULL, updated_at = h.now
                FROM held h WHERE j.ctid = h.row
                RETURNING j.id
             ), recorded AS (
                INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at,
                    latency_ms, outcome, status_code, error, response_body)
                SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], $5::int[],
                    $6::timestamptz[], $7::bigint[], $8::text[], $9::int[], $10::text[], $11::text[])
             ){healthy}
             SELECT id FROM done"
        );
        let query = sqlx::query_scalar::<_, Uuid>(sqlx::AssertSqlSafe(sql))
            .bind(&cols.id)
            .bind(&cols.job_id)
            .bind(&cols.tenant_id)
            .bind(&cols.subscription_id)
            .bind(&cols.attempt)
            .bind(&cols.started_at)
            .bind(&cols.latency_ms)
            .bind(&cols.outcome)
            .bind(&cols.status_code)
            .bind(&cols.error)
            .bind(&cols.response_body)
            .bind(&cols.token)
            .bind(&cols.state)
            .bind(&cols.due_at)
            .bind(&cols.job_error)
            .bind(&cols.finished_at)
            .bind(&cols.now);
        let mut disabled = vec![false; results.len()];
        let updated: std::collections::HashSet<Uuid> = if all_delivered {
            query.fetch_all(&self.pool).await?.into_iter().collect()
        } else {
            let mut tx = self.pool.begin().await?;
            let updated = query.fetch_all(&mut *tx).await?.into_iter().collect();
            // Failures and successes of one subscription apply in order.
            for (i, r) in results.iter().enumerate() {
                disabled[i] = Self::apply_health(&mut tx, r.record.subscription_id, &r.health).await?;
            }
            tx.commit().await?;
            updated
        };
        Ok(results
            .iter()
            .zip(disabled)
            .map(|(r, disabled)| Completed { job_updated: updated.contains(&r.record.job_id), disabled })
            .collect())
    }

    async fn recover_expired_leases(&self, now: DateTime<Utc>, poison_threshold: u32) -> StoreResult<Recovery> {
        let states: Vec<String> = sqlx::query_scalar(
            "UPDATE delivery_jobs SET recoveries = recoveries + 1,
                state = CASE WHEN recoveries + 1 >= $2 THEN 'dead' ELSE 'pending' END,
                finished_at = CASE WHEN recoveries + 1 >= $2 THEN $1 ELSE NULL END,
                last_error = CASE WHEN recoveries + 1 >= $2 THEN $3
                                  ELSE 'lease expired without an outcome; recovered' END,
                due_at = $1, lease_expires_at = NULL, lease_token = NULL, updated_at = $1
             WHERE state = 'leased' AND lease_expires_at < $1
             RETURNING state",
        )
        .bind(now)
        .bind(i64::from(poison_threshold))
        .bind(hub_core::delivery::DeadReason::Poison.as_str())
        .fetch_all(&self.pool)
        .await?;
        let poisoned = states.iter().filter(|s| s.as_str() == "dead").count() as u64;
        Ok(Recovery { recovered: states.len() as u64 - poisoned, poisoned })
    }

    async fn attempts_for_jobs(&self, tenant: &str, jobs: &[Uuid]) -> StoreResult<Vec<AttemptRecord>> {
        sqlx::query(
            "SELECT id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms, outcome, status_code,
                error, response_body
             FROM delivery_attempts WHERE tenant_id = $1 AND job_id = ANY($2) ORDER BY job_id, attempt, started_at",
        )
        .bind(tenant)
        .bind(jobs)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(attempt_from_row)
        .collect()
    }

    async fn redrive(
        &self,
        tenant: &str,
        subscription: Uuid,
        since: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let done = sqlx::query(
            "UPDATE delivery_jobs SET state = 'pending', attempts = 0, recoveries = 0, due_at = $4,
                window_start = $4, last_error = NULL, finished_at = NULL, updated_at = $4
             WHERE tenant_id = $1 AND subscription_id = $2 AND state = 'dead'
               AND ($3::timestamptz IS NULL OR finished_at >= $3)",
        )
        .bind(tenant)
        .bind(subscription)
        .bind(since)
        .bind(now)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() > 0 {
            sqlx::query("SELECT pg_notify($1, '')").bind(&self.channel).execute(&self.pool).await?;
        }
        Ok(done.rows_affected())
    }

    async fn listen_for_jobs(&self, notify: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<()> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(&self.channel).await?;
        tokio::spawn(async move {
            loop {
                match listener.recv().await {
                    Ok(_) => notify.notify_one(),
                    // The listener reconnects by itself on the next recv; wake the dispatcher so it
                    // polls meanwhile.
                    Err(_) => {
                        notify.notify_one();
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(())
    }

    async fn write_dlq_records(&self, records: &[NewDlqRecord]) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await?;
        let mut new = 0;
        for r in records {
            let headers = serde_json::to_value(&r.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let done = sqlx::query(
                "INSERT INTO dlq_records (topic, kafka_partition, kafka_offset, source, tenant_id, ce_id, ce_type,
                    error_class, error_message, headers, body, body_bytes, payload_omitted, record_timestamp,
                    received_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
                 ON CONFLICT (topic, kafka_partition, kafka_offset) DO NOTHING",
            )
            .bind(&r.topic)
            .bind(r.partition)
            .bind(r.offset)
            .bind(&r.source)
            .bind(&r.tenant_id)
            .bind(&r.ce_id)
            .bind(&r.ce_type)
            .bind(&r.error_class)
            .bind(&r.error_message)
            .bind(headers)
            .bind(&r.body)
            .bind(r.body_bytes)
            .bind(r.payload_omitted)
            .bind(r.record_timestamp)
            .bind(r.received_at)
            .execute(&mut *tx)
            .await?;
            new += done.rows_affected();
        }
        tx.commit().await?;
        Ok(new)
    }

    async fn list_dlq(&self, f: &DlqFilter) -> StoreResult<Vec<DlqEntry>> {
        sqlx::query(
            "SELECT id, topic, kafka_partition, kafka_offset, source, tenant_id, ce_id, ce_type, error_class,
                error_message, headers::text AS headers, body, body_bytes, payload_omitted, record_timestamp,
                received_at
             FROM dlq_records
             WHERE ($1::text IS NULL OR source = $1)
               AND ($2::text IS NULL OR tenant_id = $2)
               AND ($3::text IS NULL OR error_class = $3)
               AND ($4::timestamptz IS NULL OR received_at >= $4)
               AND ($5::timestamptz IS NULL OR received_at < $5)
               AND ($6::bigint IS NULL OR id < $6)
             ORDER BY id DESC LIMIT $7",
        )
        .bind(&f.source)
        .bind(&f.tenant)
        .bind(&f.error_class)
        .bind(f.since)
        .bind(f.until)
        .bind(f.before_id)
        .bind(i64::from(f.limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            let headers: String = row.try_get("headers")?;
            Ok(DlqEntry {
                id: row.try_get("id")?,
                record: NewDlqRecord {
                    topic: row.try_get("topic")?,
                    partition: row.try_get("kafka_partition")?,
                    offset: row.try_get("kafka_offset")?,
                    source: row.try_get("source")?,
                    tenant_id: row.try_get("tenant_id")?,
                    ce_id: row.try_get("ce_id")?,
                    ce_type: row.try_get("ce_type")?,
                    error_class: row.try_get("error_class")?,
                    error_message: row.try_get("error_message")?,
                    headers: serde_json::from_str(&headers).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    body: row.try_get("body")?,
                    body_bytes: row.try_get("body_bytes")?,
                    payload_omitted: row.try_get("payload_omitted")?,
                    record_timestamp: row.try_get("record_timestamp")?,
                    received_at: row.try_get("received_at")?,
                },
            })
        })
        .collect()
    }

    async fn prune(&self, kind: PruneKind, older_than: DateTime<Utc>, limit: u32) -> StoreResult<Option<u64>> {
        let mut tx = self.pool.begin().await?;
        // One replica at a time per kind (and per schema: the key includes the channel name).
        let key = format!("{}/prune/{}", self.channel, kind.as_str());
        let locked: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext($1))").bind(&key).fetch_one(&mut *tx).await?;
        if !locked {
            return Ok(None);
        }
        let limit = i64::from(limit);
        let deleted = match kind {
            PruneKind::Quarantine => sqlx::query(
                "DELETE FROM quarantine WHERE id IN
                    (SELECT id FROM quarantine WHERE received_at < $1 ORDER BY id LIMIT $2)",
            )
            .bind(older_than)
            .bind(limit)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
            PruneKind::Dlq => sqlx::query(
                "DELETE FROM dlq_records WHERE id IN
                    (SELECT id FROM dlq_records WHERE received_at < $1 ORDER BY id LIMIT $2)",
            )
            .bind(older_than)
            .bind(limit)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
            PruneKind::FinishedJobs => {
                let ids: Vec<Uuid> = sqlx::query_scalar(
                    "SELECT id FROM delivery_jobs
                     WHERE state IN ('succeeded', 'dead', 'cancelled') AND COALESCE(finished_at, updated_at) < $1
                     LIMIT $2",
                )
                .bind(older_than)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                sqlx::query("DELETE FROM delivery_attempts WHERE job_id = ANY($1)")
                    .bind(&ids)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM delivery_jobs WHERE id = ANY($1)")
                    .bind(&ids)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            PruneKind::Events => {
                let gone: Vec<(String, i64)> = sqlx::query_as(
                    "DELETE FROM events WHERE (tenant_id, seq) IN (
                        SELECT e.tenant_id, e.seq FROM events e
                        WHERE e.received_at < $1
                          AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.tenant_id = e.tenant_id AND j.event_seq = e.seq)
                        ORDER BY e.received_at LIMIT $2)
                     RETURNING tenant_id, seq",
                )
                .bind(older_than)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                let (tenants, seqs): (Vec<String>, Vec<i64>) = gone.iter().cloned().unzip();
                sqlx::query(
                    "DELETE FROM pull_entries WHERE (tenant_id, seq) IN (SELECT * FROM UNNEST($1::text[], $2::bigint[]))",
                )
                .bind(&tenants)
                .bind(&seqs)
                .execute(&mut *tx)
                .await?;
                gone.len() as u64
            }
        };
        tx.commit().await?;
        Ok(Some(deleted))
    }

    async fn inbox_size(&self) -> StoreResult<i64> {
        // `to_regclass` resolves `events` through the search_path (the configured schema).
        let estimate: Option<f32> =
            sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = to_regclass('events')")
                .fetch_optional(&self.pool)
                .await?
                .flatten();
        Ok(estimate.map_or(0, |n| n.max(0.0) as i64))
    }

    async fn job_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(sqlx::query_as("SELECT state, count(*) FROM delivery_jobs GROUP BY state").fetch_all(&self.pool).await?)
    }

    async fn list_quarantine(&self, f: &QuarantineFilter) -> StoreResult<Vec<QuarantineEntry>> {
        sqlx::query(
            "SELECT id, tenant_id, source, ce_id, reason_code, reason_field, reason,
                headers::text AS headers, body, body_bytes, origin, kafka_topic, kafka_partition,
                kafka_offset, received_at
             FROM quarantine
             WHERE ($1::text IS NULL OR tenant_id = $1)
               AND ($2::text IS NULL OR source = $2)
               AND ($3::text IS NULL OR reason_code = $3)
               AND ($4::text IS NULL OR origin = $4)
               AND ($5::timestamptz IS NULL OR received_at >= $5)
               AND ($6::timestamptz IS NULL OR received_at < $6)
               AND ($7::bigint IS NULL OR id < $7)
             ORDER BY id DESC
             LIMIT $8",
        )
        .bind(&f.tenant)
        .bind(&f.source)
        .bind(&f.reason_code)
        .bind(&f.origin)
        .bind(f.since)
        .bind(f.until)
        .bind(f.before_id)
        .bind(i64::from(f.limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(quarantine_from_row)
        .collect()
    }

    async fn create_api_key(&self, key: &NewApiKey) -> StoreResult<ApiKeyRecord> {
        let row = sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             RETURNING id, tenant_id, name, key_prefix, created_at, revoked_at",
        )
        .bind(key.id)
        .bind(&key.tenant_id)
        .bind(&key.name)
        .bind(&key.key_hash)
        .bind(&key.key_prefix)
        .bind(key.created_at)
        .fetch_one(&self.pool)
        .await?;
        api_key_from_row(&row)
    }

    async fn list_api_keys(&self, before: Option<Uuid>, limit: u32) -> StoreResult<Vec<ApiKeyRecord>> {
        sqlx::query(
            "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at FROM api_keys
             WHERE ($1::uuid IS NULL OR id < $1) ORDER BY id DESC LIMIT $2",
        )
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(api_key_from_row)
        .collect()
    }

    async fn revoke_api_key(&self, id: Uuid) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn api_key_by_hash(&self, hash: &[u8]) -> StoreResult<Option<ApiKeyRecord>> {
        sqlx::query(
            "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at FROM api_keys
             WHERE key_hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(api_key_from_row)
        .transpose()
    }
}
