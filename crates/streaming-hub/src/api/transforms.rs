//! `POST /v1/transforms/test` (SPEC §10, "Transformations"): a transform tried on an event, in the
//! same sandbox and within the same budget a delivery gets (`hub-transform`), on a blocking
//! thread, never one that serves HTTP. Nothing is stored or sent. Each try gets a runtime of its
//! own, dropped after it, and a replica runs [`AT_ONCE`] at a time (the others wait their turn):
//! each may hold up to `STREAMING_HUB_TRANSFORM_MEMORY`, so their number bounds what tenants'
//! tries can take of the hub's memory.

use axum::Json as AxumJson;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::auth::TenantCaller;
use super::error::{ApiError, ErrorBody, Json};

/// Tries one replica runs at once.
pub const AT_ONCE: usize = 4;

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

/// A transform and the event to try it on.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformTest {
    pub transform: Transform,
    /// What the handler gets: `{"type", "source", "subject", "id", "time", "extensions", "data",
    /// "headers", "path"}` (any object is taken as it is).
    #[schema(value_type = Object, example = json!({"type": "payment.settled", "source": "//lender", "id": "01890a5d-ac96-774b-bcce-b302099a8057", "time": "2026-12-05T12:00:00Z", "extensions": {}, "data": {"amount": 100}, "headers": {}, "path": ""}))]
    pub event: Value,
}

/// What the handler gave: `output` (the event, or `null` when it skips), or `error`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TransformResult {
    /// The event as the handler returned it; `null` when it skips the delivery. Absent on error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    /// Why there is no output: a throw, the CPU budget, the memory limit, or an answer that is not
    /// an event.
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
        (status = 422, description = "The language is not javascript, the code does not compile (the engine's message and position) or defines no handler, or the event is not an object", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn test(
    State(state): State<AppState>,
    _caller: TenantCaller,
    Json(req): Json<TransformTest>,
) -> Result<AxumJson<TransformResult>, ApiError> {
    let limits = state.transform_limits;
    if !req.event.is_object() {
        return Err(ApiError::validation("event", "must be an object"));
    }
    req.transform.language_is_known("transform")?;
    let _turn = state.transform_tests.acquire().await.map_err(ApiError::internal)?;
    let TransformTest { transform, event } = req;
    let run = tokio::task::spawn_blocking(move || hub_transform::run_once(&transform.code, &event, &limits))
        .await
        .map_err(ApiError::internal)?;
    let (output, error) = match run.output {
        Ok(hub_transform::Output::Event(e)) => (Some(e), None),
        Ok(hub_transform::Output::Skip) => (Some(Value::Null), None),
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
