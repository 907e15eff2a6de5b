//! The webhook sink: the contract, then every header, signature and guard rule of SPEC §3.6.

use std::collections::BTreeMap;
use std::time::Duration;

use hub_core::signature::Scheme;
use hub_sinks::webhook::config::WebhookConfig;
use hub_sinks::webhook::{WebhookSink, WebhookTarget};
use hub_sinks::{FailureKind, Outcome, Secrets, TypedSink};
use uuid::Uuid;

use crate::contract::{self, Case, Fixture, message};
use crate::receiver::{Behaviour, Receiver};

const SECRET: &str = "whsec_dGhpcyBpcyBhIHRlc3Qgc2VjcmV0IG9mIDMyIGJ5dGVzIQ==";

/// A webhook destination's configuration with these URL and signature scheme.
pub fn config(url: &str, scheme: Scheme) -> WebhookConfig {
    WebhookConfig {
        url: url.to_owned(),
        headers: [("X-Team".to_owned(), "risk".to_owned())].into(),
        timeout_ms: 5_000,
        signature: scheme,
        auth: None,
        tls: None,
    }
}

/// The target `sink` makes of `config` with these signing secrets and credentials, as the
/// dispatcher has it made.
pub fn target_of(
    sink: &WebhookSink,
    config: WebhookConfig,
    secrets: &[&str],
    credentials: Option<serde_json::Value>,
) -> WebhookTarget {
    let secrets = Secrets { signing: secrets.iter().map(|s| (*s).to_owned()).collect(), credentials, owner: None };
    sink.target(&config, &secrets, Duration::from_secs(60)).expect("a target")
}

fn target(sink: &WebhookSink, url: &str, secrets: &[&str]) -> WebhookTarget {
    target_of(sink, config(url, Scheme::Lerian), secrets, None)
}

struct WebhookFixture {
    sink: WebhookSink,
    healthy: Receiver,
    refusing: Receiver,
    slow: Receiver,
}

impl Fixture for WebhookFixture {
    type S = WebhookSink;

    fn sink(&self) -> &WebhookSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> WebhookTarget {
        match case {
            Case::Healthy => target(&self.sink, &self.healthy.url, &[SECRET]),
            Case::Refusing => target(&self.sink, &self.refusing.url, &[SECRET]),
            Case::Unreachable => {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
                let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
                drop(listener);
                target(&self.sink, &url, &[SECRET])
            }
            // The receiver checks signatures: one made with another secret is refused with 401.
            Case::BadCredentials => target(&self.sink, &self.healthy.url, &["whsec_wrong"]),
            Case::Slow => target_of(
                &self.sink,
                WebhookConfig { timeout_ms: 300, ..config(&self.slow.url, Scheme::Lerian) },
                &[SECRET],
                None,
            ),
        }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        self.healthy
            .wait_for(expected)
            .await
            .into_iter()
            .filter(|r| r.headers.get("x-webhook-signature").is_some())
            .map(|r| {
                let id = r.headers["x-lerian-event-id"].to_str().expect("id").parse().expect("uuid");
                (id, r.body)
            })
            .take(expected)
            .collect()
    }

    fn secrets(&self) -> Vec<String> {
        vec![SECRET.to_owned(), "whsec_wrong".to_owned()]
    }
}

#[tokio::test]
async fn the_webhook_sink_passes_the_contract() {
    let fixture = WebhookFixture {
        sink: WebhookSink::new(true).expect("sink"),
        healthy: Receiver::start(Behaviour::Verify(vec![SECRET.to_owned()])).await,
        refusing: Receiver::start(Behaviour::Status(500)).await,
        slow: Receiver::start(Behaviour::Sleep(Duration::from_secs(3))).await,
    };
    contract::run(&fixture).await;
}

#[tokio::test]
async fn every_header_of_the_spec_is_sent() {
    let receiver = Receiver::start(Behaviour::Verify(vec![SECRET.to_owned()])).await;
    let sink = WebhookSink::new(true).expect("sink");
    let ext = BTreeMap::new();
    let id = Uuid::now_v7();
    let body = br#"{"id":"123"}"#;
    let msg = message(body, &ext, id);
    assert!(sink.attempt(&target(&sink, &receiver.url, &[SECRET]), &msg).await.is_delivered());
    let got = receiver.wait_for(1).await.remove(0);
    let h = |name: &str| got.headers.get(name).map(|v| v.to_str().expect("ascii").to_owned());
    assert_eq!(got.body, body, "the exact body");
    assert_eq!(h("content-type").as_deref(), Some("application/json"));
    let ts: i64 = h("x-webhook-timestamp").expect("timestamp").parse().expect("unix seconds");
    assert!((chrono::Utc::now().timestamp() - ts).abs() < 30);
    assert_eq!(h("x-webhook-signature"), Some(hub_core::signature::sign(SECRET, ts, body)));
    assert_eq!(h("x-lerian-event-id"), Some(id.to_string()));
    assert_eq!(h("x-lerian-delivery-id"), Some(msg.delivery_id.to_string()));
    assert_eq!(h("x-lerian-event-type").as_deref(), Some("loan_application.approved"), "no source in the key");
    assert_eq!(h("x-lerian-tenant-id").as_deref(), Some("tenant-a"));
    assert_eq!(h("x-lerian-subscription-id"), Some(msg.subscription_id.to_string()));
    assert_eq!(h("x-lerian-attempt").as_deref(), Some("1"));
    assert_eq!(h("x-lerian-schema-version").as_deref(), Some("1.0.0"));
    assert_eq!(h("x-lerian-event-time").as_deref(), Some("2026-11-30T10:00:00Z"));
    assert_eq!(h("x-lerian-subject").as_deref(), Some("loan-42"));
    assert_eq!(h("traceparent").as_deref(), Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    assert_eq!(h("x-team").as_deref(), Some("risk"), "static headers");
    assert!(h("x-lerian-source").is_none() && h("x-lerian-origin").is_none(), "no origin header is sent");
    assert!(h("user-agent").expect("user agent").starts_with("streaming-hub/"));
}

#[tokio::test]
async fn during_a_rotation_two_signature_headers_verify_with_their_secrets() {
    let (new, old) = ("whsec_new-secret-value", "whsec_old-secret-value");
    let receiver = Receiver::start(Behaviour::Status(204)).await;
    let sink = WebhookSink::new(true).expect("sink");
    let ext = BTreeMap::new();
    let body = br#"{"n":1}"#;
    sink.attempt(&target(&sink, &receiver.url, &[new, old]), &message(body, &ext, Uuid::now_v7())).await;
    let got = receiver.wait_for(1).await.remove(0);
    let ts: i64 = got.headers["x-webhook-timestamp"].to_str().expect("ts").parse().expect("ts");
    let sigs: Vec<&str> = got.headers.get_all("x-webhook-signature").iter().map(|v| v.to_str().expect("sig")).collect();
    assert_eq!(sigs.len(), 2, "repeated headers, not one joined value");
    assert!(hub_core::signature::verify(new, ts, body, sigs[0]));
    assert!(hub_core::signature::verify(old, ts, body, sigs[1]));
}

#[tokio::test]
async fn standard_webhooks_mode_sends_its_headers_and_signs_with_every_secret() {
    let (new, old) = (SECRET, "whsec_b2xkIHNlY3JldCBvZiB0aGUgcm90YXRpb24=");
    let receiver = Receiver::start(Behaviour::Status(204)).await;
    let sink = WebhookSink::new(true).expect("sink");
    let ext = BTreeMap::new();
    let body = br#"{"n":1}"#;
    let id = Uuid::now_v7();
    let target = target_of(&sink, config(&receiver.url, Scheme::StandardWebhooks), &[new, old], None);
    assert!(sink.attempt(&target, &message(body, &ext, id)).await.is_delivered());
    let got = receiver.wait_for(1).await.remove(0);
    let h = |name: &str| got.headers.get(name).map(|v| v.to_str().expect("ascii").to_owned());
    assert_eq!(h("webhook-id"), Some(id.to_string()), "the event id: stable across redeliveries");
    let ts: i64 = h("webhook-timestamp").expect("timestamp").parse().expect("unix seconds");
    let header = h("webhook-signature").expect("signature");
    let sigs: Vec<&str> = header.split(' ').collect();
    assert_eq!(sigs.len(), 2, "one signature per secret, space separated: {header}");
    assert!(hub_core::signature::standard::verify(new, &id.to_string(), ts, body, sigs[0]));
    assert!(hub_core::signature::standard::verify(old, &id.to_string(), ts, body, sigs[1]));
    assert!(h("x-webhook-signature").is_none() && h("x-webhook-timestamp").is_none(), "not the other scheme");
    assert_eq!(h("x-lerian-event-id"), Some(id.to_string()), "correlation headers stay");
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let other = Receiver::start(Behaviour::Status(204)).await;
    let redirecting = Receiver::start(Behaviour::Redirect(other.url.clone())).await;
    let sink = WebhookSink::new(true).expect("sink");
    let ext = BTreeMap::new();
    let outcome =
        sink.attempt(&target(&sink, &redirecting.url, &[SECRET]), &message(b"{}", &ext, Uuid::now_v7())).await;
    assert!(
        matches!(&outcome, Outcome::Failed(f) if f.status == Some(302) && f.kind == FailureKind::Refused),
        "{outcome:?}"
    );
    // The attempt is over: had the redirect been followed, the target would have been called
    // before the outcome came back.
    assert!(other.requests().is_empty(), "the redirect target was never called");
}

#[tokio::test]
async fn the_response_kept_with_an_attempt_is_capped() {
    let receiver = Receiver::start(Behaviour::Large(1024 * 1024)).await;
    let sink = WebhookSink::new(true).expect("sink");
    let ext = BTreeMap::new();
    match sink.attempt(&target(&sink, &receiver.url, &[SECRET]), &message(b"{}", &ext, Uuid::now_v7())).await {
        Outcome::Delivered { status, response, .. } => {
            assert_eq!(status, Some(200));
            assert_eq!(response.expect("response").len(), hub_sinks::RESPONSE_CAP);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_ssrf_guard_refuses_private_destinations_unless_allowed() {
    let receiver = Receiver::start(Behaviour::Status(204)).await;
    let guarded = WebhookSink::new(false).expect("sink");
    let ext = BTreeMap::new();
    let port = receiver.url.split(':').nth(2).expect("port").split('/').next().expect("port").to_owned();
    for url in [
        receiver.url.clone(),
        format!("http://localhost:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        "http://10.255.255.1/hook".to_owned(),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        "http://100.64.0.1/hook".to_owned(),
        "http://[fd00::1]/hook".to_owned(),
        "http://[fe80::1]/hook".to_owned(),
        "http://224.0.0.1/hook".to_owned(),
    ] {
        let outcome = guarded.attempt(&target(&guarded, &url, &[SECRET]), &message(b"{}", &ext, Uuid::now_v7())).await;
        assert!(
            matches!(&outcome, Outcome::Failed(f) if f.kind == FailureKind::Forbidden && !f.retryable),
            "{url}: {outcome:?}"
        );
        // The tenant learns nothing of what the name resolves to.
        assert!(
            matches!(&outcome, Outcome::Failed(f) if f.reason == hub_sinks::guard::NOT_ALLOWED),
            "{url}: {outcome:?}"
        );
    }
    assert!(receiver.requests().is_empty(), "nothing reached the private receiver");
    // With private sinks allowed, the same receiver is reached.
    let open = WebhookSink::new(true).expect("sink");
    assert!(
        open.attempt(&target(&open, &receiver.url, &[SECRET]), &message(b"{}", &ext, Uuid::now_v7()))
            .await
            .is_delivered()
    );
}

#[tokio::test]
async fn verification_needs_the_challenge_echoed() {
    let echo = Receiver::start(Behaviour::Echo).await;
    let silent = Receiver::start(Behaviour::Status(204)).await;
    let sink = WebhookSink::new(true).expect("sink");
    let sub = Uuid::now_v7();
    sink.check(&target(&sink, &echo.url, &[SECRET]), "tenant-a", sub).await.expect("an echoing receiver verifies");
    let probe = echo.wait_for(1).await.remove(0);
    assert_eq!(probe.headers["x-lerian-event-type"], "streaming_hub.verification");
    assert_eq!(probe.headers["x-lerian-subscription-id"], sub.to_string().as_str());
    let body: serde_json::Value = serde_json::from_slice(&probe.body).expect("json");
    assert_eq!(body["type"], "streaming_hub.verification");
    assert_eq!(body["challenge"].as_str().expect("challenge").len(), 32);
    let ts: i64 = probe.headers["x-webhook-timestamp"].to_str().expect("ts").parse().expect("ts");
    let sig = probe.headers["x-webhook-signature"].to_str().expect("sig");
    assert!(hub_core::signature::verify(SECRET, ts, &probe.body, sig), "the probe is signed");

    let err = sink.check(&target(&sink, &silent.url, &[SECRET]), "tenant-a", sub).await.expect_err("no challenge");
    assert!(err.reason.contains("challenge"), "{err:?}");
}

/// A `200` head whose body never completes: delivered (the receiver took the message), marked
/// stalled so the allowance is cut, with what came of the body, and within the timeout.
#[tokio::test]
async fn an_answer_whose_body_stalls_is_delivered_and_marked_stalled_within_the_timeout() {
    let url = crate::receiver::stalled_body_url().await;
    let sink = WebhookSink::new(true).expect("sink");
    let t = target_of(&sink, WebhookConfig { timeout_ms: 600, ..config(&url, Scheme::Lerian) }, &[SECRET], None);
    let ext = BTreeMap::new();
    let started = std::time::Instant::now();
    match sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await {
        Outcome::Delivered { status, response, stalled } => {
            assert_eq!(status, Some(200));
            assert!(stalled, "the body stalled");
            assert_eq!(response.as_deref(), Some("accepted, and"));
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    // An answer that completes is not stalled.
    let receiver = Receiver::start(Behaviour::Echo).await;
    match sink.attempt(&target(&sink, &receiver.url, &[SECRET]), &message(b"{}", &ext, Uuid::now_v7())).await {
        Outcome::Delivered { stalled, .. } => assert!(!stalled),
        other => panic!("{other:?}"),
    }
}

/// A receiver on raw TCP: counts its connections and answers each request with the next of
/// `answers` (the last one again when they run out); after an answer whose `close` is true it
/// closes the connection without saying so, then tells `closed`.
async fn raw_receiver(
    answers: Vec<(&'static str, bool)>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>, tokio::sync::mpsc::UnboundedReceiver<()>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let served = std::sync::Arc::new(AtomicUsize::new(0));
    let (tell, closed) = tokio::sync::mpsc::unbounded_channel();
    let counted = std::sync::Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let (answers, served, tell) = (answers.clone(), std::sync::Arc::clone(&served), tell.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    // One request: its head, then as many bytes as its content-length says.
                    let head_end = loop {
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|v| v.trim().parse().ok())
                        .expect("a content-length");
                    while buf.len() < head_end + length {
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + length);
                    let n = served.fetch_add(1, Ordering::SeqCst);
                    let (answer, close) = answers[n.min(answers.len() - 1)];
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    if close {
                        drop(socket);
                        let _ = tell.send(());
                        return;
                    }
                }
            });
        }
    });
    (url, connections, closed)
}

/// One connection carries attempt after attempt; a receiver that answers `Connection: close`, or
/// closes an idle connection without a word, costs the next attempt nothing but a new connection;
/// a chunked answer is read whole and kept.
#[tokio::test]
async fn connections_are_kept_between_attempts_and_given_up_when_the_receiver_closes_them() {
    use std::sync::atomic::Ordering;
    const KEPT: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    const CHUNKED: &str = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let sink = WebhookSink::new(true).expect("sink");
    let send = |t: WebhookTarget| {
        let sink = sink.clone();
        async move {
            let ext = BTreeMap::new();
            match sink.attempt(&t, &message(b"{\"n\":1}", &ext, Uuid::now_v7())).await {
                Outcome::Delivered { status, response, stalled: false } => (status, response),
                other => panic!("{other:?}"),
            }
        }
    };
    let (url, connections, _) = raw_receiver(vec![(KEPT, false), (KEPT, false), (CHUNKED, false), (KEPT, false)]).await;
    let t = target(&sink, &url, &[SECRET]);
    for expected in ["ok", "ok", "abcde", "ok"] {
        assert_eq!(send(t.clone()).await, (Some(200), Some(expected.to_owned())));
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1, "one connection carried all four");

    let close = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
    let (url, connections, _) = raw_receiver(vec![(close, false), (KEPT, false)]).await;
    let t = target(&sink, &url, &[SECRET]);
    for _ in 0..3 {
        assert_eq!(send(t.clone()).await, (Some(200), Some("ok".to_owned())));
    }
    assert_eq!(connections.load(Ordering::SeqCst), 2, "a new connection after Connection: close, then kept");

    let (url, connections, mut closed) = raw_receiver(vec![(KEPT, true)]).await;
    let t = target(&sink, &url, &[SECRET]);
    for round in 1..=3 {
        assert_eq!(send(t.clone()).await, (Some(200), Some("ok".to_owned())), "round {round}");
        closed.recv().await.expect("the receiver closed the connection");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 3, "each closed connection was left, none used dead");
}

/// An attempt that must make a connection while the receiver's accept queue is full (its first
/// try dropped, made again by the kernel seconds later) takes the connection another attempt
/// gives back instead of waiting for its own.
#[tokio::test]
async fn an_attempt_whose_connection_is_not_accepted_takes_one_given_back() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let addr = socket.local_addr().expect("addr");
    let listener = socket.listen(1).expect("listen");
    let served = std::sync::Arc::new(AtomicUsize::new(0));
    let (accepted_tx, accepted) = tokio::sync::oneshot::channel();
    let counted = std::sync::Arc::clone(&served);
    // Accepts one connection, then no more; answers each request on it 300 ms later.
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.expect("accept");
        let _ = accepted_tx.send(());
        let mut buf = Vec::new();
        loop {
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            // Each request here is a head and a 7-byte body.
            while let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                if buf.len() < at + 4 + 7 {
                    break;
                }
                buf.drain(..at + 4 + 7);
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(300)).await;
                conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.expect("answer");
            }
        }
        drop(listener);
    });
    let sink = WebhookSink::new(true).expect("sink");
    let t = target(&sink, &format!("http://{addr}/hook"), &[SECRET]);
    let first = {
        let (sink, t) = (sink.clone(), t.clone());
        tokio::spawn(async move {
            let ext = BTreeMap::new();
            sink.attempt(&t, &message(b"{\"n\":1}", &ext, Uuid::now_v7())).await
        })
    };
    accepted.await.expect("the first connection accepted");
    // The accept queue filled: connections nobody accepts, until one is not made at once.
    let mut fillers = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(conn)) => fillers.push(conn),
            Ok(Err(e)) => panic!("{e}"),
            Err(_) => break,
        }
        assert!(fillers.len() < 64, "the accept queue never filled");
    }
    let started = std::time::Instant::now();
    let ext = BTreeMap::new();
    let second = sink.attempt(&t, &message(b"{\"n\":2}", &ext, Uuid::now_v7())).await;
    assert!(second.is_delivered(), "{second:?}");
    assert!(first.await.expect("first").is_delivered());
    assert_eq!(served.load(Ordering::SeqCst), 2, "both went over the one connection accepted");
    // Its own connection's next try would come a second after the first (then three).
    assert!(started.elapsed() < Duration::from_millis(950), "waited {:?}", started.elapsed());
}
