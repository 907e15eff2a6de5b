//! `GET /v1/subscriptions/{id}/stats`: a subscription's deliveries per minute over the last hour
//! or day — attempts delivered and failed, dead letters, deliveries skipped by a transform,
//! attempt latency p50 and p99, and the backlog — from the per-minute roll-up
//! (`crate::delivery::stats`).

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hub_core::delivery::stats::quantile;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::TenantCaller;
use super::error::{ApiError, ErrorBody, Query};
use super::subscriptions::load;
use crate::delivery::stats::minute_of;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StatsParams {
    /// `1h` (60 minutes, the default) or `24h` (1 440).
    #[param(pattern = "^(1h|24h)$")]
    window: Option<String>,
}

/// One minute of a subscription's deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub struct Bucket {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Attempts that delivered.
    pub delivered: i64,
    /// Attempts that failed (a dead letter's last attempt included).
    pub failed: i64,
    /// Jobs dead-lettered.
    pub dead: i64,
    /// Deliveries the subscription's transform skipped (not failed, not retried).
    pub skipped: i64,
    /// Attempt latency, estimated from fixed buckets; `null` without attempts.
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    /// Pending and held jobs as last sampled (once a minute) at or before this minute; `null`
    /// before the window's first sample.
    pub backlog: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatsPage {
    /// `1h` or `24h`.
    pub window: String,
    /// One per minute of the window, oldest first, the current minute last.
    pub buckets: Vec<Bucket>,
}

#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/stats", tag = "subscriptions", operation_id = "getSubscriptionStats",
    params(("id" = Uuid, Path, description = "Subscription id"), StatsParams),
    responses(
        (status = 200, description = "Per-minute deliveries, latency and backlog over the window", body = StatsPage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn read(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    Query(params): Query<StatsParams>,
) -> Result<impl IntoResponse, ApiError> {
    let (window, minutes) = match params.window.as_deref() {
        None | Some("1h") => ("1h", 60),
        Some("24h") => ("24h", 1440),
        Some(_) => return Err(ApiError::query("window", "must be 1h or 24h")),
    };
    let sub = load(&state, &caller, &id).await?;
    let now = minute_of(state.clock.now());
    let since = now - chrono::Duration::minutes(minutes - 1);
    let stored = state.store.minutes(caller.tenant.as_str(), sub.id, since).await?;
    let mut stored = stored.into_iter().peekable();
    // A minute without a sample of its own shows the last one before it.
    let mut last: Option<i64> = None;
    let buckets = (0..minutes)
        .map(|i| {
            let minute = since + chrono::Duration::minutes(i);
            match stored.next_if(|m| m.minute == minute) {
                Some(m) => {
                    last = m.backlog.or(last);
                    Bucket {
                        minute,
                        delivered: m.delivered,
                        failed: m.failed,
                        dead: m.dead,
                        skipped: m.skipped,
                        latency_p50_ms: quantile(&m.latency, 0.5),
                        latency_p99_ms: quantile(&m.latency, 0.99),
                        backlog: last,
                    }
                }
                None => Bucket {
                    minute,
                    delivered: 0,
                    failed: 0,
                    dead: 0,
                    skipped: 0,
                    latency_p50_ms: None,
                    latency_p99_ms: None,
                    backlog: last,
                },
            }
        })
        .collect();
    Ok(AxumJson(StatsPage { window: window.to_owned(), buckets }))
}
