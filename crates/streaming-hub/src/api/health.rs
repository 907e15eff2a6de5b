//! Liveness, readiness and metrics.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::json;

use super::AppState;

/// 200 while the process runs, draining included.
pub async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// 200 when this process should receive traffic: not draining, and its database answers.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "draining"})));
    }
    match tokio::time::timeout(Duration::from_secs(2), state.store.ping()).await {
        Ok(Ok(())) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "database unreachable"})))
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "database timed out"}))),
    }
}

/// Prometheus text exposition.
pub async fn metrics() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], crate::telemetry::prometheus().render())
}
