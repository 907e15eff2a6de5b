//! `GET /v1/event-types` and `GET /admin/event-types`: the event catalog — the types producers
//! declare in their manifests and the types seen in inboxes, a tenant seeing only its own
//! inbox's (SPEC §9).

use axum::extract::State;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hub_core::catalog::{DataSchema, EventClass};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{Admin, TenantCaller};
use super::error::{ApiError, ErrorBody, Query};
use crate::catalog::{EventType, SourceState};

/// One event type: what its producers declare and what was seen of it.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventTypeView {
    /// `<resourcetype>.<eventtype>`, what a subscription's `event_types` names.
    #[serde(rename = "type")]
    pub key: String,
    pub resource_type: String,
    pub event_type: String,
    /// Whether a producer's manifest declares it.
    pub declared: bool,
    /// Whether an inbox (the caller's, for a tenant) has received it.
    pub seen: bool,
    /// The first description a manifest gives.
    pub description: Option<String>,
    /// `fact` or `command`, as declared.
    #[schema(value_type = Option<String>, example = "fact")]
    pub class: Option<EventClass>,
    /// The producers (`ce-source`) that declare or sent it.
    pub sources: Vec<String>,
    /// When it was first and last received, and how many were (none when never seen).
    pub first_seen: Option<DateTime<Utc>>,
    pub last_seen: Option<DateTime<Utc>>,
    pub events: i64,
    /// Tenants whose inboxes hold it (admin view only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenants: Option<usize>,
    /// Each source and schema version: declared, seen, or both.
    pub versions: Vec<VersionView>,
}

/// One source and schema version of an event type.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionView {
    pub source: String,
    /// `null`: the declaration names none (it covers every version).
    pub schema_version: Option<String>,
    pub declared: bool,
    /// The producer's service, from its manifest.
    pub service_name: Option<String>,
    pub data_content_type: Option<String>,
    /// A URI, or the schema itself when the manifest carries it inline.
    #[schema(value_type = Option<Object>)]
    pub data_schema: Option<DataSchema>,
    /// A platform event without a tenant: never delivered.
    pub system_event: bool,
    pub first_seen: Option<DateTime<Utc>>,
    pub last_seen: Option<DateTime<Utc>>,
    pub events: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventTypeList {
    pub items: Vec<EventTypeView>,
}

/// A manifest source and how its last fetch went.
#[derive(Debug, Serialize, ToSchema)]
pub struct ManifestSourceView {
    /// The configured URL or `file:` path.
    pub location: String,
    /// The producer it describes (from its last good manifest).
    pub source: Option<String>,
    pub service_name: Option<String>,
    /// Events its last good manifest declares.
    pub events: usize,
    /// When its last good manifest was fetched.
    pub fetched_at: Option<DateTime<Utc>>,
    /// When it was last tried.
    pub checked_at: DateTime<Utc>,
    /// Why the last try failed (the last good manifest is still used); `null` when it worked.
    pub error: Option<String>,
    /// Declared payload schemas that cannot be used: `{"field", "message"}` each.
    #[schema(value_type = Vec<Object>)]
    pub problems: Vec<serde_json::Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AdminEventTypeList {
    pub items: Vec<EventTypeView>,
    pub manifests: Vec<ManifestSourceView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TypeParams {
    /// Only types this event-type pattern matches (`account.*`).
    #[param(
        pattern = r"^(\*|[A-Za-z0-9][A-Za-z0-9_-]{0,127})\.(\*|[A-Za-z0-9][A-Za-z0-9_-]{0,127})$",
        example = "account.*"
    )]
    pattern: Option<String>,
    /// Only types from this producer (`ce-source`).
    #[param(min_length = 1, max_length = 223)]
    source: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AdminTypeParams {
    /// Only types this event-type pattern matches (`account.*`).
    #[param(
        pattern = r"^(\*|[A-Za-z0-9][A-Za-z0-9_-]{0,127})\.(\*|[A-Za-z0-9][A-Za-z0-9_-]{0,127})$",
        example = "account.*"
    )]
    pattern: Option<String>,
    /// Only types from this producer (`ce-source`).
    #[param(min_length = 1, max_length = 223)]
    source: Option<String>,
    /// Seen types of this tenant only.
    #[param(min_length = 1, max_length = 256)]
    tenant: Option<String>,
}

#[utoipa::path(
    get, path = "/v1/event-types", tag = "subscriptions", operation_id = "listEventTypes",
    params(TypeParams),
    responses(
        (status = 200, description = "Types producers declare and types this tenant's inbox received, by type", body = EventTypeList),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: TenantCaller,
    Query(params): Query<TypeParams>,
) -> Result<impl IntoResponse, ApiError> {
    let keep = Keep::new(params.pattern.as_deref(), params.source)?;
    let types = state.catalog.types_for(Some(caller.tenant.as_str())).await?;
    let items = types.iter().filter(|t| keep.keeps(t)).map(|t| view(t, false)).collect();
    Ok(axum::Json(EventTypeList { items }))
}

#[utoipa::path(
    get, path = "/admin/event-types", tag = "admin", operation_id = "listAllEventTypes",
    params(AdminTypeParams),
    responses(
        (status = 200, description = "Every declared type and every type seen in any inbox, with the manifest sources and their state", body = AdminEventTypeList),
        (status = 400, description = "Invalid query parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not the admin token", body = ErrorBody),
    ),
    security(("admin_token" = []))
)]
pub async fn list_all(
    State(state): State<AppState>,
    _: Admin,
    Query(params): Query<AdminTypeParams>,
) -> Result<impl IntoResponse, ApiError> {
    let keep = Keep::new(params.pattern.as_deref(), params.source)?;
    super::overview::tenant_filter(params.tenant.as_deref())?;
    let types = state.catalog.types_for(params.tenant.as_deref()).await?;
    let items = types.iter().filter(|t| keep.keeps(t)).map(|t| view(t, true)).collect();
    let manifests = state.catalog.snapshot().sources.iter().map(source_view).collect();
    Ok(axum::Json(AdminEventTypeList { items, manifests }))
}

/// The listing's filters.
struct Keep {
    pattern: Option<hub_core::EventPattern>,
    source: Option<String>,
}

impl Keep {
    fn new(pattern: Option<&str>, source: Option<String>) -> Result<Self, ApiError> {
        let pattern = pattern
            .map(|p| hub_core::EventPattern::parse(p).map_err(|e| ApiError::query("pattern", e.to_string())))
            .transpose()?;
        if source.as_deref().is_some_and(|s| s.is_empty() || s.chars().count() > hub_core::Source::MAX_LEN) {
            return Err(ApiError::query("source", format!("must be 1 to {} characters", hub_core::Source::MAX_LEN)));
        }
        Ok(Self { pattern, source })
    }

    fn keeps(&self, t: &EventType) -> bool {
        self.pattern.as_ref().is_none_or(|p| hub_core::EventKey::parse(&t.key).is_ok_and(|k| p.matches(&k)))
            && self.source.as_ref().is_none_or(|s| t.sources.contains(s))
    }
}

fn view(t: &EventType, admin: bool) -> EventTypeView {
    let (resource_type, event_type) = t.key.split_once('.').unwrap_or((t.key.as_str(), ""));
    let mut versions: Vec<VersionView> = t
        .declared
        .iter()
        .map(|d| VersionView {
            source: d.source.clone(),
            schema_version: d.event.schema_version.clone(),
            declared: true,
            service_name: d.service_name.clone(),
            data_content_type: d.event.data_content_type.clone(),
            data_schema: d.event.data_schema.clone(),
            system_event: d.event.system_event,
            first_seen: None,
            last_seen: None,
            events: 0,
        })
        .collect();
    for s in &t.seen {
        let at = versions
            .iter()
            .position(|v| v.source == s.source && v.schema_version.as_deref() == Some(s.schema_version.as_str()));
        let v = match at {
            Some(i) => &mut versions[i],
            None => {
                versions.push(VersionView {
                    source: s.source.clone(),
                    schema_version: Some(s.schema_version.clone()),
                    declared: false,
                    service_name: None,
                    data_content_type: None,
                    data_schema: None,
                    system_event: false,
                    first_seen: None,
                    last_seen: None,
                    events: 0,
                });
                versions.last_mut().expect("just pushed")
            }
        };
        v.first_seen = v.first_seen.map_or(Some(s.first_seen), |f| Some(f.min(s.first_seen)));
        v.last_seen = v.last_seen.map_or(Some(s.last_seen), |l| Some(l.max(s.last_seen)));
        v.events += s.events;
    }
    versions.sort_by(|a, b| (&a.source, &a.schema_version).cmp(&(&b.source, &b.schema_version)));
    let tenants: std::collections::BTreeSet<&str> = t.seen.iter().map(|s| s.tenant_id.as_str()).collect();
    EventTypeView {
        resource_type: resource_type.to_owned(),
        event_type: event_type.to_owned(),
        declared: !t.declared.is_empty(),
        seen: !t.seen.is_empty(),
        description: t.declared.iter().find_map(|d| d.event.description.clone()),
        class: t.declared.iter().find_map(|d| d.event.class),
        sources: t.sources.iter().cloned().collect(),
        first_seen: t.seen.iter().map(|s| s.first_seen).min(),
        last_seen: t.seen.iter().map(|s| s.last_seen).max(),
        events: t.seen.iter().map(|s| s.events).sum(),
        tenants: admin.then_some(tenants.len()),
        versions,
        key: t.key.clone(),
    }
}

fn source_view(s: &SourceState) -> ManifestSourceView {
    ManifestSourceView {
        location: s.record.location.clone(),
        source: s.source.clone(),
        service_name: s.service_name.clone(),
        events: s.events,
        fetched_at: s.record.fetched_at,
        checked_at: s.record.checked_at,
        error: s.record.error.clone(),
        problems: s.record.problems.clone(),
    }
}
