//! `/v1/subscriptions`: create, list, read, change and delete a tenant's subscriptions.
//!
//! Every route is scoped to the caller's tenant: another tenant's subscription answers 404,
//! never 403, so its existence does not leak.

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hub_core::delivery::inflight::Limits;
use hub_core::{EventPattern, Ordering, SinkKind, Source, VerificationState};
use hub_store::{DestinationChange, SubscriptionPatch, SubscriptionRecord};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::TenantCaller;
use super::destination::{self, Credentials};
use super::error::{ApiError, ErrorBody, Json, Query, cursor, next_cursor, page_limit};
use super::filters::valid_filters;
use crate::delivery::membership::Paced;
use crate::secrets::{Purpose, SealerError, new_signing_secret_for};

/// Why a subscription disabled through the API is disabled.
pub const DISABLED_BY_API: &str = "disabled through the API";

/// A subscription as the API shows it: never a stored secret or credential.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionView {
    pub id: Uuid,
    pub name: String,
    pub event_types: Vec<String>,
    pub origin: Option<String>,
    /// Content filters; every one must match (empty: none).
    #[schema(value_type = Vec<super::filters::schema::Filter>)]
    pub filters: Value,
    /// `key`: per ordering key (`partitionkey`, else `subject`) one delivery at a time, in seq
    /// order; `none`: any order.
    #[schema(value_type = OrderingMode)]
    pub ordering: &'static str,
    /// The destination without secrets or credentials.
    #[schema(value_type = hub_sinks::SinkSchema)]
    pub sink: Value,
    /// Fixed delivery limits for the whole install (push sinks); `null` fields are no fixed limit.
    pub limits: LimitsView,
    /// The handler that reshapes each event for the destination, or skips it (push sinks;
    /// `null`: events go as they are).
    #[schema(value_type = Option<super::transforms::Transform>)]
    pub transform: Option<Value>,
    /// The rate (requests per minute) the receiver declared in its last successful
    /// verification (`WebHook-Allowed-Rate`); deliveries never go faster.
    pub allowed_rate: Option<f64>,
    pub enabled: bool,
    /// `pending`, `active` or `failed`.
    pub verification_state: String,
    pub verification_error: Option<String>,
    pub disabled_reason: Option<String>,
    /// When it was last disabled (kept after it is enabled again): where
    /// `POST …/verify` with `replay_since_disabled` starts its replay.
    pub disabled_at: Option<DateTime<Utc>>,
    /// Whether credentials are stored for the destination (they are never shown).
    pub credentials_set: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The webhook signing secret: in the creation response only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// An `ed25519` webhook's public key (`whpk_…`), in the creation response; the secret key
    /// never leaves the hub. `GET …/public-keys` lists it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// Its health, in listings: since when its destination fails (the failure period that leads
    /// to auto-disable), its breaker as this replica's dispatcher last saw it, and its jobs
    /// waiting or dead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// In the responses to a creation or a change: what was accepted but looks wrong (an
    /// `event_types` pattern that matches no type the catalog knows), never a refusal.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// A subscription's fixed delivery limits (SPEC §10), each held for the whole install (one
/// replica paces a destination).
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitsView {
    /// Attempts in flight at once for this subscription, 1 to 2048; `null`: only the
    /// destination's adaptive allowance and the replica's bound apply.
    #[schema(minimum = 1, maximum = 2048)]
    pub max_in_flight: Option<u32>,
    /// Attempts started per second, 0.01 to 10000; `null`: no rate.
    #[schema(minimum = 0.01, maximum = 10000)]
    pub per_second: Option<f64>,
}

impl From<Limits> for LimitsView {
    fn from(l: Limits) -> Self {
        Self { max_in_flight: l.max_in_flight, per_second: l.per_second }
    }
}

/// A subscription's deliveries in flight, as the replica that paces its destination sees them
/// (one replica paces each destination for the whole cluster; another replica's figures are
/// those of its last heartbeat, at most 2 s old).
#[derive(Debug, Serialize, ToSchema)]
pub struct FlightView {
    /// The replica that paces its destination (`host:pid`); `null` when no delivering replica
    /// is live.
    pub paced_by: Option<String>,
    /// Its attempts in flight now, cluster-wide.
    pub in_flight: usize,
    /// Its destination's adaptive allowance of attempts in flight, cluster-wide (`null` before
    /// its first attempt).
    pub allowance: Option<usize>,
    /// Until when its destination is paused by a `Retry-After`.
    pub paused_until: Option<DateTime<Utc>>,
    /// The rate that applies (attempts per second): its own and its receiver's declared one,
    /// the lower.
    pub rate_per_second: Option<f64>,
}

impl FlightView {
    /// From `paced` (who paces `sub`'s destination): another replica's published figures, or
    /// this replica's own.
    fn of(state: &AppState, sub: &SubscriptionRecord, paced: Option<&Paced>) -> Self {
        match paced {
            Some(Paced { by, published: Some(entry) }) => {
                // Another replica paces it: what that replica published with its last heartbeat.
                Self {
                    paced_by: Some(by.clone()),
                    in_flight: entry["in_flight"].as_u64().map_or(0, |n| n as usize),
                    allowance: entry["allowance"].as_u64().map(|n| n as usize),
                    paused_until: entry["paused_until"]
                        .as_str()
                        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                        .map(|t| t.with_timezone(&Utc))
                        .filter(|t| *t > state.clock.now()),
                    rate_per_second: sub.limits.rate(sub.allowed_rate),
                }
            }
            _ => {
                let f = state.delivery.flights.flight(sub);
                let now = state.clock.now();
                Self {
                    paced_by: paced.map(|p| p.by.clone()),
                    in_flight: f.in_flight,
                    allowance: f.allowance,
                    paused_until: f.paused_for.map(|d| now + chrono::Duration::from_std(d).unwrap_or_default()),
                    rate_per_second: f.rate,
                }
            }
        }
    }
}

/// `sub`'s breaker as the replica that paces its destination (`paced`) sees it.
fn breaker_of(state: &AppState, sub: &SubscriptionRecord, paced: Option<&Paced>) -> &'static str {
    match paced.and_then(|p| p.published.as_ref()) {
        Some(entry) => match entry["breaker"].as_str() {
            Some("open") => "open",
            Some("half_open") => "half_open",
            _ => "closed",
        },
        None => state.delivery.breakers.state(sub.id),
    }
}

/// `limits` as a request gives it (`null` is none): for push sinks only.
fn valid_limits(value: &Value, sink: SinkKind) -> Result<Limits, ApiError> {
    let limits = Limits::parse(value).map_err(|e| ApiError::validation(&e.field, e.message))?;
    if limits != Limits::default() && !sink.is_push() {
        return Err(ApiError::validation("limits", "applies to push sinks; a pull consumer reads at its own pace"));
    }
    Ok(limits)
}

/// Something accepted that looks wrong, by the field it concerns.
#[derive(Debug, Serialize, ToSchema)]
pub struct Warning {
    /// The field, as in an error (`event_types[1]`).
    pub field: String,
    pub message: String,
}

/// The warnings of a subscription's patterns: each that matches no type a producer declares, its
/// tenant's inbox has received, or the hub sends.
async fn pattern_warnings(state: &AppState, sub: &SubscriptionRecord) -> Vec<Warning> {
    match state.catalog.unknown_patterns(&sub.tenant_id, &sub.event_types, sub.origin.as_deref()).await {
        Ok(unknown) => unknown
            .into_iter()
            .map(|i| Warning {
                field: format!("event_types[{i}]"),
                message: format!(
                    "{} matches no event type a producer declares or this tenant has received{}; check the \
                     spelling (GET /v1/event-types lists the known types), or ignore this for a producer that \
                     has not published yet",
                    sub.event_types[i],
                    sub.origin.as_deref().map(|o| format!(" from {o}")).unwrap_or_default(),
                ),
            })
            .collect(),
        // A warning is advice: a catalog that cannot be read gives none, never a failure.
        Err(e) => {
            tracing::warn!(error = %e, "could not read the event catalog for a subscription's warnings");
            Vec::new()
        }
    }
}

/// A subscription's health in listings.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub failing_since: Option<DateTime<Utc>>,
    pub last_failure_at: Option<DateTime<Utc>>,
    /// `closed`, `open` or `half_open`, as the replica that paces its destination last saw it for
    /// this subscription's jobs (one breaker per destination for the cluster).
    pub breaker: &'static str,
    pub jobs: JobCounts,
    /// Its deliveries in flight, as the replica that paces its destination sees them.
    pub delivery: FlightView,
}

/// Jobs of a subscription or a tenant that are not finished, and the dead ones.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct JobCounts {
    pub pending: i64,
    pub leased: i64,
    /// Waiting for the subscription to be deliverable again (paused, disabled, not verified).
    pub held: i64,
    pub dead: i64,
}

impl JobCounts {
    pub fn add(&mut self, state: hub_store::JobState, n: i64) {
        use hub_store::JobState::*;
        match state {
            Pending => self.pending += n,
            Leased => self.leased += n,
            Held => self.held += n,
            Dead => self.dead += n,
            Succeeded | Cancelled => {}
        }
    }
}

/// Views of these subscriptions with their health.
pub async fn with_health(state: &AppState, subs: &[SubscriptionRecord]) -> Result<Vec<SubscriptionView>, ApiError> {
    let ids: Vec<Uuid> = subs.iter().map(|s| s.id).collect();
    let mut jobs: std::collections::HashMap<Uuid, JobCounts> = std::collections::HashMap::new();
    if !ids.is_empty() {
        for (sub, job_state, n) in state.store.open_jobs(&ids).await? {
            jobs.entry(sub).or_default().add(job_state, n);
        }
    }
    Ok(subs
        .iter()
        .map(|s| {
            let mut view = SubscriptionView::of(s);
            let paced = state.delivery.membership.paced(s.pace_bucket, s.id);
            view.health = Some(Health {
                failing_since: s.failing_since,
                last_failure_at: s.last_failure_at,
                breaker: breaker_of(state, s, paced.as_ref()),
                jobs: jobs.remove(&s.id).unwrap_or_default(),
                delivery: FlightView::of(state, s, paced.as_ref()),
            });
            view
        })
        .collect())
}

impl SubscriptionView {
    pub fn of(sub: &SubscriptionRecord) -> Self {
        Self {
            id: sub.id,
            name: sub.name.clone(),
            event_types: sub.event_types.clone(),
            origin: sub.origin.clone(),
            filters: sub.filters.clone(),
            ordering: sub.ordering.as_str(),
            sink: sub.sink_config.clone(),
            limits: sub.limits.into(),
            transform: sub.transform.clone(),
            allowed_rate: sub.allowed_rate,
            enabled: sub.enabled,
            verification_state: sub.verification.as_str().to_owned(),
            verification_error: sub.verification_error.clone(),
            disabled_reason: sub.disabled_reason.clone(),
            disabled_at: sub.disabled_at,
            credentials_set: sub.credentials.is_some(),
            created_at: sub.created_at,
            updated_at: sub.updated_at,
            signing_secret: None,
            public_key: None,
            health: None,
            warnings: Vec::new(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionPage {
    pub items: Vec<SubscriptionView>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSubscription {
    /// A label: 1 to 200 characters, not only spaces, no control characters.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    name: String,
    /// Event keys `<resourcetype>.<eventtype>`, `*` allowed per segment; empty matches nothing.
    event_types: Vec<String>,
    /// Only events of this `ce-source` match.
    origin: Option<String>,
    /// Content filters (CloudEvents Subscriptions API dialects, CESQL, content patterns); every
    /// one must match. Default none.
    #[schema(value_type = Option<Vec<super::filters::schema::Filter>>)]
    filters: Option<Value>,
    /// Push sinks: `key` delivers events with the same ordering key (`partitionkey`, else
    /// `subject`) one at a time in seq order. Default `none`.
    #[schema(value_type = Option<OrderingMode>)]
    ordering: Option<Value>,
    /// Where events go: one of the sink types, told apart by `type`.
    #[schema(value_type = hub_sinks::SinkSchema)]
    sink: Value,
    /// Push sinks: fixed delivery limits, held for the whole install. Default none (the adaptive
    /// allowance and the replica's bound apply).
    #[schema(value_type = Option<LimitsView>)]
    #[serde(default)]
    limits: Value,
    /// Push sinks: a JavaScript handler that reshapes each event for the destination or skips
    /// it (SPEC §10). Code that does not compile is refused with the engine's message and
    /// position. Default none.
    #[schema(value_type = Option<super::transforms::Transform>)]
    #[serde(default)]
    transform: Value,
    enabled: Option<bool>,
}

pub(super) fn valid_event_types(types: &[String], max: u32) -> Result<(), ApiError> {
    if types.len() > max as usize {
        return Err(ApiError::validation(
            "event_types",
            format!("must have at most {max} entries (STREAMING_HUB_MAX_PATTERNS_PER_SUBSCRIPTION)"),
        ));
    }
    for (i, t) in types.iter().enumerate() {
        EventPattern::parse(t)
            .map_err(|e| ApiError::validation(&format!("event_types[{i}]"), format!("{e}{}", pattern_hint(t))))?;
    }
    Ok(())
}

/// What a new user most likely meant by an event-type pattern that does not parse.
fn pattern_hint(pattern: &str) -> String {
    let parts: Vec<&str> = pattern.split('.').collect();
    if pattern == "*" {
        return "; every event is *.*".to_owned();
    }
    if parts.len() == 5 && parts[0] == "studio" && parts[1] == "lerian" {
        // A full ce-type: studio.lerian.<source>.<resourcetype>.<eventtype>.
        return format!(
            "; patterns are <resourcetype>.<eventtype> without the source: use {}.{} (and origin \"{}\" to keep \
             only that application's events)",
            parts[3], parts[4], parts[2]
        );
    }
    if parts.len() > 2 {
        let key = parts[parts.len().saturating_sub(2)..].join(".");
        return format!("; patterns are <resourcetype>.<eventtype>, for example {key}");
    }
    String::new()
}

/// How a push subscription's deliveries are ordered (SPEC §9).
#[derive(Debug, ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum OrderingMode {
    None,
    Key,
}

/// `ordering` as a request gives it (`null` is `none`): `key` only for push sinks.
fn valid_ordering(value: Option<&Value>, sink: SinkKind) -> Result<Option<Ordering>, ApiError> {
    let ordering = match value {
        None => return Ok(None),
        Some(Value::Null) => Ordering::None,
        Some(Value::String(s)) => {
            Ordering::parse(s).ok_or_else(|| ApiError::validation("ordering", "must be \"none\" or \"key\""))?
        }
        Some(_) => return Err(ApiError::validation("ordering", "must be \"none\" or \"key\"")),
    };
    if ordering == Ordering::Key && !sink.is_push() {
        return Err(ApiError::validation(
            "ordering",
            "applies to push sinks; a pull subscription is already read in seq order",
        ));
    }
    Ok(Some(ordering))
}

fn valid_origin(origin: Option<&str>) -> Result<(), ApiError> {
    match origin {
        Some(o) => Source::parse(o).map(|_| ()).map_err(|e| ApiError::validation("origin", e)),
        None => Ok(()),
    }
}

pub fn sealing_error(e: SealerError) -> ApiError {
    match e {
        SealerError::NoKey => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "encryption_unavailable",
            "no key-encryption key is configured (STREAMING_HUB_KEK_REF): secrets and credentials cannot be stored",
        ),
        SealerError::Seal(e) => ApiError::internal(e),
    }
}

/// Probes a new push destination in the background (SPEC §2.2); `POST …/verify` runs the same
/// probe on demand. A background probe never re-enables a subscription the tenant disabled.
fn spawn_probe(state: &AppState, sub: SubscriptionRecord) {
    let state = state.clone();
    tokio::spawn(async move {
        let verified = crate::delivery::verify::verify(
            sub,
            state.store.as_ref(),
            state.delivery.sinks.as_ref(),
            &state.sealer,
            state.clock.as_ref(),
            false,
            &state.notices,
        )
        .await;
        match verified {
            Ok((_, None)) => state.wakers.dispatcher.notify_one(),
            Ok((_, Some(_))) => {}
            Err(e) => tracing::warn!(error = %e, "storing a verification result failed"),
        }
    });
}

/// The id in a path; anything that is not a UUID is simply not found.
pub fn path_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| not_found())
}

pub fn not_found() -> ApiError {
    ApiError::not_found("no such subscription")
}

/// Loads one of the caller's subscriptions, 404 otherwise.
pub async fn load(state: &AppState, caller: &TenantCaller, id: &str) -> Result<SubscriptionRecord, ApiError> {
    let id = path_id(id)?;
    state.store.subscription(caller.tenant.as_str(), id).await?.ok_or_else(not_found)
}

#[utoipa::path(
    post, path = "/v1/subscriptions", tag = "subscriptions", operation_id = "createSubscription",
    request_body = CreateSubscription,
    responses(
        (status = 201, description = "Created; a webhook's `signing_secret` is shown in this response only", body = SubscriptionView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 422, description = "A field is invalid (the message names it), or `quota_exceeded`: the tenant has its maximum of subscriptions", body = ErrorBody),
        (status = 503, description = "No key-encryption key is configured", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    caller: TenantCaller,
    Json(req): Json<CreateSubscription>,
) -> Result<impl IntoResponse, ApiError> {
    super::admin::valid_name("name", &req.name)?;
    valid_event_types(&req.event_types, state.settings.quotas.patterns_per_subscription)?;
    valid_origin(req.origin.as_deref())?;
    let filters = valid_filters(req.filters)?;
    let dest = destination::parse(&req.sink, &state)?;
    destination::credentials_present(&dest, false)?;
    let ordering = valid_ordering(req.ordering.as_ref(), dest.kind)?.unwrap_or_default();
    let limits = valid_limits(&req.limits, dest.kind)?;
    let transform =
        super::transforms::valid_transform(&state, caller.tenant.as_str(), Some(&req.transform), dest.kind).await?;
    let limit = state.settings.quotas.subscriptions_per_tenant;
    let quota_exceeded = || {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "quota_exceeded",
            format!("a tenant may have at most {limit} subscriptions (STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT)"),
        )
    };

    let id = Uuid::now_v7();
    let now = state.clock.now();
    let scheme = dest.typed.signature().unwrap_or_default();
    let secret = hub_sinks::registry::signed(dest.kind).then(|| new_signing_secret_for(scheme));
    let signing_secret = match &secret {
        Some(s) => Some(state.sealer.seal(id, Purpose::SigningSecret, s.as_bytes()).map_err(sealing_error)?),
        None => None,
    };
    let credentials = match &dest.credentials {
        Credentials::Set(c) => {
            Some(state.sealer.seal(id, Purpose::Credentials, c.to_string().as_bytes()).map_err(sealing_error)?)
        }
        Credentials::Unchanged | Credentials::Cleared => None,
    };
    let pace_bucket = crate::delivery::targets::pace_bucket(id, &dest.public);
    let record = SubscriptionRecord {
        id,
        tenant_id: caller.tenant.to_string(),
        name: req.name,
        event_types: req.event_types,
        origin: req.origin,
        filters,
        transform,
        ordering,
        sink: dest.kind,
        limits,
        allowed_rate: None,
        sink_config: dest.public,
        signing_secret,
        previous_secret: None,
        previous_secret_expires_at: None,
        credentials,
        enabled: req.enabled.unwrap_or(true),
        verification: VerificationState::initial(dest.kind),
        verification_error: None,
        disabled_reason: (req.enabled == Some(false)).then(|| DISABLED_BY_API.to_owned()),
        disabled_at: (req.enabled == Some(false)).then_some(now),
        failing_since: None,
        last_failure_at: None,
        pull_cursor: 0,
        pace_bucket: Some(pace_bucket),
        created_at: now,
        updated_at: now,
    };
    if !state.store.create_subscription_within(&record, limit).await? {
        return Err(quota_exceeded());
    }
    tracing::info!(tenant = %caller.tenant, subscription = %id, sink = %dest.kind, "subscription created");
    let created = super::ledger::subscription_state(&record);
    super::ledger::record(&state, &caller, "subscription.created", json!({"subscription": id}), None, Some(created))
        .await;
    if record.sink.is_push() {
        spawn_probe(&state, record.clone());
    }
    let mut view = SubscriptionView::of(&record);
    if scheme.is_asymmetric() {
        // The receiver gets the public key; the secret key stays sealed in the hub.
        view.public_key = secret.as_deref().and_then(hub_core::signature::asymmetric::public_key);
    } else {
        view.signing_secret = secret;
    }
    view.warnings = pattern_warnings(&state, &record).await;
    Ok((StatusCode::CREATED, AxumJson(view)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// The `next_cursor` of the previous page.
    #[param(format = Uuid)]
    cursor: Option<String>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

#[utoipa::path(
    get, path = "/v1/subscriptions", tag = "subscriptions", operation_id = "listSubscriptions",
    params(ListParams),
    responses(
        (status = 200, description = "The caller's subscriptions in creation order", body = SubscriptionPage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: TenantCaller,
    Query(params): Query<ListParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(params.limit)?;
    let after: Option<Uuid> = cursor(params.cursor)?;
    let subs = state.store.list_subscriptions(caller.tenant.as_str(), after, limit).await?;
    let next_cursor = next_cursor(&subs, limit, |s| s.id);
    Ok(AxumJson(SubscriptionPage { items: with_health(&state, &subs).await?, next_cursor }))
}

#[utoipa::path(
    get, path = "/v1/subscriptions/{id}", tag = "subscriptions", operation_id = "getSubscription",
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The subscription", body = SubscriptionView),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn read(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(AxumJson(SubscriptionView::of(&load(&state, &caller, &id).await?)))
}

/// Fields a `PATCH` may change; `origin: null` removes the origin, a `sink` replaces the
/// destination (same type), its omitted `credentials` are kept.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UpdateSubscription {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    name: Option<String>,
    event_types: Option<Vec<String>>,
    #[schema(value_type = Option<String>)]
    origin: Option<Value>,
    /// New content filters (applied to events ingested after the change); `[]` or `null` removes them.
    #[schema(value_type = Option<Vec<super::filters::schema::Filter>>)]
    filters: Option<Value>,
    /// A new ordering, for deliveries of events ingested after the change.
    #[schema(value_type = Option<OrderingMode>)]
    ordering: Option<Value>,
    /// A new destination of the same type; omitted `credentials` are kept.
    #[schema(value_type = Option<hub_sinks::SinkSchema>)]
    sink: Option<Value>,
    /// New delivery limits (both fields: an omitted one is no limit); `null` removes them.
    #[schema(value_type = Option<LimitsView>)]
    #[serde(default)]
    limits: Value,
    /// A new transform, for attempts made after the change; `null` removes it.
    #[schema(value_type = Option<super::transforms::Transform>)]
    #[serde(default)]
    transform: Value,
    enabled: Option<bool>,
}

#[utoipa::path(
    patch, path = "/v1/subscriptions/{id}", tag = "subscriptions", operation_id = "updateSubscription",
    params(("id" = Uuid, Path, description = "Subscription id")),
    request_body = UpdateSubscription,
    responses(
        (status = 200, description = "The changed subscription; a new destination must be verified again", body = SubscriptionView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 422, description = "A field is invalid; the message names it", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    Json(body): Json<serde_json::Map<String, Value>>,
) -> Result<impl IntoResponse, ApiError> {
    caller.must_be(crate::sso::roles::update_needs(&body), " to change more than enabled")?;
    let sub = load(&state, &caller, &id).await?;
    if let Some(key) = body.keys().find(|k| {
        !["name", "event_types", "origin", "filters", "ordering", "sink", "limits", "transform", "enabled"]
            .contains(&k.as_str())
    }) {
        return Err(ApiError::validation(key, "is not a field that can be changed"));
    }
    let req: UpdateSubscription = super::error::from_json_value(Value::Object(body.clone()))?;
    let mut patch = SubscriptionPatch { now: state.clock.now(), ..SubscriptionPatch::default() };
    if let Some(name) = req.name {
        super::admin::valid_name("name", &name)?;
        patch.name = Some(name);
    }
    if let Some(types) = req.event_types {
        valid_event_types(&types, state.settings.quotas.patterns_per_subscription)?;
        patch.event_types = Some(types);
    }
    if body.contains_key("filters") {
        patch.filters = Some(valid_filters(req.filters)?);
    }
    if body.contains_key("ordering") {
        patch.ordering = valid_ordering(req.ordering.as_ref(), sub.sink)?;
    }
    if body.contains_key("limits") {
        patch.limits = Some(valid_limits(&req.limits, sub.sink)?);
    }
    if body.contains_key("transform") {
        patch.transform =
            Some(super::transforms::valid_transform(&state, &sub.tenant_id, Some(&req.transform), sub.sink).await?);
    }
    if body.contains_key("origin") {
        patch.origin = Some(match req.origin {
            None | Some(Value::Null) => None,
            Some(Value::String(o)) => {
                valid_origin(Some(&o))?;
                Some(o)
            }
            Some(_) => return Err(ApiError::validation("origin", "must be a string or null")),
        });
    }
    if let Some(sink) = &req.sink {
        let dest = destination::parse(sink, &state)?;
        if dest.kind != sub.sink {
            return Err(ApiError::validation("sink.type", "cannot be changed; create a new subscription instead"));
        }
        if sub.credentials.is_some() {
            destination::credentials_follow(&sub.sink_config, &dest)?;
        }
        destination::credentials_present(&dest, sub.credentials.is_some())?;
        let (was, now) = (
            hub_sinks::Destination::stored_signature(&sub.sink_config).unwrap_or_default(),
            dest.typed.signature().unwrap_or_default(),
        );
        if was.is_asymmetric() != now.is_asymmetric() {
            return Err(ApiError::validation(
                "sink.signature",
                format!(
                    "cannot change from {} to {}: a key pair and a shared secret are different keys; create a new \
                     subscription instead",
                    was.as_str(),
                    now.as_str()
                ),
            ));
        }
        let credentials = match dest.credentials {
            Credentials::Unchanged => None,
            Credentials::Cleared => sub.credentials.is_some().then_some(None),
            Credentials::Set(c) => Some(Some(
                state.sealer.seal(sub.id, Purpose::Credentials, c.to_string().as_bytes()).map_err(sealing_error)?,
            )),
        };
        // Only a change of where or how to connect proves nothing until probed again; a new
        // timeout or static header keeps the subscription active.
        let reverify = sub.sink.is_push()
            && (credentials.is_some() || !destination::same_connection(&sub.sink_config, &dest.public));
        let pace_bucket = Some(crate::delivery::targets::pace_bucket(sub.id, &dest.public));
        patch.destination = Some(DestinationChange { sink_config: dest.public, credentials, reverify, pace_bucket });
    }
    if let Some(enabled) = req.enabled {
        patch.enabled = Some(enabled);
        patch.disabled_reason = (!enabled).then(|| DISABLED_BY_API.to_owned());
    }
    let before = super::ledger::subscription_state(&sub);
    let Some(sub) = state.store.patch_subscription(caller.tenant.as_str(), sub.id, &patch).await? else {
        return Err(not_found());
    };
    let action = match patch.enabled {
        Some(false) => "subscription.disabled",
        Some(true) if before["enabled"] == false => "subscription.enabled",
        _ => "subscription.updated",
    };
    let after = super::ledger::subscription_state(&sub);
    super::ledger::record(&state, &caller, action, json!({"subscription": sub.id}), Some(before), Some(after)).await;
    if patch.destination.as_ref().is_some_and(|d| d.reverify) {
        spawn_probe(&state, sub.clone());
    }
    let mut view = SubscriptionView::of(&sub);
    if patch.event_types.is_some() || patch.origin.is_some() {
        view.warnings = pattern_warnings(&state, &sub).await;
    }
    Ok(AxumJson(view))
}

#[utoipa::path(
    delete, path = "/v1/subscriptions/{id}", tag = "subscriptions", operation_id = "deleteSubscription",
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 204, description = "Deleted; its pending deliveries are cancelled"),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let id = path_id(&id)?;
    let before =
        state.store.subscription(caller.tenant.as_str(), id).await?.map(|s| super::ledger::subscription_state(&s));
    if state.store.delete_subscription(caller.tenant.as_str(), id).await? {
        tracing::info!(tenant = %caller.tenant, subscription = %id, "subscription deleted");
        super::ledger::record(&state, &caller, "subscription.deleted", json!({"subscription": id}), before, None).await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found())
    }
}
