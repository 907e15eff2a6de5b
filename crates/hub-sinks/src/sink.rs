//! What every sink is made of: the trait each sink's folder implements ([`TypedSink`], its own
//! description: name, configuration, validation, constructor, attempt and probe), the outcome it
//! classifies, the secrets it is handed and the settings of a process. It names no sink and no
//! destination type: the registry (`registry.rs`) is built from the list in `lib.rs`, and every
//! sink folder depends on this module, never the other way.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::fields::SinkConfig;
use crate::message::{Message, attributes};

/// Installs the process's TLS crypto provider once (ring, as the database driver uses).
pub fn install_crypto_provider() {
    // Fails only when a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Signs the short-lived tokens the hub presents to a cloud's token service (STS): the hub's
/// OIDC issuer.
pub trait TokenIssuer: Send + Sync + std::fmt::Debug {
    /// A token naming `subject`, meant for `audience`.
    fn token(&self, subject: &str, audience: &str) -> Result<String, String>;
}

/// What the sinks of a process are made with.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Sinks may connect to private addresses.
    pub allow_private: bool,
    /// The default credential chain of a cloud's SDK (instance role, environment) may serve
    /// destinations that carry no credentials.
    pub default_chain: bool,
    /// The operator's AWS endpoint, for destinations that name none.
    pub aws_endpoint_url: Option<String>,
    /// The hub's OIDC issuer, when it is one: destinations may then assume a role with its
    /// tokens.
    pub issuer: Option<Arc<dyn TokenIssuer>>,
}

/// Timeout of one broker or AWS call.
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest part of a destination's response kept with an attempt.
pub const RESPONSE_CAP: usize = 4096;

/// Why an attempt failed, classified for the dispatcher. Never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// False when retrying cannot help (the dispatcher still follows its policy).
    pub retryable: bool,
    pub kind: FailureKind,
    pub reason: String,
    pub status: Option<u16>,
    pub response: Option<String>,
    /// How long the destination asked to be left alone (`Retry-After` on a `429` or `503`).
    pub retry_after: Option<Duration>,
}

/// What a tenant is told of a destination that could not be reached or is not allowed,
/// whatever the cause: "does not resolve", "resolves to a private address" and "refused the
/// connection" would let a tenant map the operator's internal network by trying names. The
/// cause goes to the operator's log and metrics.
pub const NOT_REACHED: &str = "the destination could not be reached, or is not allowed";

impl Failure {
    /// The failure's kind as a tenant sees it: unreachable and refused by the guard are one.
    pub fn tenant_kind(&self) -> &'static str {
        match self.kind {
            FailureKind::Unreachable | FailureKind::Forbidden => FailureKind::Unreachable.as_str(),
            other => other.as_str(),
        }
    }

    /// The reason as a tenant sees it (verification results, attempts, dead letters):
    /// [`NOT_REACHED`] for every destination that could not be reached or is not allowed.
    pub fn tenant_reason(&self) -> &str {
        match self.kind {
            FailureKind::Unreachable | FailureKind::Forbidden => NOT_REACHED,
            _ => &self.reason,
        }
    }

    /// The reason as it may outlive the event (a subscription's disabled reason, which erasure
    /// does not reach): a transform's is what the tenant's code threw, which may quote the
    /// event, so it is named, never quoted.
    pub fn standing_reason(&self) -> &str {
        match self.kind {
            FailureKind::Transform => "the subscription's transform failed (its attempts say why)",
            _ => self.tenant_reason(),
        }
    }
}

/// The class of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The destination answered and refused (non-2xx, nack, API error).
    Refused,
    /// It could not be reached (DNS, connection, TLS).
    Unreachable,
    /// It did not answer in time.
    Timeout,
    /// It refused the credentials.
    Unauthorized,
    /// The hub's guard refused the destination (private address).
    Forbidden,
    /// The subscription's transform threw, ran out of its budget or answered something that
    /// cannot be sent (SPEC §10): the destination was not reached.
    Transform,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::Transform => "transform_failed",
        }
    }
}

/// The outcome of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered {
        status: Option<u16>,
        response: Option<String>,
        /// The destination took the message but its answer did not complete in time (a `2xx`
        /// head, then a body that stalled): delivered, and felt by its allowance as a timeout.
        stalled: bool,
    },
    Failed(Failure),
    /// The subscription's transform skipped the event (SPEC §10): nothing was sent.
    Skipped,
    /// The job ended without an attempt, for this reason (its event was erased): nothing was
    /// sent, and the destination is neither healthier nor failing.
    Cancelled(String),
}

impl Outcome {
    pub fn is_delivered(&self) -> bool {
        matches!(self, Outcome::Delivered { .. })
    }
}

/// What a successful probe learned of the destination.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Probed {
    /// The rate the receiver declared (`WebHook-Allowed-Rate`, requests per minute).
    pub allowed_rate: Option<f64>,
}

/// One sink type, described by its own folder: its name, its configuration (what is stored and
/// shown), how a request's `sink` object is read into it, how the sink is made for a process,
/// and one attempt or probe against a target. The registry derives everything else from this
/// (the `Destination` variant, the parse dispatch, the sink of a process, the OpenAPI schema);
/// every `TypedSink` is a `Sink`.
#[async_trait]
pub trait TypedSink: Sized + Send + Sync + std::fmt::Debug + 'static {
    /// Its `type` in the API and the store: 1 to 24 of `a-z`, `0-9` and `_`.
    const NAME: &'static str;
    /// How a destination of this type reads in one line (the console's list): `{field}` is the
    /// value of a field of the stored `sink` (a dotted path for a nested one), `{field?text}` is
    /// `text` when the field is set and not false.
    const SUMMARY: &'static str;
    /// Whether its deliveries are signed with the subscription's secret (which it is then given
    /// at creation and rotated).
    const SIGNED: bool = false;

    /// Its destination as stored and shown: it holds no secret (those are sealed apart as
    /// credentials). Its [`Self::Request`] is checked into it.
    type Config: SinkConfig + Serialize + DeserializeOwned + Clone + PartialEq + Eq + std::fmt::Debug + Send + Sync;
    /// What the API takes for it: its OpenAPI schema, with every field and its rules, which a
    /// request's `sink` object is read into and checked into the configuration and credentials.
    type Request: utoipa::ToSchema + crate::fields::SinkRequest<Config = Self::Config>;
    /// Where and how to deliver: the destination with its secrets opened.
    type Target: Send + Sync;

    /// The sink of a process (one for all its destinations of this type; it pools connections).
    fn build(settings: &Settings) -> Result<Self, String>;

    /// The target of a destination, its timeouts capped at `max_timeout`.
    fn target(&self, config: &Self::Config, secrets: &Secrets, max_timeout: Duration) -> Result<Self::Target, Failure>;

    /// Makes exactly one delivery attempt.
    async fn attempt(&self, target: &Self::Target, message: &Message<'_>) -> Outcome;

    /// Verifies the destination: `Ok` when it acknowledged a test message.
    async fn check(&self, target: &Self::Target, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure>;

    /// The headers or attributes a delivery carries before any signature: by default the
    /// CloudEvents attributes ([`attributes`]), as the brokers' headers and AWS message attributes
    /// carry them.
    fn headers(&self, _config: &Self::Config, message: &Message<'_>) -> Vec<(String, String)> {
        attributes(message)
    }
}

/// Locks a sink's shared state; a panic elsewhere while it was held leaves it usable (every such
/// state is a cache or a pool, whole after each step).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A failure with nothing more to tell than its kind and reason.
pub(crate) fn failure(retryable: bool, kind: FailureKind, reason: impl Into<String>) -> Failure {
    Failure { retryable, kind, reason: reason.into(), status: None, response: None, retry_after: None }
}

/// The process's TLS client configuration, certificates checked by the platform's verifier;
/// `h2`: offering HTTP/2 by ALPN (gRPC).
pub(crate) fn platform_tls(h2: bool) -> Result<std::sync::Arc<rustls::ClientConfig>, Failure> {
    use std::sync::{Arc, OnceLock};
    static PLAIN: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    static H2: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    let made = |alpn: Vec<Vec<u8>>| {
        install_crypto_provider();
        use rustls_platform_verifier::ConfigVerifierExt;
        rustls::ClientConfig::with_platform_verifier()
            .map(|mut c| {
                c.alpn_protocols = alpn;
                Arc::new(c)
            })
            .map_err(|e| e.to_string())
    };
    let config =
        if h2 { H2.get_or_init(|| made(vec![b"h2".to_vec()])) } else { PLAIN.get_or_init(|| made(Vec::new())) };
    config.clone().map_err(|e| failure(true, FailureKind::Unreachable, format!("TLS is not available: {e}")))
}

/// A destination the hub cannot use as stored: retried (an operator may fix the key or data).
pub(crate) fn misconfigured(reason: &str) -> Failure {
    refused(reason)
}

/// A refusal worth retrying, with nothing more to tell than its reason.
pub(crate) fn refused(reason: &str) -> Failure {
    failure(true, FailureKind::Refused, reason)
}

/// Cuts text at a character boundary at most `max` bytes long.
pub fn cap_text(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned();
    text.trim_end_matches('\u{fffd}').to_owned()
}

/// A subscription's secrets, opened in memory for one attempt or probe.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Webhook signing secrets: the current one first, the previous one during a rotation.
    pub signing: Vec<String>,
    /// Sink credentials, as the API took them (a JSON object).
    pub credentials: Option<serde_json::Value>,
    /// Whose destination it is: what the hub's web identity tokens name (AWS sinks that assume
    /// a role).
    pub owner: Option<Owner>,
}

/// The subscription a destination belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub tenant: String,
    pub subscription: Uuid,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("signing", &self.signing.len())
            .field("credentials", &self.credentials.is_some())
            .field("owner", &self.owner)
            .finish()
    }
}
