//! Portal sessions (SPEC §9): an operator grants a tenant's portal — the console limited to that
//! tenant, read-only or managing — for a while, to embed in the platform's own UI.
//!
//! `POST /admin/portal-sessions` answers a one-time URL whose fragment holds a grant (a fragment
//! never reaches a server or its logs); the console exchanges the grant once
//! (`POST /v1/portal-sessions/exchange`) for a session token, sent as a bearer token from then
//! on. A session sees its tenant only, never an `/admin` route, never publishes or reads a pull
//! stream (both need an API key), and in `read` scope changes nothing. It ends when it expires or
//! is revoked (`DELETE /admin/portal-sessions/{id}`); only hashes of the grant and the token are
//! stored.

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hub_core::TenantId;
use hub_store::{NewPortalSession, PortalSession};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::{Admin, SESSION_PREFIX};
use super::error::{ApiError, ErrorBody, Json};
use crate::keys;

/// Prefix of a one-time grant.
pub const GRANT_PREFIX: &str = "shpg_";
/// A session lasts at least this long, and at most [`MAX_TTL_SECONDS`].
pub const MIN_TTL_SECONDS: u32 = 5;
pub const MAX_TTL_SECONDS: u32 = 86_400;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePortalSession {
    /// The tenant whose portal it opens.
    #[schema(min_length = 1, max_length = 256)]
    tenant_id: String,
    /// `read` (changes nothing) or `manage`.
    #[schema(pattern = "^(read|manage)$")]
    scope: String,
    /// How long the session (and its one-time URL) lasts: 5 to 86 400 seconds, default 3 600.
    #[schema(minimum = 5, maximum = 86400)]
    ttl_seconds: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedPortalSession {
    /// Revokes it: `DELETE /admin/portal-sessions/{id}`.
    pub id: Uuid,
    /// Open it once (in a frame of the platform's page, or a tab): the console exchanges the
    /// grant it carries for the session. Shown in this response only.
    pub url: String,
    pub tenant_id: String,
    pub scope: String,
    pub expires_at: DateTime<Utc>,
}

/// The base URL of the console: `STREAMING_HUB_PUBLIC_URL`, else the request's own host.
fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(public) = &state.settings.public_url {
        return public.trim_end_matches('/').to_owned();
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https" || *p == "http")
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

#[utoipa::path(
    post, path = "/admin/portal-sessions", tag = "admin", operation_id = "createPortalSession",
    request_body = CreatePortalSession,
    responses(
        (status = 201, description = "Created; the one-time URL is shown in this response only", body = CreatedPortalSession),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
        (status = 422, description = "A field is invalid; the message names it", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    admin: Admin,
    headers: HeaderMap,
    Json(req): Json<CreatePortalSession>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = TenantId::parse(&req.tenant_id).map_err(|e| ApiError::validation("tenant_id", e))?;
    if req.scope != "read" && req.scope != "manage" {
        return Err(ApiError::validation("scope", "must be read or manage"));
    }
    let ttl = req.ttl_seconds.unwrap_or(3600);
    if !(MIN_TTL_SECONDS..=MAX_TTL_SECONDS).contains(&ttl) {
        return Err(ApiError::validation(
            "ttl_seconds",
            format!("must be {MIN_TTL_SECONDS} to {MAX_TTL_SECONDS} seconds"),
        ));
    }
    let now = state.clock.now();
    let grant = keys::generate(GRANT_PREFIX);
    let session = PortalSession {
        id: Uuid::now_v7(),
        tenant_id: tenant.to_string(),
        scope: req.scope,
        created_at: now,
        expires_at: now + chrono::Duration::seconds(i64::from(ttl)),
        exchanged_at: None,
        revoked_at: None,
    };
    state
        .store
        .create_portal_session(&NewPortalSession { session: session.clone(), grant_hash: keys::hash(&grant) })
        .await?;
    tracing::info!(session = %session.id, tenant = %session.tenant_id, scope = %session.scope, ttl, "portal session granted");
    state
        .ledger
        .change(
            Some(&session.tenant_id),
            &admin.actor(),
            "portal_session.granted",
            serde_json::json!({"portal_session": session.id}),
            None,
            Some(serde_json::json!({"scope": session.scope, "expires_at": session.expires_at})),
        )
        .await;
    let url = format!("{}/console/#/portal/{grant}", base_url(&state, &headers));
    Ok((
        StatusCode::CREATED,
        AxumJson(CreatedPortalSession {
            id: session.id,
            url,
            tenant_id: session.tenant_id,
            scope: session.scope,
            expires_at: session.expires_at,
        }),
    ))
}

#[utoipa::path(
    delete, path = "/admin/portal-sessions/{id}", tag = "admin", operation_id = "revokePortalSession",
    params(("id" = Uuid, Path, description = "Portal session id")),
    responses(
        (status = 204, description = "Revoked: its token stops working at once"),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
        (status = 404, description = "No live portal session has this id", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn revoke(
    State(state): State<AppState>,
    admin: Admin,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let not_found = || ApiError::not_found("no live portal session has this id");
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    if !state.store.revoke_portal_session(id, state.clock.now()).await? {
        return Err(not_found());
    }
    tracing::info!(session = %id, "portal session revoked");
    state
        .ledger
        .change(None, &admin.actor(), "portal_session.revoked", serde_json::json!({"portal_session": id}), None, None)
        .await;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Exchange {
    /// The grant from the one-time URL's fragment.
    #[schema(min_length = 1, max_length = 256)]
    grant: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PortalToken {
    /// The session's bearer token.
    pub token: String,
    pub tenant_id: String,
    /// `read` or `manage`.
    pub scope: String,
    pub expires_at: DateTime<Utc>,
}

#[utoipa::path(
    post, path = "/v1/portal-sessions/exchange", tag = "subscriptions", operation_id = "exchangePortalGrant",
    request_body = Exchange,
    responses(
        (status = 200, description = "The session's token; the grant is used up", body = PortalToken),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "The grant is not valid: used already, revoked or expired", body = ErrorBody),
        (status = 422, description = "A field is invalid; the message names it", body = ErrorBody),
    )
)]
pub async fn exchange(State(state): State<AppState>, Json(req): Json<Exchange>) -> Result<impl IntoResponse, ApiError> {
    let refused = || ApiError::unauthorized("the grant is not valid: it was used already, revoked, or it expired");
    if !req.grant.starts_with(GRANT_PREFIX) || req.grant.len() > 256 {
        return Err(refused());
    }
    let token = keys::generate(SESSION_PREFIX);
    let session = state
        .store
        .exchange_portal_grant(&keys::hash(&req.grant), &keys::hash(&token), state.clock.now())
        .await?
        .ok_or_else(refused)?;
    tracing::info!(session = %session.id, tenant = %session.tenant_id, "portal session opened");
    Ok(AxumJson(PortalToken {
        token,
        tenant_id: session.tenant_id,
        scope: session.scope,
        expires_at: session.expires_at,
    }))
}
