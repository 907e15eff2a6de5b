//! `/openapi.json` describes every route the router serves.

use crate::support::{Backend, TestHub};
use reqwest::StatusCode;

/// The routes of SPEC §5 this build serves; each must be documented.
const SPEC_ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/subscriptions"),
    ("get", "/v1/subscriptions"),
    ("get", "/v1/subscriptions/{id}"),
    ("patch", "/v1/subscriptions/{id}"),
    ("delete", "/v1/subscriptions/{id}"),
    ("get", "/v1/subscriptions/{id}/events"),
    ("post", "/v1/subscriptions/{id}/verify"),
    ("post", "/v1/subscriptions/{id}/rotate-secret"),
    ("get", "/v1/subscriptions/{id}/deliveries"),
    ("post", "/v1/subscriptions/{id}/redrive"),
    ("post", "/v1/events"),
    ("get", "/admin/quarantine"),
    ("get", "/admin/dlq"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("post", "/admin/api-keys"),
    ("get", "/admin/api-keys"),
    ("delete", "/admin/api-keys/{id}"),
];

#[tokio::test]
async fn the_document_lists_every_route_and_every_listed_route_is_served() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let (status, doc) = hub.send(hub.client.get(hub.url("/openapi.json"))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().expect("version").starts_with("3."));
    let paths = doc["paths"].as_object().expect("paths");
    for (method, path) in SPEC_ROUTES {
        assert!(paths.get(*path).and_then(|p| p.get(*method)).is_some(), "{method} {path} is not documented");
    }
    let mut operations = 0;
    for (path, ops) in paths {
        for (method, op) in ops.as_object().expect("operations") {
            operations += 1;
            let responses = op["responses"].as_object().expect("responses");
            assert!(!responses.is_empty(), "{method} {path} documents no response");
            // The grant exchange is how a portal session starts: the grant is its credential.
            // The issuer's discovery and keys are public, as OIDC requires.
            let is_public = [
                "/healthz",
                "/readyz",
                "/metrics",
                "/openapi.json",
                "/v1/portal-sessions/exchange",
                "/.well-known/openid-configuration",
                "/.well-known/jwks.json",
                "/.well-known/ledger-keys.json",
            ]
            .contains(&path.as_str());
            if !is_public {
                assert!(responses.contains_key("401"), "{method} {path} does not document its auth error");
                assert!(op.get("security").is_some(), "{method} {path} does not document its security");
            }
            // The router serves it: no 404 "no route" and no 405.
            let url = hub.url(&path.replace("{id}", "01234567-89ab-7def-8123-456789abcdef"));
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let response = hub.client.request(method.clone(), url).send().await.expect("request");
            let status = response.status();
            let body = response.text().await.expect("body");
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert!(!body.contains("no route for"), "{method} {path} is documented but not served");
        }
    }
    assert!(operations >= SPEC_ROUTES.len());
    // Error bodies share one documented schema.
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
}

/// Fit for generators: a unique, descriptive operationId on every operation; one schema per sink
/// type whose example the API accepts; the required `ce-*` headers marked required; a `webhooks`
/// section for receivers; and the whole document valid by openapi-spec-validator from PyPI.
#[tokio::test]
async fn the_document_is_fit_for_client_generators() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let (_, doc) = hub.send(hub.client.get(hub.url("/openapi.json"))).await;
    let mut ids = std::collections::BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(id.len() > 6 && id.chars().next().is_some_and(char::is_lowercase), "{method} {path}: {id}");
            assert!(ids.insert(id.to_owned()), "operationId {id} is used twice");
        }
    }

    let ingest = &doc["paths"]["/v1/events"]["post"]["parameters"];
    let required: Vec<&str> = ingest
        .as_array()
        .expect("parameters")
        .iter()
        .filter(|p| p["in"] == "header" && p["required"] == true)
        .filter_map(|p| p["name"].as_str())
        .collect();
    for name in ["ce-specversion", "ce-id", "ce-source", "ce-type", "ce-time", "ce-schemaversion", "ce-resourcetype"]
        .into_iter()
        .chain(["ce-eventtype", "ce-tenantid"])
    {
        assert!(required.contains(&name), "{name} is not marked required: {required:?}");
    }
    assert!(!required.contains(&"ce-subject"));

    let schemas = &doc["components"]["schemas"];
    let key = hub.tenant_key("t1").await;
    // One schema per sink type of the hub's list, each with an example the hub takes.
    let variants = schemas["Sink"]["oneOf"].as_array().expect("Sink is a oneOf");
    assert_eq!(variants.len(), hub_sinks::registry::NAMES.len(), "{}", schemas["Sink"]);
    for variant in variants {
        let sink = variant["allOf"][0]["$ref"].as_str().and_then(|r| r.rsplit('/').next()).expect("a $ref");
        let kind = &variant["allOf"][1]["properties"]["type"]["enum"][0];
        let example = &schemas[sink]["example"];
        assert!(example.is_object(), "{sink} has no example");
        assert_eq!(&example["type"], kind, "{sink}'s example is of its type");
        let body = serde_json::json!({"name": sink, "event_types": ["*.*"], "sink": example});
        let (status, answer) = hub.post_json(&key, "/v1/subscriptions", &body).await;
        assert_eq!(status, StatusCode::CREATED, "{sink}'s example is refused: {answer}");
    }

    for (hook, signature) in [("delivery", "X-Webhook-Signature"), ("standardWebhooksDelivery", "webhook-signature")] {
        let params = doc["webhooks"][hook]["post"]["parameters"].as_array().unwrap_or_else(|| panic!("webhook {hook}"));
        assert!(params.iter().any(|p| p["name"] == signature && p["required"] == true), "{hook}");
        assert!(params.iter().any(|p| p["name"] == "X-Lerian-Event-Id"), "{hook}");
    }

    let path = std::env::temp_dir().join(format!("streaming-hub-openapi-{}.json", uuid::Uuid::now_v7().simple()));
    std::fs::write(&path, doc.to_string()).expect("write the document");
    let python = crate::sdk::cache_dir().join("receivers-venv/bin/python");
    let script = "import json, sys\nfrom openapi_spec_validator import validate\nvalidate(json.load(open(sys.argv[1])))\nprint('valid')";
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python).arg("-c").arg(script).arg(&path).output()
    })
    .await
    .expect("thread")
    .expect("openapi-spec-validator is required (scripts/services receivers installs it)");
    assert!(out.status.success(), "the document is not valid OpenAPI:\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "valid");
}

/// Runs schemathesis (pinned; `scripts/services receivers` installs it) against this hub's
/// document with every check, the stateful phase included, on the routes matching `paths`,
/// signed with `token`; answers its report when it found anything.
async fn schemathesis(hub: &TestHub, token: &str, paths: &str) -> Option<String> {
    let binary = crate::sdk::cache_dir().join("receivers-venv/bin/schemathesis");
    assert!(binary.exists(), "schemathesis is required: run scripts/services receivers");
    let config = crate::sdk::repo().join("crates/streaming-hub/tests/schemathesis.toml");
    let url = hub.url("/openapi.json");
    let header = format!("Authorization: Bearer {token}");
    let paths = paths.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&binary)
            .arg("--config-file")
            .arg(&config)
            .args(["run", &url, "--checks", "all", "--seed", "1", "--max-examples", "25", "--workers", "1"])
            .args(["--phases", "examples,coverage,fuzzing,stateful"])
            .args(["--include-path-regex", &paths, "-H", &header])
            .env("SCHEMATHESIS_HOOKS", "")
            .output()
    })
    .await
    .expect("thread")
    .expect("schemathesis runs");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", report.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n"));
    (!out.status.success()).then_some(report)
}

/// An independent tester finds no mismatch between the document and what the server does: every
/// status documented, every constraint stated, links that let a stateful run reach every
/// operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_independent_tester_finds_the_contract_kept() {
    let hub = TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true")]).await;
    let key = hub.tenant_key("t1").await;
    // Something to find: an event in the log, so the links from the listing lead somewhere.
    assert_eq!(hub.post_event(&key, &crate::support::Event::new("t1")).await.0, StatusCode::ACCEPTED);
    if let Some(report) = schemathesis(&hub, &key, "^/v1/").await {
        panic!("schemathesis found contract mismatches on the tenant routes:\n{report}");
    }
    let admin = hub.admin.clone();
    if let Some(report) = schemathesis(&hub, &admin, "^/admin/").await {
        panic!("schemathesis found contract mismatches on the admin routes:\n{report}");
    }
}

/// `sdk/openapi.json`, the document the API clients are generated from (`sdk/generate`), is the
/// one this build serves; `sdk/generate --check` (in scripts/test) holds the clients to it.
#[test]
fn the_clients_are_generated_from_the_served_document() {
    let path = crate::sdk::repo().join("sdk/openapi.json");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let served = serde_json::to_string_pretty(&streaming_hub::openapi_json()).expect("the document") + "\n";
    assert!(
        checked_in == served,
        "sdk/openapi.json is not the served document: run `cargo run -p streaming-hub -- openapi > sdk/openapi.json` \
         and `sdk/generate`, then commit both"
    );
}
