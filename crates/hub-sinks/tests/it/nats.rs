//! The NATS sink against a real `nats-server` with JetStream: the contract, every way of logging
//! in, deduplication by the event id, core NATS, and what a message carries, read back by the
//! test's own client.

use std::collections::BTreeMap;
use std::time::Duration;

use hub_sinks::nats::config::NatsConfig;
use hub_sinks::nats::nkey::KeyPair;
use hub_sinks::nats::{NatsSink, NatsTarget};
use hub_sinks::{FailureKind, Outcome, Secrets, TypedSink};
use hub_testkit::nats::{Auth, NatsServer};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::contract::{self, Case, Fixture, message};

const USER: &str = "hub";
const PASSWORD: &str = "nats-hub-secret";

fn secrets(credentials: Option<Value>) -> Secrets {
    Secrets { signing: Vec::new(), credentials, owner: None }
}

fn target(
    sink: &NatsSink,
    servers: &str,
    subject: &str,
    jetstream: bool,
    login: Option<Value>,
    timeout: Duration,
) -> NatsTarget {
    let config = NatsConfig { servers: servers.to_owned(), subject: subject.to_owned(), jetstream };
    sink.target(&config, &secrets(login), timeout).expect("a NATS target")
}

/// A server with a user, a stream capturing `sh.<id>.>` and its name.
struct World {
    server: NatsServer,
    stream: String,
    prefix: String,
    nkey_seed: String,
}

impl World {
    async fn new() -> Self {
        let mut seed = [0u8; 32];
        seed[..16].copy_from_slice(Uuid::now_v7().as_bytes());
        let nkey_seed = KeyPair::seed_of(&seed);
        let public = KeyPair::from_seed(&nkey_seed).expect("seed").public_key();
        let server = NatsServer::start(Auth::Users {
            passwords: vec![(USER.to_owned(), PASSWORD.to_owned())],
            nkeys: vec![public],
        })
        .await
        .expect("nats-server is required for these tests (scripts/services nats)");
        let id = Uuid::now_v7().simple().to_string();
        let stream = format!("SH_{id}");
        let prefix = format!("sh.{id}");
        let mut client = server.client(json!({"user": USER, "pass": PASSWORD})).await.expect("client");
        client.create_stream(&stream, &[&format!("{prefix}.>")]).await.expect("stream");
        Self { server, stream, prefix, nkey_seed }
    }

    fn subject(&self) -> String {
        format!("{}.events", self.prefix)
    }

    fn login(&self) -> Option<Value> {
        Some(json!({"username": USER, "password": PASSWORD}))
    }

    async fn stored(&self, expected: u64) -> Vec<hub_testkit::nats::Stored> {
        let mut client = self.server.client(json!({"user": USER, "pass": PASSWORD})).await.expect("client");
        client.all_stored(&self.stream, expected).await.expect("read back")
    }
}

struct NatsFixture {
    sink: NatsSink,
    world: World,
    silent: String,
}

impl Fixture for NatsFixture {
    type S = NatsSink;

    fn sink(&self) -> &NatsSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> NatsTarget {
        let url = self.world.server.url();
        let t = Duration::from_secs(5);
        match case {
            Case::Healthy => target(&self.sink, &url, &self.world.subject(), true, self.world.login(), t),
            // No stream captures this subject: the server answers that nobody responds.
            Case::Refusing => target(&self.sink, &url, "nobody.captures.this", true, self.world.login(), t),
            Case::Unreachable => {
                let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
                target(&self.sink, &format!("nats://127.0.0.1:{port}"), "x", true, self.world.login(), t)
            }
            Case::BadCredentials => target(
                &self.sink,
                &url,
                &self.world.subject(),
                true,
                Some(json!({"username": USER, "password": "wrong-password-123"})),
                t,
            ),
            Case::Slow => {
                target(&self.sink, &format!("nats://{}", self.silent), "x", true, None, Duration::from_millis(500))
            }
        }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        self.world
            .stored(expected as u64)
            .await
            .into_iter()
            .map(|m| {
                let id = m.header("ce-id").expect("ce-id").to_owned();
                assert_eq!(m.header("Nats-Msg-Id"), Some(id.as_str()), "Nats-Msg-Id is the ce-id");
                (id.parse().expect("uuid"), m.data)
            })
            .collect()
    }

    fn secrets(&self) -> Vec<String> {
        vec!["wrong-password-123".to_owned(), PASSWORD.to_owned()]
    }
}

#[tokio::test]
async fn the_nats_sink_passes_the_contract() {
    let fixture = NatsFixture {
        sink: NatsSink::new(true),
        world: World::new().await,
        silent: crate::receiver::silent_addr().await,
    };
    contract::run(&fixture).await;
}

#[tokio::test]
async fn a_message_carries_the_cloudevents_headers_and_a_repeat_is_dropped_by_the_stream() {
    let world = World::new().await;
    let sink = NatsSink::new(true);
    let ext = BTreeMap::from([("partner".to_owned(), "acme".to_owned())]);
    let id = Uuid::now_v7();
    let t = target(&sink, &world.server.url(), &world.subject(), true, world.login(), Duration::from_secs(5));
    let first = sink.attempt(&t, &message(br#"{"a":1}"#, &ext, id)).await;
    let Outcome::Delivered { response: Some(ack), .. } = &first else { panic!("{first:?}") };
    assert!(ack.contains(&world.stream), "the stream's acknowledgement is kept: {ack}");
    // The same event again (a retried attempt): acknowledged, and the stream keeps one.
    let again = sink.attempt(&t, &message(br#"{"a":1}"#, &ext, id)).await;
    let Outcome::Delivered { response: Some(ack), .. } = &again else { panic!("{again:?}") };
    let ack: Value = serde_json::from_str(ack).expect("the acknowledgement is JSON");
    assert_eq!(ack["duplicate"], true, "{ack}");
    let other = Uuid::now_v7();
    assert!(sink.attempt(&t, &message(b"{}", &ext, other)).await.is_delivered());
    let stored = world.stored(2).await;
    assert_eq!(stored.len(), 2, "one message per event");
    let m = &stored[0];
    assert_eq!(m.subject, world.subject());
    assert_eq!(m.data, br#"{"a":1}"#);
    for (k, v) in [
        ("ce-id", id.to_string()),
        ("ce-source", "lender".to_owned()),
        ("ce-type", "studio.lerian.lender.loan_application.approved".to_owned()),
        ("ce-tenantid", "tenant-a".to_owned()),
        ("ce-subject", "loan-42".to_owned()),
        ("ce-partner", "acme".to_owned()),
        ("content-type", "application/json".to_owned()),
        ("Nats-Msg-Id", id.to_string()),
    ] {
        assert_eq!(m.header(k), Some(v.as_str()), "{k}: {:?}", m.headers);
    }
}

#[tokio::test]
async fn every_login_is_accepted_and_a_wrong_one_refused() {
    let world = World::new().await;
    let sink = NatsSink::new(true);
    let ext = BTreeMap::new();
    let url = world.server.url();
    let t = |login: Option<Value>| target(&sink, &url, &world.subject(), true, login, Duration::from_secs(5));
    let nkey = Some(json!({"nkey_seed": world.nkey_seed}));
    assert!(sink.attempt(&t(nkey), &message(b"{}", &ext, Uuid::now_v7())).await.is_delivered(), "nkey");
    // A seed the server does not know signs, and is refused.
    let stranger = Some(json!({"nkey_seed": KeyPair::seed_of(&[3; 32])}));
    match sink.attempt(&t(stranger), &message(b"{}", &ext, Uuid::now_v7())).await {
        Outcome::Failed(f) => assert_eq!(f.kind, FailureKind::Unauthorized, "{f:?}"),
        other => panic!("{other:?}"),
    }
    match sink.attempt(&t(None), &message(b"{}", &ext, Uuid::now_v7())).await {
        Outcome::Failed(f) => assert_eq!(f.kind, FailureKind::Unauthorized, "no login: {f:?}"),
        other => panic!("{other:?}"),
    }
    // A token, on a server that takes one.
    let tokened = NatsServer::start(Auth::Token("nats-token-secret".into())).await.expect("nats-server");
    let mut client = tokened.client(json!({"auth_token": "nats-token-secret"})).await.expect("client");
    client.create_stream("TOKENED", &["tokened.>"]).await.expect("stream");
    let login = Some(json!({"token": "nats-token-secret"}));
    let t = target(&sink, &tokened.url(), "tokened.events", true, login, Duration::from_secs(5));
    assert!(sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await.is_delivered(), "token");
    assert_eq!(client.stream_messages("TOKENED").await.expect("count"), 1);
}

#[tokio::test]
async fn core_nats_delivers_to_a_subscriber_without_a_stream() {
    let world = World::new().await;
    let sink = NatsSink::new(true);
    let mut subscriber = world.server.client(json!({"user": USER, "pass": PASSWORD})).await.expect("client");
    subscriber.subscribe("core.events", 7).await.expect("subscribe");
    let id = Uuid::now_v7();
    let t = target(&sink, &world.server.url(), "core.events", false, world.login(), Duration::from_secs(5));
    let ext = BTreeMap::new();
    let outcome = sink.attempt(&t, &message(br#"{"core":true}"#, &ext, id)).await;
    assert!(outcome.is_delivered(), "{outcome:?}");
    let got = subscriber.next_message().await.expect("a message");
    assert_eq!(got.data, br#"{"core":true}"#);
    // A probe goes the same way.
    sink.check(&t, "tenant-a", Uuid::now_v7()).await.expect("probe");
}

#[tokio::test]
async fn a_kept_connection_the_server_dropped_is_replaced() {
    let mut world = World::new().await;
    let sink = NatsSink::new(true);
    let ext = BTreeMap::new();
    let t = target(&sink, &world.server.url(), &world.subject(), true, world.login(), Duration::from_secs(5));
    assert!(sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await.is_delivered());
    // The server restarts: the connection the sink kept is closed under it.
    world.server.restart().await.expect("restart");
    let outcome = sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await;
    assert!(outcome.is_delivered(), "{outcome:?}");
    assert_eq!(world.stored(2).await.len(), 2);
}

/// Servers that take the connection and never greet: however many the destination lists, the
/// attempt ends as a timeout within the cap it was given (not the cap once per server).
#[tokio::test]
async fn an_attempt_ends_within_its_cap_whatever_the_servers_listed() {
    let mut servers = Vec::new();
    for _ in 0..4 {
        servers.push(format!("nats://{}", crate::receiver::silent_addr().await));
    }
    let sink = NatsSink::new(true);
    let cap = Duration::from_millis(800);
    let t = target(&sink, &servers.join(","), "x", true, None, cap);
    let ext = BTreeMap::new();
    let started = std::time::Instant::now();
    match sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await {
        Outcome::Failed(f) => assert_eq!(f.kind, FailureKind::Timeout, "{f:?}"),
        other => panic!("{other:?}"),
    }
    // Four servers each given the whole cap would take 3.2 s.
    assert!(started.elapsed() < cap * 2, "the attempt took {:?} with a cap of {cap:?}", started.elapsed());
}

/// A first server that takes the connection and never greets holds only its share of the cap:
/// the healthy server listed after it is reached, and the message delivered.
#[tokio::test]
async fn a_silent_first_server_leaves_time_for_a_healthy_one() {
    let world = World::new().await;
    let sink = NatsSink::new(true);
    let silent = crate::receiver::silent_addr().await;
    let servers = format!("nats://{silent},{}", world.server.url());
    let t = target(&sink, &servers, &world.subject(), true, world.login(), Duration::from_secs(4));
    let ext = BTreeMap::new();
    let outcome = sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await;
    assert!(outcome.is_delivered(), "{outcome:?}");
    assert_eq!(world.stored(1).await.len(), 1);
}
