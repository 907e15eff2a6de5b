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
