//! The HTTP API: routes, shared state, and the fallbacks that keep every error in one shape.

pub mod admin;
pub mod auth;
pub mod error;
pub mod events;
pub mod health;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::routing::{delete, get, post};
use hub_core::IngestPolicy;
use hub_store::Store;

use crate::config::Secret;
use error::ApiError;

/// Largest request body read. An event body over 1 MiB but under this is still read, so that it
/// can be quarantined with a reason; anything larger is refused with 413.
pub const MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub admin_token: Secret,
    pub policy: Arc<IngestPolicy>,
    /// Set when the process starts draining: `/readyz` answers 503 from then on.
    pub draining: Arc<AtomicBool>,
}

/// The whole router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/events", post(events::ingest))
        .route("/admin/api-keys", post(admin::create_api_key).get(admin::list_api_keys))
        .route("/admin/api-keys/{id}", delete(admin::revoke_api_key))
        .route("/admin/quarantine", get(admin::list_quarantine))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}
