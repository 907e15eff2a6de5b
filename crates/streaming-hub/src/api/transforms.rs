//! `POST /v1/transforms/test` (SPEC §10, "Transformations"): a transform tried on an event, in the
//! same worker processes and within the same budget a delivery gets (`hub-transform`'s pool, the
//! tenants taken in turn), never in the hub's process. Nothing is stored or sent. Each try gets a
//! runtime of its own, dropped after it; a try whose client hangs up before its turn is not run.

use axum::Json as AxumJson;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use hub_store::StoredEvent;

use super::AppState;
use super::auth::TenantCaller;
use super::error::{ApiError, ErrorBody, Json};
use crate::delivery::transform::Given;

/// A transform: its language and code.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Transform {
    /// `javascript`.
    #[schema(example = "javascript")]
    pub language: String,
    /// Defines `function handler(event)`, which returns the event changed, or `null` to skip
    /// it; at most 64 KiB.
    #[schema(
        example = "function handler(event) { event.data = {amount: event.data.amount}; return event; }",
        max_length = 65536
    )]
    pub code: String,
}

impl Transform {
    /// A 422 naming `<field>.language` unless it is `javascript`.
    fn language_is_known(&self, field: &str) -> Result<(), ApiError> {
        if self.language == "javascript" {
            Ok(())
        } else {
            Err(ApiError::validation(&format!("{field}.language"), "must be javascript"))
        }
    }
}

fn code_refused(field: &str, e: hub_transform::CompileError) -> ApiError {
    ApiError::validation(&format!("{field}.code"), e)
}

/// A subscription's `transform` as a request gives it (`null`: none), checked to compile in the
/// sandbox (its top level runs once, within the budget, as a try does): what is stored.
pub async fn valid_transform(
    state: &AppState,
    tenant: &str,
    value: Option<&Value>,
    sink: hub_core::SinkKind,
) -> Result<Option<Value>, ApiError> {
    let transform = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(v @ Value::Object(_)) => serde_json::from_value::<Transform>(v.clone()).map_err(|e| {
            ApiError::validation("transform", format!("must be {{\"language\": \"javascript\", \"code\"}}: {e}"))
        })?,
        Some(_) => return Err(ApiError::validation("transform", "must be an object or null")),
    };
    if !sink.is_push() {
        return Err(ApiError::validation("transform", "only push subscriptions take a transform"));
    }
    transform.language_is_known("transform")?;
    state.delivery.transforms.check(tenant, transform.code.clone()).await.map_err(|e| code_refused("transform", e))?;
    Ok(Some(serde_json::json!({"language": transform.language, "code": transform.code})))
}

/// A transform and the event to try it on: one given whole (`event`), or one of the caller's
/// stored events (`event_id`), shown as a delivery to `subscription_id` would show it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformTest {
    pub transform: Transform,
    /// What the handler gets: `{"type", "source", "subject", "id", "time", "extensions", "data",
    /// "headers", "path"}` (any object is taken as it is). Give this or `event_id`.
    #[schema(value_type = Option<Object>, example = json!({"type": "payment.settled", "source": "//lender", "id": "01890a5d-ac96-774b-bcce-b302099a8057", "time": "2026-12-05T12:00:00Z", "extensions": {}, "data": {"amount": 100}, "headers": {}, "path": ""}))]
    pub event: Option<Value>,
    /// The `ce-id` of an event in the caller's inbox, given to the handler as a delivery gives it.
    pub event_id: Option<uuid::Uuid>,
    /// With `event_id` or `latest`: the subscription whose sink's headers the handler is shown.
    pub subscription_id: Option<uuid::Uuid>,
    /// With `subscription_id`: the latest event in the caller's inbox of the subscription's event
    /// types (and origin), in place of `event` or `event_id`.
    #[serde(default)]
    pub latest: bool,
}

/// The newest event of `sub`'s types (and origin) in the tenant's inbox.
async fn latest_of(state: &AppState, sub: &hub_store::SubscriptionRecord) -> Result<Option<StoredEvent>, ApiError> {
    let mut newest: Option<StoredEvent> = None;
    for pattern in &sub.event_types {
        let Ok(pattern) = hub_core::EventPattern::parse(pattern) else { continue };
        let query = hub_store::EventQuery {
            limit: 1,
            newest_first: true,
            resource_type: pattern.resource().map(str::to_owned),
            event_type: pattern.event().map(str::to_owned),
            source: sub.origin.clone(),
            ..hub_store::EventQuery::default()
        };
        if let Some(e) = state.store.list_events(&sub.tenant_id, &query).await?.pop()
            && newest.as_ref().is_none_or(|n| e.seq > n.seq)
        {
            newest = Some(e);
        }
    }
    Ok(newest)
}

/// The event a try runs on: given whole, or a stored one as its delivery would show it.
async fn event_of(
    state: &AppState,
    caller: &TenantCaller,
    req: &TransformTest,
) -> Result<(hub_transform::Input, Given<'static>), ApiError> {
    let tenant = caller.tenant.as_str();
    let sub = match req.subscription_id {
        None => None,
        Some(_) if req.event.is_some() => {
            return Err(ApiError::validation("subscription_id", "goes with event_id or latest, not with event"));
        }
        Some(id) => match state.store.subscription(tenant, id).await? {
            Some(sub) => Some(sub),
            None => return Err(ApiError::validation("subscription_id", "no such subscription")),
        },
    };
    let event = match (&req.event, req.event_id, req.latest, &sub) {
        (Some(event), None, false, _) if event.is_object() => {
            return Ok((hub_transform::Input::from(event), Given::object(event)));
        }
        (Some(_), None, false, _) => return Err(ApiError::validation("event", "must be an object")),
        (None, Some(id), false, _) => match state.store.event_by_ce_id(tenant, id).await? {
            Some(event) => event,
            None => return Err(ApiError::validation("event_id", "no event with this id is in your inbox")),
        },
        (None, None, true, Some(sub)) => match latest_of(state, sub).await? {
            Some(event) => event,
            None => {
                return Err(ApiError::validation("latest", "no event of this subscription's types is in your inbox"));
            }
        },
        (None, None, true, None) => return Err(ApiError::validation("latest", "needs subscription_id")),
        _ => return Err(ApiError::validation("event", "give one of event, event_id or latest")),
    };
    let headers = match &sub {
        None => Vec::new(),
        Some(sub) => {
            let destination =
                crate::delivery::targets::destination(sub).map_err(|e| ApiError::validation("subscription_id", e))?;
            let key = match sub.ordering {
                hub_core::Ordering::Key => hub_core::routing::ordering_key(&event),
                hub_core::Ordering::None => None,
            };
            let message = crate::delivery::targets::message(&event, sub, key.as_deref(), 1, uuid::Uuid::now_v7());
            state.delivery.sinks.headers(&destination, &message)
        }
    };
    let input = crate::delivery::transform::input(&event, &headers);
    Ok((input, Given::stored(&event, &headers).into_owned()))
}

/// What the handler gave: `output` (the event, or `null` when it skips), or `error`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TransformResult {
    /// The event as the handler returned it; `null` when it skips the delivery. Absent on error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Box<serde_json::value::RawValue>>,
    /// Why there is no output: a throw, the CPU budget, the memory limit, or an answer a delivery
    /// would refuse (not an event, a protected header changed, a path with dot segments, nesting
    /// past 64 levels), named as the delivery's attempt would name it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What it wrote with `console.log`, at most 50 lines of 1 KiB.
    pub logs: Vec<String>,
    pub duration_us: u64,
}

#[utoipa::path(
    post, path = "/v1/transforms/test", tag = "subscriptions", operation_id = "testTransform",
    request_body = TransformTest,
    responses(
        (status = 200, description = "The handler's output or error, its logs and how long it ran", body = TransformResult),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 422, description = "The language is not javascript, the code does not compile (the engine's message and position) or defines no handler, the event is not an object, or no such stored event or subscription", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn test(
    State(state): State<AppState>,
    caller: TenantCaller,
    Json(req): Json<TransformTest>,
) -> Result<AxumJson<TransformResult>, ApiError> {
    req.transform.language_is_known("transform")?;
    let (event, original) = event_of(&state, &caller, &req).await?;
    let run = state.delivery.transforms.run_once(caller.tenant.as_str(), req.transform.code, event).await;
    let (output, error) = match run.output {
        // Judged as a delivery judges it: an answer a delivery would refuse is the error.
        Ok(hub_transform::Output::Event(e)) => match crate::delivery::transform::shape(&e, &original) {
            // The answer as the handler wrote it, its keys in its order.
            Ok(_) => {
                (Some(serde_json::value::RawValue::from_string(e.text().to_owned()).map_err(ApiError::internal)?), None)
            }
            Err(refused) => (None, Some(refused)),
        },
        Ok(hub_transform::Output::Skip) => {
            (Some(serde_json::value::RawValue::from_string("null".to_owned()).map_err(ApiError::internal)?), None)
        }
        Err(hub_transform::Failure::Compile(e)) => return Err(code_refused("transform", e)),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(AxumJson(TransformResult {
        output,
        error,
        logs: run.logs,
        duration_us: u64::try_from(run.duration.as_micros()).unwrap_or(u64::MAX),
    }))
}
