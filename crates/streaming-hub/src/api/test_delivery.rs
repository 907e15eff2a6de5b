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

/// How long the answer waits for the attempt: longer than any sink's own timeout.
const WAIT: Duration = Duration::from_secs(35);
/// How often the delivery is looked at meanwhile.
const POLL: Duration = Duration::from_millis(25);

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
    params(("id" = String, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The test event's attempt ended (`delivered` or `failed`), or it is in a pull subscription's stream (`queued`)", body = TestDelivery),
        (status = 202, description = "No attempt ended within 35 s (`pending`): follow `delivery`", body = TestDelivery),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 409, description = "`not_deliverable`: the subscription is paused or its destination is not verified", body = ErrorBody),
        (status = 429, description = "The tenant's ingest rate is exceeded; `Retry-After` says when to try again", body = ErrorBody),
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
    // A test event is an event of the tenant's: it counts against its ingest rate.
    super::events::within_tenant_rate(&state, &caller.tenant)?;
    let tenant = caller.tenant.as_str();
    let notice = Notice::new(
        tenant,
        sub.id,
        Kind::Test,
        json!({"message": "A test event sent from Streaming Hub", "subscription_name": sub.name}),
    );
    let event = notice.event(state.clock.now()).ok_or_else(|| ApiError::internal("the test event was refused"))?;
    let ce_id = event.envelope.id().as_uuid();
    let seq = match state.ingest.write(IngestRecord::Accepted(event)).await? {
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
    let deadline = tokio::time::Instant::now() + WAIT;
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
        tokio::time::sleep(POLL).await;
    }
}
