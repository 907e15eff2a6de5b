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
    /// `ok`, `ready`, `draining`, `database unreachable`, `kafka unreachable`.
    pub status: &'static str,
}

#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process is alive (draining included)", body = Status)))]
pub async fn healthz() -> impl IntoResponse {
    Json(Status { status: "ok" })
}

#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready for traffic", body = Status),
        (status = 503, description = "Draining, or the database is unreachable", body = Status),
    ))]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(Status { status: "draining" }));
    }
    match tokio::time::timeout(Duration::from_secs(2), state.store.ping()).await {
        Ok(Ok(())) => {
            if let Some(kafka) = &state.kafka {
                if let Err(e) = kafka.check(Duration::from_secs(2)).await {
                    tracing::warn!(error = %e, "readiness: Kafka unreachable");
                    return (StatusCode::SERVICE_UNAVAILABLE, Json(Status { status: "kafka unreachable" }));
                }
            }
            (StatusCode::OK, Json(Status { status: "ready" }))
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(Status { status: "database unreachable" }))
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, Json(Status { status: "database unreachable" })),
    }
}

#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain")))]
pub async fn metrics() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], crate::telemetry::prometheus().render())
}

#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "This document", body = Object)))]
pub async fn openapi() -> impl IntoResponse {
    static DOC: OnceLock<String> = OnceLock::new();
    let doc = DOC.get_or_init(|| super::openapi().to_json().unwrap_or_else(|_| "{}".to_owned()));
    ([(header::CONTENT_TYPE, "application/json")], doc.as_str())
}
