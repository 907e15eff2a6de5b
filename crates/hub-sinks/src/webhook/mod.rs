//! The webhook sink (SPEC §3.6): a signed `POST` of the exact stored body.
//!
//! One pooled HTTP client serves every destination. Redirects are never followed, each request
//! has the subscription's timeout, the response is read only up to a cap, and host names go
//! through the SSRF guard's resolver.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hub_core::signature::{Scheme, asymmetric, sign, standard};
use rand::RngCore;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use url::Url;
use uuid::Uuid;

use crate::guard::check_host;
use crate::message::{Message};
use crate::sink::{Failure, FailureKind, Outcome, Probed, RESPONSE_CAP, Secrets, Settings, TypedSink, cap_text};
use base64::Engine as _;
use config::AuthConfig;

mod auth;
pub mod config;
mod http1;
pub mod schema;

const VERIFICATION_KEY: &str = "streaming_hub.verification";
const USER_AGENT_VALUE: &str = concat!("streaming-hub/", env!("CARGO_PKG_VERSION"));
/// How much of a verification answer is searched for the challenge.
const PROBE_READ_CAP: usize = 64 * 1024;

/// A webhook destination with its signing secrets opened.
#[derive(Clone)]
pub struct WebhookTarget {
    pub url: Url,
    /// Static headers configured on the subscription.
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    /// How requests are signed.
    pub scheme: Scheme,
    /// The current secret first; during a rotation overlap the previous one second.
    pub secrets: Vec<String>,
    /// The client it is sent with: the shared one, or one with its own TLS material.
    client: Arc<http1::Client>,
    /// How the hub authenticates beside the signature.
    auth: Option<Auth>,
}

/// A target's authentication, ready to send.
#[derive(Clone)]
enum Auth {
    Basic(HeaderValue),
    OAuth2(auth::OAuth2),
}

impl std::fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTarget")
            .field("url", &self.url.as_str())
            .field("timeout", &self.timeout)
            .field("scheme", &self.scheme)
            .field("secrets", &self.secrets.len())
            .field(
                "auth",
                &self.auth.as_ref().map(|a| match a {
                    Auth::Basic(_) => "basic",
                    Auth::OAuth2(_) => "oauth2_client_credentials",
                }),
            )
            .finish_non_exhaustive()
    }
}

/// The webhook sink: one pooled client for every destination.
#[derive(Debug, Clone)]
pub struct WebhookSink {
    client: Arc<http1::Client>,
    allow_private: bool,
    /// Clients of webhooks with a private CA or a client certificate.
    clients: Arc<auth::Clients>,
    /// OAuth2 tokens, shared by the attempts with the same credentials.
    tokens: Arc<auth::Tokens>,
}

impl WebhookSink {
    pub fn new(allow_private: bool) -> Result<Self, String> {
        let client = auth::client(allow_private, None, None)?;
        Ok(Self { client, allow_private, clients: Arc::default(), tokens: Arc::default() })
    }

    fn headers(&self, target: &WebhookTarget, message: &Message<'_>, timestamp: i64) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in unsigned_headers(&target.headers, message) {
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(&value)) {
                h.insert(n, v);
            }
        }
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_bytes(value.as_bytes()) {
                h.append(HeaderName::from_static(name), v);
            }
        };
        match target.scheme {
            Scheme::Lerian => {
                put("x-webhook-timestamp", &timestamp.to_string());
                for secret in &target.secrets {
                    put("x-webhook-signature", &sign(secret, timestamp, message.payload));
                }
            }
            Scheme::StandardWebhooks | Scheme::Ed25519 => {
                // The event id names the message: the same on every redelivery, as the
                // specification asks. Signatures share one header, separated by spaces.
                let id = message.ce_id.to_string();
                let sign = if target.scheme == Scheme::Ed25519 { asymmetric::sign } else { standard::sign };
                let signatures: Vec<String> =
                    target.secrets.iter().filter_map(|secret| sign(secret, &id, timestamp, message.payload)).collect();
                put("webhook-id", &id);
                put("webhook-timestamp", &timestamp.to_string());
                put("webhook-signature", &signatures.join(" "));
            }
        }
        h.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        h
    }

    /// Sends one request with the target's authentication and reads at most `cap` bytes of
    /// the answer. With OAuth2, a `401` to a token that may be stale is answered by fetching a
    /// new one and sending once more.
    async fn send(
        &self,
        target: &WebhookTarget,
        url: &Url,
        headers: HeaderMap,
        body: &[u8],
        cap: usize,
    ) -> Result<Answer, Failure> {
        if let Err(refused) = check_host(url, self.allow_private) {
            return Err(not_allowed(&refused));
        }
        let authorization = match &target.auth {
            // Boxed: a token fetch and a second request take more state than a request alone,
            // and every attempt out would hold it.
            Some(Auth::OAuth2(oauth)) => {
                return Box::pin(self.send_with_token(oauth, target, url, &headers, body, cap)).await;
            }
            Some(Auth::Basic(value)) => Some(value),
            None => None,
        };
        let request = request(target, url, &headers, authorization, body, cap)?;
        // Written into the request: not held while the receiver is waited for.
        drop(headers);
        exchange(target, request).await
    }

    async fn send_with_token(
        &self,
        oauth: &auth::OAuth2,
        target: &WebhookTarget,
        url: &Url,
        headers: &HeaderMap,
        body: &[u8],
        cap: usize,
    ) -> Result<Answer, Failure> {
        let token = oauth.token(&target.client, self.allow_private).await?;
        let answer = exchange(target, request(target, url, headers, Some(&bearer(&token)?), body, cap)?).await?;
        if answer.status != 401 || !oauth.refused(&token).await {
            return Ok(answer);
        }
        let token = oauth.token(&target.client, self.allow_private).await?;
        exchange(target, request(target, url, headers, Some(&bearer(&token)?), body, cap)?).await
    }
}

/// A request to `url` as the target sends it.
fn request(
    target: &WebhookTarget,
    url: &Url,
    headers: &HeaderMap,
    authorization: Option<&HeaderValue>,
    body: &[u8],
    cap: usize,
) -> Result<http1::Request, Failure> {
    http1::Request::post(url, headers, authorization, body, target.timeout, cap).map_err(|e| classify(e, target.timeout))
}

/// Sends `request` with the target's client and reads what its answer says.
async fn exchange(target: &WebhookTarget, request: http1::Request) -> Result<Answer, Failure> {
    let answer = target.client.post(request).await.map_err(|e| classify(e, target.timeout))?;
    let retry_after = answer.header("retry-after").and_then(|v| retry_after(v, std::time::SystemTime::now()));
    let allowed_rate = answer.header("webhook-allowed-rate").and_then(hub_core::delivery::inflight::parse_allowed_rate);
    Ok(Answer { status: answer.status, body: answer.body, retry_after, allowed_rate, stalled: answer.stalled })
}

/// A delivery's headers before it is signed: the hub's `x-lerian-*` and trace context, the
/// destination's static headers, the content type, then those the subscription's transform added
/// (SPEC §10). What a transform is shown as the headers the webhook would send.
pub fn unsigned_headers(static_headers: &[(String, String)], message: &Message<'_>) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = vec![
        ("x-lerian-event-id".into(), message.ce_id.to_string()),
        ("x-lerian-delivery-id".into(), message.delivery_id.to_string()),
        ("x-lerian-event-type".into(), message.event_key()),
        ("x-lerian-tenant-id".into(), message.tenant.to_owned()),
        ("x-lerian-subscription-id".into(), message.subscription_id.to_string()),
        ("x-lerian-attempt".into(), message.attempt.to_string()),
        ("x-lerian-schema-version".into(), message.schema_version.to_owned()),
        ("x-lerian-event-time".into(), message.time.to_owned()),
    ];
    let optional = [
        ("x-lerian-subject", message.subject),
        ("traceparent", message.traceparent),
        ("tracestate", message.tracestate),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            h.push((name.into(), value.to_owned()));
        }
    }
    let h = crate::message::with_headers(h, static_headers);
    let h = crate::message::with_headers(h, &[("content-type".to_owned(), message.content_type.to_owned())]);
    crate::message::with_headers(h, message.headers)
}

/// `url` with `path` appended to its path (a transform's, SPEC §10).
fn with_path(url: &Url, path: &str) -> Url {
    if path.is_empty() {
        return url.clone();
    }
    let mut joined = url.clone();
    let base = url.path().trim_end_matches('/');
    joined.set_path(&format!("{base}/{}", path.trim_start_matches('/')));
    joined
}

/// `Authorization: Bearer <token>`.
fn bearer(token: &str) -> Result<HeaderValue, Failure> {
    HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| crate::sink::misconfigured("the token endpoint's access_token cannot be sent in a header"))
}

/// A destination's answer: its status, the start of its body, and what its headers ask of us.
struct Answer {
    status: u16,
    body: Vec<u8>,
    retry_after: Option<Duration>,
    allowed_rate: Option<f64>,
    /// The body did not complete within the timeout.
    stalled: bool,
}

/// A `Retry-After` value (delay-seconds or an HTTP date) as a delay from `now`, at most
/// [`hub_core::delivery::inflight::MAX_PAUSE`]; `None` when it cannot be read or is past.
pub fn retry_after(raw: &str, now: std::time::SystemTime) -> Option<Duration> {
    let raw = raw.trim();
    let delay = if let Ok(secs) = raw.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        httpdate::parse_http_date(raw).ok()?.duration_since(now).ok()?
    };
    (!delay.is_zero()).then(|| delay.min(hub_core::delivery::inflight::MAX_PAUSE))
}

fn failure(
    kind: FailureKind,
    retryable: bool,
    reason: String,
    status: Option<u16>,
    response: Option<String>,
) -> Failure {
    Failure { retryable, kind, reason, status, response, retry_after: None }
}

/// A destination the guard refused. The tenant is told only that it is not allowed: which kind
/// of address a name resolves to would map the hub's own network. Operators get it in the log.
fn not_allowed(refused: &crate::guard::Refused) -> Failure {
    tracing::warn!(detail = %refused, "webhook destination refused by the address guard");
    failure(FailureKind::Forbidden, false, crate::guard::NOT_ALLOWED.to_owned(), None, None)
}

/// A transport error as a classified failure; the reason never includes the URL (it may carry
/// tokens in its query).
pub(crate) fn classify(e: http1::Error, timeout: Duration) -> Failure {
    let (kind, detail) = match e {
        http1::Error::Timeout => {
            let reason = format!("no answer within {} ms", timeout.as_millis());
            return failure(FailureKind::Timeout, true, reason, None, None);
        }
        http1::Error::Refused(refused) => return not_allowed(&refused),
        http1::Error::Unresolved(host) => ("connection failed", format!("{host} resolves to no address")),
        http1::Error::Connect(detail) => ("connection failed", detail),
        http1::Error::Exchange(detail) => ("request failed", detail),
    };
    failure(FailureKind::Unreachable, true, format!("{kind}: {detail}"), None, None)
}

#[async_trait]
impl TypedSink for WebhookSink {
    const NAME: &'static str = "webhook";
    const SUMMARY: &'static str = "{url}";
    const SIGNED: bool = true;
    type Config = config::WebhookConfig;
    type Request = schema::WebhookSink;
    type Target = WebhookTarget;


    fn build(settings: &Settings) -> Result<Self, String> {
        Self::new(settings.allow_private)
    }

    fn target(
        &self,
        config: &config::WebhookConfig,
        secrets: &Secrets,
        max_timeout: Duration,
    ) -> Result<WebhookTarget, Failure> {
        let c = config;
        if secrets.signing.is_empty() {
            return Err(crate::sink::misconfigured("the subscription has no signing secret"));
        }
        let secret = |field: &str| -> Result<String, Failure> {
            secrets
                .credentials
                .as_ref()
                .and_then(|c| c[field].as_str())
                .map(str::to_owned)
                .ok_or_else(|| crate::sink::misconfigured(&format!("the webhook's auth has no {field}")))
        };
        let mut identity = None;
        let auth = match &c.auth {
            None => None,
            Some(AuthConfig::Basic { username }) => {
                let password = secret("password")?;
                let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
                let value = HeaderValue::from_str(&format!("Basic {encoded}"))
                    .map_err(|_| crate::sink::misconfigured("the webhook's basic credentials cannot be sent in a header"))?;
                Some(Auth::Basic(value))
            }
            Some(AuthConfig::OAuth2 { token_url, client_id, scope, audience }) => {
                let url = token_url.parse().map_err(|_| crate::sink::misconfigured("the token_url is not valid"))?;
                let client_secret = secret("client_secret")?;
                Some(Auth::OAuth2(self.tokens.oauth2(
                    url,
                    client_id,
                    &client_secret,
                    scope.as_deref(),
                    audience.as_deref(),
                )))
            }
            Some(AuthConfig::Mtls { certificate_pem }) => {
                identity = Some((certificate_pem.as_str(), secret("private_key_pem")?));
                None
            }
        };
        let client = if c.tls.is_some() || identity.is_some() {
            self.clients.get(self.allow_private, c.tls.as_ref().map(|t| t.ca_pem.as_str()), identity.as_ref().map(|(c, k)| (*c, k.as_str())))?
        } else {
            Arc::clone(&self.client)
        };
        Ok(WebhookTarget {
            url: c.url.parse().map_err(|_| crate::sink::misconfigured("the webhook url is not valid"))?,
            headers: c.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            timeout: Duration::from_millis(c.timeout_ms).min(max_timeout),
            scheme: c.signature,
            secrets: secrets.signing.clone(),
            client,
            auth,
        })
    }

    async fn attempt(&self, target: &WebhookTarget, message: &Message<'_>) -> Outcome {
        let timestamp = chrono::Utc::now().timestamp();
        let headers = self.headers(target, message, timestamp);
        if let Some(sent) = message.sent {
            sent.note(
                hub_core::ledger::entry::DIGESTED_HEADERS
                    .iter()
                    .flat_map(|name| headers.get_all(*name).iter().map(move |v| (*name, v)))
                    .filter_map(|(name, v)| Some((name.to_owned(), v.to_str().ok()?.to_owned())))
                    .collect(),
            );
        }
        let url = with_path(&target.url, message.path);
        match self.send(target, &url, headers, message.payload, RESPONSE_CAP).await {
            Ok(Answer { status, body, retry_after, stalled, .. }) => {
                let response = (!body.is_empty()).then(|| cap_text(&body, RESPONSE_CAP));
                if (200..300).contains(&status) {
                    Outcome::Delivered { status: Some(status), response, stalled }
                } else {
                    let kind =
                        if status == 401 || status == 403 { FailureKind::Unauthorized } else { FailureKind::Refused };
                    let mut f = failure(kind, true, format!("HTTP {status}"), Some(status), response);
                    // Only a receiver saying it is overloaded asks to be left alone.
                    if status == 429 || status == 503 {
                        f.retry_after = retry_after;
                    }
                    Outcome::Failed(f)
                }
            }
            Err(f) => Outcome::Failed(f),
        }
    }

    async fn check(&self, target: &WebhookTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let mut nonce = [0u8; 16];
        rand::rng().fill_bytes(&mut nonce);
        let challenge: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let body = serde_json::json!({"type": VERIFICATION_KEY, "challenge": challenge}).to_string().into_bytes();
        let id = Uuid::now_v7();
        let extensions = Default::default();
        let message = Message {
            tenant,
            subscription_id,
            ce_id: id,
            source: "streaming-hub",
            ce_type: VERIFICATION_KEY,
            resource_type: "streaming_hub",
            event_type: "verification",
            time: &chrono::Utc::now().to_rfc3339(),
            schema_version: "1.0.0",
            subject: None,
            content_type: "application/json",
            data_schema: None,
            traceparent: None,
            tracestate: None,
            extensions: &extensions,
            ordering_key: None,
            payload: &body,
            headers: &[],
            path: "",
            attempt: 1,
            delivery_id: id,
            sent: None,
        };
        let headers = self.headers(target, &message, chrono::Utc::now().timestamp());
        let Answer { status, body: answer, allowed_rate, .. } =
            self.send(target, &target.url, headers, &body, PROBE_READ_CAP).await?;
        let response = (!answer.is_empty()).then(|| cap_text(&answer, RESPONSE_CAP));
        if !(200..300).contains(&status) {
            let kind = if status == 401 || status == 403 { FailureKind::Unauthorized } else { FailureKind::Refused };
            return Err(failure(
                kind,
                true,
                format!("the verification request got HTTP {status}"),
                Some(status),
                response,
            ));
        }
        if !answer.windows(challenge.len()).any(|w| w == challenge.as_bytes()) {
            return Err(failure(
                FailureKind::Refused,
                true,
                format!("HTTP {status}, but the answer does not contain the challenge"),
                Some(status),
                response,
            ));
        }
        Ok(Probed { allowed_rate })
    }

    fn headers(&self, config: &config::WebhookConfig, message: &Message<'_>) -> Vec<(String, String)> {
        let static_headers: Vec<(String, String)> =
            config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        unsigned_headers(&static_headers, message)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use hub_core::delivery::inflight::{MAX_PAUSE, parse_allowed_rate};
    use proptest::prelude::*;

    use super::retry_after;

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after("0", now), None, "no pause");
        assert_eq!(retry_after("18446744073709551615", now), Some(MAX_PAUSE), "the longest is cut");
        assert_eq!(retry_after("18446744073709551616", now), None, "past u64: not a number it reads");
        assert_eq!(retry_after("-5", now), None);
        assert_eq!(retry_after("1.5", now), None);
        let at = |secs: u64| httpdate::fmt_http_date(now + Duration::from_secs(secs));
        assert_eq!(retry_after(&at(90), now), Some(Duration::from_secs(90)));
        assert_eq!(retry_after(&at(86_400 * 365 * 100), now), Some(MAX_PAUSE));
        assert_eq!(retry_after(&httpdate::fmt_http_date(now - Duration::from_secs(5)), now), None, "a date past");
        assert_eq!(retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now), Some(MAX_PAUSE));
        assert_eq!(retry_after("Thu, 01 Jan 1970 00:00:00 GMT", now), None);
    }

    proptest! {
        /// Whatever a receiver sends, and whatever the clock says, a `Retry-After` reads as a pause
        /// of at most an hour or none, never a panic.
        #[test]
        fn any_retry_after_is_a_bounded_pause(
            raw in prop_oneof![
                any::<u64>().prop_map(|n| n.to_string()),
                "[0-9]{1,40}",
                "\\PC{0,64}",
                (0u64..400_000_000_000).prop_map(|s| {
                    httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(s % 253_402_300_799))
                }),
            ],
            now_secs in prop_oneof![Just(0u64), 0u64..253_402_300_799, Just(u64::from(u32::MAX) * 64)],
        ) {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_secs);
            if let Some(pause) = retry_after(&raw, now) {
                prop_assert!(!pause.is_zero() && pause <= MAX_PAUSE, "{raw}: {pause:?}");
            }
        }

        /// A declared rate reads as a positive finite number of requests per minute, or none.
        #[test]
        fn any_allowed_rate_is_positive_and_finite_or_none(
            raw in prop_oneof![
                any::<f64>().prop_map(|f| f.to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
                "[-+0-9.eE]{1,40}",
                "\\PC{0,40}",
            ],
        ) {
            if let Some(rate) = parse_allowed_rate(&raw) {
                prop_assert!(rate.is_finite() && rate > 0.0, "{raw}: {rate}");
                let per_second = hub_core::delivery::inflight::Limits::default().rate(Some(rate)).expect("a rate");
                let mut pace = hub_core::delivery::inflight::Pace::default();
                let t0 = std::time::Instant::now();
                prop_assert!(pace.take(per_second, t0).is_ok());
                let _ = pace.take(per_second, t0);
            }
        }
    }
}
