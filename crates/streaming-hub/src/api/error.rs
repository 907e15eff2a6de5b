//! The one error type of the HTTP edge, and extractors whose rejections use it.
//!
//! Every error body is `{"code": <status>, "title": "<snake_case>", "message": "<text>"}`.
//! Internal errors are logged with their cause and answered as an opaque 500.

use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// An error answered to the caller.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub title: &'static str,
    pub message: String,
    /// Seconds, for 429 answers.
    pub retry_after: Option<u64>,
}

/// The body of every error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The HTTP status.
    pub code: u16,
    /// A stable snake_case identifier, e.g. `validation_failed`.
    pub title: String,
    /// What went wrong; validation errors name the field.
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, title: &'static str, message: impl Into<String>) -> Self {
        Self { status, title, message: message.into(), retry_after: None }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// A field of the request failed validation; the message names it.
    pub fn validation(field: &str, problem: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", format!("{field}: {problem}"))
    }

    /// A query parameter is invalid; the message names it.
    pub fn query(param: &str, problem: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_query", format!("{param}: {problem}"))
    }

    /// Logs the cause and answers an opaque 500.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "internal error")
    }

    /// A dependency is out of reach for now: 503 with `Retry-After: 1`.
    pub fn unavailable(cause: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "dependency unavailable");
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the service is temporarily unavailable");
        e.retry_after = Some(1);
        e
    }
}

impl From<hub_store::StoreError> for ApiError {
    fn from(e: hub_store::StoreError) -> Self {
        if e.is_transient() { Self::unavailable(e) } else { Self::internal(e) }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { code: self.status.as_u16(), title: self.title.to_owned(), message: self.message };
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// JSON request body; malformed JSON is a 400 `invalid_json`, a well-formed body of the wrong
/// shape a 422 `validation_failed` that names the field.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(JsonRejection::JsonDataError(e)) => Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "validation_failed",
                std::error::Error::source(&e).map(ToString::to_string).unwrap_or_else(|| e.body_text()),
            )),
            Err(JsonRejection::JsonSyntaxError(_)) => {
                Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", "the request body is not valid JSON"))
            }
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the request body must be application/json",
            )),
            Err(JsonRejection::BytesRejection(e)) => Err(bytes_rejection(e)),
            Err(e) => Err(ApiError::new(e.status(), "invalid_request", e.body_text())),
        }
    }
}

fn bytes_rejection(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "the request body is too large")
    } else {
        ApiError::new(e.status(), "invalid_request", "the request body could not be read")
    }
}

/// The raw request body, with a 413 in the common shape when it is over the limit.
#[derive(Debug)]
pub struct RawBody(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        axum::body::Bytes::from_request(req, state).await.map(RawBody).map_err(bytes_rejection)
    }
}

/// Query parameters; an invalid one is a 400 `invalid_query` naming it.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Query(v)),
            Err(QueryRejection::FailedToDeserializeQueryString(e)) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                std::error::Error::source(&e).map(ToString::to_string).unwrap_or_else(|| e.body_text()),
            )),
            Err(e) => Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text())),
        }
    }
}

/// The page size of a listing: default 100, at most 1000.
pub fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(100),
        Some(n) if (1..=1000).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::query("limit", format!("must be from 1 to 1000 (got {n})"))),
    }
}

/// Parses the `cursor` query parameter a listing returned earlier (an id of its kind).
pub fn cursor<T: std::str::FromStr>(raw: Option<String>) -> Result<Option<T>, ApiError> {
    raw.map(|c| c.parse::<T>().map_err(|_| ApiError::query("cursor", "is not a cursor this API returned"))).transpose()
}

/// The `next_cursor` of a page: the last item's id when the page is full, `None` on a short one.
pub fn next_cursor<T, K: ToString>(items: &[T], limit: u32, id: impl Fn(&T) -> K) -> Option<String> {
    (items.len() == limit as usize).then(|| items.last().map(|i| id(i).to_string())).flatten()
}

/// A stored body as JSON can carry it: text when it is UTF-8, otherwise base64.
pub fn text_or_base64(body: Vec<u8>) -> (Option<String>, Option<String>) {
    use base64::Engine;
    match String::from_utf8(body) {
        Ok(text) => (Some(text), None),
        Err(e) => (None, Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes()))),
    }
}

/// An optional JSON request body: empty (or only whitespace) is `T::default()`; malformed JSON is
/// `400 invalid_json`; JSON of the wrong shape is `422 validation_failed` with serde's message.
pub fn optional_json<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let mut reader = serde_json::Deserializer::from_slice(body);
    let parsed: T = serde_path_to_error::deserialize(&mut reader).map_err(shape_error)?;
    reader
        .end()
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", "the request body is not valid JSON"))?;
    Ok(parsed)
}

/// A body that is not JSON is a 400; JSON of the wrong shape a 422 naming the field (`rate:
/// invalid type: …`).
fn shape_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    match e.inner().classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof | serde_json::error::Category::Io => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", "the request body is not valid JSON")
        }
        serde_json::error::Category::Data => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", e.to_string())
        }
    }
}

/// A JSON value read as `T`; a wrong shape is a 422 naming the field.
pub fn from_json_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", e.to_string()))
}

/// What a time in a request must look like.
pub const RFC3339_EXPECTED: &str = "must be an RFC 3339 time, such as 2026-01-31T12:00:00Z";

/// A time given in a request (RFC 3339, any offset), in UTC.
pub fn rfc3339(raw: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(raw).ok().map(|t| t.with_timezone(&chrono::Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database out of reach is a 503 a client may retry after a second; anything else it
    /// says is an opaque 500.
    #[test]
    fn store_errors_answer_as_their_kind() {
        let transient = [
            hub_store::StoreError::Unreachable("connection refused".into()),
            hub_store::StoreError::Database(sqlx::Error::PoolTimedOut),
            hub_store::StoreError::Database(sqlx::Error::Io(std::io::Error::other("reset"))),
        ];
        for e in transient {
            let response = ApiError::from(e).into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("1"));
        }
        let response = ApiError::from(hub_store::StoreError::Corrupt("bad row".into())).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
    }
}

/// Deserializes an optional integer that JSON may write as `3` or `3.0` (JSON Schema and most
/// clients count a whole-number float as an integer); a fraction or a value out of range is
/// refused with a message naming the number.
pub fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error as _;
    let Some(n) = <Option<serde_json::Number> as serde::Deserialize>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(i) = n.as_i64() {
        return Ok(Some(i));
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f >= -9.223_372_036_854_776e18 && f < 9.223_372_036_854_776e18 => {
            Ok(Some(f as i64))
        }
        _ => Err(D::Error::custom(format!("{n} is not a whole number in range"))),
    }
}
