//! `POST /v1/subscriptions/{id}/test`: a synthetic `streaming_hub.test` event delivered to one
//! subscription through the normal path — written to the tenant's inbox, matched (to that
//! subscription only: `hub_core::operational::addressed_to`), leased and attempted by the
//! dispatcher — and the attempt's outcome as the answer.

use std::time::Duration;

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hub_core::VerificationState;
use hub_core::operational::Kind;
use hub_store::{IngestRecord, JobState, WriteOutcome};
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::TenantCaller;
use super::delivery::{DeliveryView, delivery_views};
use super::error::{ApiError, ErrorBody};
use super::subscriptions::load;
use crate::operational::Notice;

/// How long the answer waits for the attempt: longer than any sink's own timeout (or, when the
/// request timeout is shorter, a second less than it).
const WAIT: Duration = Duration::from_secs(35);
/// How often the delivery is looked at meanwhile: soon at first, then less often.
const POLL_FIRST: Duration = Duration::from_millis(25);
const POLL_MOST: Duration = Duration::from_millis(500);
/// Test requests of one tenant that may wait for their attempts at once. Each holds a connection
/// for up to [`WAIT`]: a destination that hangs must not let one tenant fill the server's
/// connections. Past it the answer is `429`.
pub const WAITING_PER_TENANT: u32 = 8;

/// The test requests waiting now, per tenant.
#[derive(Debug, Default)]
pub struct Waiting(std::sync::Mutex<std::collections::HashMap<String, u32>>);

/// One waiting request's place; given back when dropped.
#[derive(Debug)]
pub struct Place {
    waiting: std::sync::Arc<Waiting>,
    tenant: String,
}

impl Waiting {
    /// A place for one more of the tenant's requests, or `None` when it has
    /// [`WAITING_PER_TENANT`] waiting.
    pub fn take(self: &std::sync::Arc<Self>, tenant: &str) -> Option<Place> {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(tenant.to_owned()).or_default();
        if *n >= WAITING_PER_TENANT {
            return None;
        }
        *n += 1;
        Some(Place { waiting: std::sync::Arc::clone(self), tenant: tenant.to_owned() })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut map = self.waiting.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.tenant);
            }
        }
    }
}

/// What became of a test event.
#[derive(Debug, Serialize, ToSchema)]
pub struct TestDelivery {
    /// The test event's CloudEvents id (its `X-Lerian-Event-Id`).
    pub ce_id: Uuid,
    /// Its seq in the tenant's inbox (it is in the event log like any event).
    pub seq: i64,
    /// `delivered`, `failed` (the attempt failed; the delivery retries on the usual curve),
    /// `pending` (no attempt ended in time: the breaker is open, or the destination is slow;
    /// follow the delivery) or `queued` (a pull subscription: the event is in its stream).
    pub outcome: String,
    /// The delivery job with its attempts (`null` for a pull subscription).
    pub delivery: Option<DeliveryView>,
}

#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/test", tag = "subscriptions", operation_id = "testSubscription",
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The test event's attempt ended (`delivered` or `failed`), or it is in a pull subscription's stream (`queued`)", body = TestDelivery),
        (status = 202, description = "No attempt ended within 35 s (`pending`): follow `delivery`", body = TestDelivery),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 409, description = "`not_deliverable`: the subscription is paused or its destination is not verified", body = ErrorBody),
        (status = 429, description = "The tenant's ingest rate is exceeded, or 8 of its test requests are waiting already; `Retry-After` says when to try again", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn test(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let sub = load(&state, &caller, &id).await?;
    if !sub.enabled || sub.verification != VerificationState::Active {
        let why = if sub.enabled { "its destination is not verified (POST …/verify)" } else { "it is paused" };
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_deliverable",
            format!("a test event cannot be delivered to this subscription: {why}"),
        ));
    }
    let tenant = caller.tenant.as_str();
    // A push subscription's answer waits for the attempt: a place among the tenant's waiting
    // requests first, so that a refused request writes nothing.
    let _place = match sub.sink.is_push() {
        true => Some(state.test_waiting.take(tenant).ok_or_else(|| {
            super::limiter::rate_limited(
                Duration::from_secs(5),
                format!(
                    "{WAITING_PER_TENANT} test requests of this tenant are waiting for their attempts; retry later"
                ),
            )
        })?),
        false => None,
    };
    // A test event is an event of the tenant's: it counts against its ingest rate.
    super::events::within_tenant_rate(&state, &caller.tenant)?;
    let notice = Notice::new(
        tenant,
        sub.id,
        Kind::Test,
        json!({"message": "A test event sent from Streaming Hub", "subscription_name": sub.name}),
    );
    let event = notice.event(state.clock.now()).ok_or_else(|| ApiError::internal("the test event was refused"))?;
    let ce_id = event.envelope.id().as_uuid();
    let seq = match state.intake.writer.write(IngestRecord::Accepted(event)).await? {
        WriteOutcome::Inserted { seq } | WriteOutcome::Duplicate { seq } => seq,
        WriteOutcome::Quarantined { .. } => return Err(ApiError::internal("the test event was quarantined")),
    };
    tracing::info!(tenant, subscription = %sub.id, seq, "test event sent");
    if !sub.sink.is_push() {
        return Ok((
            StatusCode::OK,
            AxumJson(TestDelivery { ce_id, seq, outcome: "queued".to_owned(), delivery: None }),
        ));
    }
    let deadline =
        tokio::time::Instant::now() + WAIT.min(state.settings.request_timeout.saturating_sub(Duration::from_secs(1)));
    let mut poll = POLL_FIRST;
    loop {
        let job = state.store.jobs_for_event(tenant, seq).await?.into_iter().find(|j| j.subscription_id == sub.id);
        let ended = job.as_ref().filter(|j| j.attempts > 0 || matches!(j.state, JobState::Succeeded | JobState::Dead));
        if ended.is_some() || tokio::time::Instant::now() >= deadline {
            let (status, outcome) = match ended.map(|j| j.state) {
                Some(JobState::Succeeded) => (StatusCode::OK, "delivered"),
                Some(_) => (StatusCode::OK, "failed"),
                None => (StatusCode::ACCEPTED, "pending"),
            };
            let delivery = delivery_views(&state, tenant, job.into_iter().collect()).await?.into_iter().next();
            return Ok((status, AxumJson(TestDelivery { ce_id, seq, outcome: outcome.to_owned(), delivery })));
        }
        tokio::time::sleep(poll).await;
        poll = (poll * 2).min(POLL_MOST);
    }
}
