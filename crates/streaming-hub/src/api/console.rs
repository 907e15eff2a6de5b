//! `/console`: the web console, seven files built into the binary (`crates/streaming-hub/console/`).
//!
//! The page holds no data of its own: it signs in with the admin token or a tenant API key (kept
//! in the tab's session storage) and calls the same API as everyone else, so every rule of the
//! API — a tenant key sees only its tenant — holds in the console too. It renders every value as
//! text, never as markup, and is served with a policy that allows only its own script and style.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("../../console/index.html");
const SCRIPT: &str = include_str!("../../console/console.js");
const FORMS: &str = include_str!("../../console/forms.js");
const CHARTS: &str = include_str!("../../console/charts.js");
const EVENTS: &str = include_str!("../../console/events.js");
const LEDGER: &str = include_str!("../../console/ledger.js");
const STYLE: &str = include_str!("../../console/console.css");

/// The page's policy: its own script and style only; framed only by `frame_ancestors`
/// (`STREAMING_HUB_PORTAL_FRAME_ANCESTORS`, `'none'` by default).
fn policy(frame_ancestors: &str) -> String {
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
         base-uri 'none'; form-action 'self'; frame-ancestors {frame_ancestors}"
    )
}

fn asset(content_type: &'static str, body: &'static str, policy: &HeaderValue, deny_frames: bool) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, policy.clone());
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // For browsers without `frame-ancestors`; an allow-list has no X-Frame-Options form.
    if deny_frames {
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The console's routes (not part of the API document).
pub fn routes<S: Clone + Send + Sync + 'static>(frame_ancestors: &str) -> axum::Router<S> {
    let policy = HeaderValue::from_str(&policy(frame_ancestors))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"));
    let deny = frame_ancestors == "'none'";
    let serve = move |content_type: &'static str, body: &'static str| {
        let policy = policy.clone();
        get(move || async move { asset(content_type, body, &policy, deny) })
    };
    axum::Router::new()
        .route("/console", serve("text/html; charset=utf-8", INDEX))
        .route("/console/", serve("text/html; charset=utf-8", INDEX))
        .route("/console/console.js", serve("text/javascript; charset=utf-8", SCRIPT))
        .route("/console/forms.js", serve("text/javascript; charset=utf-8", FORMS))
        .route("/console/charts.js", serve("text/javascript; charset=utf-8", CHARTS))
        .route("/console/events.js", serve("text/javascript; charset=utf-8", EVENTS))
        .route("/console/ledger.js", serve("text/javascript; charset=utf-8", LEDGER))
        .route("/console/console.css", serve("text/css; charset=utf-8", STYLE))
}
