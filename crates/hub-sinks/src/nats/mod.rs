//! The NATS sink (SPEC §10): each event one message to the destination's subject, the body as its
//! payload, the CloudEvents attributes as `ce-*` headers, `Nats-Msg-Id` the event id. With
//! JetStream (the default) an attempt is delivered when the stream that captures the subject
//! acknowledges it (a repeated attempt is a duplicate the stream drops); with core NATS, when the
//! server has taken it (no `-ERR` before the `PONG` that follows it).
//!
//! The protocol is spoken directly (`conn.rs`) so that every connection goes through the address
//! guard and only the configured servers are dialled, never ones a cluster advertises. Idle
//! connections are kept per destination and login, each used by one attempt at a time.

pub mod config;
mod conn;
pub mod nkey;
pub mod schema;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use uuid::Uuid;

use self::config::{NatsConfig, Server};
use self::conn::{Conn, Login, Published};
use crate::message::{Message, attributes};
use crate::sink::{Failure, FailureKind, Outcome, Probed, Secrets, Settings, TypedSink, failure, lock};

/// Idle connections kept for one destination, at most.
const IDLE_PER_DESTINATION: usize = 8;
/// Destinations whose idle connections are kept, at most.
const DESTINATIONS: usize = 1024;
/// An idle connection older than this is closed rather than reused.
const IDLE: Duration = Duration::from_secs(120);

/// A NATS subject, with its login opened.
#[derive(Debug, Clone)]
pub struct NatsTarget {
    pub servers: Vec<Server>,
    pub subject: String,
    pub jetstream: bool,
    login: Login,
    /// The destination and login its idle connections are kept under: a digest, so that no two
    /// logins ever share a connection.
    pool: [u8; 32],
    pub timeout: Duration,
}

/// The NATS sink.
#[derive(Debug)]
pub struct NatsSink {
    allow_private: bool,
    idle: Mutex<HashMap<[u8; 32], Vec<(Conn, Instant)>>>,
}

impl NatsSink {
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private, idle: Mutex::new(HashMap::new()) }
    }

    fn take(&self, pool: [u8; 32]) -> Option<Conn> {
        let mut idle = lock(&self.idle);
        let conns = idle.get_mut(&pool)?;
        while let Some((conn, since)) = conns.pop() {
            if since.elapsed() < IDLE {
                return Some(conn);
            }
        }
        None
    }

    fn put_back(&self, pool: [u8; 32], conn: Conn) {
        let mut idle = lock(&self.idle);
        if idle.len() >= DESTINATIONS && !idle.contains_key(&pool) {
            idle.retain(|_, conns| conns.iter().any(|(_, since)| since.elapsed() < IDLE));
            if idle.len() >= DESTINATIONS {
                return;
            }
        }
        let conns = idle.entry(pool).or_default();
        if conns.len() < IDLE_PER_DESTINATION {
            conns.push((conn, Instant::now()));
        }
    }

    /// A new connection to the first server that takes it, by `deadline`. Each server gets an
    /// equal share of the time left when its turn comes, so one that accepts and never greets (or
    /// whose name takes long to resolve) cannot keep a healthy server after it from being tried.
    async fn open(&self, target: &NatsTarget, deadline: Instant) -> Result<Conn, Failure> {
        let mut last = None;
        let count = target.servers.len();
        for (i, server) in target.servers.iter().enumerate() {
            let share = share_of(deadline.saturating_duration_since(Instant::now()), count - i);
            let opened = Conn::open(server, &target.login, self.allow_private, target.jetstream, share);
            match tokio::time::timeout(share, opened).await {
                Ok(Ok(conn)) => return Ok(conn),
                // A refused login or a forbidden address is the same on every server.
                Ok(Err(f)) if matches!(f.kind, FailureKind::Unauthorized | FailureKind::Forbidden) || !f.retryable => {
                    return Err(f);
                }
                Ok(Err(f)) => last = Some(f),
                Err(_) => {
                    let (host, port) = (&server.host, server.port);
                    let reason = format!("{host}:{port} did not complete the login within {} ms", share.as_millis());
                    last = Some(failure(true, FailureKind::Timeout, reason));
                }
            }
        }
        Err(last.unwrap_or_else(|| failure(false, FailureKind::Refused, "the destination lists no server")))
    }

    /// Publishes once, within the target's timeout whatever it takes (resolving and trying up to
    /// sixteen servers, logging in, a kept connection replaced): an attempt never outlives the cap
    /// it was given.
    async fn publish(&self, target: &NatsTarget, headers: &[(String, String)], payload: &[u8]) -> Result<Published, Failure> {
        let deadline = Instant::now() + target.timeout;
        tokio::time::timeout(target.timeout, self.publish_once(target, headers, payload, deadline)).await.map_err(|_| {
            failure(
                true,
                FailureKind::Timeout,
                format!("the servers did not take the message within {} ms", target.timeout.as_millis()),
            )
        })?
    }

    /// Publishes once, on an idle connection or a new one; a kept connection that turns out
    /// closed is replaced once (JetStream drops the duplicate if the first did go through).
    async fn publish_once(
        &self,
        target: &NatsTarget,
        headers: &[(String, String)],
        payload: &[u8],
        deadline: Instant,
    ) -> Result<Published, Failure> {
        let (mut conn, kept) = match self.take(target.pool) {
            Some(conn) => (conn, true),
            None => (self.open(target, deadline).await?, false),
        };
        let mut result = self.publish_on(&mut conn, target, headers, payload).await;
        if kept && matches!(&result, Err(f) if f.kind == FailureKind::Unreachable) {
            conn = self.open(target, deadline).await?;
            result = self.publish_on(&mut conn, target, headers, payload).await;
        }
        // A connection stays usable after the stream refused a message, not after a broken read.
        if matches!(&result, Ok(_)) || matches!(&result, Err(f) if f.kind == FailureKind::Refused && f.status.is_some()) {
            self.put_back(target.pool, conn);
        }
        result
    }

    async fn publish_on(
        &self,
        conn: &mut Conn,
        target: &NatsTarget,
        headers: &[(String, String)],
        payload: &[u8],
    ) -> Result<Published, Failure> {
        tokio::time::timeout(target.timeout, conn.publish(&target.subject, headers, payload, target.jetstream))
            .await
            .map_err(|_| {
                failure(
                    true,
                    FailureKind::Timeout,
                    format!("the server did not acknowledge within {} ms", target.timeout.as_millis()),
                )
            })?
    }
}

/// One server's share of `left` when `servers` (at least one) are still to be tried.
fn share_of(left: Duration, servers: usize) -> Duration {
    left / u32::try_from(servers.max(1)).unwrap_or(u32::MAX)
}

/// The headers of a message: its attributes, its content type and `Nats-Msg-Id`.
fn headers(m: &Message<'_>) -> Vec<(String, String)> {
    let mut h = attributes(m);
    h.push(("content-type".to_owned(), m.content_type.to_owned()));
    h.push(("Nats-Msg-Id".to_owned(), m.ce_id.to_string()));
    h
}

fn login(secrets: &Secrets) -> Result<Login, Failure> {
    let Some(c) = secrets.credentials.as_ref() else { return Ok(Login::None) };
    let text = |k: &str| c.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    if let Some(token) = text("token") {
        return Ok(Login::Token(token));
    }
    if let (Some(user), Some(password)) = (text("username"), text("password")) {
        return Ok(Login::User(user, password));
    }
    if let Some(seed) = text("nkey_seed") {
        let pair = nkey::KeyPair::from_seed(&seed)
            .map_err(|_| failure(false, FailureKind::Unauthorized, "the stored nkey seed cannot be read"))?;
        return Ok(Login::Nkey(Arc::new(pair)));
    }
    Ok(Login::None)
}

#[async_trait]
impl TypedSink for NatsSink {
    const NAME: &'static str = "nats";
    const SUMMARY: &'static str = "{subject} at {servers}{jetstream? (JetStream)}";
    type Config = NatsConfig;
    type Request = schema::NatsSink;
    type Target = NatsTarget;

    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.allow_private))
    }

    fn target(&self, config: &NatsConfig, secrets: &Secrets, max_timeout: Duration) -> Result<NatsTarget, Failure> {
        let login = login(secrets)?;
        let pool = crate::cache::digest(&(&config.servers, config.jetstream, secrets.credentials.as_ref().map(|c| c.to_string())));
        Ok(NatsTarget {
            servers: config.servers(),
            subject: config.subject.clone(),
            jetstream: config.jetstream,
            login,
            pool,
            timeout: crate::sink::BROKER_TIMEOUT.min(max_timeout),
        })
    }

    async fn attempt(&self, target: &NatsTarget, m: &Message<'_>) -> Outcome {
        match self.publish(target, &headers(m), m.payload).await {
            Ok(Published::Acknowledged(response)) => Outcome::Delivered { status: None, response, stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    /// Publishes a verification message (`ce-type: streaming_hub.verification`) to the subject.
    async fn check(&self, target: &NatsTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let id = Uuid::now_v7().to_string();
        let payload = json!({"type": "streaming_hub.verification", "subscription_id": subscription_id}).to_string();
        let headers = [
            ("ce-specversion", "1.0".to_owned()),
            ("ce-id", id.clone()),
            ("ce-source", "streaming-hub".to_owned()),
            ("ce-type", "streaming_hub.verification".to_owned()),
            ("ce-tenantid", tenant.to_owned()),
            ("content-type", "application/json".to_owned()),
            ("Nats-Msg-Id", id),
        ]
        .map(|(k, v)| (k.to_owned(), v));
        self.publish(target, &headers, payload.as_bytes()).await.map(|_| Probed::default())
    }
}
