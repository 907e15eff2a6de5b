//! What the AWS sinks share (SPEC §3.7): the official AWS SDK's clients, their endpoint and
//! credentials, error classification, the CloudEvents attributes, and the sink itself
//! ([`sink::AwsSink`], each service saying only what is its own).
//!
//! Clients are built per (region, endpoint, credentials) and reused. Each makes exactly one
//! request per attempt: the SDK's own retries are off, the dispatcher's curve decides. Credentials
//! come from the subscription: sealed keys, or a role assumed with the hub's own token
//! ([`web_identity`]); the default provider chain (instance role, environment) is used only when
//! the operator allows it.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use serde_json::{Map, Value};

use crate::sink::{Failure, FailureKind};

pub mod config;
pub mod schema;
pub mod sink;
pub mod web_identity;

use config::AwsAccess;
use web_identity::{AssumedRole, Exchanges, TokenIssuer, WebIdentityProvider};

/// Static AWS credentials from a subscription.
#[derive(Clone)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials").field("access_key_id", &self.access_key_id).finish_non_exhaustive()
    }
}

/// Where an AWS client connects.
#[derive(Debug, Clone)]
pub struct AwsEndpoint {
    pub region: String,
    pub endpoint_url: Option<String>,
    pub credentials: Option<AwsCredentials>,
    /// The role assumed with the hub's token, in place of keys.
    pub role: Option<AssumedRole>,
    pub timeout: Duration,
    /// `endpoint_url` is the tenant's own: its host must pass the address guard before a client
    /// is built for it (the operator's endpoint and AWS's own are trusted).
    pub check_endpoint: bool,
}

impl AwsEndpoint {
    /// The address guard for a tenant's own endpoint, before a client is built for it (a refusal
    /// classified for the tenant; the client's own resolver checks again at each connection).
    async fn guard(&self) -> Result<(), Failure> {
        match (&self.endpoint_url, self.check_endpoint) {
            (Some(url), true) => crate::guard::dial_addrs(url, false).await.map(|_| ()),
            _ => Ok(()),
        }
    }

    fn cache_key(&self) -> u64 {
        let mut h = DefaultHasher::new();
        (&self.region, &self.endpoint_url, self.timeout).hash(&mut h);
        if let Some(c) = &self.credentials {
            (&c.access_key_id, &c.secret_access_key, &c.session_token).hash(&mut h);
        }
        self.role.hash(&mut h);
        h.finish()
    }
}

/// How a process's AWS sinks build their clients.
#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    /// The hub's OIDC issuer, when it is one: destinations may then assume a role with its
    /// tokens.
    pub issuer: Option<Arc<dyn TokenIssuer>>,
    /// The default credential chain (instance role, environment) may serve destinations that
    /// carry no credentials.
    pub default_chain: bool,
    /// The operator's endpoint, for destinations that name none.
    pub endpoint_url: Option<String>,
    /// Whether sinks may connect to private addresses.
    pub allow_private: bool,
}

impl From<&crate::sink::Settings> for AwsSettings {
    fn from(s: &crate::sink::Settings) -> Self {
        Self {
            issuer: s.issuer.clone(),
            default_chain: s.default_chain,
            endpoint_url: s.aws_endpoint_url.clone(),
            allow_private: s.allow_private,
        }
    }
}

impl AwsSettings {
    /// Where a destination's client connects, with its opened credentials.
    pub(crate) fn endpoint(
        &self,
        region: &str,
        endpoint: Option<&str>,
        access: Option<&AwsAccess>,
        secrets: &crate::sink::Secrets,
        timeout: Duration,
    ) -> AwsEndpoint {
        let owner = secrets.owner.as_ref();
        let role = access.map(|a| AssumedRole {
            role_arn: a.web_identity.role_arn.clone(),
            session_name: a.web_identity.session_name.clone().unwrap_or_else(|| match owner {
                Some(o) => format!("streaming-hub-{}", o.subscription.simple()),
                None => "streaming-hub".to_owned(),
            }),
            subject: owner.and_then(|o| hub_core::oidc::subject(&o.tenant, o.subscription)),
        });
        let text = |c: &Value, name: &str| c[name].as_str().unwrap_or_default().to_owned();
        AwsEndpoint {
            region: region.to_owned(),
            check_endpoint: endpoint.is_some() && !self.allow_private,
            endpoint_url: endpoint.map(str::to_owned).or_else(|| self.endpoint_url.clone()),
            role,
            credentials: secrets.credentials.as_ref().map(|c| AwsCredentials {
                access_key_id: text(c, "access_key_id"),
                secret_access_key: text(c, "secret_access_key"),
                session_token: c["session_token"].as_str().map(str::to_owned),
            }),
            timeout,
        }
    }
}

/// One service's SDK clients, built per (region, endpoint, credentials) and reused, with the
/// settings their endpoints come from.
#[derive(Debug)]
pub(crate) struct Clients<C> {
    configs: Configs,
    pub settings: AwsSettings,
    cache: tokio::sync::Mutex<crate::cache::BoundedCache<u64, C>>,
}

impl<C: Clone> Clients<C> {
    pub(crate) fn new(settings: AwsSettings) -> Self {
        crate::sink::install_crypto_provider();
        Self {
            configs: Configs::new(settings.default_chain, settings.issuer.clone()),
            settings,
            cache: Default::default(),
        }
    }

    /// The client of `e`: the cached one, or one `make` builds once the address guard cleared
    /// a tenant's own endpoint.
    pub(crate) async fn get(&self, e: &AwsEndpoint, make: impl FnOnce(&SdkConfig) -> C) -> Result<C, Failure> {
        let key = e.cache_key();
        if let Some(c) = self.cache.lock().await.get(&key, std::time::Instant::now()) {
            return Ok(c);
        }
        e.guard().await?;
        let client = make(&self.configs.load(e).await?);
        self.cache.lock().await.insert(key, client.clone(), std::time::Instant::now());
        Ok(client)
    }
}

/// Builds SDK configurations, refusing the default chain unless allowed.
#[derive(Debug)]
struct Configs {
    allow_default_chain: bool,
    issuer: Option<Arc<dyn TokenIssuer>>,
    exchanges: Exchanges,
    /// The HTTP client of a tenant's own endpoint: it resolves through the address guard.
    guarded: aws_smithy_runtime_api::client::http::SharedHttpClient,
}

/// Credentials refused before any request: the reason, as an attempt's failure.
fn unauthorized(reason: &str) -> Failure {
    Failure {
        retryable: true,
        kind: FailureKind::Unauthorized,
        reason: reason.to_owned(),
        status: None,
        response: None,
        retry_after: None,
    }
}

impl Configs {
    fn new(allow_default_chain: bool, issuer: Option<Arc<dyn TokenIssuer>>) -> Self {
        use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
        let guarded = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
            .build_with_resolver(crate::guard::GuardedDns);
        Self { allow_default_chain, issuer, exchanges: Exchanges::default(), guarded }
    }

    /// Region, endpoint, timeouts and HTTP client of `e`, credentials left to the caller.
    fn loader(&self, e: &AwsEndpoint) -> aws_config::ConfigLoader {
        let timeouts = TimeoutConfig::builder()
            .operation_timeout(e.timeout)
            .connect_timeout(e.timeout.min(Duration::from_secs(10)))
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(e.region.clone()))
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts);
        if let Some(url) = &e.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if e.check_endpoint {
            loader = loader.http_client(self.guarded.clone());
        }
        loader
    }

    async fn load(&self, e: &AwsEndpoint) -> Result<SdkConfig, Failure> {
        let loader = self.loader(e);
        let loader = match (&e.role, &e.credentials) {
            (Some(role), _) => {
                let issuer = self.issuer.clone().ok_or_else(|| {
                    unauthorized(
                        "this destination assumes a role with the hub's token, and this hub is not an OIDC \
                         issuer (STREAMING_HUB_OIDC_ISSUER)",
                    )
                })?;
                // STS is asked where the destination's endpoint is (emulators serve it there too),
                // else at the region's own.
                let sts = aws_sdk_sts::Client::new(&self.loader(e).no_credentials().load().await);
                let provider =
                    WebIdentityProvider::new(issuer, sts, role.clone(), e.timeout, &self.exchanges, e.cache_key());
                loader.credentials_provider(provider).identity_cache(
                    aws_config::identity::IdentityCache::lazy()
                        .buffer_time(Duration::from_secs(300))
                        .load_timeout(e.timeout)
                        .build(),
                )
            }
            (None, Some(c)) => loader.credentials_provider(aws_credential_types::Credentials::new(
                c.access_key_id.clone(),
                c.secret_access_key.clone(),
                c.session_token.clone(),
                None,
                "streaming-hub",
            )),
            (None, None) if !self.allow_default_chain => {
                return Err(unauthorized(
                    "no credentials are configured for this destination, and the default AWS credential chain is \
                     not allowed (STREAMING_HUB_AWS_DEFAULT_CREDENTIALS)",
                ));
            }
            (None, None) => loader,
        };
        Ok(loader.load().await)
    }
}

/// Classifies an SDK error by its class and service error code; never includes credentials. A
/// service error whose code is in `permanent` (a resource that does not exist, a message the
/// service can never take) is not retryable.
pub(crate) fn classify<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug + 'static>(
    e: &SdkError<E, R>,
    timeout: Duration,
    service: &str,
    permanent: &[&str],
) -> Failure {
    let failure = |kind, reason: String| Failure {
        retryable: true,
        kind,
        reason,
        status: None,
        response: None,
        retry_after: None,
    };
    if let Some(reason) = web_identity::not_assumed(e) {
        return failure(FailureKind::Unauthorized, reason);
    }
    match e {
        SdkError::TimeoutError(_) => {
            failure(FailureKind::Timeout, format!("{service} did not answer within {} ms", timeout.as_millis()))
        }
        SdkError::DispatchFailure(d) if d.is_timeout() => {
            failure(FailureKind::Timeout, format!("{service} did not answer within {} ms", timeout.as_millis()))
        }
        SdkError::DispatchFailure(_) => failure(FailureKind::Unreachable, format!("{service} could not be reached")),
        SdkError::ServiceError(s) => {
            let code = s.err().code().unwrap_or("Unknown").to_owned();
            let message = s.err().message().unwrap_or_default().to_owned();
            let auth = [
                "InvalidClientTokenId",
                "UnrecognizedClientException",
                "SignatureDoesNotMatch",
                "AccessDenied",
                "AccessDeniedException",
                "InvalidSecurity",
                "ExpiredToken",
            ];
            let kind =
                if auth.iter().any(|a| code.contains(a)) { FailureKind::Unauthorized } else { FailureKind::Refused };
            let retryable = !permanent.contains(&code.as_str());
            Failure { retryable, ..failure(kind, format!("{service} refused: {code}: {message}")) }
        }
        SdkError::ResponseError(_) => failure(FailureKind::Refused, format!("{service} sent an unreadable answer")),
        _ => failure(FailureKind::Refused, format!("{service} request could not be built")),
    }
}

/// The attributes SQS and SNS carry natively (both allow 10 message attributes); the rest travel
/// packed as JSON in the tenth.
const NATIVE_ATTRIBUTES: [&str; 9] = [
    "ce-id",
    "ce-source",
    "ce-type",
    "ce-time",
    "ce-tenantid",
    "ce-schemaversion",
    "ce-resourcetype",
    "ce-eventtype",
    "traceparent",
];

/// The tenth message attribute of SQS and SNS: every other header, as a JSON object.
pub const EXTRA_HEADERS: &str = "x-lerian-extra-headers";

/// Packs a message's headers into at most 10 message attributes: the native ones by name, every
/// other one in [`EXTRA_HEADERS`]. An empty value cannot be a native attribute and travels packed.
pub(crate) fn packed_attributes(attrs: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut native = Vec::with_capacity(NATIVE_ATTRIBUTES.len() + 1);
    let mut extra = Map::new();
    for (k, v) in attrs {
        if NATIVE_ATTRIBUTES.contains(&k.as_str()) && !v.is_empty() {
            native.push((k, v));
        } else {
            extra.insert(k, Value::String(v));
        }
    }
    if !extra.is_empty() {
        native.push((EXTRA_HEADERS.to_owned(), Value::Object(extra).to_string()));
    }
    native
}

/// A body as SQS and SNS carry it (text): UTF-8 as it is, anything else base64 with
/// `x-lerian-body-encoding: base64` among the attributes.
pub(crate) fn text_body(payload: &[u8], attrs: &mut Vec<(String, String)>) -> String {
    match std::str::from_utf8(payload) {
        Ok(text) => text.to_owned(),
        Err(_) => {
            attrs.push(("x-lerian-body-encoding".to_owned(), "base64".to_owned()));
            crate::message::b64(payload)
        }
    }
}

/// A verification message as SQS and SNS carry it: a new id, the JSON body, and its attributes.
pub(crate) struct Verification {
    pub id: String,
    pub body: String,
    pub attributes: Vec<(String, String)>,
}

impl Verification {
    /// The verification document of the services that carry one JSON record (EventBridge's
    /// detail, a Kinesis record, an S3 object), the tenant in it.
    pub(crate) fn record(tenant: &str, subscription_id: uuid::Uuid) -> String {
        serde_json::json!({"type": "streaming_hub.verification", "tenantid": tenant, "subscription_id": subscription_id})
            .to_string()
    }

    pub(crate) fn new(tenant: &str, subscription_id: uuid::Uuid) -> Self {
        let id = uuid::Uuid::now_v7().to_string();
        let body =
            serde_json::json!({"type": "streaming_hub.verification", "subscription_id": subscription_id}).to_string();
        let attributes = vec![
            ("ce-id".to_owned(), id.clone()),
            ("ce-type".to_owned(), "streaming_hub.verification".to_owned()),
            ("ce-tenantid".to_owned(), tenant.to_owned()),
        ];
        Self { id, body, attributes }
    }
}
