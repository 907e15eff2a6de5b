//! Content filters at the edge: a subscription's `filters` validated (compiled once, refused with
//! a 422 naming the filter's path, such as `filters[1].sql`, and for CESQL the character and the
//! reason), their OpenAPI schema, and `POST /v1/filters/test`, which runs filters against a
//! structured CloudEvent and tells each one's result.

use axum::Json as AxumJson;
use axum::response::IntoResponse;
use hub_core::routing::{Filters, JsonEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::auth::TenantCaller;
use super::error::{ApiError, ErrorBody, Json};

/// `filters` as a request gives it: compiled to prove it valid, kept as written (`null` is none).
pub fn valid_filters(value: Option<Value>) -> Result<Value, ApiError> {
    let value = match value {
        None | Some(Value::Null) => return Ok(Value::Array(Vec::new())),
        Some(v) => v,
    };
    Filters::compile(&value).map_err(|e| ApiError::validation(&e.path, e.message))?;
    Ok(value)
}

pub mod schema {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};
    use serde_json::Value;
    use utoipa::ToSchema;

    /// One filter expression: an object naming exactly one dialect. Every filter of a
    /// subscription's list must match.
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[serde(untagged)]
    #[allow(dead_code)]
    pub enum Filter {
        Exact(ExactFilter),
        Prefix(PrefixFilter),
        Suffix(SuffixFilter),
        All(AllFilter),
        Any(AnyFilter),
        Not(NotFilter),
        Sql(SqlFilter),
        Data(DataFilter),
    }

    /// Every named attribute (lower-case CloudEvents name, extensions included) equals its value.
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[schema(example = json!({"exact": {"subject": "loan-7"}}))]
    #[allow(dead_code)]
    pub struct ExactFilter {
        pub exact: BTreeMap<String, String>,
    }

    /// Every named attribute starts with its value.
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[schema(example = json!({"prefix": {"type": "studio.lerian.lender."}}))]
    #[allow(dead_code)]
    pub struct PrefixFilter {
        pub prefix: BTreeMap<String, String>,
    }

    /// Every named attribute ends with its value.
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[schema(example = json!({"suffix": {"type": ".approved"}}))]
    #[allow(dead_code)]
    pub struct SuffixFilter {
        pub suffix: BTreeMap<String, String>,
    }

    /// Every nested filter matches.
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    pub struct AllFilter {
        #[schema(no_recursion, min_items = 1)]
        pub all: Vec<Filter>,
    }

    /// At least one nested filter matches.
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    pub struct AnyFilter {
        #[schema(no_recursion, min_items = 1)]
        pub any: Vec<Filter>,
    }

    /// The nested filter does not match.
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    pub struct NotFilter {
        #[schema(no_recursion)]
        pub not: Box<Filter>,
    }

    /// A CloudEvents SQL (CESQL v1) expression that must answer `true` without an error.
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[schema(example = json!({"sql": "subject LIKE 'loan-%' AND region IN ('br', 'mx')"}))]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    pub struct SqlFilter {
        #[schema(min_length = 1, max_length = 4096)]
        pub sql: String,
    }

    /// A content pattern over the JSON body (exact values, `prefix`, `suffix`, `anything-but`,
    /// `numeric`, `exists`, `equals-ignore-case`, `wildcard`, `$or`).
    #[derive(Debug, Deserialize, Serialize, ToSchema)]
    #[schema(example = json!({"data": {"amount": [{"numeric": [">", 1000]}], "currency": ["BRL", "USD"]}}))]
    #[allow(dead_code)]
    pub struct DataFilter {
        #[schema(value_type = Object)]
        pub data: Value,
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterTest {
    /// The filters to try, as a subscription would hold them.
    #[schema(value_type = Vec<schema::Filter>)]
    filters: Value,
    /// A structured CloudEvent: its members are the attributes, `data` the body.
    #[schema(value_type = Object, example = json!({"specversion": "1.0", "id": "0192a4e0-0000-7000-8000-000000000001", "source": "lender", "type": "studio.lerian.lender.loan_application.approved", "subject": "loan-7", "datacontenttype": "application/json", "data": {"amount": 1200}}))]
    event: serde_json::Map<String, Value>,
}

/// One filter's result.
#[derive(Debug, Serialize, ToSchema)]
pub struct FilterOutcome {
    pub matches: bool,
    /// Why it could not match as written: an evaluation error, a body that is not JSON, or
    /// `budget: …` when the evaluation used up `STREAMING_HUB_FILTER_BUDGET` (as at ingest).
    pub error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FilterTestResult {
    /// Whether every filter matches.
    pub matches: bool,
    /// Each filter's result, in order.
    pub results: Vec<FilterOutcome>,
}

#[utoipa::path(
    post, path = "/v1/filters/test", tag = "subscriptions", operation_id = "testFilters",
    request_body = FilterTest,
    responses(
        (status = 200, description = "Whether the event matches, with each filter's result", body = FilterTestResult),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 422, description = "A filter is invalid; the message names it (and, for CESQL, the character)", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn test(_caller: TenantCaller, Json(req): Json<FilterTest>) -> Result<impl IntoResponse, ApiError> {
    let filters = Filters::compile(&req.filters).map_err(|e| ApiError::validation(&e.path, e.message))?;
    // Evaluated as at ingest: within the filter budget (a filter past it answers the error
    // `budget`), and on a blocking thread, never on one that serves HTTP.
    let steps = hub_store::filter_budget();
    let explained = tokio::task::spawn_blocking(move || {
        let event = JsonEvent::new(&req.event);
        filters.explain_within(&event, steps)
    })
    .await
    .map_err(ApiError::internal)?;
    let results: Vec<FilterOutcome> =
        explained.into_iter().map(|r| FilterOutcome { matches: r.matches, error: r.error }).collect();
    Ok(AxumJson(FilterTestResult { matches: results.iter().all(|r| r.matches), results }))
}
