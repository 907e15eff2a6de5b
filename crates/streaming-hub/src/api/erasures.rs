//! `POST /admin/erasures` and `GET /admin/erasures/{id}` (SPEC §10, "Erasure"): an operator
//! forgets a data subject of one tenant. The request is kept (who, when, why and counts; its
//! match sealed while it runs and dropped after), and `crate::erasure` does the work in the
//! background, resumable after a crash.

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use hub_core::TenantId;
use hub_store::{ErasureRecord, NewErasure};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::Admin;
use super::error::{ApiError, ErrorBody, Json, Query, cursor, next_cursor, page_limit};
use super::subscriptions::sealing_error;
use crate::erasure::{Match, Selection};
use crate::secrets::Purpose;

/// The longest reason kept.
const MAX_REASON: usize = 1000;

/// Whose payloads to erase, and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateErasure {
    #[schema(example = "acme")]
    pub tenant_id: String,
    /// Exactly one of `{"subject": "…"}` (the CloudEvents subject), `{"partitionkey": "…"}` or
    /// `{"data": <content pattern>}` (the `data` filter dialect over JSON bodies).
    #[schema(value_type = ErasureMatch, example = json!({"subject": "customer:4f1c"}))]
    #[serde(rename = "match")]
    pub matches: Value,
    /// Why (a ticket, the legal basis); kept in the erasure's record.
    #[schema(example = "LGPD art. 18 request 2026-1187", min_length = 1, max_length = 1000)]
    pub reason: String,
    /// `true`: answer `200` with how many events the match selects now, erasing nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The count a dry run gave. Required when the match selects every event the tenant has, or
    /// more than `STREAMING_HUB_ERASURE_MAX_UNCONFIRMED` (default 1 000); when given it must equal
    /// what the match selects now, or nothing is erased (`409`).
    #[schema(minimum = 0)]
    #[serde(default)]
    pub expected_count: Option<u64>,
}

/// What an erasure's match selects now (a dry run): nothing was erased.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErasurePreview {
    pub tenant_id: String,
    /// `subject`, `partitionkey` or `data`.
    pub match_kind: String,
    /// Inbox events (not yet erased) the match selects now.
    pub count: u64,
    /// The tenant's inbox events not yet erased.
    pub events: u64,
    /// Whether the erasure runs only with `"expected_count": count`.
    pub confirmation_required: bool,
}

/// What an erasure matches: one field.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ErasureMatch {
    Subject(SubjectMatch),
    PartitionKey(PartitionKeyMatch),
    Data(DataMatch),
}

/// Events whose CloudEvents `subject` is this (and kept records whose `ce-subject` header is).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SubjectMatch {
    #[schema(min_length = 1, max_length = 4096)]
    pub subject: String,
}

/// Events whose `partitionkey` extension is this.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct PartitionKeyMatch {
    #[schema(min_length = 1, max_length = 4096)]
    pub partitionkey: String,
}

/// Events whose JSON body the content pattern matches (the `data` filter dialect).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct DataMatch {
    #[schema(value_type = Object, example = json!({"customer": {"cpf": ["123.456.789-09"]}}))]
    pub data: Value,
}

/// What an erasure changed so far.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErasureCountsView {
    /// Inbox events read.
    pub scanned: i64,
    /// Events whose payload became a tombstone.
    pub events: i64,
    /// Their pending or held delivery jobs, cancelled.
    pub jobs_cancelled: i64,
    /// Recorded response bodies of their attempts, removed.
    pub responses: i64,
    /// Kafka DLQ-plane records made tombstones.
    pub dlq_records: i64,
    /// Quarantined records made tombstones.
    pub quarantined: i64,
}

/// An erasure: its audit record and progress. Never the values it matched.
#[derive(Debug, Serialize, ToSchema)]
pub struct Erasure {
    pub id: Uuid,
    pub tenant_id: String,
    /// `subject`, `partitionkey` or `data`.
    pub match_kind: String,
    pub reason: String,
    /// `admin token`, or `admin key <id>`.
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
    /// `running` or `done`.
    pub state: String,
    pub counts: ErasureCountsView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<ErasureRecord> for Erasure {
    fn from(r: ErasureRecord) -> Self {
        let c = r.counts;
        Self {
            id: r.id,
            tenant_id: r.tenant_id,
            match_kind: r.match_kind,
            reason: r.reason,
            requested_by: r.requested_by,
            requested_at: r.requested_at,
            state: r.state,
            counts: ErasureCountsView {
                scanned: c.scanned,
                events: c.events,
                jobs_cancelled: c.jobs_cancelled,
                responses: c.responses,
                dlq_records: c.dlq_records,
                quarantined: c.quarantined,
            },
            finished_at: r.finished_at,
        }
    }
}

#[utoipa::path(
    post, path = "/admin/erasures", tag = "admin", operation_id = "createErasure",
    request_body = CreateErasure,
    responses(
        (status = 200, description = "A dry run: what the match selects now; nothing is erased", body = ErasurePreview),
        (status = 202, description = "Accepted: it runs in the background (`GET /admin/erasures/{id}`). The same match of the same tenant while one is still running answers that one", body = Erasure),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
        (status = 409, description = "The match selects every event of the tenant, or more than `STREAMING_HUB_ERASURE_MAX_UNCONFIRMED`, and `expected_count` is missing; or `expected_count` is not what it selects now. The message names the count; nothing is erased", body = ErrorBody),
        (status = 422, description = "A field is invalid; the message names it", body = ErrorBody),
        (status = 503, description = "No key-encryption key is configured: the match cannot be kept sealed", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    admin: Admin,
    Json(req): Json<CreateErasure>,
) -> Result<Response, ApiError> {
    let tenant = TenantId::parse(&req.tenant_id).map_err(|e| ApiError::validation("tenant_id", e))?;
    let matched = Match::parse(&req.matches).map_err(|(field, problem)| ApiError::validation(&field, problem))?;
    let reason = req.reason.trim();
    if reason.is_empty() || reason.len() > MAX_REASON {
        return Err(ApiError::validation("reason", format!("must be 1 to {MAX_REASON} bytes")));
    }
    let kind = matched.kind();
    let matched = Arc::new(matched);
    let selected = || async {
        crate::erasure::select(&*state.store, tenant.as_str(), Arc::clone(&matched), state.settings.erasure.page)
            .await
            .map_err(ApiError::internal)
    };
    if req.dry_run {
        let selection = selected().await?;
        let preview = ErasurePreview {
            tenant_id: tenant.to_string(),
            match_kind: kind.to_owned(),
            count: selection.matched,
            events: selection.events,
            confirmation_required: selection.needs_confirmation(state.settings.erasure.max_unconfirmed),
        };
        return Ok((StatusCode::OK, AxumJson(preview)).into_response());
    }
    let wanted = req.matches.to_string();
    // The same erasure asked again while it runs is that one, not a second pass over the inbox.
    for running in state.store.running_erasures(tenant.as_str()).await? {
        let same = running.sealed_match.as_deref().is_some_and(|sealed| {
            state.sealer.open(running.id, Purpose::ErasureMatch, sealed).is_ok_and(|b| b == wanted.as_bytes())
        });
        if same {
            return Ok(accepted(running).into_response());
        }
    }
    let selection = selected().await?;
    confirmed(selection, req.expected_count, state.settings.erasure.max_unconfirmed)?;
    let id = Uuid::now_v7();
    let sealed_match = state.sealer.seal(id, Purpose::ErasureMatch, wanted.as_bytes()).map_err(sealing_error)?;
    let new = NewErasure {
        id,
        tenant_id: tenant.to_string(),
        match_kind: kind.to_owned(),
        sealed_match,
        reason: reason.to_owned(),
        requested_by: admin.who(),
        requested_at: state.clock.now(),
    };
    state.store.create_erasure(&new).await?;
    tracing::info!(erasure = %id, tenant = %tenant, by = %new.requested_by, kind = new.match_kind, "erasure requested");
    // The match itself is personal data: the ledger keeps its kind and the reason only.
    state
        .ledger
        .change(
            Some(tenant.as_str()),
            &admin.actor(),
            "erasure.requested",
            serde_json::json!({"erasure": id}),
            None,
            Some(serde_json::json!({"match_kind": new.match_kind, "reason": new.reason})),
        )
        .await;
    state.wakers.erasures.notify_one();
    let record = state.store.erasure(id).await?.ok_or_else(|| ApiError::internal("the erasure was not stored"))?;
    Ok(accepted(record).into_response())
}

/// Refuses an erasure whose count is unconfirmed where it must be, or not what was expected.
fn confirmed(selection: Selection, expected: Option<u64>, max_unconfirmed: u64) -> Result<(), ApiError> {
    let n = selection.matched;
    let what = if n > 0 && n == selection.events {
        format!("the match selects {n} events, every event the tenant has")
    } else {
        format!("the match selects {n} events")
    };
    match expected {
        Some(expected) if expected == n => Ok(()),
        Some(expected) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "erasure_count_changed",
            format!("expected_count: is {expected} but {what} now; nothing was erased"),
        )),
        None if selection.needs_confirmation(max_unconfirmed) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "erasure_unconfirmed",
            format!(
                "expected_count: {what}; send the request again with \"expected_count\": {n} to erase them \
                 (\"dry_run\": true previews the count); nothing was erased"
            ),
        )),
        None => Ok(()),
    }
}

fn accepted(record: ErasureRecord) -> (StatusCode, [(header::HeaderName, String); 1], AxumJson<Erasure>) {
    let location = format!("/admin/erasures/{}", record.id);
    (StatusCode::ACCEPTED, [(header::LOCATION, location)], AxumJson(Erasure::from(record)))
}

#[utoipa::path(
    get, path = "/admin/erasures/{id}", tag = "admin", operation_id = "getErasure",
    params(("id" = Uuid, Path, description = "Erasure id")),
    responses(
        (status = 200, description = "The erasure's record and progress", body = Erasure),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
        (status = 404, description = "No erasure has this id", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn read(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<AxumJson<Erasure>, ApiError> {
    let not_found = || ApiError::not_found("no erasure has this id");
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    let record = state.store.erasure(id).await?.ok_or_else(not_found)?;
    Ok(AxumJson(record.into()))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListErasures {
    /// Only this tenant's.
    tenant_id: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(format = Uuid)]
    cursor: Option<String>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// A page of erasures, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErasurePage {
    pub items: Vec<Erasure>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

#[utoipa::path(
    get, path = "/admin/erasures", tag = "admin", operation_id = "listErasures",
    params(ListErasures),
    responses(
        (status = 200, description = "Erasures, newest first: the audit trail (who, when, why, counts; never the values)", body = ErasurePage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    _: Admin,
    Query(params): Query<ListErasures>,
) -> Result<AxumJson<ErasurePage>, ApiError> {
    let limit = page_limit(params.limit)?;
    let before: Option<Uuid> = cursor(params.cursor)?;
    let items = state.store.list_erasures(params.tenant_id.as_deref(), before, limit).await?;
    let next_cursor = next_cursor(&items, limit, |e| e.id);
    Ok(AxumJson(ErasurePage { items: items.into_iter().map(Erasure::from).collect(), next_cursor }))
}
