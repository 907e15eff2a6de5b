//! People signed in with an identity provider: tokens from a provider the test runs (its
//! discovery document and key set served over HTTP, its keys made here), checked by the hub as it
//! checks any provider's. A tenant admin creates a subscription, an operator pauses but does not
//! change it, a viewer reads and is refused every write, a platform viewer reads `/admin`; every
//! attack on the token is refused with 401 and its reason before a handler runs; the provider's
//! key rotation is followed; a hanging or huge key set is bounded and slows no one else.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::IntoResponse;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac;
use reqwest::StatusCode;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};

use crate::support::{Backend, TestHub};

const AUDIENCE: &str = "streaming-hub";

/// A signing key of the test's provider.
enum Signer {
    Es256(EcdsaKeyPair),
    EdDsa(Ed25519KeyPair),
}

struct Key {
    kid: String,
    signer: Signer,
}

impl Key {
    fn es256(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).expect("key");
        Self { kid: kid.into(), signer: Signer::Es256(pair) }
    }

    fn eddsa(kid: &str) -> Self {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("key");
        Self { kid: kid.into(), signer: Signer::EdDsa(Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("key")) }
    }

    fn alg(&self) -> &'static str {
        match self.signer {
            Signer::Es256(_) => "ES256",
            Signer::EdDsa(_) => "EdDSA",
        }
    }

    fn public(&self) -> Vec<u8> {
        match &self.signer {
            Signer::Es256(p) => p.public_key().as_ref().to_vec(),
            Signer::EdDsa(p) => p.public_key().as_ref().to_vec(),
        }
    }

    fn jwk(&self) -> Value {
        let public = self.public();
        match self.signer {
            // An uncompressed point: 0x04, x, y.
            Signer::Es256(_) => json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
                "x": URL_SAFE_NO_PAD.encode(&public[1..33]), "y": URL_SAFE_NO_PAD.encode(&public[33..65]),
            }),
            Signer::EdDsa(_) => json!({
                "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": self.kid,
                "x": URL_SAFE_NO_PAD.encode(&public),
            }),
        }
    }

    fn sign(&self, header: &Value, claims: &Value) -> String {
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = match &self.signer {
            Signer::Es256(p) => p.sign(&SystemRandom::new(), input.as_bytes()).expect("sign").as_ref().to_vec(),
            Signer::EdDsa(p) => p.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    fn token(&self, claims: &Value) -> String {
        self.sign(&json!({"alg": self.alg(), "typ": "JWT", "kid": self.kid}), claims)
    }
}

/// How the provider answers for its key set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    Published,
    Hanging,
    Huge,
}

struct Provider {
    issuer: String,
    keys: Mutex<Vec<Value>>,
    mode: Mutex<Keys>,
    fetches: AtomicUsize,
}

async fn discovery(State(p): State<Arc<Provider>>) -> impl IntoResponse {
    axum::Json(json!({"issuer": p.issuer, "jwks_uri": format!("{}/jwks", p.issuer)}))
}

async fn jwks(State(p): State<Arc<Provider>>) -> axum::response::Response {
    p.fetches.fetch_add(1, Ordering::SeqCst);
    let mode = *p.mode.lock().expect("mode");
    match mode {
        Keys::Published => axum::Json(json!({"keys": *p.keys.lock().expect("keys")})).into_response(),
        Keys::Hanging => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK.into_response()
        }
        // 50 MB of key set, sent as it is made.
        Keys::Huge => {
            let chunk = axum::body::Bytes::from(vec![b' '; 1 << 20]);
            let body = futures_util::stream::iter(
                std::iter::once(Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"{\"keys\": [")))
                    .chain(std::iter::repeat_n(chunk, 50).map(Ok)),
            );
            axum::body::Body::from_stream(body).into_response()
        }
    }
}

async fn provider(keys: &[&Key]) -> Arc<Provider> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    let provider = Arc::new(Provider {
        issuer,
        keys: Mutex::new(keys.iter().map(|k| k.jwk()).collect()),
        mode: Mutex::new(Keys::Published),
        fetches: AtomicUsize::new(0),
    });
    let app = axum::Router::new()
        .route("/.well-known/openid-configuration", axum::routing::get(discovery))
        .route("/jwks", axum::routing::get(jwks))
        .with_state(Arc::clone(&provider));
    tokio::spawn(async move { axum::serve(listener, app).await });
    provider
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Claims of a person of `issuer` with these roles, valid for ten minutes.
fn claims(issuer: &str, subject: &str, roles: &[&str]) -> Value {
    json!({
        "iss": issuer, "sub": subject, "aud": AUDIENCE, "iat": now(), "exp": now() + 600,
        "preferred_username": format!("{subject}@example.com"), "roles": roles,
    })
}

async fn hub_trusting(issuers: &[&str]) -> TestHub {
    TestHub::start_with(
        Backend::Sqlite,
        &[
            ("STREAMING_HUB_SSO_ISSUERS", &issuers.join(",")),
            ("STREAMING_HUB_SSO_AUDIENCE", AUDIENCE),
            ("STREAMING_HUB_SSO_KEYS_REFRESH", "2s"),
        ],
    )
    .await
}

fn subscription(name: &str) -> Value {
    json!({"name": name, "event_types": ["*.*"], "sink": {"type": "pull"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_act_as_far_as_their_roles_allow() {
    let key = Key::es256("k1");
    let idp = provider(&[&key]).await;
    let hub = hub_trusting(&[&idp.issuer]).await;
    let admin = key.token(&claims(&idp.issuer, "ana", &["acme:admin", "offline_access"]));
    let operator = key.token(&claims(&idp.issuer, "otto", &["acme:operator"]));
    let viewer = key.token(&claims(&idp.issuer, "vera", &["acme:viewer"]));

    // A tenant admin creates a subscription; the change is theirs in the audit.
    let (status, created) = hub.post_json(&admin, "/v1/subscriptions", &subscription("by ana")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/subscriptions/{id}");

    // A viewer reads, and every write is refused naming the role it needs.
    let (status, listed) = hub.get(&viewer, "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "{listed}");
    let (status, refused) = hub.post_json(&viewer, "/v1/subscriptions", &subscription("by vera")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["message"].as_str().unwrap_or_default().contains("admin role"), "{refused}");
    for (status, answer) in [
        hub.patch_json(&viewer, &path, &json!({"enabled": false})).await,
        hub.post_json(&viewer, &format!("{path}/replay"), &json!({})).await,
        hub.delete(&viewer, &path).await,
        hub.post_json(&viewer, &format!("{path}/rotate-secret"), &json!({})).await,
    ] {
        assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    }
    // An operator pauses, but changes nothing else.
    let (status, paused) = hub.patch_json(&operator, &path, &json!({"enabled": false})).await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    let (status, refused) = hub.patch_json(&operator, &path, &json!({"name": "renamed"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let (status, _) = hub.delete(&operator, &path).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Who did what, in the tenant's audit: the person by issuer and subject.
    let (_, audit) = hub.get(&admin, "/v1/audit").await;
    let labels: Vec<&str> =
        audit["items"].as_array().expect("items").iter().filter_map(|c| c["actor_label"].as_str()).collect();
    assert!(labels.contains(&format!("otto ({})", idp.issuer).as_str()), "{audit}");
    assert!(labels.contains(&format!("ana ({})", idp.issuer).as_str()), "{audit}");

    // A token of acme never reaches another tenant.
    let (status, refused) = hub
        .send(hub.client.get(hub.url("/v1/subscriptions")).bearer_auth(&admin).header("x-streaming-hub-tenant", "beta"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    // Several tenants: the one meant must be named.
    let both = key.token(&claims(&idp.issuer, "bea", &["acme:viewer", "beta:admin"]));
    let (status, _) = hub.get(&both, "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = hub
        .send(hub.client.get(hub.url("/v1/subscriptions")).bearer_auth(&both).header("x-streaming-hub-tenant", "beta"))
        .await;
    assert_eq!(status, StatusCode::OK);

    // The platform: a viewer reads /admin and changes nothing; a tenant's admin reads nothing there.
    let platform_viewer = key.token(&claims(&idp.issuer, "pia", &["platform-viewer"]));
    let (status, _) = hub.get(&platform_viewer, "/admin/ledger/checkpoints").await;
    assert_eq!(status, StatusCode::OK);
    let (status, refused) =
        hub.post_json(&platform_viewer, "/admin/api-keys", &json!({"tenant_id": "acme", "name": "x"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let (status, _) = hub.get(&admin, "/admin/ledger/checkpoints").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_on_a_token_is_refused_with_its_reason() {
    let key = Key::eddsa("k1");
    let stranger = Key::eddsa("k1");
    let idp = provider(&[&key]).await;
    let hub = hub_trusting(&[&idp.issuer]).await;
    let good = claims(&idp.issuer, "ana", &["acme:admin"]);

    // A key the provider does not publish: one fetch of its key set, then refused; another at
    // once costs no fetch (at most one per few seconds, whatever the tokens name).
    let unknown = Key::eddsa("made-up");
    let (status, answer) = hub.get(&unknown.token(&good), "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    assert!(answer["message"].as_str().unwrap_or_default().contains("made-up"), "{answer}");
    assert_eq!(idp.fetches.load(Ordering::SeqCst), 1, "one fetch");
    let (status, _) = hub.get(&Key::eddsa("made-up-too").token(&good), "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(idp.fetches.load(Ordering::SeqCst), 1, "no second fetch within the interval");

    let (status, _) = hub.get(&key.token(&good), "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK, "the genuine token");

    let with = |change: Value| {
        let mut c = good.clone();
        for (k, v) in change.as_object().expect("object") {
            c[k] = v.clone();
        }
        c
    };
    let b64 = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let unsigned = format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT"})), b64(&good));
    // HS256 with the provider's public key as the secret (the classic confusion).
    let hs_input = format!("{}.{}", b64(&json!({"alg": "HS256", "typ": "JWT", "kid": "k1"})), b64(&good));
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key.public()).expect("hmac");
    mac.update(hs_input.as_bytes());
    let hs256 = format!("{hs_input}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()));
    let attacks = [
        ("alg none", unsigned, "algorithm"),
        ("HS256 with the public key", hs256, "algorithm"),
        ("another key under the same kid", stranger.token(&good), "signature"),
        ("expired", key.token(&with(json!({"exp": now() - 120}))), "expired"),
        ("not yet valid", key.token(&with(json!({"nbf": now() + 600}))), "not valid yet"),
        ("another audience", key.token(&with(json!({"aud": "another-service"}))), "audience"),
        ("another issuer", key.token(&with(json!({"iss": "https://idp.example.com"}))), "issuer"),
        ("no subject", key.token(&with(json!({"sub": null}))), "claim"),
    ];
    for (what, token, reason) in attacks {
        let (status, answer) = hub.post_json(&token, "/v1/subscriptions", &subscription(what)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{what}: {message}");
    }
    // None reached a handler: nothing was created.
    let (_, listed) = hub.get(&key.token(&good), "/v1/subscriptions").await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(0), "{listed}");
    // Each refusal is counted by its reason.
    let scrape = hub.client.get(hub.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    for (reason, at_least) in [("algorithm", 2), ("unknown_key", 2), ("expired", 1), ("audience", 1), ("signature", 1)]
    {
        let counted: f64 = scrape
            .lines()
            .filter(|l| {
                l.starts_with("streaming_hub_sso_refusals_total") && l.contains(&format!("reason=\"{reason}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert!(counted >= f64::from(at_least), "{reason}: {counted} in\n{scrape}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_providers_key_rotation_is_followed() {
    let old = Key::es256("2026-11");
    let idp = provider(&[&old]).await;
    let hub = hub_trusting(&[&idp.issuer]).await;
    let person = |key: &Key| key.token(&claims(&idp.issuer, &format!("p{}", uuid::Uuid::now_v7()), &["acme:viewer"]));
    let (status, _) = hub.get(&person(&old), "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK);

    // The provider publishes a new key and signs with it: accepted at the next fetch (the key
    // set was just fetched, so within a few seconds), with one fetch.
    let new = Key::eddsa("2026-12");
    idp.keys.lock().expect("keys").push(new.jwk());
    let before = idp.fetches.load(Ordering::SeqCst);
    crate::support::until("the new key accepted", Duration::from_secs(30), async || {
        let (status, _) = hub.get(&person(&new), "/v1/subscriptions").await;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    assert_eq!(idp.fetches.load(Ordering::SeqCst), before + 1, "one fetch");

    // Then removes the old one: once the hub fetched again (every 2 s here), the old key's new
    // tokens are refused.
    idp.keys.lock().expect("keys").retain(|k| k["kid"] != "2026-11");
    crate::support::until("the old key refused", Duration::from_secs(30), async || {
        let (status, _) = hub.get(&person(&old), "/v1/subscriptions").await;
        (status == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    let (status, _) = hub.get(&person(&new), "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_or_huge_key_set_is_bounded_and_slows_no_one_else() {
    let good_key = Key::es256("k1");
    let good = provider(&[&good_key]).await;
    let bad_key = Key::es256("k1");
    let bad = provider(&[&bad_key]).await;
    let hub = hub_trusting(&[&good.issuer, &bad.issuer]).await;
    let good_token = good_key.token(&claims(&good.issuer, "ana", &["acme:viewer"]));
    let (status, _) = hub.get(&good_token, "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK);

    *bad.mode.lock().expect("mode") = Keys::Hanging;
    let hub = Arc::new(hub);
    let waiting = {
        let hub = Arc::clone(&hub);
        let token = bad_key.token(&claims(&bad.issuer, "mal", &["acme:admin"]));
        tokio::spawn(async move {
            let started = Instant::now();
            let (status, answer) = hub.get(&token, "/v1/subscriptions").await;
            (status, answer, started.elapsed())
        })
    };
    // While the bad provider hangs, the good provider's people are served at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let started = Instant::now();
        let (status, _) = hub.get(&good_token, "/v1/subscriptions").await;
        assert_eq!(status, StatusCode::OK);
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
    let (status, answer, took) = waiting.await.expect("request");
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    assert!(answer["message"].as_str().unwrap_or_default().contains("could not be fetched"), "{answer}");
    assert!(took < Duration::from_secs(15), "bounded: {took:?}");
    let scrape = hub.client.get(hub.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    assert!(
        scrape.lines().any(|l| l.starts_with("streaming_hub_sso_key_fetch_failures_total")
            && l.contains(&bad.issuer)
            && !l.ends_with(" 0")),
        "the failed fetch is counted by issuer:\n{scrape}"
    );

    // A key set of 50 MB is cut at its bound, not read.
    let huge_key = Key::es256("k1");
    let huge = provider(&[&huge_key]).await;
    *huge.mode.lock().expect("mode") = Keys::Huge;
    let hub2 = hub_trusting(&[&huge.issuer]).await;
    let (status, answer) =
        hub2.get(&huge_key.token(&claims(&huge.issuer, "mal", &["acme:admin"])), "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    assert!(answer["message"].as_str().unwrap_or_default().contains("larger than"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_have_roles_too() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key_of = |role: Option<&str>| {
        let mut body = json!({"tenant_id": "acme", "name": "k"});
        if let Some(role) = role {
            body["role"] = json!(role);
        }
        body
    };
    let admin_key = |body: Value| {
        let hub = &hub;
        async move { hub.send(hub.client.post(hub.url("/admin/api-keys")).bearer_auth(&hub.admin).json(&body)).await }
    };
    let (status, default) = admin_key(key_of(None)).await;
    assert_eq!(status, StatusCode::CREATED, "{default}");
    assert_eq!(default["role"], "admin", "a key is its tenant's admin unless told otherwise");
    let (status, viewer) = admin_key(key_of(Some("viewer"))).await;
    assert_eq!(status, StatusCode::CREATED, "{viewer}");
    let viewer = viewer["key"].as_str().expect("key").to_owned();
    let (status, operator) = admin_key(key_of(Some("operator"))).await;
    assert_eq!(status, StatusCode::CREATED, "{operator}");
    let operator = operator["key"].as_str().expect("key").to_owned();
    for bad in [json!({"tenant_id": "acme", "role": "owner"}), json!({"admin": true, "role": "viewer"})] {
        let (status, answer) = admin_key(bad).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert!(answer["message"].as_str().unwrap_or_default().contains("role"), "{answer}");
    }

    let admin = default["key"].as_str().expect("key");
    let (status, created) = hub.post_json(admin, "/v1/subscriptions", &subscription("p")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let path = format!("/v1/subscriptions/{}", created["id"].as_str().expect("id"));
    let (status, _) = hub.get(&viewer, &path).await;
    assert_eq!(status, StatusCode::OK);
    let (status, refused) = hub.patch_json(&viewer, &path, &json!({"enabled": false})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let (status, _) = hub.patch_json(&operator, &path, &json!({"enabled": false})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = hub.post_json(&operator, "/v1/subscriptions", &subscription("q")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let event = crate::support::Event::new("acme");
    let (status, _) = hub.post_event(&viewer, &event).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a viewer publishes nothing");
    let (status, _) = hub.post_event(&operator, &event).await;
    assert!(status.is_success(), "an operator publishes: {status}");
}

/// People arriving at once before the provider's keys were ever fetched all wait for the one
/// fetch, none is refused meanwhile, and the key set is fetched once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_arriving_at_once_share_the_first_fetch() {
    let key = Key::es256("k1");
    let idp = provider(&[&key]).await;
    let hub = Arc::new(hub_trusting(&[&idp.issuer]).await);
    let mut asked = Vec::new();
    for n in 0..24 {
        let hub = Arc::clone(&hub);
        let token = key.token(&claims(&idp.issuer, &format!("p{n}"), &["acme:viewer"]));
        asked.push(tokio::spawn(async move { hub.get(&token, "/v1/subscriptions").await }));
    }
    for a in asked {
        let (status, answer) = a.await.expect("request");
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    assert_eq!(idp.fetches.load(Ordering::SeqCst), 1);
}

/// The certified OpenID provider (`oidc-provider` from npm, `scripts/services oidc`), run as a
/// process of its own: its clients stand for people with roles, its access tokens (RFC 9068 JWTs
/// of the client credentials grant) are what the hub checks.
struct RealProvider {
    issuer: String,
    child: std::process::Child,
    http: reqwest::Client,
}

impl Drop for RealProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const REAL_AUDIENCE: &str = "urn:streaming-hub:api";

impl RealProvider {
    async fn start(clients: Value) -> Self {
        Self::start_at(crate::support::free_port(), &[("CLIENTS", clients.to_string())]).await
    }

    /// The provider on `port`, with these of its settings (`CLIENTS`, `WEB_CLIENTS`, `PEOPLE`).
    async fn start_at(port: u16, settings: &[(&str, String)]) -> Self {
        let issuer = format!("http://127.0.0.1:{port}");
        let modules = hub_testkit::kafka::cache_dir().join("oidc/node_modules");
        assert!(
            modules.join("oidc-provider/package.json").exists(),
            "the identity provider is required for these tests: run scripts/services oidc"
        );
        let mut child = std::process::Command::new("node")
            .arg(crate::sdk::repo().join("crates/hub-testkit/oidc/provider.mjs"))
            .env("MODULES", &modules)
            .env("ISSUER", &issuer)
            .env("PORT", port.to_string())
            .env("AUDIENCE", REAL_AUDIENCE)
            .envs(settings.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node runs the provider");
        let stdout = child.stdout.take().expect("stdout");
        let (said, ready) = tokio::sync::oneshot::channel();
        // Read to the end, not only to "ready": a provider writing to a closed pipe would die.
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut lines = std::io::BufReader::new(stdout).lines().map_while(Result::ok);
            let _ = said.send(lines.any(|l| l.trim() == "ready"));
            lines.for_each(drop);
        });
        let ready = tokio::time::timeout(Duration::from_secs(30), ready).await.expect("the provider starts in time");
        assert!(ready.expect("reader"), "the provider said ready");
        Self { issuer, child, http: crate::support::http_client() }
    }

    async fn token(&self, client: &str) -> String {
        let answer: Value = self
            .http
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("secret-{client}-0123456789abcdef")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials&scope=api")
            .send()
            .await
            .expect("token request")
            .json()
            .await
            .expect("token answer");
        answer["access_token"].as_str().unwrap_or_else(|| panic!("a token: {answer}")).to_owned()
    }

    async fn post(&self, path: &str) {
        let status = self.http.post(format!("{}{path}", self.issuer)).send().await.expect("post").status();
        assert!(status.is_success(), "{path}: {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certified_providers_tokens_and_key_rotation() {
    let client = |id: &str, roles: &[&str]| json!({"client_id": id, "client_secret": format!("secret-{id}-0123456789abcdef"), "roles": roles});
    let idp = RealProvider::start(json!([client("ana", &["acme:admin"]), client("vera", &["acme:viewer"])])).await;
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[
            ("STREAMING_HUB_SSO_ISSUERS", idp.issuer.as_str()),
            ("STREAMING_HUB_SSO_AUDIENCE", REAL_AUDIENCE),
            ("STREAMING_HUB_SSO_KEYS_REFRESH", "1s"),
        ],
    )
    .await;
    let ana = idp.token("ana").await;
    let vera = idp.token("vera").await;
    let (status, created) = hub.post_json(&ana, "/v1/subscriptions", &subscription("by ana")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, listed) = hub.get(&vera, "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let (status, refused) = hub.post_json(&vera, "/v1/subscriptions", &subscription("by vera")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");

    // The provider rotates: its new key signs (the old one stays published): the hub follows.
    idp.post("/rotate").await;
    crate::support::until("the new key's token accepted", Duration::from_secs(30), async || {
        let token = idp.token("vera").await;
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(token.split('.').next()?).ok()?).ok()?;
        assert_eq!(header["kid"], "k2", "the provider signs with its new key");
        let (status, _) = hub.get(&token, "/v1/subscriptions").await;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    // Its old key's tokens keep working while it is published.
    let (status, _) = hub.get(&vera, "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK);
}

/// People sign in to the console through the certified provider, in Chromium
/// (`console/test/sso.mjs`): an admin creates a subscription from the form, a viewer is refused
/// every write in the console and the API, the cookie without its CSRF token opens nothing, and
/// sign-out ends the session on the hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_to_the_console_through_the_provider() {
    let port = crate::support::free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let secret = "secret-console-0123456789abcdef";
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[
            ("STREAMING_HUB_SSO_ISSUERS", issuer.as_str()),
            ("STREAMING_HUB_SSO_AUDIENCE", REAL_AUDIENCE),
            ("STREAMING_HUB_SSO_CONSOLE_CLIENT_ID", "console"),
            ("STREAMING_HUB_SSO_CONSOLE_CLIENT_SECRET", secret),
        ],
    )
    .await;
    let idp = RealProvider::start_at(
        port,
        &[
            (
                "WEB_CLIENTS",
                json!([{"client_id": "console", "client_secret": secret,
                        "redirect_uris": [hub.url("/console/sso/callback")]}])
                .to_string(),
            ),
            ("PEOPLE", json!({"ana": ["acme:admin", "beta:viewer"], "vera": ["acme:viewer"]}).to_string()),
        ],
    )
    .await;
    assert_eq!(idp.issuer, issuer);
    let offered: Value =
        hub.client.get(hub.url("/console/sso")).send().await.expect("offer").json().await.expect("json");
    assert_eq!(offered, json!({"enabled": true}));

    // A sign-in not started here, or answered for another, goes nowhere.
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let stray = browser.get(hub.url("/console/sso/callback?code=x&state=y")).send().await.expect("callback");
    assert_eq!(stray.status(), StatusCode::BAD_REQUEST);
    assert!(stray.text().await.expect("page").contains("was not started here"));
    let start = browser.get(hub.url("/console/sso/start")).send().await.expect("start");
    assert_eq!(start.status(), StatusCode::SEE_OTHER);
    let pending = start.headers()["set-cookie"].to_str().expect("cookie").to_owned();
    assert!(
        pending.contains("HttpOnly") && pending.contains("Secure") && pending.contains("SameSite=Lax"),
        "{pending}"
    );
    let location = start.headers()["location"].to_str().expect("location").to_owned();
    assert!(
        location.starts_with(&format!("{issuer}/auth?")) && location.contains("code_challenge_method=S256"),
        "{location}"
    );
    let cookie = pending.split(';').next().expect("cookie");
    let mismatched = browser
        .get(hub.url("/console/sso/callback?code=x&state=not-the-state"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("callback");
    assert_eq!(mismatched.status(), StatusCode::BAD_REQUEST);
    assert!(mismatched.text().await.expect("page").contains("another sign-in"));
    // The provider's own refusal, said on the page (and nothing signed in).
    let denied = browser
        .get(hub.url("/console/sso/callback?error=access_denied&error_description=the%20person%20said%20no"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("callback");
    assert_eq!(denied.status(), StatusCode::BAD_REQUEST);
    assert!(denied.headers().get_all("set-cookie").iter().all(|c| !c.to_str().unwrap_or("").contains("shcs_")));
    assert!(
        denied
            .text()
            .await
            .expect("page")
            .contains("the provider refused the sign-in: access_denied: the person said no")
    );

    let report = crate::console::browser_script("sso.mjs", &[("BASE", hub.url(""))]).await;
    assert_eq!(report["steps"].as_array().map(Vec::len), Some(6), "{report}");

    // The subscription is acme's, and the change is ana's in acme's audit.
    let as_acme =
        |path: &str| hub.client.get(hub.url(path)).bearer_auth(&hub.admin).header("x-streaming-hub-tenant", "acme");
    let (status, listed) = hub.send(as_acme("/v1/subscriptions")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let names: Vec<_> = listed["items"].as_array().expect("items").iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["by-ana-in-the-console"], "{listed}");
    let (_, audit) = hub.send(as_acme("/v1/audit")).await;
    let labels: Vec<_> =
        audit["items"].as_array().expect("items").iter().filter_map(|c| c["actor_label"].as_str()).collect();
    assert!(labels.contains(&format!("ana ({issuer})").as_str()), "{audit}");
}

/// Outside `local`, with people signing in, the admin token may be left unset: it is then off
/// (break-glass: an operator sets it and restarts). Without SSO or an admin key the hub refuses to
/// start, naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_people_signing_in_the_admin_token_can_be_off() {
    let mut vars = crate::support::base_vars(Backend::Sqlite).await;
    vars.remove("STREAMING_HUB_ADMIN_TOKEN");
    vars.insert("STREAMING_HUB_ENV".into(), "staging".into());
    let config = streaming_hub::config::Config::from_vars(vars.clone()).expect("valid");
    streaming_hub::open_store(&config, true).await.expect("migrate");
    let clock: Arc<dyn streaming_hub::testing::Clock> = Arc::new(streaming_hub::testing::ShiftedClock::default());
    let refused =
        streaming_hub::start_with_clock(config, tokio_util::sync::CancellationToken::new(), Arc::clone(&clock))
            .await
            .err()
            .expect("no way to administer: refused");
    assert!(refused.to_string().contains("STREAMING_HUB_ADMIN_TOKEN"), "{refused}");

    vars.insert("STREAMING_HUB_SSO_ISSUERS".into(), "https://idp.bank.example/realms/hub".into());
    vars.insert("STREAMING_HUB_SSO_AUDIENCE".into(), AUDIENCE.into());
    let config = streaming_hub::config::Config::from_vars(vars).expect("valid");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let hub = streaming_hub::start_with_clock(config, shutdown.clone(), clock).await.expect("starts without a token");
    assert!(hub.admin_token.is_none());
    let answer = crate::support::http_client()
        .get(format!("http://{}/admin/tenants", hub.addr))
        .bearer_auth("a-guess-at-an-admin-token")
        .send()
        .await
        .expect("admin");
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    shutdown.cancel();
}
