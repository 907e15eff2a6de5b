//! A webhook destination: its configuration, identity and validation.

use std::collections::BTreeMap;

use hub_core::signature::Scheme;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fields::{Credentials, Fields, Invalid, MAX_URL, SinkConfig, destination_url};

/// The default request timeout of a webhook.
pub const DEFAULT_WEBHOOK_TIMEOUT_MS: u64 = 10_000;

fn default_timeout_ms() -> u64 {
    DEFAULT_WEBHOOK_TIMEOUT_MS
}

/// A webhook: a signed `POST` to `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookConfig {
    pub url: String,
    /// Static headers sent with every delivery.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// How requests are signed (`lerian`, the default, or `standard-webhooks`).
    #[serde(default)]
    pub signature: Scheme,
}

impl SinkConfig for WebhookConfig {
    fn key(&self) -> String {
        format!("webhook {}", self.url)
    }

    /// How it is signed counts: receivers verify another way.
    fn same_connection(&self, other: &Self) -> bool {
        (&self.url, self.signature) == (&other.url, other.signature)
    }
}

const MAX_HEADERS: usize = 20;
/// Words in a header name that say its value is a credential (`X-Api-Key`, `X-Auth-Token`, …).
const CREDENTIAL_WORDS: &[&str] =
    &["token", "secret", "password", "passwd", "api-key", "apikey", "api_key", "auth", "session", "signature"];
/// Headers the hub sets itself, or that would carry credentials in clear configuration.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "user-agent",
    "traceparent",
    "tracestate",
    "authorization",
    "proxy-authorization",
    "cookie",
];

/// Validates a webhook `sink` object.
pub(crate) fn validate(fields: &Fields<'_>, allow_private: bool) -> Result<(WebhookConfig, Credentials), Invalid> {
    fields.only(&["url", "headers", "timeout_ms", "signature"])?;
    let schemes: &[&str] = if allow_private { &["https", "http"] } else { &["https"] };
    let url = destination_url("url", fields.required("url", MAX_URL)?, schemes, allow_private)?;
    let mut headers = BTreeMap::new();
    match fields.map.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(h)) => {
            if h.len() > MAX_HEADERS {
                return Err(Invalid::new("sink.headers", format!("must have at most {MAX_HEADERS} entries")));
            }
            for (name, value) in h {
                let f = format!("sink.headers.{name}");
                let lower = name.to_ascii_lowercase();
                if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(Invalid::new(&f, "is not a valid header name"));
                }
                if RESERVED_HEADERS.contains(&lower.as_str())
                    || lower.starts_with("x-webhook-")
                    || lower.starts_with("webhook-")
                    || lower.starts_with("x-lerian-")
                {
                    return Err(Invalid::new(&f, "is set by the hub or carries credentials; it cannot be configured"));
                }
                // Static headers are configuration, shown in every listing (to portal sessions too):
                // a name that says it carries a credential is refused rather than shown in clear.
                if CREDENTIAL_WORDS.iter().any(|w| lower.contains(w)) {
                    return Err(Invalid::new(
                        &f,
                        "looks like a credential; static header values are shown in every listing, so \
                         credentials cannot be configured as headers (receivers verify the signature)",
                    ));
                }
                let Value::String(v) = value else {
                    return Err(Invalid::new(&f, "must be a string"));
                };
                if v.len() > 1024 || reqwest::header::HeaderValue::from_str(v).is_err() {
                    return Err(Invalid::new(&f, "must be a valid header value of at most 1024 bytes"));
                }
                headers.insert(name.clone(), v.clone());
            }
        }
        Some(_) => return Err(Invalid::new("sink.headers", "must be an object of strings")),
    }
    let timeout_ms = match fields.map.get("timeout_ms") {
        None | Some(Value::Null) => DEFAULT_WEBHOOK_TIMEOUT_MS,
        Some(v) => match v.as_u64() {
            Some(ms) if (100..=60_000).contains(&ms) => ms,
            _ => return Err(Invalid::new("sink.timeout_ms", "must be a whole number from 100 to 60000")),
        },
    };
    let signature = match fields.string("signature", 32)? {
        None => Scheme::default(),
        Some(raw) => Scheme::parse(raw).ok_or_else(|| {
            let names: Vec<&str> = Scheme::ALL.iter().map(|s| s.as_str()).collect();
            Invalid::new("sink.signature", format!("must be one of {}", names.join(", ")))
        })?,
    };
    Ok((WebhookConfig { url: url.into(), headers, timeout_ms, signature }, Credentials::Unchanged))
}
