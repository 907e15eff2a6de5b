//! `/console/sso`: people sign in to the console through the identity provider
//! (`STREAMING_HUB_SSO_CONSOLE_CLIENT_ID`; the flow itself is `sso::console`).
//!
//! - `GET /console/sso`: whether sign-in through the provider is offered (the sign-in page asks).
//! - `GET /console/sso/start`: sends the browser to the provider, with the sign-in's state,
//!   nonce and PKCE verifier kept in a cookie of ten minutes (`SameSite=Lax`: it must come back
//!   with the provider's redirect).
//! - `GET /console/sso/callback`: the provider's answer; on success a server-side session is
//!   stored (only its hash), its token set in an `HttpOnly`, `Secure`, `SameSite=Strict` cookie,
//!   and the browser sent to the console.
//! - `GET /console/sso/session`: who is signed in, their tenants and roles, and the session's
//!   CSRF token, which the page sends as `X-CSRF-Token` on every API call it makes with the
//!   cookie (`auth.rs` refuses such a call without it).
//! - `POST /console/sso/sign-out`: ends the session, everywhere, at once.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::error::ApiError;
use crate::keys;
use crate::sso::console::{Pending, SignInError, csrf_token};

/// The session's cookie. `__Host-`: set only by this host, over a secure connection, for every
/// path, never for another domain.
pub const SESSION_COOKIE: &str = "__Host-streaming-hub-session";
/// The sign-in under way.
const PENDING_COOKIE: &str = "__Host-streaming-hub-sign-in";
/// What every console session token begins with.
const SESSION_PREFIX: &str = "shcs_";
/// The header a console session's API calls carry its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a sign-in may take at the provider.
const PENDING_SECONDS: u64 = 600;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/console/sso", get(offered))
        .route("/console/sso/start", get(start))
        .route("/console/sso/callback", get(callback))
        .route("/console/sso/session", get(session))
        .route("/console/sso/sign-out", post(sign_out))
}

/// The value of the cookie `name`, from any `Cookie` header.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.trim())
}

fn set_cookie(name: &str, value: &str, same_site: &str, max_age: u64) -> HeaderValue {
    // The values are base64url or empty: nothing to escape.
    HeaderValue::from_str(&format!("{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; Secure; SameSite={same_site}"))
        .unwrap_or_else(|_| HeaderValue::from_static("__Host-streaming-hub-invalid=; Path=/; Max-Age=0; Secure"))
}

/// Where the provider sends people back: under `STREAMING_HUB_PUBLIC_URL`, or (only in `local`,
/// where it need not be set) the address the browser used.
fn redirect_uri(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    if let Some(public) = &state.settings.public_url {
        return Ok(format!("{public}/console/sso/callback"));
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| axum::http::uri::Authority::try_from(*h).is_ok())
        .ok_or_else(|| ApiError::validation("host", "must be the hub's address (or set STREAMING_HUB_PUBLIC_URL)"))?;
    Ok(format!("http://{host}/console/sso/callback"))
}

async fn offered(State(state): State<AppState>) -> Response {
    let enabled = state.access.sso.as_ref().is_some_and(|sso| sso.console().is_some());
    axum::Json(json!({ "enabled": enabled })).into_response()
}

fn console_sso(state: &AppState) -> Result<&crate::sso::Sso, ApiError> {
    state.access.sso.as_deref().filter(|sso| sso.console().is_some()).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "sign-in through an identity provider is not configured (STREAMING_HUB_SSO_CONSOLE_CLIENT_ID)",
        )
    })
}

async fn start(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, Response> {
    let sso = console_sso(&state).map_err(IntoResponse::into_response)?;
    let back = redirect_uri(&state, &headers).map_err(IntoResponse::into_response)?;
    let (location, pending) = sso.sign_in_start(&back).await.map_err(|e| failed(&state, &e))?;
    let mut response = StatusCode::SEE_OTHER.into_response();
    let h = response.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_str(&location).map_err(|_| failed(&state, &SignInError::NotStarted))?);
    h.insert(header::SET_COOKIE, set_cookie(PENDING_COOKIE, &pending.to_cookie(), "Lax", PENDING_SECONDS));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

#[derive(Deserialize)]
struct Answer {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(answer): Query<Answer>,
) -> Result<Response, Response> {
    let sso = console_sso(&state).map_err(IntoResponse::into_response)?;
    let pending = cookie(&headers, PENDING_COOKIE).and_then(Pending::from_cookie);
    let person = match (pending, answer) {
        (_, Answer { error: Some(error), error_description, .. }) => {
            let said = format!("{error}{}", error_description.map(|d| format!(": {d}")).unwrap_or_default());
            Err(SignInError::Provider(said.chars().filter(|c| !c.is_control()).take(200).collect()))
        }
        (Some(pending), Answer { code: Some(code), state: Some(returned), .. }) => {
            let back = redirect_uri(&state, &headers).map_err(IntoResponse::into_response)?;
            sso.sign_in_finish(&pending, &returned, &code, &back).await
        }
        _ => Err(SignInError::NotStarted),
    }
    .map_err(|e| failed(&state, &e))?;
    let ttl = sso.console().map(|c| c.client.session_ttl).unwrap_or_default();
    let token = keys::generate(SESSION_PREFIX);
    let now = state.clock.now();
    let session = hub_store::PersonSession {
        id: uuid::Uuid::now_v7(),
        issuer: person.issuer.clone(),
        subject: person.subject.clone(),
        roles: person.grants.values(),
        created_at: now,
        expires_at: now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::hours(8)),
    };
    state
        .store
        .create_person_session(&session, &keys::hash(&token))
        .await
        .map_err(|e| ApiError::from(e).into_response())?;
    tracing::info!(session = %session.id, issuer = %session.issuer, "a person signed in to the console");
    metrics::counter!(crate::telemetry::metric::CONSOLE_SIGN_INS, "outcome" => "signed_in").increment(1);
    let mut response = StatusCode::SEE_OTHER.into_response();
    let h = response.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_static("/console/"));
    h.append(header::SET_COOKIE, set_cookie(SESSION_COOKIE, &token, "Strict", ttl.as_secs()));
    h.append(header::SET_COOKIE, set_cookie(PENDING_COOKIE, "", "Lax", 0));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// A sign-in that did not finish: a page saying why, with a way back (the pending sign-in is
/// forgotten).
fn failed(state: &AppState, why: &SignInError) -> Response {
    tracing::info!(reason = %why, "a console sign-in did not finish");
    metrics::counter!(crate::telemetry::metric::CONSOLE_SIGN_INS, "outcome" => why.reason()).increment(1);
    let text = why.to_string().replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    let status = match why {
        SignInError::Unreachable(_) => StatusCode::BAD_GATEWAY,
        _ => StatusCode::BAD_REQUEST,
    };
    let page = format!(
        "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>Sign-in failed</title>\
         <h1>Sign-in failed</h1><p data-testid=\"sign-in-failed\">{text}</p>\
         <p><a href=\"/console/\">Back to the console</a></p></html>"
    );
    let mut response = (status, axum::response::Html(page)).into_response();
    let h = response.headers_mut();
    h.insert(header::SET_COOKIE, set_cookie(PENDING_COOKIE, "", "Lax", 0));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_str(&format!("default-src 'none'; frame-ancestors {}", state.settings.frame_ancestors))
            .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'")),
    );
    response
}

/// The signed-in person's session: its token and stored record.
pub async fn current(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(String, hub_store::PersonSession)>, ApiError> {
    let Some(token) = cookie(headers, SESSION_COOKIE).filter(|t| t.starts_with(SESSION_PREFIX)) else {
        return Ok(None);
    };
    Ok(state.store.person_session(&keys::hash(token), state.clock.now()).await?.map(|s| (token.to_owned(), s)))
}

/// The person a stored session signed in, with the roles granted then.
pub fn person_of(session: hub_store::PersonSession) -> crate::sso::Person {
    crate::sso::Person {
        grants: crate::sso::Grants::from_values(session.roles.iter().map(String::as_str)),
        issuer: session.issuer,
        subject: session.subject,
    }
}

/// Whether a request made with a session's cookie carries the session's CSRF token.
pub fn csrf_ok(headers: &HeaderMap, session_token: &str) -> bool {
    use subtle::ConstantTimeEq;
    let sent = headers.get(CSRF_HEADER).map(HeaderValue::as_bytes).unwrap_or_default();
    bool::from(sent.ct_eq(csrf_token(session_token).as_bytes()))
}

fn ended() -> ApiError {
    ApiError::unauthorized("no console session: sign in again")
}

async fn session(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let (token, session) = current(&state, &headers).await?.ok_or_else(ended)?;
    let expires_at = session.expires_at;
    let person = person_of(session);
    let grants = &person.grants;
    let tenants: Vec<_> = grants
        .tenants
        .iter()
        .map(|(tenant, role)| json!({"tenant_id": tenant.as_str(), "role": role.as_str()}))
        .collect();
    let mut response = axum::Json(json!({
        "issuer": person.issuer,
        "subject": person.subject,
        "tenants": tenants,
        "platform_role": grants.platform.map(|p| p.as_str()),
        "expires_at": expires_at,
        "csrf_token": csrf_token(&token),
    }))
    .into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let (token, session) = current(&state, &headers).await?.ok_or_else(ended)?;
    if !csrf_ok(&headers, &token) {
        return Err(csrf_refused());
    }
    state.store.end_person_session(&keys::hash(&token)).await?;
    tracing::info!(session = %session.id, "a person signed out of the console");
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, set_cookie(SESSION_COOKIE, "", "Strict", 0));
    Ok(response)
}

/// A call with a console session's cookie but not its CSRF token.
pub fn csrf_refused() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "csrf_refused",
        "a request with the console's session cookie must carry the session's X-CSRF-Token header",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_name_in_any_cookie_header() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; __Host-streaming-hub-session=shcs_x"));
        headers.append(header::COOKIE, HeaderValue::from_static("b=2;c"));
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("shcs_x"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, "c"), None);
        assert_eq!(cookie(&headers, "__Host-streaming-hub"), None);
    }
}
