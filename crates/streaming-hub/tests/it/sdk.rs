//! The receiver packages (sdk/) against a live hub: each language's package verifies and parses
//! real deliveries (across a secret rotation), refuses a tampered one, and drains a pull
//! subscription; a Standard Webhooks subscription's deliveries verify with the specification's
//! reference libraries from PyPI and npm, and fail with a tampered body.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use crate::receiver::{Delivery, Receiver, Script};
use crate::support::{Backend, Event, TestHub};

/// The repository's root: from where `cargo test` runs this package now (a build cached from
/// another checkout keeps the directory it was compiled in).
pub(crate) fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("../..")
}

pub use hub_testkit::kafka::cache_dir;

fn captured(d: &Delivery, body: &[u8]) -> Value {
    let mut headers = serde_json::Map::new();
    for name in d.headers.keys() {
        let values: Vec<Value> =
            d.headers.get_all(name).iter().map(|v| json!(v.to_str().expect("ascii header"))).collect();
        headers.insert(name.as_str().to_owned(), Value::Array(values));
    }
    json!({"headers": headers, "body": B64.encode(body)})
}

/// Runs a program off the runtime's threads (the hub it talks to runs on them), asserts it
/// succeeded, and answers what it printed.
pub(crate) async fn succeeded(what: &str, command: &mut Command) -> std::process::Output {
    let shown = format!("{command:?}");
    let mut command = std::mem::replace(command, Command::new("true"));
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the program's thread")
        .unwrap_or_else(|e| panic!("{what} could not be started ({shown}): {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`succeeded`], reading the JSON the program prints.
async fn run(what: &str, command: &mut Command) -> Value {
    let out = succeeded(what, command).await;
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what} printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// Compiles the TypeScript package (and its live check) with the cached compiler.
pub(crate) fn compiled_typescript() -> PathBuf {
    let tools = cache_dir().join("typescript/node_modules");
    let out = std::env::temp_dir().join(format!("streaming-hub-sdk-ts-{}", uuid::Uuid::now_v7().simple()));
    let compiled = Command::new(tools.join(".bin/tsc"))
        .arg("-p")
        .arg(repo().join("sdk/typescript"))
        .arg("--outDir")
        .arg(&out)
        .arg("--typeRoots")
        .arg(tools.join("@types"))
        .output()
        .expect("TypeScript is required (scripts/services typescript installs it)");
    assert!(
        compiled.status.success(),
        "{}{}",
        String::from_utf8_lossy(&compiled.stdout),
        String::from_utf8_lossy(&compiled.stderr)
    );
    out
}

#[tokio::test]
async fn every_package_verifies_live_deliveries_and_drains_a_pull_subscription() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let hook = hub
        .subscribe(&key, json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    let hook_id = hook["id"].as_str().expect("id").to_owned();
    let first_secret = hook["signing_secret"].as_str().expect("secret").to_owned();
    hub.wait_until_active(&key, &hook_id).await;
    let languages = ["go", "python", "typescript", "rust"];
    let mut pulls = Vec::new();
    for language in languages {
        let sub =
            hub.subscribe(&key, json!({"name": language, "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
        pulls.push(sub["id"].as_str().expect("id").to_owned());
    }

    let bodies: [&[u8]; 3] =
        [br#"{"amount":100}"#, "{\"name\":\"José\",\"note\":\"€ 10\"}".as_bytes(), br#"{"items":[1,2,3]}"#];
    let mut posted = Vec::new();
    for body in bodies {
        let event = Event::new("t1").body(body);
        posted.push(event.id().to_string());
        hub.post_event(&key, &event).await;
    }
    receiver.wait_for(3, Duration::from_secs(20)).await;
    // A rotation: the next delivery carries two signatures, one per secret.
    let (_, rotated) = hub.post_json(&key, &format!("/v1/subscriptions/{hook_id}/rotate-secret"), &json!({})).await;
    let new_secret = rotated["signing_secret"].as_str().expect("new secret").to_owned();
    let event = Event::new("t1").body(br#"{"after":"rotation"}"#.to_vec());
    posted.push(event.id().to_string());
    hub.post_event(&key, &event).await;
    let deliveries = receiver.wait_for(4, Duration::from_secs(20)).await;
    assert_eq!(deliveries[3].headers.get_all("x-webhook-signature").iter().count(), 2, "rotation overlap");

    let mut in_order: Vec<&Delivery> = deliveries.iter().collect();
    in_order.sort_by_key(|d| posted.iter().position(|id| *id == d.header("x-lerian-event-id")));
    let captured_all: Vec<Value> = in_order.iter().map(|d| captured(d, &d.body)).collect();
    let tampered = captured(in_order[0], br#"{"amount":900}"#);
    // The receiver accepts both secrets, as during an overlap: the first deliveries were signed
    // with the first secret only, the one after the rotation with both.
    let secrets = [new_secret.as_str(), first_secret.as_str()];
    let expected = json!({"verified": posted, "rejected": ["no_matching_signature"], "pulled": posted});

    let input = |pull: &str| {
        let path = std::env::temp_dir().join(format!("streaming-hub-sdk-{}.json", uuid::Uuid::now_v7().simple()));
        let doc = json!({"secrets": secrets, "deliveries": captured_all, "tampered": [tampered],
            "pull": {"base_url": hub.base, "api_key": key, "subscription_id": pull}});
        std::fs::write(&path, doc.to_string()).expect("write the input");
        path
    };

    let go = run(
        "the Go package",
        Command::new("go").args(["run", "./cmd/livecheck"]).arg(input(&pulls[0])).current_dir(repo().join("sdk/go")),
    )
    .await;
    assert_eq!(go, expected, "Go");

    let python = run(
        "the Python package",
        Command::new("python3").arg(repo().join("sdk/python/examples/livecheck.py")).arg(input(&pulls[1])),
    )
    .await;
    assert_eq!(python, expected, "Python");

    let ts = compiled_typescript();
    let typescript =
        run("the TypeScript package", Command::new("node").arg(ts.join("examples/livecheck.js")).arg(input(&pulls[2])))
            .await;
    assert_eq!(typescript, expected, "TypeScript");

    // Rust: the crate itself.
    let mut verified = Vec::new();
    for d in &in_order {
        streaming_hub_receiver::verify(&secrets, &d.headers, &d.body, SystemTime::now()).expect("verifies");
        let parsed = streaming_hub_receiver::parse_headers(&d.headers).expect("headers");
        assert!(parsed.attempt >= 1 && parsed.tenant_id == "t1" && parsed.subscription_id == hook_id);
        verified.push(parsed.event_id);
    }
    let refused = streaming_hub_receiver::verify(&secrets, &in_order[0].headers, b"{}", SystemTime::now());
    assert_eq!(refused.map_err(|e| e.kind), Err(streaming_hub_receiver::Kind::NoMatchingSignature));
    let mut consumer = streaming_hub_receiver::pull::PullConsumer::new(&hub.base, &key, &pulls[3]);
    consumer.limit = Some(3);
    let mut pulled = Vec::new();
    consumer.drain(|e| pulled.push(e.ce_id)).await.expect("pull");
    assert_eq!(json!({"verified": verified, "pulled": pulled}), json!({"verified": posted, "pulled": posted}));
}

#[tokio::test]
async fn standard_webhooks_deliveries_verify_with_the_reference_libraries() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "sw", "event_types": ["*.*"],
            "sink": {"type": "webhook", "url": receiver.url, "signature": "standard-webhooks"}}),
        )
        .await;
    assert_eq!(sub["sink"]["signature"], "standard-webhooks");
    let id = sub["id"].as_str().expect("id").to_owned();
    let mut secrets = vec![sub["signing_secret"].as_str().expect("secret").to_owned()];
    hub.wait_until_active(&key, &id).await;
    let event = Event::new("t1").body("{\"name\":\"José\",\"amount\":100}".as_bytes());
    hub.post_event(&key, &event).await;
    receiver.wait_for(1, Duration::from_secs(20)).await;
    // During a rotation the one header carries both signatures; either secret verifies.
    let (_, rotated) = hub.post_json(&key, &format!("/v1/subscriptions/{id}/rotate-secret"), &json!({})).await;
    secrets.push(rotated["signing_secret"].as_str().expect("new secret").to_owned());
    hub.post_event(&key, &Event::new("t1")).await;
    let deliveries = receiver.wait_for(2, Duration::from_secs(20)).await;
    for d in &deliveries {
        assert!(d.headers.get("x-webhook-signature").is_none(), "only the Standard Webhooks headers sign");
        assert_eq!(d.header("webhook-id"), d.header("x-lerian-event-id"));
    }
    assert_eq!(deliveries[1].header("webhook-signature").split(' ').count(), 2, "rotation overlap");

    // Each case: which secret, which delivery, which body, and whether it must verify.
    let mut cases = Vec::new();
    for (i, d) in deliveries.iter().enumerate() {
        let headers = json!({"webhook-id": d.header("webhook-id"), "webhook-timestamp": d.header("webhook-timestamp"),
            "webhook-signature": d.header("webhook-signature")});
        let signers: &[&String] = if i == 0 { &[&secrets[0]] } else { &[&secrets[0], &secrets[1]] };
        for secret in signers {
            cases.push(json!({"secret": secret, "headers": headers, "body": B64.encode(&d.body), "valid": true}));
            cases.push(
                json!({"secret": secret, "headers": headers, "body": B64.encode(b"{\"amount\":1}"), "valid": false}),
            );
        }
    }
    let wrong = "whsec_".to_owned() + &B64.encode([7u8; 32]);
    cases.push(json!({"secret": wrong, "headers": cases[0]["headers"], "body": cases[0]["body"], "valid": false}));
    let path = std::env::temp_dir().join(format!("streaming-hub-sw-{}.json", uuid::Uuid::now_v7().simple()));
    std::fs::write(&path, Value::Array(cases.clone()).to_string()).expect("write the cases");
    let expected: Vec<bool> = cases.iter().map(|c| c["valid"] == true).collect();

    let python = cache_dir().join("receivers-venv/bin/python");
    let script = r#"
import base64, json, sys
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
out = []
for c in json.load(open(sys.argv[1])):
    try:
        Webhook(c["secret"]).verify(base64.b64decode(c["body"]), c["headers"])
        out.append(True)
    except WebhookVerificationError:
        out.append(False)
print(json.dumps(out))
"#;
    let got = run(
        "PyPI standardwebhooks (scripts/services receivers installs it)",
        Command::new(&python).arg("-c").arg(script).arg(&path),
    )
    .await;
    assert_eq!(got, json!(expected), "PyPI standardwebhooks");

    let script = r#"
const { Webhook } = require("standardwebhooks");
const fs = require("fs");
const out = JSON.parse(fs.readFileSync(process.argv[1], "utf8")).map((c) => {
  try {
    new Webhook(c.secret).verify(Buffer.from(c.body, "base64"), c.headers);
    return true;
  } catch (e) {
    if (e.name !== "WebhookVerificationError") throw e;
    return false;
  }
});
console.log(JSON.stringify(out));
"#;
    let got = run(
        "npm standardwebhooks (scripts/services receivers installs it)",
        Command::new("node")
            .arg("-e")
            .arg(script)
            .arg(&path)
            .env("NODE_PATH", cache_dir().join("receivers-node/node_modules")),
    )
    .await;
    assert_eq!(got, json!(expected), "npm standardwebhooks");
}

/// An `ed25519` webhook: the creation and rotation answers carry public keys and never a secret,
/// `…/public-keys` lists both during the overlap, every delivery's `v1a` signatures verify with
/// them in two independent ed25519 implementations (Node's OpenSSL-backed `crypto` and Go's
/// `crypto/ed25519`), and the key kind cannot be changed by `PATCH`.
#[tokio::test]
async fn ed25519_deliveries_verify_with_independent_libraries() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "ed", "event_types": ["*.*"],
            "sink": {"type": "webhook", "url": receiver.url, "signature": "ed25519"}}),
        )
        .await;
    assert!(sub.get("signing_secret").is_none(), "no secret leaves the hub: {sub}");
    let first = sub["public_key"].as_str().expect("public key").to_owned();
    assert!(first.starts_with("whpk_") && B64.decode(&first[5..]).expect("base64").len() == 32, "{first}");
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(&key, &id).await;
    hub.post_event(&key, &Event::new("t1").body("{\"name\":\"José\",\"amount\":100}".as_bytes())).await;
    receiver.wait_for(1, Duration::from_secs(20)).await;
    let (_, rotated) = hub.post_json(&key, &format!("/v1/subscriptions/{id}/rotate-secret"), &json!({})).await;
    assert!(rotated.get("signing_secret").is_none(), "{rotated}");
    let second = rotated["public_key"].as_str().expect("new public key").to_owned();
    assert_ne!(first, second);
    let (status, listed) = hub.get(&key, &format!("/v1/subscriptions/{id}/public-keys")).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{listed}");
    assert_eq!(listed["keys"][0], json!({"public_key": second, "expires_at": null}));
    assert_eq!(listed["keys"][1]["public_key"], first.as_str());
    assert!(listed["keys"][1]["expires_at"].is_string());
    hub.post_event(&key, &Event::new("t1")).await;
    let deliveries = receiver.wait_for(2, Duration::from_secs(20)).await;
    for d in &deliveries {
        assert!(d.headers.get("x-webhook-signature").is_none());
        assert!(
            d.header("webhook-signature").split(' ').all(|s| s.starts_with("v1a,")),
            "{}",
            d.header("webhook-signature")
        );
    }
    assert_eq!(deliveries[1].header("webhook-signature").split(' ').count(), 2, "rotation overlap");

    // Each case: a public key, a signed message, one signature, and whether it must verify.
    let mut cases = Vec::new();
    for (i, d) in deliveries.iter().enumerate() {
        let message =
            [d.header("webhook-id").as_bytes(), b".", d.header("webhook-timestamp").as_bytes(), b".", &d.body].concat();
        let tampered = [&message[..message.len() - 1], b"!"].concat();
        let signatures: Vec<String> = d.header("webhook-signature").split(' ').map(|s| s[4..].to_owned()).collect();
        let keys: Vec<&String> = if i == 0 { vec![&first] } else { vec![&second, &first] };
        for (key, signature) in keys.iter().zip(&signatures) {
            let raw = &key[5..];
            cases.push(json!({"key": raw, "message": B64.encode(&message), "signature": signature, "valid": true}));
            cases.push(json!({"key": raw, "message": B64.encode(&tampered), "signature": signature, "valid": false}));
        }
        // A signature checked against the other delivery's key.
        let other = if i == 0 { &second[5..] } else { &first[5..] };
        if i == 0 {
            cases.push(
                json!({"key": other, "message": B64.encode(&message), "signature": signatures[0], "valid": false}),
            );
        }
    }
    let path = std::env::temp_dir().join(format!("streaming-hub-ed-{}.json", uuid::Uuid::now_v7().simple()));
    std::fs::write(&path, Value::Array(cases.clone()).to_string()).expect("write the cases");
    let expected: Vec<bool> = cases.iter().map(|c| c["valid"] == true).collect();

    let script = r#"
const crypto = require("crypto");
const fs = require("fs");
const b64url = (b64) => Buffer.from(b64, "base64").toString("base64url");
const out = JSON.parse(fs.readFileSync(process.argv[1], "utf8")).map((c) => {
  const key = crypto.createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: b64url(c.key) }, format: "jwk" });
  return crypto.verify(null, Buffer.from(c.message, "base64"), key, Buffer.from(c.signature, "base64"));
});
console.log(JSON.stringify(out));
"#;
    let got = run("Node's crypto", Command::new("node").arg("-e").arg(script).arg(&path)).await;
    assert_eq!(got, json!(expected), "Node's crypto");

    let dir = std::env::temp_dir().join(format!("streaming-hub-ed-go-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("main.go"),
        r#"package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	raw, _ := os.ReadFile(os.Args[1])
	var cases []struct{ Key, Message, Signature string }
	if err := json.Unmarshal(raw, &cases); err != nil {
		panic(err)
	}
	out := []bool{}
	for _, c := range cases {
		key, _ := base64.StdEncoding.DecodeString(c.Key)
		msg, _ := base64.StdEncoding.DecodeString(c.Message)
		sig, _ := base64.StdEncoding.DecodeString(c.Signature)
		out = append(out, len(key) == ed25519.PublicKeySize && ed25519.Verify(ed25519.PublicKey(key), msg, sig))
	}
	enc, _ := json.Marshal(out)
	fmt.Println(string(enc))
}
"#,
    )
    .expect("write the Go check");
    let got =
        run("Go's crypto/ed25519", Command::new("go").args(["run", "main.go"]).arg(&path).current_dir(&dir)).await;
    assert_eq!(got, json!(expected), "Go's crypto/ed25519");

    // The key kind is fixed: no PATCH to or from ed25519, and an HMAC webhook has no public keys.
    let to_hmac = json!({"sink": {"type": "webhook", "url": receiver.url, "signature": "standard-webhooks"}});
    let (status, body) = hub.patch_json(&key, &format!("/v1/subscriptions/{id}"), &to_hmac).await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().expect("message").starts_with("sink.signature: cannot change"), "{body}");
    let hmac = hub
        .subscribe(&key, json!({"name": "h", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    let hmac_id = hmac["id"].as_str().expect("id");
    let (status, body) = hub.get(&key, &format!("/v1/subscriptions/{hmac_id}/public-keys")).await;
    assert_eq!((status, body["title"].as_str()), (reqwest::StatusCode::CONFLICT, Some("not_asymmetric")), "{body}");
    let to_ed = json!({"sink": {"type": "webhook", "url": receiver.url, "signature": "ed25519"}});
    let (status, _) = hub.patch_json(&key, &format!("/v1/subscriptions/{hmac_id}"), &to_ed).await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY);
}
