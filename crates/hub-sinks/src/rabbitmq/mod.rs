//! The RabbitMQ sink (SPEC §3.7): a persistent message published with publisher confirms and
//! `mandatory`, so an unroutable message is a failure, not a silent drop.
//!
//! One connection and one confirm-mode channel per destination are kept and reused; any error
//! drops them, and the next attempt connects afresh (a connection is never kept half-open).

use crate::cache::BoundedCache;
use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::tcp::TLSConfig;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{AsyncTcpStream, BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::message::{Message};
use crate::sink::{Failure, FailureKind, Outcome, Probed, Secrets, Settings, TypedSink};

pub mod config;
pub mod schema;

/// A RabbitMQ destination with its password opened.
#[derive(Clone)]
pub struct RabbitTarget {
    /// `amqp(s)://user@host:port/vhost`, without the password.
    pub url: String,
    pub password: Option<String>,
    pub exchange: String,
    /// May use `{resource}`, `{event}` and `{source}`.
    pub routing_key: String,
    pub timeout: Duration,
    /// Private addresses may be reached; otherwise a new connection's host must pass the
    /// address guard (checked where the connection is made, not per message), and the
    /// connection dials only the addresses it checked.
    pub allow_private: bool,
}

impl std::fmt::Debug for RabbitTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitTarget")
            .field("url", &self.url)
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .finish_non_exhaustive()
    }
}

impl RabbitTarget {
    /// The URL with the password put back, for connecting only.
    fn connect_url(&self) -> Result<String, Failure> {
        let mut url = url::Url::parse(&self.url).map_err(|_| refused("the RabbitMQ URL is invalid"))?;
        if let Some(p) = &self.password {
            url.set_password(Some(p)).map_err(|()| refused("the RabbitMQ URL cannot carry a password"))?;
        }
        Ok(url.to_string())
    }

    fn routing_key_for(&self, message: &Message<'_>) -> String {
        self.routing_key
            .replace("{resource}", message.resource_type)
            .replace("{event}", message.event_type)
            .replace("{source}", message.source)
    }
}

fn refused(reason: &str) -> Failure {
    crate::sink::refused(reason)
}

/// Classifies a client error; the text never carries the URL (it may hold the password).
fn classify(e: &lapin::Error, connecting: bool) -> Failure {
    let text = e.to_string();
    let upper = text.to_ascii_uppercase();
    let kind = if upper.contains("ACCESS_REFUSED") || upper.contains("ACCESSREFUSED") || upper.contains("AUTH") {
        FailureKind::Unauthorized
    } else if let lapin::ErrorKind::IOError(io) = e.kind() {
        match io.kind() {
            // RabbitMQ closes the socket on a failed login.
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof if connecting => {
                FailureKind::Unauthorized
            }
            _ => FailureKind::Unreachable,
        }
    } else if connecting && matches!(e.kind(), lapin::ErrorKind::InvalidConnectionState(_)) {
        FailureKind::Unauthorized
    } else {
        FailureKind::Refused
    };
    Failure {
        retryable: true,
        kind,
        reason: format!("RabbitMQ: {text}"),
        status: None,
        response: None,
        retry_after: None,
    }
}

/// Opens a connection that dials only `addrs` (what the address guard resolved and checked; the
/// client never resolves the name again). Over `amqps` TLS verifies the certificate against the
/// URL's host name, as it would have without the guard.
async fn connect(url: &str, addrs: Vec<SocketAddr>) -> Result<Connection, Failure> {
    let uri: AMQPUri = url.parse().map_err(|_| refused("the RabbitMQ URL is invalid"))?;
    let runtime = lapin::runtime::default_runtime().map_err(|e| classify(&e, true))?;
    let dial = async move |uri: AMQPUri, runtime| {
        let mut last = None;
        for addr in &addrs {
            match AsyncTcpStream::connect(&runtime, *addr).await {
                Ok(stream) => {
                    return Ok(match uri.scheme {
                        AMQPScheme::AMQP => stream,
                        AMQPScheme::AMQPS => stream.into_tls(&uri.authority.host, TLSConfig::default()).await?,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no address")).into())
    };
    Connection::connector(uri, runtime, dial, ConnectionProperties::default()).await.map_err(|e| classify(&e, true))
}

#[derive(Clone)]
struct Link {
    // Kept so the connection lives as long as its channel.
    _connection: std::sync::Arc<Connection>,
    channel: Channel,
}

/// The RabbitMQ sink: a pooled connection per destination.
#[derive(Default)]
pub struct RabbitSink {
    links: Mutex<BoundedCache<String, Link>>,
    /// Whether connections may go to private addresses.
    allow_private: bool,
}

impl std::fmt::Debug for RabbitSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitSink").finish_non_exhaustive()
    }
}

impl RabbitSink {
    pub fn new(allow_private: bool) -> Self {
        Self { links: Mutex::default(), allow_private }
    }

    async fn channel(&self, target: &RabbitTarget) -> Result<Channel, Failure> {
        let url = target.connect_url()?;
        let mut links = self.links.lock().await;
        if let Some(link) = links.get(&url, std::time::Instant::now()) {
            if link.channel.status().connected() {
                return Ok(link.channel.clone());
            }
            links.remove(&url);
        }
        let connect = async {
            let addrs = crate::guard::dial_addrs(&url, target.allow_private).await?;
            let connection = connect(&url, addrs).await?;
            let channel = connection.create_channel().await.map_err(|e| classify(&e, true))?;
            channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| classify(&e, true))?;
            Ok::<_, Failure>(Link { _connection: std::sync::Arc::new(connection), channel })
        };
        let link = match tokio::time::timeout(target.timeout, connect).await {
            Ok(link) => link?,
            Err(_) => return Err(timeout(target.timeout)),
        };
        let channel = link.channel.clone();
        links.insert(url, link, std::time::Instant::now());
        Ok(channel)
    }

    async fn forget(&self, target: &RabbitTarget) {
        if let Ok(url) = target.connect_url() {
            self.links.lock().await.remove(&url);
        }
    }

    async fn publish(
        &self,
        target: &RabbitTarget,
        routing_key: &str,
        payload: &[u8],
        properties: BasicProperties,
        mandatory: bool,
    ) -> Result<(), Failure> {
        let channel = self.channel(target).await?;
        let publish = async {
            let confirm = channel
                .basic_publish(
                    ShortString::from(target.exchange.as_str()),
                    ShortString::from(routing_key),
                    BasicPublishOptions { mandatory, ..BasicPublishOptions::default() },
                    payload,
                    properties,
                )
                .await
                .map_err(|e| classify(&e, false))?;
            confirm.await.map_err(|e| classify(&e, false))
        };
        let confirmation = match tokio::time::timeout(target.timeout, publish).await {
            Ok(Ok(c)) => c,
            Ok(Err(f)) => {
                self.forget(target).await;
                return Err(f);
            }
            Err(_) => {
                self.forget(target).await;
                return Err(timeout(target.timeout));
            }
        };
        match confirmation {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(returned)) => Err(refused(&format!(
                "RabbitMQ returned the message as unroutable ({} {}): no queue is bound for routing key {routing_key}",
                returned.reply_code, returned.reply_text
            ))),
            Confirmation::Nack(_) => Err(refused("RabbitMQ refused the message (nack)")),
            Confirmation::NotRequested => Err(refused("the channel is not in confirm mode")),
        }
    }
}

fn timeout(after: Duration) -> Failure {
    Failure {
        retryable: true,
        kind: FailureKind::Timeout,
        reason: format!("RabbitMQ did not confirm within {} ms", after.as_millis()),
        status: None,
        response: None,
        retry_after: None,
    }
}

fn header(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value.as_bytes().to_vec()))
}

/// The message's CloudEvents attributes as AMQP headers (`ce-*`), plus trace context and the
/// attempt's identity.
fn headers(message: &Message<'_>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in crate::message::attributes(message) {
        t.insert(ShortString::from(k), header(&v));
    }
    t
}

#[async_trait]
impl TypedSink for RabbitSink {
    const NAME: &'static str = "rabbitmq";
    const SUMMARY: &'static str = "{exchange} at {url}";
    type Config = config::RabbitConfig;
    type Request = schema::RabbitmqSink;
    type Target = RabbitTarget;


    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.allow_private))
    }

    fn target(
        &self,
        config: &config::RabbitConfig,
        secrets: &Secrets,
        max_timeout: Duration,
    ) -> Result<RabbitTarget, Failure> {
        let c = config;
        Ok(RabbitTarget {
            url: c.url.clone(),
            password: secrets.credentials.as_ref().and_then(|v| v["password"].as_str().map(str::to_owned)),
            exchange: c.exchange.clone(),
            routing_key: c.routing_key.clone(),
            timeout: crate::sink::BROKER_TIMEOUT.min(max_timeout),
            allow_private: self.allow_private,
        })
    }

    async fn attempt(&self, target: &RabbitTarget, message: &Message<'_>) -> Outcome {
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(message.ce_id.to_string()))
            .with_content_type(ShortString::from(message.content_type))
            .with_timestamp(chrono::Utc::now().timestamp().max(0) as u64)
            .with_headers(headers(message));
        let key = target.routing_key_for(message);
        match self.publish(target, &key, message.payload, properties, true).await {
            Ok(()) => Outcome::Delivered { status: None, response: None, stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    async fn check(&self, target: &RabbitTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        // The exchange must exist (passive declare), and the broker must confirm a test message.
        let channel = self.channel(target).await?;
        let passive = ExchangeDeclareOptions { passive: true, ..ExchangeDeclareOptions::default() };
        let declared = tokio::time::timeout(
            target.timeout,
            channel.exchange_declare(
                ShortString::from(target.exchange.as_str()),
                ExchangeKind::Topic,
                passive,
                FieldTable::default(),
            ),
        )
        .await;
        match declared {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.forget(target).await;
                return Err(Failure {
                    reason: format!("the exchange {} cannot be used: {}", target.exchange, classify(&e, false).reason),
                    ..classify(&e, false)
                });
            }
            Err(_) => {
                self.forget(target).await;
                return Err(timeout(target.timeout));
            }
        }
        let mut h = FieldTable::default();
        h.insert(ShortString::from("ce-type"), header("streaming_hub.verification"));
        h.insert(ShortString::from("ce-tenantid"), header(tenant));
        h.insert(ShortString::from("x-lerian-subscription-id"), header(&subscription_id.to_string()));
        let body =
            serde_json::json!({"type": "streaming_hub.verification", "subscription_id": subscription_id}).to_string();
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_message_id(ShortString::from(Uuid::now_v7().to_string()))
            .with_headers(h);
        // Not mandatory: a destination may route only real event keys.
        self.publish(target, "streaming_hub.verification", body.as_bytes(), properties, false)
            .await
            .map(|()| Probed::default())
    }
}
