//! Verify and read Streaming Hub deliveries.
//!
//! - [`verify`]: a webhook's `X-Webhook-Signature` (`v1,sha256=<hex>`, HMAC-SHA256 over
//!   `"v1:" + timestamp + "." + body`) against every secret the receiver accepts, with the
//!   timestamp tolerance, in constant time.
//! - [`verify_ed25519`]: an ed25519 webhook's `webhook-signature` (`v1a,<base64>` over
//!   `"{webhook-id}.{webhook-timestamp}.{body}"`) against the subscription's public keys.
//! - [`parse_headers`]: the `X-Lerian-*` headers as a typed [`Delivery`].
//! - [`pull::PullConsumer`] (feature `pull`): paging a pull subscription with `next_cursor`,
//!   waiting out `429 Retry-After`.

#[cfg(feature = "pull")]
pub mod pull;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// How far a delivery's timestamp may be from now by default.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// The event type of the hub's verification probe.
pub const VERIFICATION_EVENT_TYPE: &str = "streaming_hub.verification";

pub const TIMESTAMP: &str = "X-Webhook-Timestamp";
pub const SIGNATURE: &str = "X-Webhook-Signature";
const STANDARD_TIMESTAMP: &str = "webhook-timestamp";

/// Why a delivery is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    MissingHeader,
    MalformedHeader,
    TimestampTooOld,
    TimestampTooNew,
    NoMatchingSignature,
}

impl Kind {
    /// The name the shared vectors and the other packages use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingHeader => "missing_header",
            Self::MalformedHeader => "malformed_header",
            Self::TimestampTooOld => "timestamp_too_old",
            Self::TimestampTooNew => "timestamp_too_new",
            Self::NoMatchingSignature => "no_matching_signature",
        }
    }
}

/// A refused delivery: its kind and the header at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub kind: Kind,
    pub header: &'static str,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.kind.as_str(), self.header)
    }
}

impl std::error::Error for Invalid {}

fn invalid(kind: Kind, header: &'static str) -> Invalid {
    Invalid { kind, header }
}

/// Request headers, however a server holds them: every value of a name, case-insensitively.
pub trait Headers {
    fn values(&self, name: &str) -> Vec<String>;
}

impl Headers for http::HeaderMap {
    fn values(&self, name: &str) -> Vec<String> {
        self.get_all(name).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Headers for [(K, V)] {
    fn values(&self, name: &str) -> Vec<String> {
        self.iter().filter(|(k, _)| k.as_ref().eq_ignore_ascii_case(name)).map(|(_, v)| v.as_ref().to_owned()).collect()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Headers for Vec<(K, V)> {
    fn values(&self, name: &str) -> Vec<String> {
        self.as_slice().values(name)
    }
}

fn single(headers: &(impl Headers + ?Sized), name: &'static str) -> Result<String, Invalid> {
    let mut values = headers.values(name);
    match values.len() {
        0 => Err(invalid(Kind::MissingHeader, name)),
        1 if !values[0].is_empty() => Ok(values.remove(0)),
        _ => Err(invalid(Kind::MalformedHeader, name)),
    }
}

fn optional(headers: &(impl Headers + ?Sized), name: &'static str) -> Result<Option<String>, Invalid> {
    let mut values = headers.values(name);
    match values.len() {
        0 => Ok(None),
        1 => Ok(Some(values.remove(0))),
        _ => Err(invalid(Kind::MalformedHeader, name)),
    }
}

fn unsigned(raw: &str) -> Option<i64> {
    (!raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit())).then(|| raw.parse().ok()).flatten()
}

fn mac(secret: &str, timestamp: &str, body: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(b"v1:");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// The `X-Webhook-Signature` value the hub sends; for tests of a receiver.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    format!("v1,sha256={}", hex::encode(mac(secret, &timestamp.to_string(), body)))
}

/// Every `v1,sha256=<hex>` in the values, which a framework may have joined with commas.
fn candidates(values: &[String]) -> Vec<[u8; 32]> {
    let mut out = Vec::new();
    for value in values {
        let tokens: Vec<&str> = value.split(',').map(str::trim).collect();
        for pair in tokens.windows(2) {
            let Some(hexed) = pair[1].strip_prefix("sha256=") else { continue };
            let mut digest = [0u8; 32];
            if pair[0] == "v1" && hex::decode_to_slice(hexed, &mut digest).is_ok() {
                out.push(digest);
            }
        }
    }
    out
}

/// Whether a delivery's `timestamp` (read from `header`) is within `tolerance` of `now`.
fn within_tolerance(timestamp: i64, now: SystemTime, tolerance: Duration, header: &'static str) -> Result<(), Invalid> {
    let now = match now.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(_) => 0,
    };
    let limit = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    let age = now.saturating_sub(timestamp);
    if age > limit {
        return Err(invalid(Kind::TimestampTooOld, header));
    }
    if age.saturating_neg() > limit {
        return Err(invalid(Kind::TimestampTooNew, header));
    }
    Ok(())
}

/// Checks a delivery with the default tolerance; see [`verify_with`].
pub fn verify<S: AsRef<str>>(
    secrets: &[S],
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now: SystemTime,
) -> Result<(), Invalid> {
    verify_with(secrets, headers, body, now, DEFAULT_TOLERANCE)
}

/// Checks a delivery on its raw body: one numeric `X-Webhook-Timestamp` within `tolerance` of
/// `now`, and an `X-Webhook-Signature` value that matches one of `secrets` (each exactly as the
/// API showed it; both during a rotation).
pub fn verify_with<S: AsRef<str>>(
    secrets: &[S],
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), Invalid> {
    let raw = single(headers, TIMESTAMP)?;
    let timestamp = unsigned(&raw).ok_or(invalid(Kind::MalformedHeader, TIMESTAMP))?;
    let signatures = headers.values(SIGNATURE);
    if signatures.is_empty() {
        return Err(invalid(Kind::MissingHeader, SIGNATURE));
    }
    within_tolerance(timestamp, now, tolerance, TIMESTAMP)?;
    let found = candidates(&signatures);
    for secret in secrets {
        let expected = mac(secret.as_ref(), &raw, body);
        if found.iter().any(|c| bool::from(c.ct_eq(&expected))) {
            return Ok(());
        }
    }
    Err(invalid(Kind::NoMatchingSignature, SIGNATURE))
}

/// The headers of an ed25519 webhook's delivery (Standard Webhooks').
pub const WEBHOOK_ID: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// Checks an ed25519 webhook's delivery with the default tolerance; see [`verify_ed25519_with`].
pub fn verify_ed25519<S: AsRef<str>>(
    public_keys: &[S],
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now: SystemTime,
) -> Result<(), Invalid> {
    verify_ed25519_with(public_keys, headers, body, now, DEFAULT_TOLERANCE)
}

/// Checks a delivery of an ed25519 webhook (`sink.signature` `"ed25519"`) on its raw body: one
/// `webhook-id`, one numeric `webhook-timestamp` within `tolerance` of `now`, and a `v1a,<base64>`
/// value of `webhook-signature` (space-separated) that is an ed25519 signature of
/// `"{id}.{timestamp}.{body}"` by one of `public_keys` (`whpk_<base64>` as the API showed them;
/// both during a rotation).
pub fn verify_ed25519_with<S: AsRef<str>>(
    public_keys: &[S],
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), Invalid> {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    let id = single(headers, WEBHOOK_ID)?;
    let raw = single(headers, WEBHOOK_TIMESTAMP)?;
    let timestamp = unsigned(&raw).ok_or(invalid(Kind::MalformedHeader, WEBHOOK_TIMESTAMP))?;
    let signatures = headers.values(WEBHOOK_SIGNATURE);
    if signatures.is_empty() {
        return Err(invalid(Kind::MissingHeader, WEBHOOK_SIGNATURE));
    }
    within_tolerance(timestamp, now, tolerance, WEBHOOK_TIMESTAMP)?;
    let mut message = Vec::with_capacity(id.len() + raw.len() + body.len() + 2);
    message.extend_from_slice(id.as_bytes());
    message.push(b'.');
    message.extend_from_slice(raw.as_bytes());
    message.push(b'.');
    message.extend_from_slice(body);
    let keys: Vec<Vec<u8>> = public_keys
        .iter()
        .filter_map(|k| STANDARD.decode(k.as_ref().strip_prefix("whpk_").unwrap_or(k.as_ref())).ok())
        .filter(|k| k.len() == 32)
        .collect();
    let found = signatures
        .iter()
        .flat_map(|v| v.split(' '))
        .filter_map(|token| token.strip_prefix("v1a,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .any(|signature| {
            keys.iter().any(|key| {
                ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key)
                    .verify(&message, &signature)
                    .is_ok()
            })
        });
    if found { Ok(()) } else { Err(invalid(Kind::NoMatchingSignature, WEBHOOK_SIGNATURE)) }
}

/// What the hub's headers say about one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The CloudEvents id: the same on every redelivery. Deduplicate by it.
    pub event_id: String,
    /// New for every attempt.
    pub delivery_id: String,
    /// The event key `<resourcetype>.<eventtype>`.
    pub event_type: String,
    pub tenant_id: String,
    pub subscription_id: String,
    pub attempt: u32,
    pub schema_version: Option<String>,
    pub event_time: Option<String>,
    pub subject: Option<String>,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// The attempt's Unix time in seconds.
    pub timestamp: i64,
}

impl Delivery {
    /// The hub's verification probe: answer 2xx with a body that contains its challenge.
    pub fn is_verification(&self) -> bool {
        self.event_type == VERIFICATION_EVENT_TYPE
    }
}

/// Reads the `X-Lerian-*` headers and the timestamp. Verifies nothing: call [`verify`] first.
pub fn parse_headers(headers: &(impl Headers + ?Sized)) -> Result<Delivery, Invalid> {
    let event_id = single(headers, "X-Lerian-Event-Id")?;
    let delivery_id = single(headers, "X-Lerian-Delivery-Id")?;
    let event_type = single(headers, "X-Lerian-Event-Type")?;
    let tenant_id = single(headers, "X-Lerian-Tenant-Id")?;
    let subscription_id = single(headers, "X-Lerian-Subscription-Id")?;
    let attempt = unsigned(&single(headers, "X-Lerian-Attempt")?)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n >= 1)
        .ok_or(invalid(Kind::MalformedHeader, "X-Lerian-Attempt"))?;
    let timestamp_header = if headers.values(TIMESTAMP).is_empty() && !headers.values(STANDARD_TIMESTAMP).is_empty() {
        STANDARD_TIMESTAMP
    } else {
        TIMESTAMP
    };
    let raw = single(headers, timestamp_header).map_err(|e| invalid(e.kind, TIMESTAMP))?;
    let timestamp = unsigned(&raw).ok_or(invalid(Kind::MalformedHeader, TIMESTAMP))?;
    Ok(Delivery {
        event_id,
        delivery_id,
        event_type,
        tenant_id,
        subscription_id,
        attempt,
        schema_version: optional(headers, "X-Lerian-Schema-Version")?,
        event_time: optional(headers, "X-Lerian-Event-Time")?,
        subject: optional(headers, "X-Lerian-Subject")?,
        traceparent: optional(headers, "traceparent")?,
        tracestate: optional(headers, "tracestate")?,
        timestamp,
    })
}
