//! `/admin`: API keys and the quarantine. Admin token only.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use base64::Engine;
use chrono::{DateTime, Utc};
use hub_core::{ReasonCode, TenantId};
use hub_store::{ApiKeyRecord, QuarantineEntry, QuarantineFilter};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::AppState;
use super::auth::Admin;
use super::error::{ApiError, Json, Query, page_limit};
use crate::keys;

const MAX_NAME: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKey {
    tenant_id: String,
    name: Option<String>,
}

#[derive(Serialize)]
struct CreatedApiKey {
    #[serde(flatten)]
    record: ApiKeyRecord,
    /// The key itself: shown in this response only.
    key: String,
}

/// A page of a listing.
#[derive(Debug, Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// Checks a human label: 1 to 200 characters, no control characters.
pub fn valid_name(field: &str, name: &str) -> Result<(), ApiError> {
    if name.trim().is_empty() {
        return Err(ApiError::validation(field, "must not be empty"));
    }
    if name.chars().count() > MAX_NAME {
        return Err(ApiError::validation(field, format!("must be at most {MAX_NAME} characters")));
    }
    if name.chars().any(char::is_control) {
        return Err(ApiError::validation(field, "must not contain control characters"));
    }
    Ok(())
}

/// Creates a key for a tenant; the key is shown once.
pub async fn create_api_key(
    State(state): State<AppState>,
    _: Admin,
    Json(req): Json<CreateApiKey>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = TenantId::parse(&req.tenant_id).map_err(|e| ApiError::validation("tenant_id", e))?;
    let name = req.name.unwrap_or_else(|| "default".to_owned());
    valid_name("name", &name)?;
    let (record, key) = keys::issue(state.store.as_ref(), &tenant, &name).await?;
    Ok((StatusCode::CREATED, axum::Json(CreatedApiKey { record, key })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    cursor: Option<String>,
    limit: Option<u32>,
}

pub async fn list_api_keys(
    State(state): State<AppState>,
    _: Admin,
    Query(params): Query<ListParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(params.limit)?;
    let before = params
        .cursor
        .map(|c| Uuid::parse_str(&c).map_err(|_| ApiError::query("cursor", "is not a cursor this API returned")))
        .transpose()?;
    let items = state.store.list_api_keys(before, limit).await?;
    let next_cursor = (items.len() == limit as usize).then(|| items.last().map(|k| k.id.to_string())).flatten();
    Ok(axum::Json(Page { items, next_cursor }))
}

pub async fn revoke_api_key(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let not_found = || ApiError::not_found("no live API key has this id");
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    if state.store.revoke_api_key(id).await? { Ok(StatusCode::NO_CONTENT) } else { Err(not_found()) }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuarantineParams {
    tenant: Option<String>,
    source: Option<String>,
    reason: Option<String>,
    origin: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

/// A quarantined record as operators read it: the body as text when it is UTF-8, else base64.
#[derive(Serialize)]
struct QuarantineView {
    #[serde(flatten)]
    entry: QuarantineEntry,
    body: Option<String>,
    body_base64: Option<String>,
    body_truncated: bool,
}

fn timestamp(param: &str, raw: Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
    raw.map(|r| {
        DateTime::parse_from_rfc3339(&r)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| ApiError::query(param, "must be an RFC 3339 timestamp"))
    })
    .transpose()
}

pub async fn list_quarantine(
    State(state): State<AppState>,
    _: Admin,
    Query(p): Query<QuarantineParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(p.limit)?;
    if let Some(reason) = &p.reason {
        if ReasonCode::parse(reason).is_none() {
            let codes: Vec<&str> = ReasonCode::ALL.iter().map(|c| c.as_str()).collect();
            return Err(ApiError::query("reason", format!("must be one of {}", codes.join(", "))));
        }
    }
    if let Some(origin) = &p.origin {
        if origin != "http" && origin != "kafka" {
            return Err(ApiError::query("origin", "must be http or kafka"));
        }
    }
    let filter = QuarantineFilter {
        tenant: p.tenant,
        source: p.source,
        reason_code: p.reason,
        origin: p.origin,
        since: timestamp("since", p.since)?,
        until: timestamp("until", p.until)?,
        before_id: p
            .cursor
            .map(|c| c.parse::<i64>().map_err(|_| ApiError::query("cursor", "is not a cursor this API returned")))
            .transpose()?,
        limit,
    };
    let entries = state.store.list_quarantine(&filter).await?;
    let next_cursor = (entries.len() == limit as usize).then(|| entries.last().map(|e| e.id.to_string())).flatten();
    let items = entries
        .into_iter()
        .map(|entry| {
            let truncated = entry.body.len() as i64 != entry.body_bytes;
            let (body, body_base64) = match std::str::from_utf8(&entry.body) {
                Ok(text) => (Some(text.to_owned()), None),
                Err(_) => (None, Some(base64::engine::general_purpose::STANDARD.encode(&entry.body))),
            };
            QuarantineView { entry, body, body_base64, body_truncated: truncated }
        })
        .collect();
    Ok(axum::Json(Page { items, next_cursor }))
}
