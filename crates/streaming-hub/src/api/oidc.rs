//! The hub's OIDC issuer routes (SPEC §10, keyless AWS): discovery and JWKS, public as OIDC
//! requires (STS reads them to verify the hub's tokens), and the operator's key rotation.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::auth::Admin;
use super::error::{ApiError, ErrorBody};
use crate::oidc::{Issuer, KeyView};

fn issuer(state: &AppState) -> Result<&Issuer, ApiError> {
    state
        .access
        .issuer
        .as_deref()
        .ok_or_else(|| ApiError::not_found("this hub is not an OIDC issuer (STREAMING_HUB_OIDC_ISSUER)"))
}

/// Public documents may be cached a little: a rotation's new key is published at once anyway.
const CACHE: &str = "public, max-age=300";

#[utoipa::path(get, path = "/.well-known/openid-configuration", tag = "operations", operation_id = "getOpenIdConfiguration",
    responses(
        (status = 200, description = "The issuer's OpenID Connect discovery document", body = Object),
        (status = 404, description = "This hub is not an OIDC issuer", body = ErrorBody),
    ))]
pub async fn discovery(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    Ok(([(header::CACHE_CONTROL, CACHE)], Json(issuer(&state)?.discovery())))
}

#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "operations", operation_id = "getJwks",
    responses(
        (status = 200, description = "The issuer's public keys: the signing one and those still in their overlap", body = Object),
        (status = 404, description = "This hub is not an OIDC issuer", body = ErrorBody),
    ))]
pub async fn jwks(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    Ok(([(header::CACHE_CONTROL, CACHE)], Json(issuer(&state)?.jwks())))
}

/// The issuer's keys.
#[derive(Debug, Serialize, ToSchema)]
pub struct IssuerKeys {
    pub issuer: String,
    /// Oldest first; the one without `retired_at` signs.
    pub keys: Vec<KeyView>,
}

#[utoipa::path(get, path = "/admin/oidc/keys", tag = "admin", operation_id = "listIssuerKeys",
    responses(
        (status = 200, description = "The issuer's keys (never their private halves)", body = IssuerKeys),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
        (status = 404, description = "This hub is not an OIDC issuer", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn keys(State(state): State<AppState>, _: Admin) -> Result<Json<IssuerKeys>, ApiError> {
    let issuer = issuer(&state)?;
    let keys = issuer.refresh().await.map_err(ApiError::internal)?;
    Ok(Json(IssuerKeys { issuer: issuer.url().to_owned(), keys }))
}

#[utoipa::path(post, path = "/admin/oidc/keys", tag = "admin", operation_id = "rotateIssuerKey",
    responses(
        (status = 201, description = "A new key signs from now on; the one it replaced stays published for STREAMING_HUB_OIDC_KEY_OVERLAP", body = IssuerKeys),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
        (status = 404, description = "This hub is not an OIDC issuer", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn rotate(State(state): State<AppState>, admin: Admin) -> Result<impl IntoResponse, ApiError> {
    let issuer = issuer(&state)?;
    let keys = issuer.add_key(true).await.map_err(ApiError::internal)?;
    let kid = keys.last().map(|k| k.kid);
    tracing::info!(kid = ?kid, "OIDC signing key rotated");
    state
        .ledger
        .change(None, &admin.actor(), "oidc_key.rotated", serde_json::json!({"oidc_key": kid}), None, None)
        .await;
    Ok((axum::http::StatusCode::CREATED, Json(IssuerKeys { issuer: issuer.url().to_owned(), keys })))
}
