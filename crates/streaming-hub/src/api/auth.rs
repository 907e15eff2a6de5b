//! Bearer authentication.
//!
//! A tenant API key (`shk_…`) is looked up by its SHA-256 hash and sees only its own tenant; the
//! admin token opens `/admin`. Tokens are compared in constant time and never logged.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use hub_core::TenantId;
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;
use crate::keys;

/// Who is calling.
#[derive(Debug, Clone)]
pub enum Principal {
    Admin,
    Tenant { tenant: TenantId, key_id: uuid::Uuid },
}

fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("an Authorization: Bearer header is required"))?;
    let value = value.to_str().map_err(|_| ApiError::unauthorized("the Authorization header is malformed"))?;
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(ApiError::unauthorized("the Authorization header must be: Bearer <token>"));
    }
    Ok(token.trim())
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)?;
        if bool::from(token.as_bytes().ct_eq(state.admin_token.expose().as_bytes())) {
            return Ok(Principal::Admin);
        }
        if token.starts_with(keys::API_KEY_PREFIX) {
            if let Some(key) = state.store.api_key_by_hash(&keys::hash(token)).await? {
                let tenant = TenantId::parse(&key.tenant_id).map_err(ApiError::internal)?;
                return Ok(Principal::Tenant { tenant, key_id: key.id });
            }
        }
        Err(ApiError::unauthorized("the bearer token is not valid"))
    }
}

/// A caller holding the admin token.
#[derive(Debug)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match Principal::from_request_parts(parts, state).await? {
            Principal::Admin => Ok(Admin),
            Principal::Tenant { .. } => Err(ApiError::forbidden("this route requires the admin token")),
        }
    }
}

/// A caller holding a tenant API key: the `/v1` tenant routes.
#[derive(Debug)]
pub struct TenantCaller {
    pub tenant: TenantId,
}

impl FromRequestParts<AppState> for TenantCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match Principal::from_request_parts(parts, state).await? {
            Principal::Tenant { tenant, .. } => Ok(TenantCaller { tenant }),
            Principal::Admin => Err(ApiError::forbidden("this route requires a tenant API key")),
        }
    }
}
