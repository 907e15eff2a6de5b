//! The shared vectors (sdk/vectors/webhooks.json), case by case; and the hub's own signer
//! against them.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use streaming_hub_receiver::{DEFAULT_TOLERANCE, Headers, parse_headers, sign, verify, verify_ed25519};

fn vectors() -> Value {
    // Where `cargo test` runs this package now (a build cached from another checkout keeps the
    // directory it was compiled in).
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let path = dir.join("../vectors/webhooks.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("the shared vectors")).expect("JSON")
}

fn pairs(headers: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, values) in headers.as_object().expect("headers") {
        for v in values.as_array().expect("values") {
            out.push((name.clone(), v.as_str().expect("value").to_owned()));
        }
    }
    out
}

fn header_map(headers: &Value) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (name, value) in pairs(headers) {
        map.append(http::HeaderName::from_bytes(name.as_bytes()).expect("name"), value.parse().expect("value"));
    }
    map
}

fn at(secs: &Value) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs.as_u64().expect("now"))
}

#[test]
fn verify_vectors() {
    let v = vectors();
    assert_eq!(v["tolerance_seconds"].as_u64(), Some(DEFAULT_TOLERANCE.as_secs()));
    let cases = v["verify"].as_array().expect("cases");
    assert!(cases.len() >= 20);
    for case in cases {
        let secrets: Vec<&str> =
            case["secrets"].as_array().expect("secrets").iter().filter_map(Value::as_str).collect();
        let body = case["body"].as_str().expect("body").as_bytes();
        let name = case["name"].as_str().expect("name");
        for headers in [&pairs(&case["headers"]) as &dyn HeadersDyn, &header_map(&case["headers"])] {
            let got = headers.verify(&secrets, body, at(&case["now"]));
            match case["error"].as_str() {
                None => assert_eq!(got, Ok(()), "{name}"),
                Some(kind) => assert_eq!(got.err(), Some(kind.to_owned()), "{name}"),
            }
        }
    }
}

#[test]
fn verify_ed25519_vectors() {
    let v = vectors();
    let cases = v["verify_ed25519"].as_array().expect("cases");
    assert!(cases.len() >= 10);
    for case in cases {
        let keys: Vec<&str> = case["public_keys"].as_array().expect("keys").iter().filter_map(Value::as_str).collect();
        let body = case["body"].as_str().expect("body").as_bytes();
        let name = case["name"].as_str().expect("name");
        for got in [
            verify_ed25519(&keys, &pairs(&case["headers"]), body, at(&case["now"])),
            verify_ed25519(&keys, &header_map(&case["headers"]), body, at(&case["now"])),
        ] {
            match case["error"].as_str() {
                None => assert_eq!(got, Ok(()), "{name}"),
                Some(kind) => {
                    assert_eq!(got.err().map(|e| e.kind.as_str().to_owned()), Some(kind.to_owned()), "{name}")
                }
            }
        }
    }
}

/// The hub's own ed25519 signer, checked by this package: a signature it makes verifies with its
/// public key, during a rotation with either key.
#[test]
fn the_hubs_ed25519_signatures_verify() {
    use hub_core::signature::asymmetric;
    let (new, old) = (asymmetric::secret_key([1; 32]), asymmetric::secret_key([2; 32]));
    let body = br#"{"amount":100}"#;
    let id = "0192a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    let header = format!(
        "{} {}",
        asymmetric::sign(&new, id, 1_700_000_000, body).expect("signed"),
        asymmetric::sign(&old, id, 1_700_000_000, body).expect("signed")
    );
    let headers = vec![
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", "1700000000".to_owned()),
        ("webhook-signature", header),
    ];
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for key in [&new, &old] {
        let public = asymmetric::public_key(key).expect("public");
        assert_eq!(verify_ed25519(&[public], &headers, body, now), Ok(()));
    }
    let stranger = asymmetric::public_key(&asymmetric::secret_key([3; 32])).expect("public");
    assert!(verify_ed25519(&[stranger], &headers, body, now).is_err());
}

/// Runs `verify` over either header holder.
trait HeadersDyn {
    fn verify(&self, secrets: &[&str], body: &[u8], now: SystemTime) -> Result<(), String>;
}

impl<H: Headers> HeadersDyn for H {
    fn verify(&self, secrets: &[&str], body: &[u8], now: SystemTime) -> Result<(), String> {
        verify(secrets, self, body, now).map_err(|e| e.kind.as_str().to_owned())
    }
}

#[test]
fn header_vectors() {
    let v = vectors();
    for case in v["headers"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        let got = parse_headers(&pairs(&case["headers"]));
        if let Some(kind) = case["error"].as_str() {
            let e = got.expect_err(name);
            assert_eq!((e.kind.as_str(), e.header), (kind, case["header"].as_str().expect("header")), "{name}");
            continue;
        }
        let d = got.unwrap_or_else(|e| panic!("{name}: {e}"));
        let as_json = serde_json::json!({
            "event_id": d.event_id, "delivery_id": d.delivery_id, "event_type": d.event_type,
            "tenant_id": d.tenant_id, "subscription_id": d.subscription_id, "attempt": d.attempt,
            "schema_version": d.schema_version, "event_time": d.event_time, "subject": d.subject,
            "traceparent": d.traceparent, "tracestate": d.tracestate, "timestamp": d.timestamp,
            "is_verification": d.is_verification(),
        });
        assert_eq!(as_json, case["delivery"], "{name}");
    }
}

/// The hub signs as the vectors say: every valid case with one signature in its canonical form,
/// signed again by the hub's own signer, gives the same header value.
#[test]
fn the_hubs_signer_agrees_with_the_vectors() {
    let v = vectors();
    let mut checked = 0;
    for case in v["verify"].as_array().expect("cases").iter().filter(|c| c["valid"] == true) {
        let headers = pairs(&case["headers"]);
        let (timestamps, signatures) = (headers.values("x-webhook-timestamp"), headers.values("x-webhook-signature"));
        let [ts] = timestamps.as_slice() else { continue };
        let [sig] = signatures.as_slice() else { continue };
        let canonical = sig
            .strip_prefix("v1,sha256=")
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        if !canonical {
            continue;
        }
        let ts: i64 = ts.parse().expect("timestamp");
        let body = case["body"].as_str().expect("body").as_bytes();
        let secrets = case["secrets"].as_array().expect("secrets").iter().filter_map(Value::as_str);
        let hub: Vec<String> = secrets.clone().map(|s| hub_core::signature::sign(s, ts, body)).collect();
        assert!(hub.contains(sig), "{}: the hub signs {hub:?}", case["name"]);
        assert!(secrets.map(|s| sign(s, ts, body)).any(|s| &s == sig));
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} cases checked");
}
