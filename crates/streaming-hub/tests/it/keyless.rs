//! Keyless AWS end to end, on both stores: the hub is an OIDC issuer, an SQS destination names a
//! role instead of keys, and the events reach the queue with credentials STS gave for the hub's
//! own token. Between the hub and the AWS emulator sits a recording proxy: it shows the token
//! the hub presented (verified here by Node's crypto against the JWKS the hub serves), that
//! STS was asked once for many deliveries, and that every SQS request was signed with the key
//! STS answered. A role STS refuses fails the probe with STS's reason, and a second probe within
//! ten seconds does not ask STS again.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::sinks::{aws_endpoint, sdk};
use crate::support::{Backend, Event, TestHub, free_port, until};

const WAIT: Duration = Duration::from_secs(30);
const EVENTS: usize = 5;
const DENIED: &str = "arn:aws:iam::123456789012:role/denied";

/// One request the proxy forwarded.
#[derive(Debug, Clone)]
struct Seen {
    /// `AssumeRoleWithWebIdentity`, `SendMessage`, …
    action: String,
    form: Vec<(String, String)>,
    authorization: String,
    answer: String,
}

#[derive(Clone, Default)]
struct Proxy {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Proxy {
    async fn start() -> (Self, String) {
        let proxy = Self::default();
        let app = axum::Router::new().fallback(forward).with_state(proxy.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (proxy, url)
    }

    fn seen(&self, action: &str) -> Vec<Seen> {
        self.seen.lock().expect("lock").iter().filter(|s| s.action == action).cloned().collect()
    }
}

async fn forward(
    State(proxy): State<Proxy>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, HeaderMap, Bytes) {
    let form: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let action = match headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
        Some(target) => target.rsplit('.').next().unwrap_or_default().to_owned(),
        None => field("Action").unwrap_or_default(),
    };
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let (status, answer_headers, answer) = if action == "AssumeRoleWithWebIdentity"
        && field("RoleArn").as_deref() == Some(DENIED)
    {
        let refused = "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type>\
                       <Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message>\
                       </Error><RequestId>r1</RequestId></ErrorResponse>";
        let mut h = HeaderMap::new();
        h.insert("content-type", "text/xml".parse().expect("header"));
        (StatusCode::FORBIDDEN, h, Bytes::from(refused))
    } else {
        let mut request = reqwest::Client::new().request(method, format!("{}{}", aws_endpoint(), uri));
        for (name, value) in &headers {
            if name != "host" && name != "content-length" {
                request = request.header(name, value);
            }
        }
        let answer = request.body(body.clone()).send().await.expect("the AWS emulator is required");
        let status = answer.status();
        let mut h = HeaderMap::new();
        for (name, value) in answer.headers() {
            if name != "content-length" && name != "transfer-encoding" && name != "connection" {
                h.insert(name.clone(), value.clone());
            }
        }
        (status, h, answer.bytes().await.expect("body"))
    };
    proxy.seen.lock().expect("lock").push(Seen {
        action,
        form,
        authorization,
        answer: String::from_utf8_lossy(&answer).into_owned(),
    });
    (status, answer_headers, answer)
}

/// The text of `<tag>` in an XML answer.
fn xml<'a>(text: &'a str, tag: &str) -> &'a str {
    let start = text.find(&format!("<{tag}>")).map(|i| i + tag.len() + 2).expect(tag);
    &text[start..start + text[start..].find('<').expect("closing tag")]
}

/// The claims of `token` when Node's crypto verifies its ES256 signature with the key of its
/// `kid` in `jwks`; `null` otherwise.
fn node_verifies(token: &str, jwks: &Value) -> Value {
    let script = r#"
const crypto = require("crypto");
const [token, jwks] = [process.argv[1], JSON.parse(process.argv[2])];
const [h, c, s] = token.split(".");
const header = JSON.parse(Buffer.from(h, "base64url"));
const jwk = jwks.keys.find((k) => k.kid === header.kid);
const ok = header.alg === "ES256" && jwk && crypto.verify("sha256", Buffer.from(h + "." + c),
  { key: crypto.createPublicKey({ key: jwk, format: "jwk" }), dsaEncoding: "ieee-p1363" }, Buffer.from(s, "base64url"));
console.log(ok ? Buffer.from(c, "base64url").toString() : "null");
"#;
    let out = Command::new("node").arg("-e").arg(script).arg(token).arg(jwks.to_string()).output().expect("node runs");
    assert!(out.status.success(), "node: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("node printed JSON")
}

crate::on_both_backends!(an_sqs_destination_assumes_a_role_with_the_hubs_token);

async fn an_sqs_destination_assumes_a_role_with_the_hubs_token(backend: Backend) {
    let (proxy, proxy_url) = Proxy::start().await;
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_HTTP_LISTEN_ADDR", &format!("127.0.0.1:{port}")),
            ("STREAMING_HUB_OIDC_ISSUER", &issuer),
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;

    // Discovery and JWKS, public.
    let discovery: Value = hub
        .client
        .get(hub.url("/.well-known/openid-configuration"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(discovery["issuer"], issuer.as_str());
    assert_eq!(discovery["jwks_uri"], format!("{issuer}/.well-known/jwks.json"));
    assert_eq!(discovery["id_token_signing_alg_values_supported"], json!(["ES256"]));
    let jwks: Value =
        hub.client.get(hub.url("/.well-known/jwks.json")).send().await.expect("get").json().await.expect("json");
    assert_eq!(jwks["keys"].as_array().map(Vec::len), Some(1), "{jwks}");
    assert!(jwks["keys"][0].get("d").is_none(), "never the private half: {jwks}");

    let queue = format!("keyless-{}", Uuid::now_v7().simple());
    let sqs = aws_sdk_sqs::Client::new(&sdk().await);
    let queue_url = sqs.create_queue().queue_name(&queue).send().await.expect("the AWS emulator is required");
    let queue_url = queue_url.queue_url().expect("url").to_owned();
    let role = "arn:aws:iam::123456789012:role/streaming-hub-delivery";
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "keyless", "event_types": ["loan_application.*"], "sink": {
                "type": "sqs", "queue_url": queue_url, "region": "us-east-1", "endpoint_url": proxy_url,
                "credentials": {"web_identity": {"role_arn": role}}}}),
        )
        .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    assert_eq!(sub["sink"]["credentials"], json!({"web_identity": {"role_arn": role}}), "the role is shown: {sub}");
    hub.wait_until_active(&key, &id).await;

    for _ in 0..EVENTS {
        hub.post_event(&key, &Event::new("t1")).await;
    }
    let mut bodies = 0;
    until("the events in the queue", WAIT, async || {
        let got = sqs.receive_message().queue_url(&queue_url).max_number_of_messages(10).send().await.expect("receive");
        for m in got.messages() {
            if !m.body().unwrap_or_default().contains("streaming_hub.verification") {
                bodies += 1;
            }
            sqs.delete_message()
                .queue_url(&queue_url)
                .receipt_handle(m.receipt_handle().expect("handle"))
                .send()
                .await
                .expect("delete");
        }
        (bodies == EVENTS).then_some(())
    })
    .await;

    // STS was asked once: the probe's credentials served every delivery.
    let exchanges = proxy.seen("AssumeRoleWithWebIdentity");
    assert_eq!(exchanges.len(), 1, "{exchanges:#?}");
    let exchange = &exchanges[0];
    let form = |name: &str| exchange.form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap_or_default();
    assert_eq!(form("RoleArn"), role);
    assert_eq!(form("RoleSessionName"), format!("streaming-hub-{}", id.replace('-', "")));
    let claims = node_verifies(&form("WebIdentityToken"), &jwks);
    assert_eq!(claims["iss"], issuer.as_str(), "{claims}");
    assert_eq!(claims["aud"], "sts.amazonaws.com");
    assert_eq!(claims["sub"], format!("tenant:t1:subscription:{id}"));
    assert_eq!(claims["exp"].as_i64().zip(claims["iat"].as_i64()).map(|(e, i)| e - i), Some(300));
    // Every SQS request was signed with the key STS answered, none with another.
    let access_key = xml(&exchange.answer, "AccessKeyId").to_owned();
    let sends = proxy.seen("SendMessage");
    assert!(sends.len() > EVENTS, "the probe and the events: {}", sends.len());
    for s in &sends {
        assert!(s.authorization.contains(&format!("Credential={access_key}/")), "{}", s.authorization);
    }
    // The token does not verify with another key published under its kid.
    let kid = jwks["keys"][0]["kid"].as_str().expect("kid");
    let stranger = hub_core::oidc::SigningKey::generate().expect("key");
    let other = json!({"keys": [hub_core::oidc::SigningKey::from_pkcs8(kid, &stranger).expect("key").jwk()]});
    assert_eq!(node_verifies(&form("WebIdentityToken"), &other), Value::Null);

    // A rotation: a new key signs, the old one stays published for the overlap.
    let (status, _) = hub.post_json(&key, "/admin/oidc/keys", &json!({})).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "a tenant key cannot rotate");
    let (status, rotated) = hub.send(hub.client.post(hub.url("/admin/oidc/keys")).bearer_auth(&hub.admin)).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{rotated}");
    let keys = rotated["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 2);
    assert!(keys[0]["retired_at"].is_string() && keys[0]["published_until"].is_string(), "{rotated}");
    assert!(keys[1].get("retired_at").is_none(), "{rotated}");
    let jwks: Value =
        hub.client.get(hub.url("/.well-known/jwks.json")).send().await.expect("get").json().await.expect("json");
    let kids: Vec<&Value> = jwks["keys"].as_array().expect("keys").iter().map(|k| &k["kid"]).collect();
    assert_eq!(kids, vec![&keys[0]["kid"], &keys[1]["kid"]]);

    // A role STS refuses: the probe fails with STS's reason; a second probe at once does not ask
    // STS again.
    let (status, denied) = hub
        .post_json(
            &key,
            "/v1/subscriptions",
            &json!({"name": "denied", "event_types": ["loan_application.*"], "sink": {
                "type": "sqs", "queue_url": queue_url, "region": "us-east-1", "endpoint_url": proxy_url,
                "credentials": {"web_identity": {"role_arn": DENIED, "session_name": "denied-probe"}}}}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{denied}");
    let denied_id = denied["id"].as_str().expect("id");
    for _ in 0..2 {
        let (status, refused) = hub.post_json(&key, &format!("/v1/subscriptions/{denied_id}/verify"), &json!({})).await;
        assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(message.contains("the role could not be assumed") && message.contains("AccessDenied"), "{refused}");
    }
    let asked: Vec<Seen> = proxy
        .seen("AssumeRoleWithWebIdentity")
        .into_iter()
        .filter(|s| s.form.iter().any(|(_, v)| v == DENIED))
        .collect();
    assert_eq!(asked.len(), 1, "a refusal stands ten seconds: {asked:#?}");
    assert!(!hub.get(&key, &format!("/v1/subscriptions/{denied_id}")).await.1.to_string().contains("secret"));
}

/// A hub that is not an issuer refuses a role with a 422 naming the field, serves no discovery,
/// and a bad ARN is named too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_needs_an_issuer_and_a_role_arn() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let sink = |credentials: Value| {
        json!({"name": "k", "event_types": ["a.b"], "sink": {"type": "sqs", "region": "us-east-1",
            "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "credentials": credentials}})
    };
    let (status, refused) = hub
        .post_json(
            &key,
            "/v1/subscriptions",
            &sink(json!({"web_identity": {"role_arn": "arn:aws:iam::123456789012:role/r"}})),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(refused["message"].as_str().unwrap_or_default().starts_with("sink.credentials.web_identity"), "{refused}");
    for (credentials, field) in [
        (json!({"web_identity": {"role_arn": "arn:aws:s3:::bucket"}}), "sink.credentials.web_identity.role_arn"),
        (json!({"web_identity": {"role_arn": "arn:aws:iam::123:role/r"}}), "sink.credentials.web_identity.role_arn"),
        (
            json!({"web_identity": {"role_arn": "arn:aws:iam::123456789012:role/r", "session_name": "a b"}}),
            "sink.credentials.web_identity.session_name",
        ),
        (
            json!({"web_identity": {"role_arn": "arn:aws:iam::123456789012:role/r"}, "access_key_id": "AKIAIOSFODNN7EXAMPLE"}),
            "sink.credentials",
        ),
        (json!({"web_identity": "arn:aws:iam::123456789012:role/r"}), "sink.credentials.web_identity"),
    ] {
        let (status, refused) = hub.post_json(&key, "/v1/subscriptions", &sink(credentials.clone())).await;
        assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{credentials}: {refused}");
        assert!(
            refused["message"].as_str().unwrap_or_default().starts_with(&format!("{field}:")),
            "{credentials}: {refused}"
        );
    }
    let answer = hub.client.get(hub.url("/.well-known/jwks.json")).send().await.expect("get");
    assert_eq!(answer.status(), reqwest::StatusCode::NOT_FOUND);
}
