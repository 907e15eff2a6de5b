//! `GET /v1/subscriptions/{id}/events`: the pull API (SPEC §4).
//!
//! Reading is the acknowledgement: a page moves the subscription's durable cursor to the highest
//! seq it returned. Reads are rate limited per tenant (a token bucket per process).

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use base64::Engine;
use hub_core::SinkKind;
use hub_core::envelope::is_json_media_type;
use hub_core::pull;
use hub_store::{PullRead, PulledEvent};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::AppState;
use super::auth::TenantCaller;
use super::error::{ApiError, ErrorBody, Query, page_limit};
use crate::telemetry::metric;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PullParams {
    /// Read events with a seq above this one (default: the subscription's cursor). Greater than
    /// the cursor skips everything up to it for good; smaller reads an older page without
    /// rewinding; beyond the tenant's newest seq it is refused (400) and nothing moves.
    #[param(minimum = 0)]
    after: Option<i64>,
    /// 1 to 1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// One pulled event.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullItem {
    /// The item's position in this subscription's stream: what `after` and the cursor count in.
    /// For an event matched at ingest it is the event's seq; an event given again by a replay is
    /// appended at a later position (see `eventSeq`).
    pub seq: i64,
    /// The event's seq in the tenant's inbox (`GET /v1/events`).
    pub event_seq: i64,
    /// The CloudEvents id: dedup by it.
    pub ce_id: uuid::Uuid,
    /// The event key `<resourcetype>.<eventtype>`.
    #[serde(rename = "type")]
    pub event_type: String,
    pub source: String,
    pub time: String,
    pub schema_version: String,
    pub subject: Option<String>,
    pub data_content_type: String,
    /// The event body: JSON as received, or a string (base64 when `payloadEncoding` says so).
    #[schema(value_type = Value)]
    pub payload: Box<RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_encoding: Option<&'static str>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PullPage {
    pub items: Vec<PullItem>,
    /// The highest seq of a full page; null on a short page.
    pub next_cursor: Option<i64>,
}

/// A stored event as a pull item. Total: a body that cannot be shown as what its content type
/// says (JSON that is not, from before bodies were checked throughout) is shown as a string, or
/// base64 when it is not UTF-8, so no stored event can make a page fail.
fn item(PulledEvent { position, event }: PulledEvent) -> PullItem {
    let content_type = event.data_content_type.clone().unwrap_or_else(|| "application/json".to_owned());
    let (payload, encoding) = render_payload(&content_type, event.payload);
    PullItem {
        seq: position,
        event_seq: event.seq,
        ce_id: event.ce_id,
        event_type: format!("{}.{}", event.resource_type, event.event_type),
        source: event.source,
        time: event.event_time,
        schema_version: event.schema_version,
        subject: event.subject,
        data_content_type: content_type,
        payload,
        payload_encoding: encoding,
    }
}

/// The payload as JSON (a JSON body as it is, anything else as a JSON string) and its encoding.
pub(crate) fn render_payload(content_type: &str, payload: Vec<u8>) -> (Box<RawValue>, Option<&'static str>) {
    let (text, encoding) = match String::from_utf8(payload) {
        Ok(text) if is_json_media_type(content_type) => match serde_json::from_str::<Box<RawValue>>(&text) {
            Ok(json) => return (json, None),
            Err(_) => (text, None),
        },
        Ok(text) => (text, None),
        Err(e) => (base64::engine::general_purpose::STANDARD.encode(e.into_bytes()), Some("base64")),
    };
    // A JSON string is always valid JSON; the default (null) is never reached.
    (serde_json::value::to_raw_value(&text).unwrap_or_default(), encoding)
}

#[utoipa::path(
    get, path = "/v1/subscriptions/{id}/events", tag = "pull", operation_id = "pullEvents",
    params(("id" = Uuid, Path, description = "Subscription id"), PullParams),
    responses(
        (status = 200, description = "A page in ascending seq; returning it acknowledges it", body = PullPage),
        (status = 400, description = "Invalid query parameter, or `after` beyond the newest event (nothing moves)", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 409, description = "Not a pull subscription", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn read(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    Query(params): Query<PullParams>,
) -> Result<impl IntoResponse, ApiError> {
    if let Err(wait) = state.limiters.pull.check(&caller.tenant) {
        metrics::counter!(metric::PULL_READS, "outcome" => "rate_limited").increment(1);
        return Err(super::limiter::rate_limited(wait, "too many pull reads; retry later"));
    }
    let limit = page_limit(params.limit)?;
    if let Some(after) = params.after {
        if after < 0 {
            return Err(ApiError::query("after", "must be a seq, 0 or more"));
        }
    }
    let sub = super::subscriptions::load(&state, &caller, &id).await?;
    if sub.sink != SinkKind::PULL {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_pull_subscription",
            format!("this subscription delivers to {}; only pull subscriptions are read here", sub.sink),
        ));
    }
    let tenant = caller.tenant.as_str();
    // One transaction per read, holding the subscription's row: concurrent readers (on any
    // replica) each get their own page.
    let events = match state.store.read_pull_page(tenant, sub.id, params.after, limit).await? {
        PullRead::Page { events, .. } => events,
        PullRead::NoSubscription => return Err(super::subscriptions::not_found()),
        PullRead::AfterBeyondNewest { newest } => {
            return Err(ApiError::query(
                "after",
                format!("is beyond the newest event ({newest}); nothing was read and the cursor did not move"),
            ));
        }
    };
    let highest = events.last().map(|e| e.position);
    let returned = events.len();
    let items: Vec<PullItem> = events.into_iter().map(item).collect();
    let next_cursor = pull::next_cursor(returned, limit, highest);
    metrics::counter!(metric::PULL_READS, "outcome" => "served").increment(1);
    metrics::counter!(metric::PULL_EVENTS).increment(returned as u64);
    Ok(AxumJson(PullPage { items, next_cursor }))
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use proptest::prelude::*;

    use super::render_payload;

    fn content_type() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("application/json".to_owned()),
            Just("application/cloudevents+json; charset=utf-8".to_owned()),
            Just("text/plain".to_owned()),
            Just("application/octet-stream".to_owned()),
            "\\PC{0,30}",
        ]
    }

    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            any::<String>().prop_map(String::into_bytes),
            any::<i64>().prop_map(|n| format!("{{\"n\": {n}, \"s\": [1, 2]}}").into_bytes()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Whatever a producer stored, its page renders: the item is valid JSON that gives the
        /// body back byte for byte (as JSON kept as it was, as a string, or as base64).
        #[test]
        fn any_stored_body_renders_and_round_trips(ct in content_type(), payload in body()) {
            let (raw, encoding) = render_payload(&ct, payload.clone());
            let value: serde_json::Value = serde_json::from_str(raw.get()).expect("valid JSON");
            // A reader knows the content type: a JSON type whose body is JSON comes as it was;
            // other text as a string; anything else as base64.
            let kept_as_json = hub_core::envelope::is_json_media_type(&ct)
                && std::str::from_utf8(&payload).is_ok_and(|t| serde_json::from_str::<serde_json::Value>(t).is_ok());
            let back = match (encoding, &value) {
                (Some("base64"), serde_json::Value::String(s)) => {
                    base64::engine::general_purpose::STANDARD.decode(s).expect("base64")
                }
                _ if kept_as_json => raw.get().as_bytes().to_vec(),
                (None, serde_json::Value::String(s)) => s.clone().into_bytes(),
                other => panic!("unexpected rendering {other:?} of {payload:?}"),
            };
            prop_assert_eq!(back, payload);
        }
    }
}
