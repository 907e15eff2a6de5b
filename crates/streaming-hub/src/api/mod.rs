//! The HTTP API: routes, shared state, the OpenAPI document, and the fallbacks that keep every
//! error in one shape.
//!
//! Every route is registered through `utoipa-axum` from its annotated handler, so the document
//! served at `/openapi.json` is built from the same table that routes requests.

pub mod admin;
pub mod auth;
pub mod catalog;
mod console;
mod contract;
pub mod delivery;
pub mod destination;
pub mod erasures;
pub mod error;
pub mod event_log;
pub mod events;
pub mod filters;
pub mod health;
pub mod ledger;
pub mod limiter;
pub mod oidc;
pub mod ordering;
pub mod overview;
pub mod portal;
pub mod pull;
mod receiver_doc;
pub mod replay;
pub mod sign_in;
pub mod simulate;
pub mod stats;
pub mod test_delivery;
pub mod transforms;

use receiver_doc::ReceiverWebhooks;
pub mod subscriptions;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use hub_store::Store;
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::config::Secret;
use crate::secrets::Sealer;
use error::ApiError;

/// Largest request body read. An event body over 1 MiB but under this is still read, so that it
/// can be quarantined with a reason; anything larger is refused with 413.
pub const MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;

/// The background runners the API hands work to, each woken by name.
#[derive(Clone, Debug)]
pub struct Wakers {
    /// The dispatcher: new jobs, a verified destination, a redrive.
    pub dispatcher: Arc<tokio::sync::Notify>,
    /// The replay runner: a replay started.
    pub replays: Arc<tokio::sync::Notify>,
    /// The erasure runner: an erasure was requested.
    pub erasures: Arc<tokio::sync::Notify>,
}

/// What every handler can reach: the store, the clock and the sealer every room shares, then
/// what each room hands the API.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn crate::clock::Clock>,
    pub sealer: Arc<Sealer>,
    /// Operational events.
    pub notices: crate::operational::Notices,
    /// Who may call: the admin token, keys, sign-in and the hub as an issuer.
    pub access: Access,
    /// Ingest: its policy, HTTP ingest's group commit, Kafka's probe.
    pub intake: crate::ingest::Handle,
    /// The event catalog: declared and seen types, payload checks.
    pub catalog: Arc<crate::catalog::EventCatalog>,
    /// Delivery: sinks, transform workers, boards, membership.
    pub delivery: crate::delivery::Handle,
    /// The ledger: its keys, and where changes are recorded (SPEC §11).
    pub ledger: Arc<crate::ledger::Ledger>,
    /// Wakes the background runners the API hands work to.
    pub wakers: Wakers,
    /// Per-tenant rates of the API.
    pub limiters: Limiters,
    /// What the configuration says of the API's answers.
    pub settings: Settings,
    /// Whether this replica is ready: draining, and its background tasks.
    pub health: Health,
    /// Simulations this replica may run at once (`simulate.rs`).
    pub simulations: Arc<simulate::Simulations>,
    /// Test requests waiting for their attempts, per tenant.
    pub test_waiting: Arc<test_delivery::Waiting>,
}

/// Who may call the API.
#[derive(Debug, Clone)]
pub struct Access {
    /// `None` outside `local` when the operators use admin keys only.
    pub admin_token: Option<Secret>,
    /// Live API keys seen lately.
    pub key_cache: Arc<auth::KeyCache>,
    /// The identity providers people sign in with (`STREAMING_HUB_SSO_ISSUERS`), when any.
    pub sso: Option<Arc<crate::sso::Sso>>,
    /// The hub as an OIDC issuer (`STREAMING_HUB_OIDC_ISSUER`), when it is one.
    pub issuer: Option<Arc<crate::oidc::Issuer>>,
}

/// Per-tenant rates of the API.
#[derive(Debug, Clone)]
pub struct Limiters {
    /// Pull pages (`STREAMING_HUB_PULL_RATE`).
    pub pull: Arc<limiter::TenantLimiter>,
    /// HTTP ingest (`STREAMING_HUB_INGEST_RATE`).
    pub ingest: Arc<limiter::TenantLimiter>,
}

/// What the configuration says of the API's answers.
#[derive(Debug, Clone)]
pub struct Settings {
    pub quotas: crate::config::Quotas,
    pub allow_private_sinks: bool,
    /// A replay's rate when its request names none (`STREAMING_HUB_REPLAY_RATE`).
    pub replay_rate: u32,
    /// How long a request may take, body included (`STREAMING_HUB_HTTP_REQUEST_TIMEOUT`).
    pub request_timeout: std::time::Duration,
    /// Where operators reach the hub (`STREAMING_HUB_PUBLIC_URL`): portal URLs start with it.
    pub public_url: Option<String>,
    /// Who may frame the console (`STREAMING_HUB_PORTAL_FRAME_ANCESTORS`).
    pub frame_ancestors: String,
    /// How erasures read the inbox and which need their count confirmed.
    pub erasure: crate::config::ErasureSettings,
}

impl Settings {
    pub fn new(config: &crate::config::Config) -> Self {
        Self {
            quotas: config.quotas,
            allow_private_sinks: config.allow_private_sinks,
            replay_rate: config.replay_rate,
            request_timeout: config.http_limits.request_timeout,
            public_url: config.public_url.clone(),
            frame_ancestors: config.portal_frame_ancestors.clone(),
            erasure: config.erasure,
        }
    }
}

/// Whether this replica is ready.
#[derive(Debug, Clone)]
pub struct Health {
    /// Set when the process starts draining: `/readyz` answers 503 from then on.
    pub draining: Arc<AtomicBool>,
    /// The hub's background tasks: readiness is off once one of them failed.
    pub supervisor: crate::supervisor::Supervisor,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Streaming Hub",
        description = "CloudEvents in; signed webhooks, queues and pull cursors out. Every error is \
                       `{\"code\", \"title\", \"message\"}`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    modifiers(&Security, &ReceiverWebhooks),
    components(schemas(error::ErrorBody, hub_sinks::SinkSchema)),
    tags(
        (name = "events", description = "Ingest"),
        (name = "subscriptions", description = "A tenant's subscriptions"),
        (name = "pull", description = "Reading a pull subscription"),
        (name = "ledger", description = "The tenant's tamper-evident record of deliveries and changes"),
        (name = "admin", description = "Operator routes (admin token)"),
        (name = "operations", description = "Health, readiness, metrics and this document"),
    )
)]
struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
        components.add_security_scheme("admin_token", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The routes and the OpenAPI document that describes them.
pub fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let parts = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(health::openapi))
        .routes(routes!(oidc::discovery))
        .routes(routes!(oidc::jwks))
        .routes(routes!(oidc::rotate, oidc::keys))
        .routes(routes!(events::ingest, event_log::list))
        .routes(routes!(event_log::read))
        .routes(routes!(subscriptions::create, subscriptions::list))
        .routes(routes!(subscriptions::read, subscriptions::update, subscriptions::delete))
        .routes(routes!(filters::test))
        .routes(routes!(transforms::test))
        .routes(routes!(catalog::list))
        .routes(routes!(catalog::list_all))
        .routes(routes!(pull::read))
        .routes(routes!(delivery::verify))
        .routes(routes!(delivery::rotate_secret))
        .routes(routes!(delivery::public_keys))
        .routes(routes!(delivery::deliveries))
        .routes(routes!(ordering::read))
        .routes(routes!(delivery::redrive))
        .routes(routes!(test_delivery::test))
        .routes(routes!(stats::read))
        .routes(routes!(replay::create))
        .routes(routes!(replay::read))
        .routes(routes!(replay::undelivered))
        .routes(routes!(simulate::simulate))
        .routes(routes!(admin::create_api_key, admin::list_api_keys))
        .routes(routes!(admin::revoke_api_key))
        .routes(routes!(portal::create))
        .routes(routes!(portal::revoke))
        .routes(routes!(portal::exchange))
        .routes(routes!(erasures::create, erasures::list))
        .routes(routes!(erasures::read))
        .routes(routes!(admin::list_quarantine))
        .routes(routes!(admin::list_dlq))
        .routes(routes!(overview::tenants))
        .routes(routes!(overview::subscriptions))
        .routes(routes!(ledger::public_keys))
        .routes(routes!(ledger::keys, ledger::rotate))
        .routes(routes!(ledger::tenant_checkpoints))
        .routes(routes!(ledger::tenant_entries))
        .routes(routes!(ledger::tenant_entry))
        .routes(routes!(ledger::tenant_inclusion))
        .routes(routes!(ledger::tenant_consistency))
        .routes(routes!(ledger::tenant_export))
        .routes(routes!(ledger::tenant_audit))
        .routes(routes!(ledger::platform_checkpoints))
        .routes(routes!(ledger::platform_entries))
        .routes(routes!(ledger::platform_inclusion))
        .routes(routes!(ledger::platform_consistency))
        .routes(routes!(ledger::platform_export))
        .routes(routes!(ledger::platform_audit))
        .split_for_parts();
    let (router, mut doc) = parts;
    contract::complete(&mut doc);
    (router, doc)
}

/// The OpenAPI document alone.
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().1
}

/// The OpenAPI document as `GET /openapi.json` serves it (see `contract::served`).
pub fn openapi_json() -> serde_json::Value {
    contract::served(&openapi())
}

/// The whole router.
pub fn router(state: AppState) -> Router {
    let (routes, _) = routes();
    let limit = state.settings.request_timeout;
    routes
        .merge(console::routes(&state.settings.frame_ancestors))
        .merge(sign_in::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .layer(axum::middleware::from_fn(head_only_where_harmless))
        .layer(axum::middleware::from_fn(move |request, next| within(limit, request, next)))
        .layer(axum::middleware::from_fn(unwound))
        .with_state(state)
}

/// A handler that panics answers `500` in the error shape rather than a dropped connection, and
/// is counted (`streaming_hub_http_panics_total`); the panic's location is in the log.
async fn unwound(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    match futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(next.run(request))).await {
        Ok(response) => response,
        Err(_) => {
            metrics::counter!(crate::telemetry::metric::HTTP_PANICS).increment(1);
            ApiError::internal(format_args!("the handler of {method} {path} panicked")).into_response()
        }
    }
}

/// `HEAD` runs a route's `GET` handler (the body is dropped), so a `GET` with an effect — a pull
/// read moves its cursor — would take effect unseen. The API (`/v1`, `/admin`) is read with `GET`
/// only: `HEAD` there is `405`, before any handler runs. Health, metrics, the OpenAPI document and
/// the console keep `HEAD`.
async fn head_only_where_harmless(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = request.uri().path();
    if request.method() == Method::HEAD && (path.starts_with("/v1/") || path.starts_with("/admin/")) {
        let refused = ApiError::new(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("HEAD is not allowed on {path}: the API is read with GET"),
        )
        .into_response();
        return refused;
    }
    next.run(request).await
}

/// Answers `408` in the error shape when a request (its body included) takes longer than `limit`.
async fn within(
    limit: std::time::Duration,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!("the request was not complete within {} s", limit.as_secs_f64()),
        )
        .into_response(),
    }
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

#[cfg(test)]
mod tests {
    /// A handler that panics answers 500 in the error shape, and the server keeps answering.
    #[tokio::test]
    async fn a_panicking_handler_answers_500_in_the_error_shape() {
        let app = axum::Router::new()
            .route(
                "/boom",
                axum::routing::get(|| async {
                    if std::hint::black_box(true) {
                        panic!("a handler broke");
                    }
                    "unreached"
                }),
            )
            .route("/fine", axum::routing::get(|| async { "fine" }))
            .layer(axum::middleware::from_fn(super::unwound));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        hub_sinks::install_crypto_provider();
        let client = reqwest::Client::new();
        for _ in 0..3 {
            let answer = client.get(format!("{base}/boom")).send().await.expect("an answer, not a dropped connection");
            assert_eq!(answer.status(), 500);
            let body: serde_json::Value = answer.json().await.expect("json");
            assert_eq!(
                (&body["code"], &body["title"]),
                (&serde_json::json!(500), &serde_json::json!("internal_error")),
                "{body}"
            );
            assert!(!body.to_string().contains("broke"), "the panic's message is not answered: {body}");
        }
        assert_eq!(client.get(format!("{base}/fine")).send().await.expect("get").text().await.expect("text"), "fine");
    }
}
