//! Liveness, readiness, metrics and the OpenAPI document.

use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct Status {
    /// `ok`, `ready`, `draining`, `database unreachable`, `kafka unreachable`,
    /// `background task stopped`, `transform workers cannot be started`, `delivery stalled`.
    pub status: &'static str,
    /// The background task that stopped, or why delivery is stalled, when that is why the hub is
    /// not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

impl Status {
    fn of(status: &'static str) -> Json<Self> {
        Json(Self { status, task: None })
    }
}

#[utoipa::path(get, path = "/healthz", tag = "operations", operation_id = "getHealth",
    responses((status = 200, description = "The process is alive (draining included)", body = Status)))]
pub async fn healthz() -> impl IntoResponse {
    Status::of("ok")
}

#[utoipa::path(get, path = "/readyz", tag = "operations", operation_id = "getReadiness",
    responses(
        (status = 200, description = "Ready for traffic", body = Status),
        (status = 503, description = "Draining, the database or Kafka is unreachable, a background task stopped, no transform worker can be started, or delivery made no progress for `STREAMING_HUB_DISPATCH_STALL_TIMEOUT`", body = Status),
    ))]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if let Some(task) = state.health.supervisor.failed() {
        let status = Json(Status { status: "background task stopped", task: Some(task) });
        return (StatusCode::SERVICE_UNAVAILABLE, status);
    }
    if state.health.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, Status::of("draining"));
    }
    // Transforms cannot run at all: no worker process could be started in the last minute (the
    // reason is logged with each failed start).
    if state.delivery.transforms.health().cannot_start.is_some() {
        return (StatusCode::SERVICE_UNAVAILABLE, Status::of("transform workers cannot be started"));
    }
    // Delivery made no progress for the stall timeout (the reason is in `task`).
    if let Some(stall) = state.delivery.flights.stall(state.delivery.stall_timeout) {
        let status = Json(Status { status: "delivery stalled", task: Some(stall.as_str().to_owned()) });
        return (StatusCode::SERVICE_UNAVAILABLE, status);
    }
    match tokio::time::timeout(Duration::from_secs(2), state.store.ping()).await {
        Ok(Ok(())) => {
            if let Some(kafka) = &state.intake.kafka {
                // The check's own outage log tells the log once (not once per probe).
                if kafka.check(Duration::from_secs(2)).await.is_err() {
                    return (StatusCode::SERVICE_UNAVAILABLE, Status::of("kafka unreachable"));
                }
            }
            (StatusCode::OK, Status::of("ready"))
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Status::of("database unreachable"))
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, Status::of("database unreachable")),
    }
}

#[utoipa::path(get, path = "/metrics", tag = "operations", operation_id = "getMetrics",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    crate::telemetry::transform_workers(&state.delivery.transforms.health());
    crate::telemetry::delivery_stall(state.delivery.flights.stall(state.delivery.stall_timeout));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], crate::telemetry::prometheus().render())
}

#[utoipa::path(get, path = "/openapi.json", tag = "operations", operation_id = "getOpenApiDocument",
    responses((status = 200, description = "This document", body = Object)))]
pub async fn openapi() -> impl IntoResponse {
    static DOC: OnceLock<String> = OnceLock::new();
    let doc = DOC.get_or_init(|| super::openapi_json().to_string());
    ([(header::CONTENT_TYPE, "application/json")], doc.as_str())
}
