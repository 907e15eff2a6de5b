//! The SQS and EventBridge sinks (SPEC §3.7), with the official AWS SDK.
//!
//! Clients are built per (region, endpoint, credentials) and reused. Each makes exactly one
//! request per attempt: the SDK's own retries are off, the dispatcher's curve decides. Credentials
//! come from the subscription; the default provider chain (instance role, environment) is used
//! only when the operator allows it.

use std::collections::HashMap;

use crate::cache::BoundedCache;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::{Failure, FailureKind, Message, Outcome, Sink};

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
        h.finish()
    }
}

/// Builds SDK configurations, refusing the default chain unless allowed.
#[derive(Debug)]
struct Configs {
    allow_default_chain: bool,
    /// The HTTP client of a tenant's own endpoint: it resolves through the address guard.
    guarded: aws_smithy_runtime_api::client::http::SharedHttpClient,
}

impl Configs {
    fn new(allow_default_chain: bool) -> Self {
        use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
        let guarded = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
            .build_with_resolver(crate::guard::GuardedDns);
        Self { allow_default_chain, guarded }
    }
}

impl Configs {
    async fn load(&self, e: &AwsEndpoint) -> Result<SdkConfig, Failure> {
        let timeouts = TimeoutConfig::builder()
            .operation_timeout(e.timeout)
            .connect_timeout(e.timeout.min(Duration::from_secs(10)))
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(e.region.clone()))
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts);
        match &e.credentials {
            Some(c) => {
                loader = loader.credentials_provider(aws_credential_types::Credentials::new(
                    c.access_key_id.clone(),
                    c.secret_access_key.clone(),
                    c.session_token.clone(),
                    None,
                    "streaming-hub",
                ));
            }
            None if !self.allow_default_chain => {
                return Err(Failure {
                    retryable: true,
                    kind: FailureKind::Unauthorized,
                    reason: "no credentials are configured for this destination, and the default AWS credential \
                             chain is not allowed (STREAMING_HUB_AWS_DEFAULT_CREDENTIALS)"
                        .to_owned(),
                    status: None,
                    response: None,
                });
            }
            None => {}
        }
        if let Some(url) = &e.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if e.check_endpoint {
            loader = loader.http_client(self.guarded.clone());
        }
        Ok(loader.load().await)
    }
}

/// Classifies an SDK error by its class and service error code; never includes credentials.
fn classify<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    e: &SdkError<E, R>,
    timeout: Duration,
    service: &str,
) -> Failure {
    let failure = |kind, reason: String| Failure { retryable: true, kind, reason, status: None, response: None };
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
            failure(kind, format!("{service} refused: {code}: {message}"))
        }
        SdkError::ResponseError(_) => failure(FailureKind::Refused, format!("{service} sent an unreadable answer")),
        _ => failure(FailureKind::Refused, format!("{service} request could not be built")),
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The attributes SQS carries natively (it allows 10); the rest travel packed as JSON.
const SQS_NATIVE: [&str; 9] = [
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
/// The tenth attribute: every other header, as a JSON object.
pub const SQS_EXTRA_HEADERS: &str = "x-lerian-extra-headers";

/// The CloudEvents attributes of a message as `(header, value)` pairs.
fn attributes(m: &Message<'_>) -> Vec<(String, String)> {
    let mut a = vec![
        ("ce-specversion".to_owned(), "1.0".to_owned()),
        ("ce-id".to_owned(), m.ce_id.to_string()),
        ("ce-source".to_owned(), m.source.to_owned()),
        ("ce-type".to_owned(), m.ce_type.to_owned()),
        ("ce-time".to_owned(), m.time.to_owned()),
        ("ce-tenantid".to_owned(), m.tenant.to_owned()),
        ("ce-schemaversion".to_owned(), m.schema_version.to_owned()),
        ("ce-resourcetype".to_owned(), m.resource_type.to_owned()),
        ("ce-eventtype".to_owned(), m.event_type.to_owned()),
        ("ce-datacontenttype".to_owned(), m.content_type.to_owned()),
        ("x-lerian-delivery-id".to_owned(), m.delivery_id.to_string()),
        ("x-lerian-attempt".to_owned(), m.attempt.to_string()),
    ];
    let optional = [
        ("ce-subject", m.subject),
        ("ce-dataschema", m.data_schema),
        ("traceparent", m.traceparent),
        ("tracestate", m.tracestate),
    ];
    for (k, v) in optional {
        if let Some(v) = v {
            a.push((k.to_owned(), v.to_owned()));
        }
    }
    for (name, value) in m.extensions {
        a.push((format!("ce-{name}"), value.clone()));
    }
    a
}

/// An SQS queue.
#[derive(Debug, Clone)]
pub struct SqsTarget {
    pub queue_url: String,
    pub endpoint: AwsEndpoint,
}

/// The SQS sink.
#[derive(Debug)]
pub struct SqsSink {
    configs: Configs,
    clients: Mutex<BoundedCache<u64, aws_sdk_sqs::Client>>,
}

impl SqsSink {
    pub fn new(allow_default_chain: bool) -> Self {
        crate::webhook::install_crypto_provider();
        Self { configs: Configs::new(allow_default_chain), clients: Mutex::new(BoundedCache::default()) }
    }

    async fn client(&self, e: &AwsEndpoint) -> Result<aws_sdk_sqs::Client, Failure> {
        let key = e.cache_key();
        if let Some(c) = self.clients.lock().await.get(&key, std::time::Instant::now()) {
            return Ok(c);
        }
        e.guard().await?;
        let client = aws_sdk_sqs::Client::new(&self.configs.load(e).await?);
        self.clients.lock().await.insert(key, client.clone(), std::time::Instant::now());
        Ok(client)
    }

    async fn send(
        &self,
        target: &SqsTarget,
        body: String,
        attrs: Vec<(String, String)>,
        group: &str,
        dedup: &str,
    ) -> Result<(), Failure> {
        use aws_sdk_sqs::types::MessageAttributeValue;
        let client = self.client(&target.endpoint).await?;
        let mut native = HashMap::new();
        let mut extra = Map::new();
        for (k, v) in attrs {
            if SQS_NATIVE.contains(&k.as_str()) && !v.is_empty() {
                let value = MessageAttributeValue::builder().data_type("String").string_value(v).build();
                if let Ok(value) = value {
                    native.insert(k, value);
                }
            } else {
                extra.insert(k, Value::String(v));
            }
        }
        if !extra.is_empty() {
            let packed = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(Value::Object(extra).to_string())
                .build();
            if let Ok(packed) = packed {
                native.insert(SQS_EXTRA_HEADERS.to_owned(), packed);
            }
        }
        let mut request =
            client.send_message().queue_url(&target.queue_url).message_body(body).set_message_attributes(Some(native));
        if target.queue_url.ends_with(".fifo") {
            request = request.message_group_id(group).message_deduplication_id(dedup);
        }
        request.send().await.map(|_| ()).map_err(|e| classify(&e, target.endpoint.timeout, "SQS"))
    }
}

#[async_trait]
impl Sink for SqsSink {
    type Target = SqsTarget;

    async fn deliver(&self, target: &SqsTarget, m: &Message<'_>) -> Outcome {
        let mut attrs = attributes(m);
        let body = match std::str::from_utf8(m.payload) {
            Ok(text) => text.to_owned(),
            Err(_) => {
                attrs.push(("x-lerian-body-encoding".to_owned(), "base64".to_owned()));
                b64(m.payload)
            }
        };
        match self.send(target, body, attrs, m.tenant, &m.ce_id.to_string()).await {
            Ok(()) => Outcome::Delivered { status: None, response: None },
            Err(f) => Outcome::Failed(f),
        }
    }

    async fn probe(&self, target: &SqsTarget, tenant: &str, subscription_id: Uuid) -> Result<(), Failure> {
        let id = Uuid::now_v7().to_string();
        let body = json!({"type": "streaming_hub.verification", "subscription_id": subscription_id}).to_string();
        let attrs = vec![
            ("ce-id".to_owned(), id.clone()),
            ("ce-type".to_owned(), "streaming_hub.verification".to_owned()),
            ("ce-tenantid".to_owned(), tenant.to_owned()),
        ];
        self.send(target, body, attrs, tenant, &id).await
    }
}

/// An EventBridge bus.
#[derive(Debug, Clone)]
pub struct EventBridgeTarget {
    /// A bus name or ARN.
    pub event_bus: String,
    pub endpoint: AwsEndpoint,
}

/// The EventBridge sink.
#[derive(Debug)]
pub struct EventBridgeSink {
    configs: Configs,
    clients: Mutex<BoundedCache<u64, aws_sdk_eventbridge::Client>>,
}

/// The CloudEvent in structured JSON form: attributes plus `data` (or `data_base64`).
pub fn structured(m: &Message<'_>) -> Value {
    let mut doc = Map::new();
    for (k, v) in attributes(m) {
        if let Some(name) = k.strip_prefix("ce-") {
            doc.insert(name.to_owned(), Value::String(v));
        } else if k == "traceparent" || k == "tracestate" {
            doc.insert(k, Value::String(v));
        }
    }
    let json_data = hub_core::envelope::is_json_media_type(m.content_type)
        .then(|| serde_json::from_slice::<Value>(m.payload).ok())
        .flatten();
    match (json_data, std::str::from_utf8(m.payload)) {
        (Some(data), _) => doc.insert("data".to_owned(), data),
        (None, Ok(text)) => doc.insert("data".to_owned(), Value::String(text.to_owned())),
        (None, Err(_)) => doc.insert("data_base64".to_owned(), Value::String(b64(m.payload))),
    };
    Value::Object(doc)
}

impl EventBridgeSink {
    pub fn new(allow_default_chain: bool) -> Self {
        crate::webhook::install_crypto_provider();
        Self { configs: Configs::new(allow_default_chain), clients: Mutex::new(BoundedCache::default()) }
    }

    async fn client(&self, e: &AwsEndpoint) -> Result<aws_sdk_eventbridge::Client, Failure> {
        let key = e.cache_key();
        if let Some(c) = self.clients.lock().await.get(&key, std::time::Instant::now()) {
            return Ok(c);
        }
        e.guard().await?;
        let client = aws_sdk_eventbridge::Client::new(&self.configs.load(e).await?);
        self.clients.lock().await.insert(key, client.clone(), std::time::Instant::now());
        Ok(client)
    }

    async fn put(
        &self,
        target: &EventBridgeTarget,
        source: &str,
        detail_type: &str,
        time: Option<i64>,
        detail: String,
    ) -> Result<(), Failure> {
        use aws_sdk_eventbridge::types::PutEventsRequestEntry;
        let client = self.client(&target.endpoint).await?;
        let mut entry = PutEventsRequestEntry::builder()
            .source(source)
            .detail_type(detail_type)
            .detail(detail)
            .event_bus_name(&target.event_bus);
        if let Some(secs) = time {
            entry = entry.time(aws_sdk_eventbridge::primitives::DateTime::from_secs(secs));
        }
        let out = client
            .put_events()
            .entries(entry.build())
            .send()
            .await
            .map_err(|e| classify(&e, target.endpoint.timeout, "EventBridge"))?;
        if out.failed_entry_count() > 0 {
            let entry = out.entries().first();
            let code = entry.and_then(|e| e.error_code()).unwrap_or("Unknown");
            let message = entry.and_then(|e| e.error_message()).unwrap_or_default();
            return Err(Failure {
                retryable: true,
                kind: FailureKind::Refused,
                reason: format!("EventBridge refused the entry: {code}: {message}"),
                status: None,
                response: None,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for EventBridgeSink {
    type Target = EventBridgeTarget;

    async fn deliver(&self, target: &EventBridgeTarget, m: &Message<'_>) -> Outcome {
        let time = chrono::DateTime::parse_from_rfc3339(m.time).ok().map(|t| t.timestamp());
        match self.put(target, m.source, m.ce_type, time, structured(m).to_string()).await {
            Ok(()) => Outcome::Delivered { status: None, response: None },
            Err(f) => Outcome::Failed(f),
        }
    }

    async fn probe(&self, target: &EventBridgeTarget, tenant: &str, subscription_id: Uuid) -> Result<(), Failure> {
        let detail =
            json!({"type": "streaming_hub.verification", "tenantid": tenant, "subscription_id": subscription_id});
        self.put(target, "streaming-hub", "streaming_hub.verification", None, detail.to_string()).await
    }
}
