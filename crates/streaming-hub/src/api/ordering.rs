//! `GET /v1/subscriptions/{id}/ordering`: a subscription ordered by key (SPEC §9) and the keys
//! whose deliveries wait behind an earlier one — the oldest waiting first, each with its head
//! delivery (the one being attempted or retried, with its attempts), so a tenant sees which key is
//! stuck and why.

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::auth::TenantCaller;
use super::delivery::{DeliveryView, delivery_views};
use super::error::{ApiError, ErrorBody, Query, page_limit};
use super::subscriptions::load;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrderingParams {
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// An ordering key with deliveries waiting behind its head.
#[derive(Debug, Serialize, ToSchema)]
pub struct BlockedKeyView {
    pub key: String,
    /// Deliveries of this key waiting behind the head.
    pub waiting: i64,
    /// The earliest delivery of the key not yet settled: the next waits until it is delivered or
    /// dead-lettered.
    pub head: DeliveryView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OrderingView {
    /// `none` or `key`.
    pub ordering: &'static str,
    pub blocked_keys: Vec<BlockedKeyView>,
}

#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/ordering", tag = "subscriptions", operation_id = "getOrdering",
    params(("id" = Uuid, Path, description = "Subscription id"), OrderingParams),
    responses(
        (status = 200, description = "Its ordering and the keys waiting behind an earlier delivery, oldest first", body = OrderingView),
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
    Query(params): Query<OrderingParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(params.limit)?;
    let sub = load(&state, &caller, &id).await?;
    let tenant = caller.tenant.as_str();
    let blocked = state.store.blocked_keys(tenant, sub.id, limit).await?;
    let heads = delivery_views(&state, tenant, blocked.iter().map(|b| b.head.clone()).collect()).await?;
    let blocked_keys = blocked
        .into_iter()
        .zip(heads)
        .map(|(b, head)| BlockedKeyView { key: b.key, waiting: b.waiting, head })
        .collect();
    Ok(AxumJson(OrderingView { ordering: sub.ordering.as_str(), blocked_keys }))
}
