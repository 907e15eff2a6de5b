//! The Google Cloud Pub/Sub sink (SPEC §10): each event one message published to the destination's
//! topic — the body as its data, the CloudEvents attributes (`ce-*`, `content-type`) as message
//! attributes, and, for a subscription ordered by key, the event's ordering key as the message's.
//! Delivered when Pub/Sub answers with the message's id (it has stored it).
//!
//! `Publish` is called over gRPC (`grpc.rs`), every connection through the address guard; the
//! tenant's service account key signs the hub's token itself (`auth.rs`). An emulator named by
//! `endpoint_url` is called without a token.

mod auth;
pub mod config;
mod grpc;
pub mod schema;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub use self::auth::ServiceAccount;
use self::config::PubSubConfig;
use self::grpc::{Channels, Endpoint, proto};
use crate::message::{Message, attributes};
use crate::cache::BoundedCache;
use crate::sink::{Failure, FailureKind, Outcome, Probed, Secrets, Settings, TypedSink, failure, lock};

const PUBLISH: &str = "/google.pubsub.v1.Publisher/Publish";
/// Pub/Sub's limits on an attribute.
const MAX_ATTRIBUTE_KEY: usize = 256;
const MAX_ATTRIBUTE_VALUE: usize = 1024;

/// A Pub/Sub topic, with its key opened.
#[derive(Debug, Clone)]
pub struct PubSubTarget {
    pub endpoint: Endpoint,
    pub topic: String,
    account: Option<Arc<Account>>,
    pub timeout: Duration,
}

/// A stored service account key, read once rather than per attempt (reading and checking an RSA
/// key costs about 12 µs, a seventh of the hub's CPU a Pub/Sub delivery), and the token it last
/// signed, with when that stops being used.
#[derive(Debug)]
struct Account {
    key: ServiceAccount,
    token: Mutex<Option<(String, u64)>>,
}

impl Account {
    fn token(&self) -> Result<String, Failure> {
        let now = auth::now();
        let mut token = lock(&self.token);
        if let Some((token, until)) = token.as_ref() {
            if now < *until {
                return Ok(token.clone());
            }
        }
        let made = self.key.token(now).map_err(|e| failure(true, FailureKind::Unauthorized, e))?;
        *token = Some(made.clone());
        Ok(made.0)
    }
}

/// The Pub/Sub sink.
#[derive(Debug)]
pub struct PubSubSink {
    allow_private: bool,
    channels: Channels,
    /// Service account keys read, by the digest of the stored key.
    accounts: Mutex<BoundedCache<[u8; 32], Arc<Account>>>,
}

impl PubSubSink {
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private, channels: Channels::default(), accounts: Mutex::default() }
    }

    /// The account of a stored key, read when first used.
    fn account(&self, stored: &Value) -> Result<Arc<Account>, Failure> {
        let digest: [u8; 32] = Sha256::digest(stored.to_string().as_bytes()).into();
        let now = Instant::now();
        if let Some(account) = lock(&self.accounts).get(&digest, now) {
            return Ok(account);
        }
        let key = ServiceAccount::read(stored)
            .map_err(|_| failure(true, FailureKind::Unauthorized, "the stored service account key cannot be read"))?;
        let account = Arc::new(Account { key, token: Mutex::new(None) });
        lock(&self.accounts).insert(digest, Arc::clone(&account), now);
        Ok(account)
    }

    async fn publish(&self, target: &PubSubTarget, message: proto::PubsubMessage) -> Result<String, Failure> {
        let token = target.account.as_deref().map(Account::token).transpose()?;
        let request = proto::PublishRequest { topic: target.topic.clone(), messages: vec![message] };
        let answer: proto::PublishResponse = self
            .channels
            .call(&target.endpoint, PUBLISH, &request, token.as_deref(), self.allow_private, target.timeout)
            .await?;
        answer
            .message_ids
            .into_iter()
            .next()
            .ok_or_else(|| failure(true, FailureKind::Refused, "Pub/Sub answered without a message id"))
    }
}

/// The attributes of a message: its CloudEvents attributes and content type.
fn message_attributes(headers: Vec<(String, String)>) -> Result<HashMap<String, String>, Failure> {
    let mut out = HashMap::new();
    for (key, value) in headers {
        if key.len() > MAX_ATTRIBUTE_KEY || value.len() > MAX_ATTRIBUTE_VALUE || key.to_ascii_lowercase().starts_with("goog") {
            return Err(failure(
                false,
                FailureKind::Refused,
                format!("the attribute {key:?} cannot be sent to Pub/Sub (keys of at most 256 bytes not starting with goog, values of at most 1024)"),
            ));
        }
        out.insert(key, value);
    }
    Ok(out)
}

#[async_trait]
impl TypedSink for PubSubSink {
    const NAME: &'static str = "pubsub";
    const SUMMARY: &'static str = "projects/{project}/topics/{topic}";
    type Config = PubSubConfig;
    type Request = schema::PubsubSink;
    type Target = PubSubTarget;

    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.allow_private))
    }

    fn target(&self, config: &PubSubConfig, secrets: &Secrets, max_timeout: Duration) -> Result<PubSubTarget, Failure> {
        let endpoint = Endpoint::parse(config.endpoint())
            .ok_or_else(|| failure(false, FailureKind::Refused, "the stored endpoint is not readable"))?;
        let account = match secrets.credentials.as_ref().and_then(|c| c.get("credentials_json")) {
            Some(stored) => Some(self.account(stored)?),
            None => None,
        };
        Ok(PubSubTarget {
            endpoint,
            topic: config.topic_name(),
            account,
            timeout: crate::sink::BROKER_TIMEOUT.min(max_timeout),
        })
    }

    async fn attempt(&self, target: &PubSubTarget, m: &Message<'_>) -> Outcome {
        let mut headers = attributes(m);
        headers.push(("content-type".to_owned(), m.content_type.to_owned()));
        let attributes = match message_attributes(headers) {
            Ok(a) => a,
            Err(f) => return Outcome::Failed(f),
        };
        let message = proto::PubsubMessage {
            data: m.payload.to_vec(),
            attributes,
            ordering_key: m.ordering_key.unwrap_or_default().to_owned(),
        };
        match self.publish(target, message).await {
            Ok(id) => Outcome::Delivered { status: None, response: Some(json!({"message_id": id}).to_string()), stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    /// Publishes a verification message (`ce-type: streaming_hub.verification`) to the topic.
    async fn check(&self, target: &PubSubTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let attributes = [
            ("ce-specversion", "1.0".to_owned()),
            ("ce-id", Uuid::now_v7().to_string()),
            ("ce-source", "streaming-hub".to_owned()),
            ("ce-type", "streaming_hub.verification".to_owned()),
            ("ce-tenantid", tenant.to_owned()),
            ("content-type", "application/json".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let data = json!({"type": "streaming_hub.verification", "subscription_id": subscription_id}).to_string();
        let message = proto::PubsubMessage { data: data.into_bytes(), attributes, ordering_key: String::new() };
        self.publish(target, message).await.map(|_| Probed::default())
    }
}
