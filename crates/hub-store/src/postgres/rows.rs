//! Column arrays for the batch statements, and the readers of each table's rows.

use crate::sql;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row};
use uuid::Uuid;

use crate::model::JobToWrite;
use crate::{
    AcceptedEvent, ApiKeyRecord, AttemptRecord, AttemptResult, ClaimedJob, Completed, DeliveryJob, HealthChange,
    JobState, JobTransition, Origin, QuarantineEntry, StoreError, StoreResult, StoredEvent, SubscriptionRecord,
};

/// Column arrays for one `UNNEST` insert.
#[derive(Default)]
pub(super) struct EventColumns {
    pub(super) tenant_id: Vec<String>,
    pub(super) seq: Vec<i64>,
    pub(super) ce_id: Vec<Uuid>,
    pub(super) source: Vec<String>,
    pub(super) ce_type: Vec<String>,
    pub(super) resource_type: Vec<String>,
    pub(super) event_type: Vec<String>,
    pub(super) event_time: Vec<String>,
    pub(super) schema_version: Vec<String>,
    pub(super) subject: Vec<Option<String>>,
    pub(super) data_content_type: Vec<Option<String>>,
    pub(super) data_schema: Vec<Option<String>>,
    pub(super) traceparent: Vec<Option<String>>,
    pub(super) tracestate: Vec<Option<String>>,
    pub(super) extensions: Vec<String>,
    pub(super) payload: Vec<Vec<u8>>,
    pub(super) origin: Vec<String>,
    pub(super) kafka_topic: Vec<Option<String>>,
    pub(super) kafka_partition: Vec<Option<i32>>,
    pub(super) kafka_offset: Vec<Option<i64>>,
    pub(super) received_at: Vec<DateTime<Utc>>,
    pub(super) hub_traceparent: Vec<Option<String>>,
}

impl EventColumns {
    pub(super) fn push(&mut self, tenant: &str, seq: i64, event: &AcceptedEvent) {
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
        self.hub_traceparent.push(event.trace.clone());
    }
}

/// Column arrays for inserting delivery jobs with `UNNEST`.
#[derive(Default)]
pub(super) struct JobColumns {
    pub(super) id: Vec<Uuid>,
    pub(super) tenant_id: Vec<String>,
    pub(super) sub: Vec<Uuid>,
    pub(super) seq: Vec<i64>,
    pub(super) received: Vec<DateTime<Utc>>,
    pub(super) state: Vec<&'static str>,
    pub(super) token: Vec<Option<Uuid>>,
    pub(super) until: Vec<Option<DateTime<Utc>>>,
    pub(super) key: Vec<Option<String>>,
}

impl JobColumns {
    pub(super) fn push(&mut self, tenant: &str, job: JobToWrite) {
        self.state.push(job.state().as_str());
        self.id.push(job.id);
        self.tenant_id.push(tenant.to_owned());
        self.sub.push(job.job.subscription);
        self.seq.push(job.job.seq);
        self.received.push(job.job.received_at);
        self.token.push(job.leased.map(|(token, _)| token));
        self.until.push(job.leased.map(|(_, until)| until));
        self.key.push(job.job.ordering_key);
    }
}

/// Whether every attempt delivered (so each clears its subscription's failure mark, and none
/// changes its health otherwise).
pub(super) fn delivered_only(results: &[AttemptResult]) -> bool {
    results.iter().all(|r| matches!(r.health, HealthChange::Success))
}

/// The `hub_record` call for a set of attempts (migration 0012): the jobs it moved.
pub(super) fn record_query(
    cols: &AttemptColumns,
    clear_health: bool,
) -> sqlx::query::QueryScalar<'_, Postgres, Uuid, sqlx::postgres::PgArguments> {
    sqlx::query_scalar(
        "SELECT moved FROM hub_record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
            $18, $19, $20, $21)",
    )
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
    .bind(&cols.now)
    .bind(clear_health)
    .bind(&cols.entry)
    .bind(&cols.event)
    .bind(&cols.digest_key)
}

/// What recording each attempt changed: its job when the store moved it (`moved`), and whether
/// it disabled its subscription.
pub(super) fn completions(results: &[AttemptResult], moved: &[Uuid], disabled: Option<&[bool]>) -> Vec<Completed> {
    let moved: std::collections::HashSet<&Uuid> = moved.iter().collect();
    results
        .iter()
        .enumerate()
        .map(|(i, r)| Completed {
            job_updated: moved.contains(&r.record.job_id),
            disabled: disabled.is_some_and(|d| d[i]),
        })
        .collect()
}

/// Column arrays for recording a batch of attempts with `UNNEST`.
#[derive(Default)]
pub(super) struct AttemptColumns {
    pub(super) id: Vec<Uuid>,
    pub(super) job_id: Vec<Uuid>,
    pub(super) tenant_id: Vec<String>,
    pub(super) subscription_id: Vec<Uuid>,
    pub(super) attempt: Vec<i32>,
    pub(super) started_at: Vec<DateTime<Utc>>,
    pub(super) latency_ms: Vec<i64>,
    pub(super) outcome: Vec<String>,
    pub(super) status_code: Vec<Option<i32>>,
    pub(super) error: Vec<Option<String>>,
    pub(super) response_body: Vec<Option<String>>,
    pub(super) token: Vec<Uuid>,
    pub(super) state: Vec<&'static str>,
    pub(super) due_at: Vec<Option<DateTime<Utc>>>,
    pub(super) job_error: Vec<Option<String>>,
    pub(super) finished_at: Vec<Option<DateTime<Utc>>>,
    pub(super) now: Vec<DateTime<Utc>>,
    pub(super) entry: Vec<Option<String>>,
    pub(super) event: Vec<Option<Uuid>>,
    pub(super) digest_key: Vec<Option<Vec<u8>>>,
}

impl AttemptColumns {
    pub(super) fn of(results: &[AttemptResult]) -> Self {
        let mut cols = Self::default();
        for r in results {
            cols.push(r);
        }
        cols
    }

    pub(super) fn push(&mut self, r: &AttemptResult) {
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
            JobTransition::Dead { reason, .. } => ("dead", None, Some(reason.clone()), Some(r.now)),
            JobTransition::Cancelled { reason } => ("cancelled", None, Some(reason.clone()), Some(r.now)),
        };
        self.token.push(r.token);
        self.state.push(state);
        self.due_at.push(due_at);
        self.job_error.push(error);
        self.finished_at.push(finished);
        self.now.push(r.now);
        self.entry.push(r.ledger.as_ref().map(|e| e.data.clone()));
        self.event.push(r.ledger.as_ref().and_then(|e| e.event_id));
        self.digest_key.push(r.ledger.as_ref().and_then(|e| e.digest_key.clone()));
    }
}

pub(super) const EVENT_COLUMNS: &str = "tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
    event_time, schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
    extensions::text AS extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset,
    received_at, hub_traceparent, erased_by";

pub(super) fn event_from_row(row: &PgRow) -> StoreResult<StoredEvent> {
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
        trace: row.try_get("hub_traceparent")?,
        erasure_id: row.try_get("erased_by")?,
    })
}

pub(super) fn quarantine_from_row(row: &PgRow) -> StoreResult<QuarantineEntry> {
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

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, <Postgres as sqlx::Database>::Arguments<'q>>;

/// Binds `$1`..`$18` of a subscription write (see `create_subscription`).
pub(super) fn bind_subscription<'q>(q: PgQuery<'q>, sub: &SubscriptionRecord) -> StoreResult<PgQuery<'q>> {
    let event_types = serde_json::to_string(&sub.event_types).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(q.bind(sub.tenant_id.clone())
        .bind(sub.id)
        .bind(sub.name.clone())
        .bind(event_types)
        .bind(sub.origin.clone())
        .bind(sub.sink.as_str().to_owned())
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

pub(super) const SUBSCRIPTION_COLUMNS: &str = "id, tenant_id, name, event_types::text AS event_types, origin,
    filters::text AS filters, transform::text AS transform, ordering, limits::text AS limits, allowed_rate, sink_type, sink_config::text AS sink_config, signing_secret, previous_secret,
    previous_secret_expires_at, credentials, enabled, verification_state, verification_error,
    disabled_reason, disabled_at, failing_since, last_failure_at, pull_cursor, pace_bucket, created_at, updated_at";

pub(super) fn subscription_from_row(row: &PgRow) -> StoreResult<SubscriptionRecord> {
    let id: Uuid = row.try_get("id")?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("subscription {id}: {what}"));
    let event_types: String = row.try_get("event_types")?;
    let filters: String = row.try_get("filters")?;
    let sink_config: String = row.try_get("sink_config")?;
    let sink: String = row.try_get("sink_type")?;
    let verification: String = row.try_get("verification_state")?;
    Ok(SubscriptionRecord {
        id,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        event_types: serde_json::from_str(&event_types).map_err(|_| corrupt("event_types"))?,
        origin: row.try_get("origin")?,
        filters: serde_json::from_str(&filters).map_err(|_| corrupt("filters"))?,
        transform: row
            .try_get::<Option<String>, _>("transform")?
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|_| corrupt("transform"))?,
        ordering: hub_core::Ordering::parse(&row.try_get::<String, _>("ordering")?)
            .ok_or_else(|| corrupt("ordering"))?,
        sink: hub_core::SinkKind::parse(&sink).ok_or_else(|| corrupt("sink_type"))?,
        limits: serde_json::from_str(&row.try_get::<String, _>("limits")?).map_err(|_| corrupt("limits"))?,
        allowed_rate: row.try_get("allowed_rate")?,
        sink_config: serde_json::from_str(&sink_config).map_err(|_| corrupt("sink_config"))?,
        signing_secret: row.try_get("signing_secret")?,
        previous_secret: row.try_get("previous_secret")?,
        previous_secret_expires_at: row.try_get("previous_secret_expires_at")?,
        credentials: row.try_get("credentials")?,
        enabled: row.try_get("enabled")?,
        verification: hub_core::VerificationState::parse(&verification).ok_or_else(|| corrupt("verification_state"))?,
        verification_error: row.try_get("verification_error")?,
        disabled_reason: row.try_get("disabled_reason")?,
        disabled_at: row.try_get("disabled_at")?,
        failing_since: row.try_get("failing_since")?,
        last_failure_at: row.try_get("last_failure_at")?,
        pull_cursor: row.try_get("pull_cursor")?,
        pace_bucket: row.try_get("pace_bucket")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub(super) const JOB_COLUMNS: &str = sql::JOB_COLUMNS;

pub(super) fn job_state(s: String) -> StoreResult<JobState> {
    JobState::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("unknown job state {s:?}")))
}

pub(super) fn job_from_row(row: &PgRow) -> StoreResult<DeliveryJob> {
    Ok(DeliveryJob {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: row.try_get("subscription_id")?,
        event_seq: row.try_get("event_seq")?,
        state: job_state(row.try_get("state")?)?,
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

pub(super) fn claimed_from_row(row: &PgRow) -> StoreResult<ClaimedJob> {
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

pub(super) fn attempt_from_row(row: &PgRow) -> StoreResult<AttemptRecord> {
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
        ledger_index: row.try_get("ledger_index")?,
    })
}

pub(super) fn api_key_from_row(row: &PgRow) -> StoreResult<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        tenant_id: if row.try_get::<bool, _>("admin")? { None } else { Some(row.try_get("tenant_id")?) },
        name: row.try_get("name")?,
        key_prefix: row.try_get("key_prefix")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
        expires_at: row.try_get("expires_at")?,
        role: row.try_get("role")?,
    })
}
