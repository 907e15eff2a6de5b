//! The Pub/Sub sink against Google's own in-memory Pub/Sub server (`pstest`): the contract, what a
//! message carries (attributes, the ordering key), read back from the server; and, against an
//! HTTP/2 server of the test's own that refuses every token, that the hub sends one the service
//! account key signed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hub_sinks::pubsub::config::PubSubConfig;
use hub_sinks::pubsub::{PubSubSink, PubSubTarget};
use hub_sinks::{FailureKind, Outcome, Secrets, TypedSink};
use hub_testkit::pubsub::PubSubServer;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::contract::{self, Case, Fixture, message};

const PROJECT: &str = "lerian-test";

fn target(sink: &PubSubSink, endpoint: &str, topic: &str, key: Option<Value>, timeout: Duration) -> PubSubTarget {
    let config = PubSubConfig { project: PROJECT.into(), topic: topic.into(), endpoint_url: Some(endpoint.into()) };
    let secrets =
        Secrets { signing: Vec::new(), credentials: key.map(|k| json!({"credentials_json": k})), owner: None };
    sink.target(&config, &secrets, timeout).expect("a Pub/Sub target")
}

fn service_account_key() -> Value {
    hub_testkit::pubsub::service_account_key(PROJECT)
}

/// An HTTP/2 server that answers every call `UNAUTHENTICATED` and keeps the `authorization` it got.
async fn refusing_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(socket).await else { return };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    let auth = request.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
                    kept.lock().expect("lock").push(auth.to_owned());
                    let answer = http::Response::builder()
                        .status(200)
                        .header("content-type", "application/grpc")
                        .header("grpc-status", "16")
                        .header("grpc-message", "Request had invalid authentication credentials.")
                        .body(())
                        .expect("answer");
                    let _ = respond.send_response(answer, true);
                }
            });
        }
    });
    (format!("http://{addr}"), seen)
}

struct PubSubFixture {
    sink: PubSubSink,
    server: PubSubServer,
    topic: String,
    refusing: String,
    silent: String,
    key: Value,
}

impl Fixture for PubSubFixture {
    type S = PubSubSink;

    fn sink(&self) -> &PubSubSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> PubSubTarget {
        let t = Duration::from_secs(5);
        let endpoint = self.server.endpoint_url();
        match case {
            Case::Healthy => target(&self.sink, &endpoint, &self.topic, None, t),
            // A topic that does not exist: retrying cannot help.
            Case::Refusing => target(&self.sink, &endpoint, "missing-topic", None, t),
            Case::Unreachable => {
                let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
                target(&self.sink, &format!("http://127.0.0.1:{port}"), &self.topic, None, t)
            }
            Case::BadCredentials => target(&self.sink, &self.refusing, &self.topic, Some(self.key.clone()), t),
            Case::Slow => {
                target(&self.sink, &format!("http://{}", self.silent), &self.topic, None, Duration::from_millis(500))
            }
        }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        self.server
            .wait_for(expected)
            .await
            .expect("read back")
            .into_iter()
            .map(|m| (m.attributes["ce-id"].parse().expect("uuid"), m.data))
            .collect()
    }

    fn secrets(&self) -> Vec<String> {
        let pem = self.key["private_key"].as_str().expect("pem");
        vec![pem.lines().nth(1).expect("a line of the key").to_owned()]
    }

    fn refusal_is_permanent(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn the_pubsub_sink_passes_the_contract() {
    let server = PubSubServer::start().await.expect("the Pub/Sub test server is required (scripts/services pubsub)");
    let topic = format!("events-{}", Uuid::now_v7().simple());
    server.create_topic(PROJECT, &topic).await.expect("topic");
    let fixture = PubSubFixture {
        sink: PubSubSink::new(true),
        server,
        topic,
        refusing: refusing_server().await.0,
        silent: crate::receiver::silent_addr().await,
        key: service_account_key(),
    };
    contract::run(&fixture).await;
}

#[tokio::test]
async fn a_message_carries_the_attributes_and_the_ordering_key() {
    let server = PubSubServer::start().await.expect("the Pub/Sub test server");
    server.create_topic(PROJECT, "ordered").await.expect("topic");
    let sink = PubSubSink::new(true);
    let t = target(&sink, &server.endpoint_url(), "ordered", None, Duration::from_secs(5));
    let ext = BTreeMap::from([("partner".to_owned(), "acme".to_owned())]);
    let id = Uuid::now_v7();
    let mut m = message(br#"{"a":1}"#, &ext, id);
    m.ordering_key = Some("loan-42");
    let outcome = sink.attempt(&t, &m).await;
    let Outcome::Delivered { response: Some(answer), .. } = &outcome else { panic!("{outcome:?}") };
    let got = server.wait_for(1).await.expect("read back");
    assert_eq!(got.len(), 1);
    let answer: Value = serde_json::from_str(answer).expect("json");
    assert_eq!(answer["message_id"], got[0].id, "the message id is kept with the attempt");
    assert_eq!(got[0].data, br#"{"a":1}"#);
    assert_eq!(got[0].ordering_key, "loan-42");
    for (k, v) in [
        ("ce-id", id.to_string()),
        ("ce-source", "lender".to_owned()),
        ("ce-type", "studio.lerian.lender.loan_application.approved".to_owned()),
        ("ce-tenantid", "tenant-a".to_owned()),
        ("ce-subject", "loan-42".to_owned()),
        ("ce-partner", "acme".to_owned()),
        ("content-type", "application/json".to_owned()),
    ] {
        assert_eq!(got[0].attributes.get(k), Some(&v), "{k}: {:?}", got[0].attributes);
    }
    // Unordered, no key.
    assert!(sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await.is_delivered());
    assert_eq!(server.wait_for(2).await.expect("read back")[1].ordering_key, "");
}

#[tokio::test]
async fn the_key_signs_a_bearer_token_and_a_refused_one_is_unauthorized() {
    let (endpoint, seen) = refusing_server().await;
    let sink = PubSubSink::new(true);
    let key = service_account_key();
    let t = target(&sink, &endpoint, "events", Some(key.clone()), Duration::from_secs(5));
    let ext = BTreeMap::new();
    match sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await {
        Outcome::Failed(f) => {
            assert_eq!(f.kind, FailureKind::Unauthorized, "{f:?}");
            assert!(f.retryable);
            assert!(f.reason.contains("invalid authentication credentials"), "{}", f.reason);
        }
        other => panic!("{other:?}"),
    }
    let auth = seen.lock().expect("lock")[0].clone();
    let token = auth.strip_prefix("Bearer ").expect("a bearer token");
    use base64::Engine as _;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).expect("claims"))
            .expect("b64"),
    )
    .expect("json");
    assert_eq!(claims["iss"], key["client_email"]);
    assert_eq!(claims["aud"], "https://pubsub.googleapis.com/");
    // A second attempt reuses the token.
    let _ = sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await;
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], seen[1], "the token is kept, not signed again per attempt");
}

/// An endpoint that takes the connection and never answers the TLS handshake holds back only its
/// own attempts: another endpoint's attempt, started while the first waits, is delivered first.
#[tokio::test]
async fn a_hanging_endpoint_holds_back_only_its_own_attempts() {
    let server = PubSubServer::start().await.expect("the Pub/Sub test server");
    server.create_topic(PROJECT, "beside").await.expect("topic");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let hanging = format!("https://{}", listener.local_addr().expect("addr"));
    let (accepted, mut connected) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            let _ = accepted.try_send(());
        }
    });
    let sink = Arc::new(PubSubSink::new(true));
    let stuck = target(&sink, &hanging, "events", None, Duration::from_secs(10));
    let ext = BTreeMap::new();
    let waiting = {
        let sink = Arc::clone(&sink);
        tokio::spawn(async move {
            let ext = BTreeMap::new();
            sink.attempt(&stuck, &message(b"{}", &ext, Uuid::now_v7())).await
        })
    };
    connected.recv().await.expect("the hanging endpoint was dialled");
    let beside = target(&sink, &server.endpoint_url(), "beside", None, Duration::from_secs(10));
    let outcome = sink.attempt(&beside, &message(b"{}", &ext, Uuid::now_v7())).await;
    assert!(outcome.is_delivered(), "{outcome:?}");
    assert!(!waiting.is_finished(), "the other endpoint's attempt waited for the hanging one");
    match waiting.await.expect("the hanging attempt") {
        Outcome::Failed(f) => assert_eq!(f.kind, FailureKind::Timeout, "{f:?}"),
        other => panic!("{other:?}"),
    }
}
