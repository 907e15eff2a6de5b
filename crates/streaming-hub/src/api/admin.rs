//! `/admin`: API keys and the quarantine. Admin token only.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hub_core::{ReasonCode, TenantId};
use hub_store::{ApiKeyRecord, QuarantineEntry, QuarantineFilter};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::Admin;
use super::error::{ApiError, ErrorBody, Json, Query, cursor, next_cursor, page_limit, text_or_base64};
use crate::keys;

const MAX_NAME: usize = 200;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKey {
    /// The tenant the key belongs to; leave it out with `admin: true`.
    tenant_id: Option<String>,
    /// A label to tell keys apart; `default` when omitted.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    name: Option<String>,
    /// An operator's admin key: the admin routes, like the admin token, but named and revocable.
    #[serde(default)]
    admin: bool,
    /// When the key stops working (RFC 3339, in the future); it never expires when omitted.
    /// An expired key is refused like a revoked one (401).
    expires_at: Option<DateTime<Utc>>,
    /// A tenant key's role: `admin` (the default: everything in the tenant), `operator` or
    /// `viewer` (see each operation's `x-streaming-hub-role`). Not for an admin key.
    #[schema(value_type = Option<String>, pattern = "^(admin|operator|viewer)$")]
    role: Option<String>,
}

/// An API key as listed: never the key itself.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKeyView {
    pub id: Uuid,
    /// `null` for an admin key.
    pub tenant_id: Option<String>,
    /// An operator's admin key.
    pub admin: bool,
    pub name: String,
    /// The first characters of the key, to tell keys apart.
    pub key_prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// When the key stops working; `null` never.
    pub expires_at: Option<DateTime<Utc>>,
    /// Its role in its tenant: `admin`, `operator` or `viewer` (`admin` for an admin key).
    pub role: String,
}

impl From<ApiKeyRecord> for ApiKeyView {
    fn from(r: ApiKeyRecord) -> Self {
        Self {
            id: r.id,
            admin: r.tenant_id.is_none(),
            tenant_id: r.tenant_id,
            name: r.name,
            key_prefix: r.key_prefix,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
            expires_at: r.expires_at,
            role: r.role,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedApiKey {
    #[serde(flatten)]
    record: ApiKeyView,
    /// The key itself: shown in this response only.
    key: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKeyPage {
    pub items: Vec<ApiKeyView>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QuarantinePage {
    pub items: Vec<QuarantineView>,
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
#[utoipa::path(
    post, path = "/admin/api-keys", tag = "admin", operation_id = "createApiKey",
    request_body = CreateApiKey,
    responses(
        (status = 201, description = "Created; the key is shown in this response only", body = CreatedApiKey),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
        (status = 422, description = "A field is invalid; the message names it", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn create_api_key(
    State(state): State<AppState>,
    admin: Admin,
    Json(req): Json<CreateApiKey>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = match (req.tenant_id, req.admin) {
        (Some(t), false) => Some(TenantId::parse(&t).map_err(|e| ApiError::validation("tenant_id", e))?),
        (None, true) => None,
        (Some(_), true) => {
            return Err(ApiError::validation("admin", "an admin key belongs to no tenant: leave out tenant_id"));
        }
        (None, false) => {
            return Err(ApiError::validation("tenant_id", "is required (or admin: true for an admin key)"));
        }
    };
    let name = req.name.unwrap_or_else(|| "default".to_owned());
    valid_name("name", &name)?;
    if req.expires_at.is_some_and(|at| at <= state.clock.now()) {
        return Err(ApiError::validation("expires_at", "must be in the future"));
    }
    let role = match (&req.role, &tenant) {
        (None, _) => crate::sso::Role::Admin,
        (Some(_), None) => return Err(ApiError::validation("role", "an admin key has no tenant role: leave it out")),
        (Some(raw), Some(_)) => crate::sso::Role::parse(raw)
            .ok_or_else(|| ApiError::validation("role", "must be admin, operator or viewer"))?,
    };
    let (record, key) = keys::issue(state.store.as_ref(), tenant.as_ref(), &name, req.expires_at, role).await?;
    if tenant.is_none() {
        tracing::info!(key = %record.id, name = %record.name, "admin key created");
    }
    let view = serde_json::to_value(ApiKeyView::from(record.clone())).ok();
    let action = if tenant.is_some() { "api_key.created" } else { "admin_key.created" };
    state
        .ledger
        .change(
            tenant.as_ref().map(TenantId::as_str),
            &admin.actor(),
            action,
            serde_json::json!({"api_key": record.id}),
            None,
            view,
        )
        .await;
    Ok((StatusCode::CREATED, axum::Json(CreatedApiKey { record: record.into(), key })))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// The `next_cursor` of the previous page.
    #[param(format = Uuid)]
    cursor: Option<String>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

#[utoipa::path(
    get, path = "/admin/api-keys", tag = "admin", operation_id = "listApiKeys",
    params(ListParams),
    responses(
        (status = 200, description = "Every key, newest first, revoked ones included", body = ApiKeyPage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn list_api_keys(
    State(state): State<AppState>,
    _: Admin,
    Query(params): Query<ListParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(params.limit)?;
    let before: Option<Uuid> = cursor(params.cursor)?;
    let items = state.store.list_api_keys(before, limit).await?;
    let next_cursor = next_cursor(&items, limit, |k| k.id);
    Ok(axum::Json(ApiKeyPage { items: items.into_iter().map(ApiKeyView::from).collect(), next_cursor }))
}

#[utoipa::path(
    delete, path = "/admin/api-keys/{id}", tag = "admin", operation_id = "revokeApiKey",
    params(("id" = Uuid, Path, description = "API key id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
        (status = 404, description = "No live key with this id", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn revoke_api_key(
    State(state): State<AppState>,
    admin: Admin,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let not_found = || ApiError::not_found("no live API key has this id");
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    if state.store.revoke_api_key(id).await? {
        state.access.key_cache.clear();
        state
            .ledger
            .change(None, &admin.actor(), "api_key.revoked", serde_json::json!({"api_key": id}), None, None)
            .await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found())
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QuarantineParams {
    /// The `ce-tenantid` the record carried.
    tenant: Option<String>,
    /// The `ce-source` the record carried.
    source: Option<String>,
    /// A reason code, e.g. `invalid_id`.
    #[param(
        pattern = r"^(missing_header|invalid_header|control_character|invalid_id|source_mismatch|type_mismatch|tenant_not_allowed|body_too_large|invalid_body|schema_mismatch)$"
    )]
    reason: Option<String>,
    /// `http` or `kafka`.
    #[param(pattern = r"^(http|kafka)$")]
    origin: Option<String>,
    /// RFC 3339; received at or after.
    #[param(format = DateTime)]
    since: Option<String>,
    /// RFC 3339; received before.
    #[param(format = DateTime)]
    until: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(pattern = r"^[0-9]{1,18}$")]
    cursor: Option<String>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// A quarantined record as operators read it: the body as text when it is UTF-8, else base64.
#[derive(Debug, Serialize, ToSchema)]
pub struct QuarantineView {
    pub id: i64,
    pub tenant_id: Option<String>,
    pub source: Option<String>,
    pub ce_id: Option<String>,
    pub reason_code: String,
    /// The header (or `body`) at fault.
    pub reason_field: String,
    pub reason: String,
    /// The record's CloudEvents and trace headers, each capped at 4 KiB.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The body (capped at 64 KiB) when it is UTF-8 text.
    pub body: Option<String>,
    /// The body (capped at 64 KiB), base64, when it is not UTF-8.
    pub body_base64: Option<String>,
    /// The size of the body as received.
    pub body_bytes: i64,
    pub body_truncated: bool,
    /// `{"kind": "http"}` or `{"kind": "kafka", "topic", "partition", "offset"}`.
    #[schema(value_type = Object)]
    pub origin: serde_json::Value,
    pub received_at: DateTime<Utc>,
}

impl QuarantineView {
    fn of(entry: QuarantineEntry) -> Self {
        let body_truncated = entry.body.len() as i64 != entry.body_bytes;
        let (body, body_base64) = text_or_base64(entry.body);
        Self {
            id: entry.id,
            tenant_id: entry.tenant_id,
            source: entry.source,
            ce_id: entry.ce_id,
            reason_code: entry.reason_code,
            reason_field: entry.reason_field,
            reason: entry.reason,
            headers: entry.headers,
            body,
            body_base64,
            body_bytes: entry.body_bytes,
            body_truncated,
            origin: serde_json::to_value(&entry.origin).unwrap_or_default(),
            received_at: entry.received_at,
        }
    }
}

fn timestamp(param: &str, raw: Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
    raw.map(|r| {
        DateTime::parse_from_rfc3339(&r)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| ApiError::query(param, "must be an RFC 3339 timestamp"))
    })
    .transpose()
}

#[utoipa::path(
    get, path = "/admin/quarantine", tag = "admin", operation_id = "listQuarantine",
    params(QuarantineParams),
    responses(
        (status = 200, description = "Quarantined records, newest first", body = QuarantinePage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
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
        before_id: cursor(p.cursor)?,
        limit,
    };
    let entries = state.store.list_quarantine(&filter).await?;
    let next_cursor = next_cursor(&entries, limit, |e| e.id);
    let items = entries.into_iter().map(QuarantineView::of).collect();
    Ok(axum::Json(QuarantinePage { items, next_cursor }))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DlqParams {
    /// The producing application (`lerian.streaming.<source>.dlq`).
    source: Option<String>,
    /// The `ce-tenantid` the record carried.
    tenant: Option<String>,
    /// The `x-lerian-dlq-error-class` the record carried.
    error_class: Option<String>,
    /// RFC 3339; received at or after.
    #[param(format = DateTime)]
    since: Option<String>,
    /// RFC 3339; received before.
    #[param(format = DateTime)]
    until: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(pattern = r"^[0-9]{1,18}$")]
    cursor: Option<String>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// A record observed on a `.dlq` topic.
#[derive(Debug, Serialize, ToSchema)]
pub struct DlqView {
    pub id: i64,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub source: String,
    pub tenant_id: Option<String>,
    pub ce_id: Option<String>,
    pub ce_type: Option<String>,
    pub error_class: Option<String>,
    pub error_message: Option<String>,
    /// The record's `ce-*` and `x-lerian-dlq-*` headers.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The body (capped at 64 KiB) when it is UTF-8 text.
    pub body: Option<String>,
    /// The body (capped at 64 KiB), base64, when it is not UTF-8.
    pub body_base64: Option<String>,
    /// The body's size; for an omitted payload, as the producer reported it.
    pub body_bytes: i64,
    /// The producer dropped the body (`x-lerian-dlq-payload-omitted`).
    pub payload_omitted: bool,
    pub record_timestamp: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DlqPage {
    pub items: Vec<DlqView>,
    pub next_cursor: Option<String>,
}

#[utoipa::path(
    get, path = "/admin/dlq", tag = "admin", operation_id = "listDlqRecords",
    params(DlqParams),
    responses(
        (status = 200, description = "DLQ-topic observations, newest first", body = DlqPage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn list_dlq(
    State(state): State<AppState>,
    _: Admin,
    Query(p): Query<DlqParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(p.limit)?;
    let filter = hub_store::DlqFilter {
        source: p.source,
        tenant: p.tenant,
        error_class: p.error_class,
        since: timestamp("since", p.since)?,
        until: timestamp("until", p.until)?,
        before_id: cursor(p.cursor)?,
        limit,
    };
    let entries = state.store.list_dlq(&filter).await?;
    let next_cursor = next_cursor(&entries, limit, |e| e.id);
    let items = entries
        .into_iter()
        .map(|e| {
            let r = e.record;
            let (body, body_base64) = text_or_base64(r.body);
            DlqView {
                id: e.id,
                topic: r.topic,
                partition: r.partition,
                offset: r.offset,
                source: r.source,
                tenant_id: r.tenant_id,
                ce_id: r.ce_id,
                ce_type: r.ce_type,
                error_class: r.error_class,
                error_message: r.error_message,
                headers: r.headers,
                body,
                body_base64,
                body_bytes: r.body_bytes,
                payload_omitted: r.payload_omitted,
                record_timestamp: r.record_timestamp,
                received_at: r.received_at,
            }
        })
        .collect();
    Ok(axum::Json(DlqPage { items, next_cursor }))
}

#[cfg(test)]
mod tests {
    /// The `reason` parameter's pattern in the document names every quarantine reason code.
    #[test]
    fn the_reason_pattern_names_every_reason_code() {
        let doc = crate::api::openapi_json();
        let params = doc["paths"]["/admin/quarantine"]["get"]["parameters"].as_array().cloned().unwrap_or_default();
        let reason = params.iter().find(|p| p["name"] == "reason").expect("reason");
        let codes: Vec<&str> = hub_core::ReasonCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(reason["schema"]["pattern"], format!("^({})$", codes.join("|")));
    }
}
