//! `/admin/tenants` and `/admin/subscriptions`: the operator's read-only listings across
//! tenants (the console's first views). Admin token only.

use axum::extract::State;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::AppState;
use super::auth::Admin;
use super::error::{ApiError, ErrorBody, Query, cursor, next_cursor, page_limit};
use super::subscriptions::{JobCounts, SubscriptionView, with_health};

/// A tenant with its counts.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantView {
    pub tenant_id: String,
    /// False for an id stored before tenant ids had a grammar (`^[A-Za-z0-9][A-Za-z0-9._-]*$`,
    /// no `..`): its keys keep working, but no new key, session or event can name it; move its
    /// subscriptions to a tenant id that follows the grammar (docs/OPERATIONS.md).
    pub id_follows_grammar: bool,
    /// Events in its inbox.
    pub events: i64,
    pub subscriptions: i64,
    /// API keys not revoked.
    pub api_keys: i64,
    pub jobs: JobCounts,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    pub items: Vec<TenantView>,
}

#[utoipa::path(
    get, path = "/admin/tenants", tag = "admin", operation_id = "listTenants",
    responses(
        (status = 200, description = "Every tenant the hub knows (by events, subscriptions or API keys), by id", body = TenantList),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn tenants(State(state): State<AppState>, _: Admin) -> Result<impl IntoResponse, ApiError> {
    let items = state
        .store
        .tenants()
        .await?
        .into_iter()
        .map(|t| {
            let mut jobs = JobCounts::default();
            for (s, n) in t.jobs {
                jobs.add(s, n);
            }
            TenantView {
                id_follows_grammar: hub_core::TenantId::parse(&t.tenant_id).is_ok(),
                tenant_id: t.tenant_id,
                events: t.events,
                subscriptions: t.subscriptions,
                api_keys: t.api_keys,
                jobs,
            }
        })
        .collect();
    Ok(axum::Json(TenantList { items }))
}

/// An admin listing's `tenant` filter: empty or longer than any tenant id is refused; any other
/// text is looked up (one that is no tenant's finds nothing).
pub fn tenant_filter(tenant: Option<&str>) -> Result<(), ApiError> {
    match tenant {
        Some(t) if t.is_empty() || t.chars().count() > hub_core::TenantId::MAX_LEN => {
            Err(ApiError::query("tenant", format!("must be 1 to {} characters", hub_core::TenantId::MAX_LEN)))
        }
        _ => Ok(()),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SubscriptionParams {
    /// Only this tenant's.
    #[param(min_length = 1, max_length = 256)]
    tenant: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(format = Uuid)]
    cursor: Option<String>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// A subscription with its tenant.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantSubscription {
    pub tenant_id: String,
    #[serde(flatten)]
    pub subscription: SubscriptionView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantSubscriptionPage {
    pub items: Vec<TenantSubscription>,
    pub next_cursor: Option<String>,
}

#[utoipa::path(
    get, path = "/admin/subscriptions", tag = "admin", operation_id = "listAllSubscriptions",
    params(SubscriptionParams),
    responses(
        (status = 200, description = "Subscriptions of every tenant (or one), by id, with their health", body = TenantSubscriptionPage),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn subscriptions(
    State(state): State<AppState>,
    _: Admin,
    Query(params): Query<SubscriptionParams>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = page_limit(params.limit)?;
    let after: Option<Uuid> = cursor(params.cursor)?;
    // A filter: empty or longer than any tenant id is refused; any other text is looked up (one
    // that is no tenant's has no subscriptions).
    tenant_filter(params.tenant.as_deref())?;
    let subs = state.store.list_all_subscriptions(params.tenant.as_deref(), after, limit).await?;
    let next_cursor = next_cursor(&subs, limit, |s| s.id);
    let views = with_health(&state, &subs).await?;
    let items = subs
        .iter()
        .zip(views)
        .map(|(s, subscription)| TenantSubscription { tenant_id: s.tenant_id.clone(), subscription })
        .collect();
    Ok(axum::Json(TenantSubscriptionPage { items, next_cursor }))
}
