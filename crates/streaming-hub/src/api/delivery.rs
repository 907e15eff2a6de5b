//! Delivery routes of a subscription: verify, rotate the secret, list deliveries, redrive.

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hub_store::{AttemptRecord, DeliveryJob, JobState, SecretRotation};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::TenantCaller;
use super::error::{ApiError, ErrorBody, Query, RawBody, cursor, next_cursor, optional_json, page_limit};
use super::subscriptions::{SubscriptionView, load, sealing_error};
use crate::secrets::{Purpose, new_signing_secret_for};

/// How long the previous secret keeps signing after a rotation.
pub const ROTATION_OVERLAP: chrono::Duration = chrono::Duration::hours(24);

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// When the probe succeeds, also start a replay of everything that arrived since the
    /// subscription was disabled (its `disabled_at`): the recovery of a disabled subscription.
    /// Only for a subscription that is disabled.
    #[serde(default)]
    pub replay_since_disabled: bool,
}

/// A verified subscription, and the replay the request started.
#[derive(Debug, Serialize, ToSchema)]
pub struct Verified {
    #[serde(flatten)]
    pub subscription: SubscriptionView,
    /// The replay `replay_since_disabled` started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<super::replay::ReplayView>,
}

#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/verify", tag = "subscriptions", operation_id = "verifySubscription",
    params(("id" = Uuid, Path, description = "Subscription id")),
    request_body(content = VerifyRequest, description = "Optional"),
    responses(
        (status = 200, description = "The probe succeeded: active and enabled, failure period cleared", body = Verified),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 409, description = "`not_disabled`: `replay_since_disabled` on a subscription that is not disabled; or `replay_in_progress`", body = ErrorBody),
        (status = 422, description = "`verification_failed`: the probe failed; the message says why", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn verify(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> Result<impl IntoResponse, ApiError> {
    let req: VerifyRequest = optional_json(&body)?;
    let sub = load(&state, &caller, &id).await?;
    let since = match (req.replay_since_disabled, sub.enabled, sub.disabled_at) {
        (false, _, _) => None,
        (true, false, Some(at)) => Some(at),
        (true, _, _) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_disabled",
                "replay_since_disabled: the subscription is not disabled; replay a window with POST …/replay",
            ));
        }
    };
    let (sub, failure) = crate::delivery::verify::verify(
        sub,
        state.store.as_ref(),
        state.delivery.sinks.as_ref(),
        &state.sealer,
        state.clock.as_ref(),
        true,
        &state.notices,
    )
    .await?;
    match failure {
        None => {
            // Jobs that waited for the destination can go now.
            state.wakers.dispatcher.notify_one();
            super::ledger::record(
                &state,
                &caller,
                "subscription.verified",
                serde_json::json!({"subscription": sub.id}),
                None,
                Some(serde_json::json!({"result": "active", "replay_since": since})),
            )
            .await;
            let replay = match since {
                Some(since) => {
                    let window = super::replay::ReplayRequest {
                        since: Some(since.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
                        ..Default::default()
                    };
                    let r = super::replay::start(&state, caller.tenant.as_str(), sub.id, &window).await?;
                    Some(super::replay::ReplayView::of(&r))
                }
                None => None,
            };
            Ok(AxumJson(Verified { subscription: SubscriptionView::of(&sub), replay }))
        }
        Some(reason) => {
            super::ledger::record(
                &state,
                &caller,
                "subscription.verified",
                serde_json::json!({"subscription": sub.id}),
                None,
                Some(serde_json::json!({"result": "failed", "reason": reason})),
            )
            .await;
            Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "verification_failed", reason))
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RotatedSecret {
    /// The new shared secret: shown in this response only (not for an `ed25519` webhook).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// An `ed25519` webhook's new public key (`whpk_…`); its secret key never leaves the hub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// Until then, every delivery also carries a signature made with the previous secret.
    pub previous_secret_expires_at: DateTime<Utc>,
}

/// A public key an `ed25519` webhook's deliveries verify with.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicKey {
    /// `whpk_` and the base64 of the 32-byte ed25519 key.
    pub public_key: String,
    /// `null` for the current key; for the previous one during a rotation, when it stops signing.
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PublicKeys {
    /// The current key first; during a rotation's overlap the previous one second.
    pub keys: Vec<PublicKey>,
}

fn not_asymmetric() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "not_asymmetric",
        "the subscription's deliveries are not signed with a key pair (sink.signature is not ed25519)",
    )
}

#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/public-keys", tag = "subscriptions", operation_id = "listPublicKeys",
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The public keys its deliveries verify with", body = PublicKeys),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 409, description = "Not an `ed25519` webhook", body = ErrorBody),
        (status = 503, description = "No key-encryption key is configured", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn public_keys(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
) -> Result<AxumJson<PublicKeys>, ApiError> {
    let sub = load(&state, &caller, &id).await?;
    let scheme = hub_sinks::Destination::stored_signature(&sub.sink_config);
    if !hub_sinks::registry::signed(sub.sink) || !scheme.is_some_and(|s| s.is_asymmetric()) {
        return Err(not_asymmetric());
    }
    let public = |sealed: &[u8], purpose: Purpose| -> Result<String, ApiError> {
        let secret = state.sealer.open(sub.id, purpose, sealed).map_err(sealing_error)?;
        std::str::from_utf8(&secret)
            .ok()
            .and_then(hub_core::signature::asymmetric::public_key)
            .ok_or_else(|| ApiError::internal("an ed25519 webhook whose key is not a key"))
    };
    let current = sub.signing_secret.as_deref().ok_or_else(|| ApiError::internal("a webhook without a key"))?;
    let mut keys = vec![PublicKey { public_key: public(current, Purpose::SigningSecret)?, expires_at: None }];
    if let (Some(previous), Some(until)) = (sub.previous_secret.as_deref(), sub.previous_secret_expires_at)
        && until > state.clock.now()
    {
        keys.push(PublicKey { public_key: public(previous, Purpose::PreviousSecret)?, expires_at: Some(until) });
    }
    Ok(AxumJson(PublicKeys { keys }))
}

#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/rotate-secret", tag = "subscriptions", operation_id = "rotateSigningSecret",
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The new secret; both sign for 24 hours", body = RotatedSecret),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 409, description = "Not a webhook subscription", body = ErrorBody),
        (status = 503, description = "No key-encryption key is configured", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn rotate_secret(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    // Compare-and-set on the stored secret: a rotation that raced with another one reads the
    // winner's secret and rotates from it, so the previous secret is always the one that signed.
    for _ in 0..3 {
        let sub = load(&state, &caller, &id).await?;
        if !hub_sinks::registry::signed(sub.sink) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_webhook_subscription",
                "only webhook subscriptions have a signing secret",
            ));
        }
        let current =
            sub.signing_secret.clone().ok_or_else(|| ApiError::internal("a webhook subscription without a secret"))?;
        let previous = state.sealer.open(sub.id, Purpose::SigningSecret, &current).map_err(sealing_error)?;
        let scheme = hub_sinks::Destination::stored_signature(&sub.sink_config).unwrap_or_default();
        let secret = new_signing_secret_for(scheme);
        let now = state.clock.now();
        let expires = now + ROTATION_OVERLAP;
        let rotation = SecretRotation {
            replaces: current,
            signing_secret: state
                .sealer
                .seal(sub.id, Purpose::SigningSecret, secret.as_bytes())
                .map_err(sealing_error)?,
            previous_secret: state.sealer.seal(sub.id, Purpose::PreviousSecret, &previous).map_err(sealing_error)?,
            previous_expires_at: expires,
            now,
        };
        if state.store.rotate_secret(caller.tenant.as_str(), sub.id, &rotation).await?.is_some() {
            tracing::info!(tenant = %caller.tenant, subscription = %sub.id, "signing secret rotated");
            super::ledger::record(
                &state,
                &caller,
                "subscription.secret_rotated",
                serde_json::json!({"subscription": sub.id}),
                None,
                Some(serde_json::json!({"previous_secret_expires_at": expires})),
            )
            .await;
            let (signing_secret, public_key) = if scheme.is_asymmetric() {
                (None, hub_core::signature::asymmetric::public_key(&secret))
            } else {
                (Some(secret), None)
            };
            return Ok(AxumJson(RotatedSecret { signing_secret, public_key, previous_secret_expires_at: expires }));
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "concurrent_rotation",
        "the secret was rotated by another request meanwhile; try again",
    ))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryParams {
    /// `pending`, `held`, `leased`, `succeeded`, `dead` or `cancelled`.
    #[param(pattern = "^(pending|held|leased|succeeded|dead|cancelled)$")]
    state: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(format = Uuid)]
    cursor: Option<String>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// One attempt as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    /// The `X-Lerian-Delivery-Id` of the attempt.
    pub delivery_id: Uuid,
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    pub latency_ms: i64,
    /// `delivered`, `failed`, `skipped` (the subscription's transform returned `null`), or
    /// `cancelled` (its event was erased: nothing was sent).
    pub outcome: String,
    pub status_code: Option<i32>,
    /// Why it failed: `<kind>: <reason>`; `transform_failed: …` when the subscription's
    /// transform threw, ran out of its budget or answered what cannot be sent.
    pub error: Option<String>,
    /// The start of the destination's answer (at most 4 KiB).
    pub response_body: Option<String>,
    /// What a failed transform wrote with `console.log` (at most 4 KiB in all).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
    /// Its entry in the tenant's ledger (`GET /v1/ledger/entries/{index}`, and its proof at
    /// `GET /v1/ledger/proof/inclusion?entry={index}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_index: Option<i64>,
}

impl From<AttemptRecord> for AttemptView {
    fn from(a: AttemptRecord) -> Self {
        // A failed transform reached no destination: what is kept in place of an answer is what
        // the handler logged.
        let transform_failed = a.error.as_deref().is_some_and(|e| e.starts_with("transform_failed:"));
        let (response_body, logs) = match a.response_body {
            Some(logs) if transform_failed => (None, logs.lines().map(str::to_owned).collect()),
            body => (body, Vec::new()),
        };
        Self {
            delivery_id: a.id,
            attempt: a.attempt,
            started_at: a.started_at,
            latency_ms: a.latency_ms,
            outcome: a.outcome,
            status_code: a.status_code,
            error: a.error,
            response_body,
            logs,
            ledger_index: a.ledger_index,
        }
    }
}

/// One delivery job with its attempts.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: Uuid,
    /// The event's seq in the tenant's inbox.
    pub event_seq: i64,
    /// The event's CloudEvents id (the `X-Lerian-Event-Id` a receiver logged); null once the
    /// event left the inbox by retention.
    pub ce_id: Option<Uuid>,
    pub state: String,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub attempt_log: Vec<AttemptView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryPage {
    pub items: Vec<DeliveryView>,
    pub next_cursor: Option<String>,
}

#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/deliveries", tag = "subscriptions", operation_id = "listDeliveries",
    params(("id" = Uuid, Path, description = "Subscription id"), DeliveryParams),
    responses(
        (status = 200, description = "Delivery jobs in creation order, each with its attempts", body = DeliveryPage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn deliveries(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    Query(params): Query<DeliveryParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(params.limit)?;
    let wanted = match &params.state {
        None => None,
        Some(s) => Some(JobState::parse(s).ok_or_else(|| {
            let all: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::query("state", format!("must be one of {}", all.join(", ")))
        })?),
    };
    let after: Option<Uuid> = cursor(params.cursor)?;
    let sub = load(&state, &caller, &id).await?;
    let tenant = caller.tenant.as_str();
    let jobs: Vec<DeliveryJob> = state.store.list_jobs(tenant, sub.id, wanted, after, limit).await?;
    let next_cursor = next_cursor(&jobs, limit, |j| j.id);
    let items = delivery_views(&state, tenant, jobs).await?;
    Ok(AxumJson(DeliveryPage { items, next_cursor }))
}

/// Jobs of one tenant as the API shows them: each with its event's ce-id and its attempts.
pub async fn delivery_views(
    state: &AppState,
    tenant: &str,
    jobs: Vec<DeliveryJob>,
) -> Result<Vec<DeliveryView>, ApiError> {
    let ids: Vec<Uuid> = jobs.iter().map(|j| j.id).collect();
    let mut attempts = state.store.attempts_for_jobs(tenant, &ids).await?;
    let mut seqs: Vec<(String, i64)> = jobs.iter().map(|j| (tenant.to_owned(), j.event_seq)).collect();
    seqs.sort_unstable();
    seqs.dedup();
    let ce_ids: std::collections::HashMap<i64, Uuid> =
        state.store.events_by_seqs(&seqs).await?.into_iter().map(|e| (e.seq, e.ce_id)).collect();
    Ok(jobs
        .into_iter()
        .map(|j| {
            let log: Vec<AttemptView> = attempts.extract_if(.., |a| a.job_id == j.id).map(AttemptView::from).collect();
            DeliveryView {
                id: j.id,
                event_seq: j.event_seq,
                ce_id: ce_ids.get(&j.event_seq).copied(),
                next_attempt_at: (j.state == JobState::Pending).then_some(j.due_at),
                state: j.state.as_str().to_owned(),
                attempts: j.attempts,
                last_error: j.last_error,
                created_at: j.created_at,
                finished_at: j.finished_at,
                attempt_log: log,
            }
        })
        .collect())
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveRequest {
    /// Only jobs dead-lettered at or after this time (RFC 3339).
    since: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Redriven {
    /// How many dead-lettered jobs are pending again.
    pub redriven: u64,
}

#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/redrive", tag = "subscriptions", operation_id = "redriveDeliveries",
    params(("id" = Uuid, Path, description = "Subscription id")),
    request_body(content = RedriveRequest, description = "Optional; an empty body redrives every dead job"),
    responses(
        (status = 200, description = "Dead-lettered jobs are pending again, with a fresh retry window", body = Redriven),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 422, description = "A field is invalid", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn redrive(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> Result<impl IntoResponse, ApiError> {
    let req: RedriveRequest = optional_json(&body)?;
    let sub = load(&state, &caller, &id).await?;
    let n = state.store.redrive(caller.tenant.as_str(), sub.id, req.since, state.clock.now()).await?;
    if n > 0 {
        state.wakers.dispatcher.notify_one();
    }
    tracing::info!(tenant = %caller.tenant, subscription = %sub.id, redriven = n, "dead-lettered jobs redriven");
    super::ledger::record(
        &state,
        &caller,
        "subscription.redriven",
        serde_json::json!({"subscription": sub.id}),
        None,
        Some(serde_json::json!({"since": req.since, "redriven": n})),
    )
    .await;
    Ok(AxumJson(Redriven { redriven: n }))
}
