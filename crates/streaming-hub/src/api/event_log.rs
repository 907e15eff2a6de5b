//! The event log: a tenant's inbox (`GET /v1/events`) and one event with what became of it in
//! each subscription (`GET /v1/events/{ce_id}`), so support can start from the
//! `X-Lerian-Event-Id` a receiver logged.

use std::collections::BTreeMap;

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hub_core::{EventKey, EventPattern, SinkKind};
use hub_store::{EventQuery, StoredEvent, SubscriptionRecord};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::TenantCaller;
use super::delivery::{DeliveryView, delivery_views};
use super::error::{ApiError, ErrorBody, Query, RFC3339_EXPECTED, page_limit, rfc3339};
use super::pull::render_payload;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventLogParams {
    /// An event-key pattern as in subscriptions: `account.created`, `account.*`, `*.created`.
    #[param(pattern = r"^(\*|[A-Za-z0-9][A-Za-z0-9_-]{0,127})\.(\*|[A-Za-z0-9][A-Za-z0-9_-]{0,127})$")]
    event_type: Option<String>,
    /// Only events of this `ce-source`.
    #[param(pattern = r"^[a-z0-9][a-z0-9_-]{0,222}$")]
    source: Option<String>,
    /// Received at or after this time (RFC 3339).
    #[param(format = DateTime)]
    since: Option<String>,
    /// Received before this time (RFC 3339).
    #[param(format = DateTime)]
    until: Option<String>,
    /// Events with a seq above this one (the `next_cursor` of the previous page).
    #[param(minimum = 0)]
    after: Option<i64>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// One event of the inbox.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    /// Its seq in the tenant's inbox (arrival order).
    pub seq: i64,
    pub ce_id: Uuid,
    /// The event key `<resourcetype>.<eventtype>`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The `ce-type` header as received.
    pub ce_type: String,
    pub source: String,
    pub time: String,
    pub schema_version: String,
    pub subject: Option<String>,
    pub data_content_type: String,
    pub data_schema: Option<String>,
    pub traceparent: Option<String>,
    pub extensions: BTreeMap<String, String>,
    /// `{"kind": "http"}` or `{"kind": "kafka", "topic", "partition", "offset"}`.
    #[schema(value_type = Object)]
    pub origin: hub_store::Origin,
    pub received_at: DateTime<Utc>,
    /// The body: JSON as received, or a string (base64 when `payload_encoding` says so).
    #[schema(value_type = Value)]
    pub payload: Box<RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_encoding: Option<&'static str>,
    /// The erasure that replaced its payload, subject and extensions with a tombstone (SPEC §10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erasure_id: Option<Uuid>,
}

impl EventView {
    pub fn of(event: StoredEvent) -> Self {
        let content_type = event.data_content_type.clone().unwrap_or_else(|| "application/json".to_owned());
        let (payload, payload_encoding) = render_payload(&content_type, event.payload);
        Self {
            seq: event.seq,
            ce_id: event.ce_id,
            event_type: format!("{}.{}", event.resource_type, event.event_type),
            ce_type: event.ce_type,
            source: event.source,
            time: event.event_time,
            schema_version: event.schema_version,
            subject: event.subject,
            data_content_type: content_type,
            data_schema: event.data_schema,
            traceparent: event.traceparent,
            extensions: event.extensions,
            origin: event.origin,
            received_at: event.received_at,
            payload,
            payload_encoding,
            erasure_id: event.erasure_id,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventPage {
    pub items: Vec<EventView>,
    /// The seq of the last item of a full page (pass it as `after`); null on a short page.
    pub next_cursor: Option<i64>,
}

/// A time query parameter (RFC 3339).
pub fn time_param(name: &str, raw: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    raw.map(|s| rfc3339(s).ok_or_else(|| ApiError::query(name, RFC3339_EXPECTED))).transpose()
}

#[utoipa::path(
    get, path = "/v1/events", tag = "events", operation_id = "listEvents",
    params(EventLogParams),
    responses(
        (status = 200, description = "The tenant's inbox in ascending seq", body = EventPage),
        (status = 400, description = "Invalid query parameter (the message names it)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: TenantCaller,
    Query(params): Query<EventLogParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(params.limit)?;
    let pattern = params
        .event_type
        .as_deref()
        .map(EventPattern::parse)
        .transpose()
        .map_err(|e| ApiError::query("event_type", e))?;
    if let Some(source) = params.source.as_deref()
        && let Err(e) = hub_core::Source::parse(source)
    {
        return Err(ApiError::query("source", e));
    }
    let since = time_param("since", params.since.as_deref())?;
    let until = time_param("until", params.until.as_deref())?;
    if let (Some(s), Some(u)) = (since, until) {
        if u <= s {
            return Err(ApiError::query("until", "must be after since"));
        }
    }
    let after = params.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::query("after", "must be a seq, 0 or more"));
    }
    let query = EventQuery {
        after,
        limit,
        resource_type: pattern.as_ref().and_then(|p| p.resource().map(str::to_owned)),
        event_type: pattern.as_ref().and_then(|p| p.event().map(str::to_owned)),
        source: params.source,
        since,
        until,
        ..EventQuery::default()
    };
    let events = state.store.list_events(caller.tenant.as_str(), &query).await?;
    let next_cursor = (events.len() as u32 >= limit).then(|| events.last().map(|e| e.seq)).flatten();
    Ok(AxumJson(EventPage { items: events.into_iter().map(EventView::of).collect(), next_cursor }))
}

/// What became of one event in one subscription.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionOutcome {
    pub subscription_id: Uuid,
    pub name: String,
    /// `webhook`, `sqs`, `rabbitmq`, `eventbridge` or `pull`.
    pub sink: String,
    /// A summary: a push subscription's newest job state (`pending`, `held`, `leased`,
    /// `succeeded`, `dead`, `cancelled`); for pull, `read` or `unread`; `none` when the
    /// subscription's filter wants the event but it never got it (it was created later, or was
    /// disabled when the event arrived: replay gives it).
    pub state: String,
    /// A push subscription's jobs for the event, oldest first, with their attempts.
    pub deliveries: Vec<DeliveryView>,
    /// A pull subscription's stream entries of the event.
    pub stream: Vec<StreamEntryView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StreamEntryView {
    /// Its position in the stream (the pull cursor's unit).
    pub position: i64,
    /// The stream's cursor is at or past it.
    pub read: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventDetail {
    pub event: EventView,
    /// Every subscription that has or wants the event.
    pub subscriptions: Vec<SubscriptionOutcome>,
}

#[utoipa::path(
    get, path = "/v1/events/{ce_id}", tag = "events", operation_id = "getEvent",
    params(("ce_id" = Uuid, Path, description = "The event's CloudEvents id")),
    responses(
        (status = 200, description = "The event and, per subscription, what became of it", body = EventDetail),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such event in this tenant's inbox", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn read(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(ce_id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let missing = || ApiError::not_found("no such event in this tenant's inbox");
    let ce_id = Uuid::parse_str(&ce_id).map_err(|_| missing())?;
    let tenant = caller.tenant.as_str();
    let event = state.store.event_by_ce_id(tenant, ce_id).await?.ok_or_else(missing)?;
    let jobs = state.store.jobs_for_event(tenant, event.seq).await?;
    let entries = state.store.stream_entries_for_event(tenant, event.seq).await?;
    let key = EventKey::new(&event.resource_type, &event.event_type).ok();
    // Each job's view, grouped by its subscription (views come in the jobs' order).
    let owners: Vec<Uuid> = jobs.iter().map(|j| j.subscription_id).collect();
    let mut by_subscription: std::collections::HashMap<Uuid, Vec<DeliveryView>> = std::collections::HashMap::new();
    for (owner, view) in owners.into_iter().zip(delivery_views(&state, tenant, jobs).await?) {
        by_subscription.entry(owner).or_default().push(view);
    }
    // The candidates: the subscriptions that have the event, and those holding a pattern that
    // matches its key (found by index); the full rule (origin, filters) is applied below.
    let mut holders: Vec<Uuid> =
        by_subscription.keys().copied().chain(entries.iter().map(|e| e.subscription_id)).collect();
    holders.sort_unstable();
    holders.dedup();
    let patterns = key.as_ref().map(hub_core::patterns_matching).map(Vec::from).unwrap_or_default();
    let candidates = state.store.subscriptions_for_event(tenant, &patterns, &holders).await?;
    let mut subscriptions = Vec::new();
    for sub in candidates {
        let deliveries = by_subscription.remove(&sub.id).unwrap_or_default();
        let stream: Vec<StreamEntryView> = entries
            .iter()
            .filter(|e| e.subscription_id == sub.id)
            .map(|e| StreamEntryView { position: e.position, read: e.read })
            .collect();
        let wanted = key.as_ref().is_some_and(|k| wants(&sub, k, &event));
        if deliveries.is_empty() && stream.is_empty() && !wanted {
            continue;
        }
        let state = match (sub.sink, deliveries.last(), stream.iter().any(|e| !e.read), stream.is_empty()) {
            (SinkKind::PULL, _, true, _) => "unread".to_owned(),
            (SinkKind::PULL, _, false, false) => "read".to_owned(),
            (_, Some(newest), _, _) => newest.state.clone(),
            _ => "none".to_owned(),
        };
        subscriptions.push(SubscriptionOutcome {
            subscription_id: sub.id,
            name: sub.name,
            sink: sub.sink.as_str().to_owned(),
            state,
            deliveries,
            stream,
        });
    }
    Ok(AxumJson(EventDetail { event: EventView::of(event), subscriptions }))
}

/// Whether the subscription's event types, origin and content filters want the event.
fn wants(sub: &SubscriptionRecord, key: &EventKey, event: &hub_store::StoredEvent) -> bool {
    let patterns: Vec<EventPattern> = sub.event_types.iter().filter_map(|p| EventPattern::parse(p).ok()).collect();
    hub_core::wants(&patterns, sub.origin.as_deref(), key, &event.source)
        && sub.compiled_filters().is_some_and(|f| event.passes(&f))
}
