//! The ledger's routes (SPEC §11, "Proof of delivery"): a tenant's log under `/v1/ledger` and
//! `/v1/audit`, the platform's under `/admin/ledger` and `/admin/audit`, the public keys at
//! `/.well-known/ledger-keys.json`, and the operator's key rotation.
//!
//! Every answer is what a holder needs to check it without the hub: entries with their exact
//! `data`, proofs as lists of hashes (standard base64) with the signed checkpoint of their size,
//! and the export `streaming-hub ledger verify` reads.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hub_core::ledger::checkpoint::{Checkpoint, Log};
use hub_core::ledger::export::Line;
use hub_core::ledger::proof::{consistency_plan, fill, inclusion_plan, nodes_of};
use hub_store::{LedgerEntryRecord, LedgerStart};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{Admin, TenantCaller};
use super::error::{ApiError, ErrorBody, Query};
use crate::ledger::LedgerKeyView;

/// Entries a page holds at most, and the export reads at a time.
const PAGE: u64 = 1000;
const EXPORT_PAGE: u64 = 5000;

/// One entry of a log.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryView {
    pub index: u64,
    pub recorded_at: chrono::DateTime<chrono::Utc>,
    /// `delivery` or `change`.
    pub kind: String,
    /// The entry's exact text: what its leaf hashes (with its index).
    pub data: String,
    /// `data` read as JSON.
    #[schema(value_type = Object)]
    pub entry: Value,
    /// Its leaf hash (RFC 9162: SHA-256 of 0x00, the index as 8 bytes big-endian, and `data`),
    /// standard base64.
    pub leaf_hash: String,
}

impl From<LedgerEntryRecord> for EntryView {
    fn from(e: LedgerEntryRecord) -> Self {
        Self {
            index: e.index,
            recorded_at: e.at,
            kind: e.kind,
            entry: serde_json::from_str(&e.data).unwrap_or(Value::Null),
            leaf_hash: STANDARD.encode(e.leaf_hash),
            data: e.data,
        }
    }
}

/// A page of entries.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryPage {
    /// `tenant <id>` or `platform`: the log's line in its checkpoints.
    pub log: String,
    pub items: Vec<EntryView>,
    /// Where the kept entries begin: those below are past `STREAMING_HUB_LEDGER_RETENTION`
    /// (0 until retention first drops some).
    pub start: u64,
    /// The `from` of the next page; absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_from: Option<u64>,
}

/// One entry with its digest key (kept outside the log; gone once erasure reached its event).
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryDetail {
    #[serde(flatten)]
    pub entry: EntryView,
    /// The key of the entry's `sent` digest (HMAC-SHA256), standard base64: with it and the
    /// bytes a receiver got, the digest can be checked. Absent when erased or never kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest_key: Option<String>,
}

/// A signed checkpoint (the note is what the Ed25519 signature covers).
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckpointView {
    pub size: u64,
    pub root: String,
    pub time: String,
    pub kid: String,
    pub signature: String,
    pub note: String,
}

impl From<Checkpoint> for CheckpointView {
    fn from(c: Checkpoint) -> Self {
        Self { size: c.size, root: c.root, time: c.time, kid: c.kid, signature: c.signature, note: c.note }
    }
}

/// Checkpoints of a log.
#[derive(Debug, Serialize, ToSchema)]
pub struct Checkpoints {
    pub log: String,
    /// By size: the latest alone, the one of `size`, or those from `from` to `to`.
    pub items: Vec<CheckpointView>,
}

/// That an entry is in the tree of `size` entries.
#[derive(Debug, Serialize, ToSchema)]
pub struct InclusionProof {
    pub log: String,
    pub entry: EntryView,
    pub size: u64,
    /// RFC 9162 §2.1.3: the sibling hashes from the leaf up, standard base64.
    pub proof: Vec<String>,
    /// The signed checkpoint of `size`, when one was signed at that size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointView>,
}

/// That the tree of `from` entries is the beginning of the tree of `to`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsistencyProof {
    pub log: String,
    pub from: u64,
    pub to: u64,
    /// RFC 9162 §2.1.4, standard base64.
    pub proof: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_checkpoint: Option<CheckpointView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_checkpoint: Option<CheckpointView>,
}

/// One change, as the audit view lists it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeView {
    /// Its entry in the log.
    pub index: u64,
    pub recorded_at: chrono::DateTime<chrono::Utc>,
    /// Who made it, as listed (`api key <id>`, `admin token`, `portal session <id>`, …).
    pub actor_label: String,
    /// The change's entry: actor, action, target, before and after (secrets removed).
    #[schema(value_type = Object)]
    pub change: Value,
}

/// Changes, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub log: String,
    pub items: Vec<ChangeView>,
    /// The `before` of the next page; absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_before: Option<u64>,
}

/// The ledger's keys.
#[derive(Debug, Serialize, ToSchema)]
pub struct LedgerKeys {
    /// Oldest first; the one without `retired_at` signs. Every one stays published.
    pub keys: Vec<LedgerKeyView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CheckpointParams {
    /// The checkpoint of exactly this size.
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub size: Option<String>,
    /// With `to`: the checkpoints with sizes in `from..=to` (at most 1000).
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub from: Option<String>,
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub to: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EntryParams {
    /// The first index (default 0).
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub from: Option<String>,
    /// The last index, excluded (default: the end).
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub to: Option<String>,
    /// At most this many (1 to 1000, default 100).
    #[param(pattern = r"^([1-9][0-9]{0,2}|1000)$")]
    pub limit: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InclusionParams {
    /// The entry's index.
    #[param(pattern = r"^[0-9]{1,18}$", required = true)]
    pub entry: Option<String>,
    /// The tree size to prove it in (default: the latest checkpoint's).
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub size: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConsistencyParams {
    #[param(pattern = r"^[0-9]{1,18}$", required = true)]
    pub from: Option<String>,
    /// Default: the latest checkpoint's size.
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub to: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// Changes before this index (the `next_before` of the last page).
    #[param(pattern = r"^[0-9]{1,18}$")]
    pub before: Option<String>,
    #[param(pattern = r"^([1-9][0-9]{0,2}|1000)$")]
    pub limit: Option<String>,
}

fn number(name: &str, raw: Option<&str>) -> Result<Option<u64>, ApiError> {
    raw.map(|r| {
        r.parse::<u64>()
            .ok()
            .filter(|n| *n < 1 << 62)
            .ok_or_else(|| ApiError::query(name, format!("must be a whole number from 0 (got {:?})", cap(r))))
    })
    .transpose()
}

fn cap(raw: &str) -> String {
    raw.chars().take(40).collect()
}

fn limit(raw: Option<&str>, default: u64) -> Result<u64, ApiError> {
    match number("limit", raw)? {
        None => Ok(default),
        Some(n) if (1..=PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::query("limit", format!("must be from 1 to {PAGE} (got {n})"))),
    }
}

/// Which log a caller reads.
fn tenant_log(caller: &TenantCaller) -> Log {
    Log::Tenant(caller.tenant.as_str().to_owned())
}

/// The size of the log's signed tree (its latest checkpoint), 0 when none.
async fn signed_size(state: &AppState, log: &Log) -> Result<(u64, Option<Checkpoint>), ApiError> {
    let latest = state.store.latest_ledger_checkpoint(log.key()).await?;
    Ok((latest.as_ref().map_or(0, |c| c.size), latest))
}

async fn checkpoint_at(state: &AppState, log: &Log, size: u64) -> Result<Option<CheckpointView>, ApiError> {
    Ok(state.store.ledger_checkpoints(log.key(), size, size, 1).await?.into_iter().next().map(Into::into))
}

async fn checkpoints(state: &AppState, log: Log, p: CheckpointParams) -> Result<Json<Checkpoints>, ApiError> {
    let (size, from, to) =
        (number("size", p.size.as_deref())?, number("from", p.from.as_deref())?, number("to", p.to.as_deref())?);
    let items: Vec<Checkpoint> = match (size, from, to) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(ApiError::query("size", "give size alone, or from and to"));
        }
        (Some(s), None, None) => state.store.ledger_checkpoints(log.key(), s, s, 1).await?,
        (None, None, None) => state.store.latest_ledger_checkpoint(log.key()).await?.into_iter().collect(),
        (None, from, to) => {
            let (from, to) = (from.unwrap_or(0), to.unwrap_or(u64::MAX));
            if from > to {
                return Err(ApiError::query("from", format!("must not be above to ({from} > {to})")));
            }
            state.store.ledger_checkpoints(log.key(), from, to, PAGE).await?
        }
    };
    Ok(Json(Checkpoints { log: log.line(), items: items.into_iter().map(Into::into).collect() }))
}

/// Where the log's kept entries begin.
async fn start_of(state: &AppState, log: &Log) -> Result<LedgerStart, ApiError> {
    Ok(state.store.ledger_start(log.key()).await?)
}

/// The answer for an index below the log's start.
fn past_retention(what: &str, index: u64, start: u64) -> ApiError {
    ApiError::new(
        StatusCode::GONE,
        "gone",
        format!("{what} {index} is past the ledger's retention: the log's kept entries begin at {start}"),
    )
}

async fn entries(state: &AppState, log: Log, p: EntryParams) -> Result<Json<EntryPage>, ApiError> {
    let start = start_of(state, &log).await?.size;
    let from = number("from", p.from.as_deref())?.unwrap_or(0).max(start);
    let to = number("to", p.to.as_deref())?;
    let limit = limit(p.limit.as_deref(), 100)?;
    let limit = to.map_or(limit, |to| limit.min(to.saturating_sub(from)));
    let items = if limit == 0 { Vec::new() } else { state.store.ledger_entries(log.key(), from, limit).await? };
    let next_from = (items.len() as u64 == limit && limit > 0)
        .then(|| items.last().map(|e| e.index + 1))
        .flatten()
        .filter(|n| to.is_none_or(|to| *n < to));
    Ok(Json(EntryPage { log: log.line(), items: items.into_iter().map(Into::into).collect(), start, next_from }))
}

async fn entry(state: &AppState, log: Log, index: &str) -> Result<Json<EntryDetail>, ApiError> {
    let index = index.parse::<u64>().map_err(|_| ApiError::validation("index", "must be a whole number from 0"))?;
    let found = state.store.ledger_entries(log.key(), index, 1).await?.into_iter().find(|e| e.index == index);
    let Some(found) = found else {
        let start = start_of(state, &log).await?.size;
        if index < start {
            return Err(past_retention("entry", index, start));
        }
        return Err(ApiError::not_found(format!("the log has no entry {index}")));
    };
    let digest_key = state.store.digest_key(log.key(), index).await?.map(|k| STANDARD.encode(k));
    Ok(Json(EntryDetail { entry: found.into(), digest_key }))
}

/// The hashes a plan names, from the store.
async fn hashes(state: &AppState, log: &Log, plan: &[(u64, u64)]) -> Result<Vec<String>, ApiError> {
    let nodes = state.store.ledger_nodes(log.key(), &nodes_of(plan)).await?;
    let filled = fill(plan, |n| nodes.iter().find(|(m, _)| *m == n).map(|(_, h)| *h))
        .ok_or_else(|| ApiError::internal("a node the proof needs is missing from the store"))?;
    Ok(filled.iter().map(|h| STANDARD.encode(h)).collect())
}

async fn inclusion(state: &AppState, log: Log, p: InclusionParams) -> Result<Json<InclusionProof>, ApiError> {
    let index = number("entry", p.entry.as_deref())?.ok_or_else(|| ApiError::query("entry", "is required"))?;
    let start = start_of(state, &log).await?.size;
    if index < start {
        return Err(past_retention("entry", index, start));
    }
    let (signed, latest) = signed_size(state, &log).await?;
    let size = number("size", p.size.as_deref())?.unwrap_or(signed);
    if size > signed {
        return Err(ApiError::query("size", format!("the log's signed tree holds {signed} entries so far")));
    }
    if index >= size {
        return Err(ApiError::query(
            "entry",
            format!("must be below the tree size {size} (an entry is proved once a checkpoint covers it)"),
        ));
    }
    let plan = inclusion_plan(index, size).map_err(|e| ApiError::query("entry", e))?;
    let proof = hashes(state, &log, &plan).await?;
    let found = state.store.ledger_entries(log.key(), index, 1).await?.into_iter().find(|e| e.index == index);
    let found = found.ok_or_else(|| ApiError::internal(format!("entry {index} is missing from the store")))?;
    let checkpoint = match latest {
        Some(c) if c.size == size => Some(c.into()),
        _ => checkpoint_at(state, &log, size).await?,
    };
    Ok(Json(InclusionProof { log: log.line(), entry: found.into(), size, proof, checkpoint }))
}

async fn consistency(state: &AppState, log: Log, p: ConsistencyParams) -> Result<Json<ConsistencyProof>, ApiError> {
    let from = number("from", p.from.as_deref())?.ok_or_else(|| ApiError::query("from", "is required"))?;
    let start = start_of(state, &log).await?.size;
    if from > 0 && from < start {
        return Err(past_retention("the tree of size", from, start));
    }
    let (signed, _) = signed_size(state, &log).await?;
    let to = number("to", p.to.as_deref())?.unwrap_or(signed);
    if to > signed {
        return Err(ApiError::query("to", format!("the log's signed tree holds {signed} entries so far")));
    }
    let plan = consistency_plan(from, to).map_err(|e| ApiError::query("from", e))?;
    let proof = hashes(state, &log, &plan).await?;
    Ok(Json(ConsistencyProof {
        log: log.line(),
        from,
        to,
        proof,
        from_checkpoint: checkpoint_at(state, &log, from).await?,
        to_checkpoint: checkpoint_at(state, &log, to).await?,
    }))
}

/// JSON lines: the ledger line, the public keys, where the kept entries begin (when retention
/// dropped some), then every kept entry with each checkpoint right after the last entry it
/// covers; read a page at a time.
async fn export(state: AppState, log: Log) -> Result<Response, ApiError> {
    struct Walk {
        state: AppState,
        log: Log,
        next: u64,
        head: Option<Vec<String>>,
        done: bool,
    }
    let start = start_of(&state, &log).await?;
    // The checkpoint of exactly the start's size, when one was signed there: it signs the peaks.
    let at_start = if start.size > 0 {
        state.store.ledger_checkpoints(log.key(), start.size, start.size, 1).await?
    } else {
        vec![]
    };
    let head: Vec<String> = std::iter::once(Line::ledger(&log))
        .chain(state.ledger.published().into_iter().map(|jwk| Line::Key { jwk }))
        .chain((start.size > 0).then(|| Line::start(start.size, &start.peaks)))
        .chain(at_start.into_iter().map(Line::Checkpoint))
        .map(|l| serde_json::to_string(&l).unwrap_or_default())
        .collect();
    let walk = Walk { state, log, next: start.size, head: Some(head), done: false };
    let stream = futures_util::stream::unfold(walk, |mut w| async move {
        if let Some(head) = w.head.take() {
            let mut text = head.join("\n");
            text.push('\n');
            return Some((Ok::<_, std::io::Error>(text), w));
        }
        if w.done {
            return None;
        }
        let page = match w.state.store.ledger_entries(w.log.key(), w.next, EXPORT_PAGE).await {
            Ok(page) => page,
            Err(e) => {
                tracing::error!(error = %e, "a ledger export stopped: its entries could not be read");
                return Some((Err(std::io::Error::other("the ledger could not be read")), Walk { done: true, ..w }));
            }
        };
        if page.first().is_some_and(|e| e.index != w.next) {
            // Retention moved the log's start while it was read: what follows would not verify.
            tracing::warn!(log = %w.log.line(), "a ledger export stopped: retention dropped entries it was reading");
            return Some((Err(std::io::Error::other("the ledger's start moved")), Walk { done: true, ..w }));
        }
        let last = page.last().map_or(w.next, |e| e.index + 1);
        // The checkpoints this page reaches (sizes after the previous page's end, up to this
        // page's), never one beyond the entries exported: the sealer
        // may append and sign more while the export is read, and a checkpoint over entries the
        // export does not hold would not verify.
        let mut checkpoints = match w.state.store.ledger_checkpoints(w.log.key(), w.next + 1, last, 1_000_000).await {
            Ok(found) => found.into_iter().peekable(),
            Err(e) => {
                tracing::error!(error = %e, "a ledger export stopped: its checkpoints could not be read");
                return Some((Err(std::io::Error::other("the ledger could not be read")), Walk { done: true, ..w }));
            }
        };
        let mut text = String::new();
        let mut line = |l: &Line| {
            text.push_str(&serde_json::to_string(l).unwrap_or_default());
            text.push('\n');
        };
        for e in &page {
            line(&Line::entry(e.index, &e.data, &e.leaf_hash));
            while let Some(c) = checkpoints.next_if(|c| c.size <= e.index + 1) {
                line(&Line::Checkpoint(c));
            }
        }
        w.next = last;
        if (page.len() as u64) < EXPORT_PAGE {
            w.done = true;
        }
        Some((Ok(text), w))
    });
    Ok(([(header::CONTENT_TYPE, "application/jsonl"), (header::CACHE_CONTROL, "no-store")], Body::from_stream(stream))
        .into_response())
}

async fn audit(state: &AppState, log: Log, p: AuditParams) -> Result<Json<AuditPage>, ApiError> {
    let before = number("before", p.before.as_deref())?;
    let limit = limit(p.limit.as_deref(), 100)?;
    let items = state.store.ledger_entries_of_kind(log.key(), "change", before, limit).await?;
    let next_before = (items.len() as u64 == limit).then(|| items.last().map(|e| e.index)).flatten();
    let items = items
        .into_iter()
        .map(|e| {
            let change: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
            let actor_label = serde_json::from_value::<hub_core::ledger::entry::Actor>(change["actor"].clone())
                .map(|a| a.label())
                .unwrap_or_else(|_| "unknown".to_owned());
            ChangeView { index: e.index, recorded_at: e.at, actor_label, change }
        })
        .collect();
    Ok(Json(AuditPage { log: log.line(), items, next_before }))
}

#[utoipa::path(get, path = "/v1/ledger/checkpoints", tag = "ledger", operation_id = "listLedgerCheckpoints",
    params(CheckpointParams),
    responses(
        (status = 200, description = "The tenant's signed checkpoints: the latest, the one of a size, or a range", body = Checkpoints),
        (status = 400, description = "A parameter is invalid (named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The admin token without X-Streaming-Hub-Tenant", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub async fn tenant_checkpoints(
    State(state): State<AppState>,
    caller: TenantCaller,
    Query(p): Query<CheckpointParams>,
) -> Result<Json<Checkpoints>, ApiError> {
    checkpoints(&state, tenant_log(&caller), p).await
}

#[utoipa::path(get, path = "/v1/ledger/entries", tag = "ledger", operation_id = "listLedgerEntries",
    params(EntryParams),
    responses(
        (status = 200, description = "The tenant's entries from `from`, in order", body = EntryPage),
        (status = 400, description = "A parameter is invalid (named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The admin token without X-Streaming-Hub-Tenant", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub async fn tenant_entries(
    State(state): State<AppState>,
    caller: TenantCaller,
    Query(p): Query<EntryParams>,
) -> Result<Json<EntryPage>, ApiError> {
    entries(&state, tenant_log(&caller), p).await
}

#[utoipa::path(get, path = "/v1/ledger/entries/{index}", tag = "ledger", operation_id = "getLedgerEntry",
    params(("index" = u64, Path, description = "The entry's index")),
    responses(
        (status = 200, description = "One entry, with its digest key while it is kept", body = EntryDetail),
        (status = 410, description = "Past the ledger's retention: the log's kept entries begin later (named)", body = ErrorBody),
        (status = 404, description = "No such entry", body = ErrorBody),
        (status = 422, description = "The index is not a number", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The admin token without X-Streaming-Hub-Tenant", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub async fn tenant_entry(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(index): Path<String>,
) -> Result<Json<EntryDetail>, ApiError> {
    entry(&state, tenant_log(&caller), &index).await
}

#[utoipa::path(get, path = "/v1/ledger/proof/inclusion", tag = "ledger", operation_id = "proveLedgerInclusion",
    params(InclusionParams),
    responses(
        (status = 200, description = "The proof that the entry is in the tree of `size` entries", body = InclusionProof),
        (status = 410, description = "Past the ledger's retention: the log's kept entries begin later (named)", body = ErrorBody),
        (status = 400, description = "A parameter is invalid or beyond the signed tree (named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The admin token without X-Streaming-Hub-Tenant", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub async fn tenant_inclusion(
    State(state): State<AppState>,
    caller: TenantCaller,
    Query(p): Query<InclusionParams>,
) -> Result<Json<InclusionProof>, ApiError> {
    inclusion(&state, tenant_log(&caller), p).await
}

#[utoipa::path(get, path = "/v1/ledger/proof/consistency", tag = "ledger", operation_id = "proveLedgerConsistency",
    params(ConsistencyParams),
    responses(
        (status = 200, description = "The proof that the tree of `from` entries begins the tree of `to`", body = ConsistencyProof),
        (status = 410, description = "Past the ledger's retention: the log's kept entries begin later (named)", body = ErrorBody),
        (status = 400, description = "A parameter is invalid or beyond the signed tree (named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The admin token without X-Streaming-Hub-Tenant", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub async fn tenant_consistency(
    State(state): State<AppState>,
    caller: TenantCaller,
    Query(p): Query<ConsistencyParams>,
) -> Result<Json<ConsistencyProof>, ApiError> {
    consistency(&state, tenant_log(&caller), p).await
}

#[utoipa::path(get, path = "/v1/ledger/export", tag = "ledger", operation_id = "exportLedger",
    responses(
        (status = 200, description = "JSON lines: the log, its public keys, its entries and checkpoints (what `streaming-hub ledger verify` reads)", content_type = "application/jsonl", body = String),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The admin token without X-Streaming-Hub-Tenant", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub async fn tenant_export(State(state): State<AppState>, caller: TenantCaller) -> Result<Response, ApiError> {
    let log = tenant_log(&caller);
    export(state, log).await
}

#[utoipa::path(get, path = "/v1/audit", tag = "ledger", operation_id = "listAudit",
    params(AuditParams),
    responses(
        (status = 200, description = "The tenant's changes, newest first, with who made them", body = AuditPage),
        (status = 400, description = "A parameter is invalid (named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The admin token without X-Streaming-Hub-Tenant", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub async fn tenant_audit(
    State(state): State<AppState>,
    caller: TenantCaller,
    Query(p): Query<AuditParams>,
) -> Result<Json<AuditPage>, ApiError> {
    audit(&state, tenant_log(&caller), p).await
}

#[utoipa::path(get, path = "/admin/ledger/checkpoints", tag = "admin", operation_id = "listPlatformLedgerCheckpoints",
    params(CheckpointParams),
    responses((status = 200, description = "The platform log's checkpoints", body = Checkpoints),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn platform_checkpoints(
    State(state): State<AppState>,
    _: Admin,
    Query(p): Query<CheckpointParams>,
) -> Result<Json<Checkpoints>, ApiError> {
    checkpoints(&state, Log::Platform, p).await
}

#[utoipa::path(get, path = "/admin/ledger/entries", tag = "admin", operation_id = "listPlatformLedgerEntries",
    params(EntryParams),
    responses((status = 200, description = "The platform log's entries", body = EntryPage),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn platform_entries(
    State(state): State<AppState>,
    _: Admin,
    Query(p): Query<EntryParams>,
) -> Result<Json<EntryPage>, ApiError> {
    entries(&state, Log::Platform, p).await
}

#[utoipa::path(get, path = "/admin/ledger/proof/inclusion", tag = "admin", operation_id = "provePlatformLedgerInclusion",
    params(InclusionParams),
    responses((status = 200, description = "An inclusion proof in the platform log", body = InclusionProof),
        (status = 410, description = "Past the ledger's retention: the log's kept entries begin later (named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn platform_inclusion(
    State(state): State<AppState>,
    _: Admin,
    Query(p): Query<InclusionParams>,
) -> Result<Json<InclusionProof>, ApiError> {
    inclusion(&state, Log::Platform, p).await
}

#[utoipa::path(get, path = "/admin/ledger/proof/consistency", tag = "admin", operation_id = "provePlatformLedgerConsistency",
    params(ConsistencyParams),
    responses((status = 200, description = "A consistency proof of the platform log", body = ConsistencyProof),
        (status = 410, description = "Past the ledger's retention: the log's kept entries begin later (named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn platform_consistency(
    State(state): State<AppState>,
    _: Admin,
    Query(p): Query<ConsistencyParams>,
) -> Result<Json<ConsistencyProof>, ApiError> {
    consistency(&state, Log::Platform, p).await
}

#[utoipa::path(get, path = "/admin/ledger/export", tag = "admin", operation_id = "exportPlatformLedger",
    responses((status = 200, description = "The platform log's export (JSON lines)", content_type = "application/jsonl", body = String),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn platform_export(State(state): State<AppState>, _: Admin) -> Result<Response, ApiError> {
    export(state, Log::Platform).await
}

#[utoipa::path(get, path = "/admin/audit", tag = "admin", operation_id = "listPlatformAudit",
    params(AuditParams),
    responses((status = 200, description = "Platform changes, newest first, with who made them", body = AuditPage),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token or an admin key", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn platform_audit(
    State(state): State<AppState>,
    _: Admin,
    Query(p): Query<AuditParams>,
) -> Result<Json<AuditPage>, ApiError> {
    audit(&state, Log::Platform, p).await
}

#[utoipa::path(get, path = "/.well-known/ledger-keys.json", tag = "operations", operation_id = "getLedgerKeys",
    responses((status = 200, description = "Every public key that signed or signs ledger checkpoints (Ed25519 JWKs)", body = Object)))]
pub async fn public_keys(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "public, max-age=300")], Json(state.ledger.keys_document()))
}

#[utoipa::path(get, path = "/admin/ledger/keys", tag = "admin", operation_id = "listLedgerKeys",
    responses(
        (status = 200, description = "The ledger's keys (never their private halves)", body = LedgerKeys),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn keys(State(state): State<AppState>, _: Admin) -> Result<Json<LedgerKeys>, ApiError> {
    let keys = state.ledger.refresh().await.map_err(ApiError::internal)?;
    Ok(Json(LedgerKeys { keys }))
}

#[utoipa::path(post, path = "/admin/ledger/keys", tag = "admin", operation_id = "rotateLedgerKey",
    responses(
        (status = 201, description = "A new key signs checkpoints from now on; the one it replaced stays published", body = LedgerKeys),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
    ),
    security(("admin_token" = [])))]
pub async fn rotate(State(state): State<AppState>, admin: Admin) -> Result<impl IntoResponse, ApiError> {
    let keys = state.ledger.add_key(true).await.map_err(ApiError::internal)?;
    let kid = keys.last().map(|k| k.kid.to_string());
    tracing::info!(kid = ?kid, "ledger signing key rotated");
    state
        .ledger
        .change(None, &admin.actor(), "ledger_key.rotated", serde_json::json!({"ledger_key": kid}), None, None)
        .await;
    Ok((StatusCode::CREATED, Json(LedgerKeys { keys })))
}

/// Records a change a tenant's caller made (SPEC §11), in the tenant's log, with who made it.
pub async fn record(
    state: &AppState,
    caller: &TenantCaller,
    action: &str,
    target: Value,
    before: Option<Value>,
    after: Option<Value>,
) {
    state.ledger.change(Some(caller.tenant.as_str()), &caller.actor, action, target, before, after).await;
}

/// A subscription as a change records it (the API's view: no secret in it).
pub fn subscription_state(record: &hub_store::SubscriptionRecord) -> Value {
    serde_json::to_value(super::subscriptions::SubscriptionView::of(record)).unwrap_or(Value::Null)
}
