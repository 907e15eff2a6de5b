//! Webhook authentication against real servers (SPEC §10): HTTP Basic at a receiver that checks
//! it, OAuth2 client credentials from a token endpoint that counts its requests, and mutual TLS
//! at a TLS server that requires a client certificate from a CA made here, trusted through
//! `tls.ca_pem`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use hub_core::signature::Scheme;
use hub_sinks::webhook::WebhookSink;
use hub_sinks::webhook::config::{AuthConfig, TlsConfig, WebhookConfig};
use hub_sinks::{FailureKind, Outcome, TypedSink};
use serde_json::json;
use uuid::Uuid;

use hub_testkit::tls::Pki;

use crate::contract::message;
use crate::webhook::{config, target_of};

const SECRET: &str = "whsec_dGhpcyBpcyBhIHRlc3Qgc2VjcmV0IG9mIDMyIGJ5dGVzIQ==";

fn failure(outcome: Outcome) -> hub_sinks::Failure {
    match outcome {
        Outcome::Failed(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

async fn attempt(sink: &WebhookSink, target: &hub_sinks::webhook::WebhookTarget) -> Outcome {
    let ext = BTreeMap::new();
    sink.attempt(target, &message(b"{\"n\":1}", &ext, Uuid::now_v7())).await
}

/// `n` attempts at once, each a task of its own (as the dispatcher makes them).
async fn at_once(n: usize, sink: &WebhookSink, target: &hub_sinks::webhook::WebhookTarget) -> Vec<Outcome> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (sink, target) = (sink.clone(), target.clone());
        tasks.spawn(async move { attempt(&sink, &target).await });
    }
    tasks.join_all().await
}

// ---------------------------------------------------------------------------------------------
// HTTP Basic

#[derive(Clone)]
struct Expect {
    authorization: Arc<Mutex<String>>,
    seen: Arc<AtomicUsize>,
}

/// 204 when `Authorization` is what is expected now, 401 otherwise; echoes a verification.
async fn checks_authorization(State(e): State<Expect>, headers: HeaderMap, body: Bytes) -> Response {
    e.seen.fetch_add(1, Ordering::SeqCst);
    let got = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if got != *e.authorization.lock().expect("lock") {
        return (StatusCode::UNAUTHORIZED, [("www-authenticate", "Bearer")], "who are you").into_response();
    }
    (StatusCode::OK, body).into_response()
}

async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn checking_receiver(expected: &str) -> (String, Expect) {
    let e = Expect { authorization: Arc::new(Mutex::new(expected.to_owned())), seen: Arc::default() };
    let url = serve(axum::Router::new().fallback(checks_authorization).with_state(e.clone())).await;
    (format!("{url}/hook"), e)
}

#[tokio::test]
async fn basic_auth_is_sent_and_a_wrong_password_is_an_unauthorized_attempt() {
    let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("hub:s3cr:et"));
    let (url, _) = checking_receiver(&expected).await;
    let sink = WebhookSink::new(true).expect("sink");
    let with = |password: &str| {
        let c =
            WebhookConfig { auth: Some(AuthConfig::Basic { username: "hub".into() }), ..config(&url, Scheme::Lerian) };
        target_of(&sink, c, &[SECRET], Some(json!({"password": password})))
    };
    assert!(attempt(&sink, &with("s3cr:et")).await.is_delivered());
    sink.check(&with("s3cr:et"), "tenant-a", Uuid::now_v7()).await.expect("verification carries it too");
    let f = failure(attempt(&sink, &with("wrong")).await);
    assert_eq!((f.kind, f.status), (FailureKind::Unauthorized, Some(401)));
    assert!(!format!("{:?} {}", with("s3cr:et"), f.reason).contains("s3cr"), "the password is never shown");
}

// ---------------------------------------------------------------------------------------------
// OAuth2 client credentials

#[derive(Clone)]
struct Issuer {
    /// The client's expected `Authorization: Basic` header.
    client: String,
    asked: Arc<AtomicUsize>,
    /// The receiver's expectation, moved to each new token.
    receiver: Arc<Mutex<String>>,
}

async fn issue(State(i): State<Issuer>, headers: HeaderMap, body: String) -> Response {
    let n = i.asked.fetch_add(1, Ordering::SeqCst) + 1;
    let form: BTreeMap<String, String> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    let client = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if client != i.client {
        return (StatusCode::UNAUTHORIZED, axum::Json(json!({"error": "invalid_client", "error_description": "nope"})))
            .into_response();
    }
    if form.get("grant_type").map(String::as_str) != Some("client_credentials")
        || form.get("scope").map(String::as_str) != Some("deliveries:write")
        || form.get("audience").map(String::as_str) != Some("https://api.bank.example")
    {
        return (StatusCode::BAD_REQUEST, axum::Json(json!({"error": "invalid_request"}))).into_response();
    }
    let token = format!("tok-{n}");
    *i.receiver.lock().expect("lock") = format!("Bearer {token}");
    axum::Json(json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600})).into_response()
}

struct OAuthWorld {
    sink: WebhookSink,
    receiver: String,
    token_url: String,
    asked: Arc<AtomicUsize>,
    delivered: Arc<AtomicUsize>,
}

async fn oauth_world() -> OAuthWorld {
    let (receiver, expect) = checking_receiver("Bearer (none yet)").await;
    // Client id and secret are form-encoded before Basic encoding (RFC 6749 §2.3.1).
    let client = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("hub%2Bclient:top+secret"));
    let issuer = Issuer { client, asked: Arc::default(), receiver: Arc::clone(&expect.authorization) };
    let asked = Arc::clone(&issuer.asked);
    let token_url = format!("{}/oauth/token", serve(axum::Router::new().fallback(issue).with_state(issuer)).await);
    OAuthWorld { sink: WebhookSink::new(true).expect("sink"), receiver, token_url, asked, delivered: expect.seen }
}

impl OAuthWorld {
    fn target(&self, secret: &str) -> hub_sinks::webhook::WebhookTarget {
        let auth = AuthConfig::OAuth2 {
            token_url: self.token_url.clone(),
            client_id: "hub+client".into(),
            scope: Some("deliveries:write".into()),
            audience: Some("https://api.bank.example".into()),
        };
        let c = WebhookConfig { auth: Some(auth), ..config(&self.receiver, Scheme::Lerian) };
        target_of(&self.sink, c, &[SECRET], Some(json!({"client_secret": secret})))
    }
}

#[tokio::test]
async fn oauth2_fetches_one_token_for_many_attempts_and_sends_it_as_a_bearer() {
    let w = oauth_world().await;
    let target = w.target("top secret");
    let outcomes = at_once(40, &w.sink, &target).await;
    assert!(outcomes.iter().all(Outcome::is_delivered), "{outcomes:?}");
    // A target made again for the same credentials (the next job) shares the token.
    assert!(attempt(&w.sink, &w.target("top secret")).await.is_delivered());
    w.sink.check(&target, "tenant-a", Uuid::now_v7()).await.expect("verification carries the token too");
    assert_eq!(w.asked.load(Ordering::SeqCst), 1, "one token for 42 requests");
    assert_eq!(w.delivered.load(Ordering::SeqCst), 42);
}

#[tokio::test]
async fn a_wrong_client_secret_fails_attempts_clearly_without_a_storm_on_the_token_endpoint() {
    let w = oauth_world().await;
    let target = w.target("wrong");
    for outcome in at_once(50, &w.sink, &target).await {
        let f = failure(outcome);
        assert_eq!(f.kind, FailureKind::Unauthorized);
        assert!(f.reason.starts_with("the token endpoint answered HTTP 401 (invalid_client)"), "{}", f.reason);
        assert!(!f.reason.contains("wrong") && !f.reason.contains("nope"), "{}", f.reason);
    }
    assert_eq!(w.asked.load(Ordering::SeqCst), 1, "50 attempts within the pause ask the token endpoint once");
    assert_eq!(w.delivered.load(Ordering::SeqCst), 0, "nothing reaches the receiver without a token");
    // The right secret is other credentials: not held back by the wrong one's pause.
    assert!(attempt(&w.sink, &w.target("top secret")).await.is_delivered());
}

#[tokio::test]
async fn a_token_endpoint_at_a_private_address_is_refused_by_a_guarded_sink() {
    let w = oauth_world().await;
    let guarded = WebhookSink::new(false).expect("sink");
    let auth = AuthConfig::OAuth2 {
        token_url: w.token_url.clone(),
        client_id: "hub+client".into(),
        scope: None,
        audience: None,
    };
    // The receiver is public; only the token endpoint is private.
    let c = WebhookConfig { auth: Some(auth), ..config("https://receiver.example/hook", Scheme::Lerian) };
    let target = target_of(&guarded, c, &[SECRET], Some(json!({"client_secret": "top secret"})));
    let f = failure(attempt(&guarded, &target).await);
    assert_eq!(f.kind, FailureKind::Forbidden);
    assert!(f.reason.starts_with("token endpoint:"), "{}", f.reason);
    assert_eq!(w.asked.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------------------------
// Mutual TLS and a private CA

/// An HTTPS receiver that requires a client certificate issued by the test CA; it echoes bodies
/// and counts the requests that got through the handshake.
async fn mtls_receiver(pki: &Pki) -> (String, Arc<AtomicUsize>) {
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let app = axum::Router::new().fallback(move |body: Bytes| {
        count.fetch_add(1, Ordering::SeqCst);
        async move { (StatusCode::OK, body) }
    });
    (format!("{}/hook", pki.serve(app, true).await), served)
}

#[tokio::test]
async fn mtls_presents_the_client_certificate_to_a_server_of_a_private_ca() {
    let pki = Pki::new();
    let sink = WebhookSink::new(true).expect("sink");
    let (url, served) = mtls_receiver(&pki).await;
    let tls = Some(TlsConfig { ca_pem: pki.ca_pem.clone() });
    let mtls = Some(AuthConfig::Mtls { certificate_pem: pki.client_pem.clone() });
    let key = Some(json!({"private_key_pem": pki.client_key_pem}));

    let target = target_of(
        &sink,
        WebhookConfig { auth: mtls.clone(), tls: tls.clone(), ..config(&url, Scheme::Lerian) },
        &[SECRET],
        key.clone(),
    );
    assert!(attempt(&sink, &target).await.is_delivered());
    sink.check(&target, "tenant-a", Uuid::now_v7()).await.expect("verification over mutual TLS");
    assert_eq!(served.load(Ordering::SeqCst), 2);

    // Trusting the CA without a client certificate: the server ends the handshake.
    let no_cert = target_of(&sink, WebhookConfig { tls: tls.clone(), ..config(&url, Scheme::Lerian) }, &[SECRET], None);
    assert_eq!(failure(attempt(&sink, &no_cert).await).kind, FailureKind::Unreachable);
    // A client certificate without trusting the private CA: the hub ends it.
    let no_ca = target_of(&sink, WebhookConfig { auth: mtls, ..config(&url, Scheme::Lerian) }, &[SECRET], key);
    assert_eq!(failure(attempt(&sink, &no_ca).await).kind, FailureKind::Unreachable);
    assert_eq!(served.load(Ordering::SeqCst), 2, "neither got through the handshake");
}

#[test]
fn a_client_key_or_ca_that_cannot_be_used_is_refused_at_validation_naming_its_field() {
    let pki = Pki::new();
    let parse = |auth: serde_json::Value, tls: serde_json::Value| {
        let sink = json!({"type": "webhook", "url": "https://receiver.example/hook", "auth": auth, "tls": tls});
        hub_sinks::destination::request::parse(&sink, false).map(|_| ()).map_err(|e| e.to_string())
    };
    let mtls = |key: &str| json!({"type": "mtls", "certificate_pem": pki.client_pem, "private_key_pem": key});
    assert_eq!(parse(mtls(&pki.client_key_pem), json!({"ca_pem": pki.ca_pem})), Ok(()));
    let err = parse(mtls(&pki.other_key_pem), json!(null)).expect_err("another key");
    assert!(err.starts_with("sink.auth.private_key_pem:"), "{err}");
    let err =
        parse(mtls("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"), json!(null)).expect_err("garbage");
    assert!(err.starts_with("sink.auth.private_key_pem:"), "{err}");
    let err = parse(json!(null), json!({"ca_pem": "not a certificate"})).expect_err("bad ca");
    assert!(err.starts_with("sink.tls.ca_pem:"), "{err}");
    let err =
        parse(json!({"type": "mtls", "certificate_pem": "x", "private_key_pem": pki.client_key_pem}), json!(null))
            .expect_err("bad certificate");
    assert!(err.starts_with("sink.auth.certificate_pem:"), "{err}");

    // A combined `client.pem` (the certificate and its key) in a public field is refused, and the
    // key never appears in the error.
    let combined = format!("{}\n{}", pki.client_pem.trim(), pki.client_key_pem.trim());
    let key_line = pki.client_key_pem.lines().nth(1).expect("a key body line");
    let err = parse(
        mtls(&pki.client_key_pem),
        json!({"ca_pem": format!("{}\n{}", pki.ca_pem.trim(), pki.client_key_pem.trim())}),
    )
    .expect_err("a key beside the CA");
    assert!(err.starts_with("sink.tls.ca_pem:") && !err.contains(key_line), "{err}");
    let err =
        parse(json!({"type": "mtls", "certificate_pem": combined, "private_key_pem": pki.client_key_pem}), json!(null))
            .expect_err("a key beside the certificate");
    assert!(err.starts_with("sink.auth.certificate_pem:") && !err.contains(key_line), "{err}");
    // Any other block, encrypted keys and unknown labels included.
    for label in ["ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "PUBLIC KEY", "X"] {
        let block = format!("{}\n-----BEGIN {label}-----\nAAAA\n-----END {label}-----\n", pki.ca_pem.trim());
        let err = parse(json!(null), json!({"ca_pem": block})).expect_err(label);
        assert!(err.starts_with("sink.tls.ca_pem:"), "{label}: {err}");
    }
    // PEM armour around what is not a certificate is refused at create, naming the field.
    for junk in ["AA==", "MIIBAAAA", "aGVsbG8gd29ybGQ="] {
        let armoured = format!("-----BEGIN CERTIFICATE-----\n{junk}\n-----END CERTIFICATE-----\n");
        let err = parse(json!(null), json!({"ca_pem": armoured})).expect_err(junk);
        assert!(err.starts_with("sink.tls.ca_pem:"), "{junk}: {err}");
        let err = parse(
            json!({"type": "mtls", "certificate_pem": armoured, "private_key_pem": pki.client_key_pem}),
            json!(null),
        )
        .expect_err(junk);
        assert!(err.starts_with("sink.auth.certificate_pem:"), "{junk}: {err}");
        // A good certificate followed by a junk one is refused too.
        let err = parse(json!(null), json!({"ca_pem": format!("{}\n{armoured}", pki.ca_pem.trim())})).expect_err(junk);
        assert!(err.starts_with("sink.tls.ca_pem:"), "{junk}: {err}");
    }
}
