//! Replay: `POST /v1/subscriptions/{id}/replay` gives a subscription a window of its tenant's
//! inbox again; `GET …/replays/{replay_id}` reports how far it got. The rules are
//! `hub_core::replay`; the walk runs in the background (`crate::delivery::replay`).

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hub_core::replay::MAX_RATE;
use hub_store::{NewReplay, ReplayRecord, ReplayStart, TimeWindow};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::TenantCaller;
use super::error::{ApiError, ErrorBody, RFC3339_EXPECTED, RawBody, optional_json, rfc3339};
use super::subscriptions::{load, not_found, path_id};

/// A replay's window: arrival times (`since` inclusive, `until` exclusive) or inbox seqs
/// (`from_seq` to `to_seq`, both inclusive). At least one bound; an open end runs to the newest
/// event at the time of the request (what arrives later reaches the subscription live).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// RFC 3339.
    #[schema(format = DateTime, example = "2026-11-30T00:00:00Z")]
    pub since: Option<String>,
    /// RFC 3339.
    #[schema(format = DateTime)]
    pub until: Option<String>,
    #[serde(default, deserialize_with = "super::error::whole_number")]
    #[schema(minimum = 1)]
    pub from_seq: Option<i64>,
    #[serde(default, deserialize_with = "super::error::whole_number")]
    #[schema(minimum = 1)]
    pub to_seq: Option<i64>,
    /// Give events again that the subscription already received (default false: only what it
    /// never got, or got dead-lettered).
    #[serde(default)]
    pub include_delivered: bool,
    /// Give again only what the subscription had and never got: events with a dead-lettered or
    /// cancelled job of it and none delivered or waiting (what a receiver's outage cost). Events
    /// it never had, and those whose jobs retention already removed, are left alone. Not with
    /// `include_delivered`.
    #[serde(default)]
    pub only_undelivered: bool,
    /// Content filters that select in place of the subscription's own for this replay (its
    /// event types still apply); `[]` selects without content filters. Omitted: the
    /// subscription's.
    #[schema(value_type = Option<Vec<super::filters::schema::Filter>>)]
    #[serde(default)]
    pub filters: Option<serde_json::Value>,
    /// Wanted events given per second at most, 1 to 100 000 (default: the operator's
    /// `STREAMING_HUB_REPLAY_RATE`, 250). Also bounded by the destination: a push replay waits
    /// while its subscription has 50 jobs waiting.
    #[serde(default, deserialize_with = "super::error::whole_number")]
    #[schema(minimum = 1, maximum = 100_000)]
    pub rate: Option<i64>,
}

impl ReplayRequest {
    /// Checks the window and returns its times; the error names the field.
    pub fn validate(&self) -> Result<TimeWindow, ApiError> {
        let time = |name: &str, raw: &Option<String>| {
            raw.as_deref().map(|s| rfc3339(s).ok_or_else(|| ApiError::validation(name, RFC3339_EXPECTED))).transpose()
        };
        let window = TimeWindow { since: time("since", &self.since)?, until: time("until", &self.until)? };
        let by_time = self.since.is_some() || self.until.is_some();
        let by_seq = self.from_seq.is_some() || self.to_seq.is_some();
        if !by_time && !by_seq {
            return Err(ApiError::validation("window", "give since and/or until, or from_seq and/or to_seq"));
        }
        if by_time && by_seq {
            return Err(ApiError::validation(
                if self.from_seq.is_some() { "from_seq" } else { "to_seq" },
                "a window is either times (since, until) or seqs (from_seq, to_seq), not both",
            ));
        }
        if let (Some(s), Some(u)) = (window.since, window.until) {
            if u <= s {
                return Err(ApiError::validation("until", "must be after since"));
            }
        }
        if self.from_seq.is_some_and(|f| f < 1) {
            return Err(ApiError::validation("from_seq", "must be 1 or more"));
        }
        if self.to_seq.is_some_and(|t| t < 1) {
            return Err(ApiError::validation("to_seq", "must be 1 or more"));
        }
        if let (Some(f), Some(t)) = (self.from_seq, self.to_seq) {
            if t < f {
                return Err(ApiError::validation("to_seq", "must not be below from_seq"));
            }
        }
        if self.include_delivered && self.only_undelivered {
            return Err(ApiError::validation(
                "only_undelivered",
                "cannot be asked with include_delivered (one gives delivered events again, the other only missed ones)",
            ));
        }
        if self.rate.is_some_and(|r| !(1..=i64::from(MAX_RATE)).contains(&r)) {
            return Err(ApiError::validation("rate", format!("must be 1 to {MAX_RATE} events per second")));
        }
        Ok(window)
    }
}

/// A replay as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayView {
    pub replay_id: Uuid,
    pub subscription_id: Uuid,
    /// `running`, `done`, or `cancelled` (its subscription was deleted).
    pub state: String,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// The seqs the window was resolved to when the replay started.
    pub from_seq: i64,
    pub to_seq: i64,
    pub include_delivered: bool,
    pub only_undelivered: bool,
    /// The content filters it selects by in place of the subscription's, when it was given some.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<super::filters::schema::Filter>>)]
    pub filters: Option<serde_json::Value>,
    /// Wanted events given per second at most.
    pub rate: u32,
    /// The last seq walked.
    pub walked_to: i64,
    /// Events of the window the subscription's filter wants.
    pub matched: u64,
    /// Of those, given to the subscription again (a job, or an entry at the end of its stream).
    pub created: u64,
    /// Of those, left alone: still waiting, or already delivered.
    pub skipped: u64,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl ReplayView {
    pub fn of(r: &ReplayRecord) -> Self {
        Self {
            replay_id: r.id,
            subscription_id: r.subscription_id,
            state: r.state.as_str().to_owned(),
            since: r.window.since,
            until: r.window.until,
            from_seq: r.from_seq,
            to_seq: r.to_seq,
            include_delivered: r.include_delivered,
            only_undelivered: r.only_undelivered,
            filters: r.filters.clone(),
            rate: r.rate,
            walked_to: r.walked_to,
            matched: r.progress.matched,
            created: r.progress.created,
            skipped: r.progress.skipped,
            created_at: r.created_at,
            finished_at: r.finished_at,
        }
    }
}

/// Starts a replay of `sub` (already loaded for the caller), or says why not.
pub async fn start(state: &AppState, tenant: &str, sub: Uuid, req: &ReplayRequest) -> Result<ReplayRecord, ApiError> {
    let window = req.validate()?;
    let replay = NewReplay {
        id: Uuid::now_v7(),
        tenant_id: tenant.to_owned(),
        subscription_id: sub,
        window,
        from_seq: req.from_seq,
        to_seq: req.to_seq,
        include_delivered: req.include_delivered,
        only_undelivered: req.only_undelivered,
        filters: match &req.filters {
            // `null` is the subscription's own, as omitted.
            None | Some(serde_json::Value::Null) => None,
            Some(f) => Some(super::filters::valid_filters(Some(f.clone()))?),
        },
        rate: req.rate.and_then(|r| u32::try_from(r).ok()).unwrap_or(state.settings.replay_rate),
        now: state.clock.now(),
    };
    match state.store.start_replay(&replay).await? {
        ReplayStart::Started(r) => {
            tracing::info!(tenant, subscription = %sub, replay = %r.id, from_seq = r.from_seq, to_seq = r.to_seq, "replay started");
            if r.state == hub_store::ReplayState::Running {
                state.wakers.replays.notify_one();
            } else {
                // An empty window: done at once, and said so like any replay's end.
                state.notices.emit(crate::operational::Notice::replay_finished(&r));
            }
            Ok(r)
        }
        ReplayStart::Busy(running) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "replay_in_progress",
            format!("replay {} of this subscription is still running; one runs at a time", running.id),
        )),
        ReplayStart::NoSubscription => Err(not_found()),
    }
}

#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/replay", tag = "subscriptions", operation_id = "replaySubscription",
    params(("id" = Uuid, Path, description = "Subscription id")),
    request_body = ReplayRequest,
    responses(
        (status = 202, description = "The replay started; it runs in the background", body = ReplayView),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 409, description = "`replay_in_progress`: one replay per subscription runs at a time", body = ErrorBody),
        (status = 422, description = "The window is invalid (the message names the field)", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> Result<impl IntoResponse, ApiError> {
    let req: ReplayRequest = optional_json(&body)?;
    let sub = load(&state, &caller, &id).await?;
    let replay = start(&state, caller.tenant.as_str(), sub.id, &req).await?;
    let view = ReplayView::of(&replay);
    super::ledger::record(
        &state,
        &caller,
        "replay.created",
        serde_json::json!({"subscription": sub.id, "replay": view.replay_id}),
        None,
        serde_json::to_value(&view).ok(),
    )
    .await;
    Ok((StatusCode::ACCEPTED, AxumJson(view)))
}

#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/replays/{replay_id}", tag = "subscriptions", operation_id = "getReplay",
    params(
        ("id" = Uuid, Path, description = "Subscription id"),
        ("replay_id" = Uuid, Path, description = "Replay id"),
    ),
    responses(
        (status = 200, description = "The replay and its progress", body = ReplayView),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such replay of this subscription", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn read(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path((id, replay_id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let missing = || ApiError::not_found("no such replay of this subscription");
    let sub = path_id(&id)?;
    let replay_id = Uuid::parse_str(&replay_id).map_err(|_| missing())?;
    let replay = state.store.replay(caller.tenant.as_str(), sub, replay_id).await?.ok_or_else(missing)?;
    Ok(AxumJson(ReplayView::of(&replay)))
}

/// The query of `GET …/undelivered`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UndeliveredParams {
    /// Events received at or after this time (RFC 3339).
    #[param(format = DateTime)]
    since: Option<String>,
    /// Events received before this time (RFC 3339).
    #[param(format = DateTime)]
    until: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(pattern = "^[1-9][0-9]{0,17}$")]
    cursor: Option<String>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// An event the subscription had and never got.
#[derive(Debug, Serialize, ToSchema)]
pub struct UndeliveredView {
    /// The event's id (`X-Lerian-Event-Id`).
    pub ce_id: Uuid,
    /// Its seq in the tenant's inbox.
    pub seq: i64,
    /// `<resourcetype>.<eventtype>`.
    pub event_type: String,
    pub received_at: DateTime<Utc>,
    /// How its latest delivery ended: `dead` or `cancelled`.
    pub state: String,
    /// The most attempts one of its deliveries made.
    pub attempts: i64,
    /// Its latest delivery's last error.
    pub last_error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UndeliveredPage {
    pub items: Vec<UndeliveredView>,
    /// Pass as `cursor` for the next page; `null` on the last one.
    pub next_cursor: Option<String>,
}

#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/undelivered", tag = "subscriptions", operation_id = "listUndelivered",
    params(("id" = Uuid, Path, description = "Subscription id"), UndeliveredParams),
    responses(
        (status = 200, description = "Events the subscription had and never got (a dead-lettered or cancelled delivery, none delivered or waiting), oldest first: what `only_undelivered` replays", body = UndeliveredPage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn undelivered(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    super::error::Query(params): super::error::Query<UndeliveredParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = super::error::page_limit(params.limit)?;
    let time = |name: &str, raw: &Option<String>| {
        raw.as_deref().map(|s| rfc3339(s).ok_or_else(|| ApiError::query(name, RFC3339_EXPECTED))).transpose()
    };
    // An empty window (until at or before since) lists nothing, as the event log's does.
    let window = TimeWindow { since: time("since", &params.since)?, until: time("until", &params.until)? };
    let after = params
        .cursor
        .map(|c| {
            c.parse::<i64>()
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| ApiError::query("cursor", "is not a cursor this API returned"))
        })
        .transpose()?;
    let sub = load(&state, &caller, &id).await?;
    let found = state.store.undelivered(caller.tenant.as_str(), sub.id, window, after, limit).await?;
    let next_cursor = super::error::next_cursor(&found, limit, |e| e.seq);
    let items = found
        .into_iter()
        .map(|e| UndeliveredView {
            ce_id: e.ce_id,
            seq: e.seq,
            event_type: format!("{}.{}", e.resource_type, e.event_type),
            received_at: e.received_at,
            state: e.state.as_str().to_owned(),
            attempts: e.attempts,
            last_error: e.last_error,
        })
        .collect();
    Ok(AxumJson(UndeliveredPage { items, next_cursor }))
}
