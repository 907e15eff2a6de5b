//! `/v1/subscriptions`: validation, secrets at rest, changes, deletion, and tenant isolation.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::on_both_backends;
use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, TestHub};

on_both_backends!(
    secrets_and_credentials_are_never_stored_or_returned_in_clear,
    another_tenant_gets_404_on_every_v1_route,
    deleting_a_subscription_cancels_its_pending_deliveries,
    concurrent_creates_never_pass_the_quota,
);

/// The subscription quota holds under concurrent creates: 40 at once against a quota of 5 leave
/// exactly 5, and the rest are answered `quota_exceeded`.
async fn concurrent_creates_never_pass_the_quota(backend: Backend) {
    let hub =
        std::sync::Arc::new(TestHub::start_with(backend, &[("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", "5")]).await);
    let key = hub.tenant_key("t1").await;
    let mut creates = Vec::new();
    for i in 0..40 {
        let (hub, key) = (std::sync::Arc::clone(&hub), key.clone());
        creates.push(tokio::spawn(async move {
            let body = json!({"name": format!("p{i}"), "event_types": ["*.*"], "sink": {"type": "pull"}});
            let (status, answer) = hub.post_json(&key, "/v1/subscriptions", &body).await;
            if status != StatusCode::CREATED {
                assert_eq!(
                    (status, answer["title"].as_str()),
                    (StatusCode::UNPROCESSABLE_ENTITY, Some("quota_exceeded")),
                    "{answer}"
                );
            }
            status == StatusCode::CREATED
        }));
    }
    let mut created = 0;
    for c in creates {
        created += usize::from(c.await.expect("create"));
    }
    assert_eq!(created, 5);
    let (_, listed) = hub.get(&key, "/v1/subscriptions?limit=100").await;
    assert_eq!(listed["items"].as_array().expect("items").len(), 5, "{listed}");
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

async fn secrets_and_credentials_are_never_stored_or_returned_in_clear(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let hook = hub
        .subscribe(
            &key,
            json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": "https://example.com/h"}}),
        )
        .await;
    let secret = hook["signing_secret"].as_str().expect("secret at creation").to_owned();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(hook["verification_state"], "pending", "a push subscription starts pending");
    let sqs_secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY";
    let sqs = hub
        .subscribe(
            &key,
            json!({"name": "q", "event_types": ["*.*"], "sink": {"type": "sqs",
            "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "region": "us-east-1",
            "credentials": {"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": sqs_secret}}}),
        )
        .await;
    assert_eq!(sqs["credentials_set"], true);
    let amqp_password = "rabbit-pass-7f3a9c";
    let rabbit = hub
        .subscribe(&key, json!({"name": "r", "event_types": ["*.*"], "sink": {"type": "rabbitmq",
            "url": format!("amqps://hub:{amqp_password}@mq.example.com/vh"), "exchange": "events", "routing_key": "{resource}.{event}"}}))
        .await;
    assert_eq!(rabbit["sink"]["url"], "amqps://hub@mq.example.com/vh");

    // Credentials never follow a destination to another host: the PATCH must give them again.
    let rabbit_path = format!("/v1/subscriptions/{}", rabbit["id"].as_str().expect("id"));
    let moved = json!({"sink": {"type": "rabbitmq", "url": "amqp://hub@127.0.0.1:5999/vh", "exchange": "events"}});
    let (status, body) = hub.patch_json(&key, &rabbit_path, &moved).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().expect("message").starts_with("sink.url"), "{body}");
    let (_, read) = hub.get(&key, &rabbit_path).await;
    assert_eq!(read["sink"]["url"], "amqps://hub@mq.example.com/vh", "nothing changed");
    let same_host =
        json!({"sink": {"type": "rabbitmq", "url": "amqps://hub@mq.example.com/other", "exchange": "events"}});
    assert_eq!(hub.patch_json(&key, &rabbit_path, &same_host).await.0, StatusCode::OK);
    let with_password =
        json!({"sink": {"type": "rabbitmq", "url": "amqp://hub:new-pass@127.0.0.1:5999/vh", "exchange": "events"}});
    assert_eq!(hub.patch_json(&key, &rabbit_path, &with_password).await.0, StatusCode::OK);
    let sqs_path = format!("/v1/subscriptions/{}", sqs["id"].as_str().expect("id"));
    let endpoint = json!({"sink": {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
        "region": "us-east-1", "endpoint_url": "http://127.0.0.1:5999"}});
    let (status, body) = hub.patch_json(&key, &sqs_path, &endpoint).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().expect("message").starts_with("sink.credentials"), "{body}");

    for plain in [secret.as_str(), sqs_secret, amqp_password] {
        for answer in [&sqs, &rabbit] {
            assert!(!answer.to_string().contains(plain), "a response reveals a secret");
        }
        let (_, listed) = hub.get(&key, "/v1/subscriptions").await;
        assert!(!listed.to_string().contains(plain), "the listing reveals a secret");
        for sub in [&hook, &sqs, &rabbit] {
            let (_, read) = hub.get(&key, &format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"))).await;
            assert!(!read.to_string().contains(plain), "a read reveals a secret");
            assert!(read.get("signing_secret").is_none());
        }
        let raw = hub.raw_table_bytes("subscriptions").await;
        assert!(!raw.is_empty());
        assert!(!contains(&raw, plain), "the database holds a secret in clear");
    }
}

/// Drives every `/v1` route of the OpenAPI document with a second tenant's key: each answers
/// 404 for the first tenant's subscriptions, or an empty list (the ledger's listings: only the
/// second tenant's own key being made, nothing of the first's).
async fn another_tenant_gets_404_on_every_v1_route(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let owner = hub.tenant_key("t1").await;
    let intruder = hub.tenant_key("t2").await;
    let mut ids = Vec::new();
    for sink in [json!({"type": "pull"}), json!({"type": "webhook", "url": "https://example.com/h"})] {
        let sub = hub.subscribe(&owner, json!({"name": "s", "event_types": ["*.*"], "sink": sink})).await;
        ids.push(sub["id"].as_str().expect("id").to_owned());
    }
    let owned = Event::new("t1");
    hub.post_event(&owner, &owned).await;

    let (_, doc) = hub.send(hub.client.get(hub.url("/openapi.json"))).await;
    let paths = doc["paths"].as_object().expect("paths");
    let mut checked = 0;
    for (path, ops) in paths.iter().filter(|(p, _)| p.starts_with("/v1/")) {
        for method in ops.as_object().expect("operations").keys() {
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            if path.contains("{ce_id}") {
                let url = hub.url(&path.replace("{ce_id}", &owned.id().to_string()));
                let (status, body) = hub.send(hub.client.request(method.clone(), url).bearer_auth(&intruder)).await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
                checked += 1;
            } else if path.contains("{id}") {
                for id in &ids {
                    let url = hub.url(&path.replace("{id}", id));
                    let request = hub.client.request(method.clone(), url).bearer_auth(&intruder).json(&json!({}));
                    let (status, body) = hub.send(request).await;
                    assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
                    assert_eq!(body["title"], "not_found", "{method} {path}");
                    checked += 1;
                }
            } else if path.contains("{index}") {
                // The first tenant's log has entries 0 and up; the second's only its key's making.
                let url = hub.url(&path.replace("{index}", "1"));
                let (status, body) = hub.send(hub.client.request(method.clone(), url).bearer_auth(&intruder)).await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
                checked += 1;
            } else if method == reqwest::Method::GET && (path.starts_with("/v1/ledger/") || path == "/v1/audit") {
                // The second tenant's own log (an export is JSON lines; a proof asks for an entry).
                let url = hub.url(&format!("{path}?entry=0&from=0"));
                let response = hub.client.get(url).bearer_auth(&intruder).send().await.expect("request");
                let status = response.status();
                let text = response.text().await.expect("body");
                assert!(status == StatusCode::OK || status == StatusCode::BAD_REQUEST, "{path}: {status} {text}");
                assert!(
                    !text.contains("tenant t1") && ids.iter().all(|id| !text.contains(id.as_str())),
                    "{path}: {text}"
                );
                checked += 1;
            } else if method == reqwest::Method::GET {
                let (status, body) = hub.get(&intruder, path).await;
                assert_eq!(status, StatusCode::OK, "{path}");
                assert_eq!(body["items"], json!([]), "{path} lists nothing of another tenant");
                checked += 1;
            }
        }
    }
    assert!(checked >= 8, "too few routes were driven ({checked})");
    // Posting an event in the first tenant's name is refused.
    assert_eq!(hub.post_event(&intruder, &Event::new("t1")).await.0, StatusCode::FORBIDDEN);
    // And nothing of the first tenant changed.
    let (_, listed) = hub.get(&owner, "/v1/subscriptions").await;
    assert_eq!(listed["items"].as_array().expect("items").len(), 2);
}

async fn deleting_a_subscription_cancels_its_pending_deliveries(backend: Backend) {
    // An ingest-only hub: no dispatcher takes the jobs while the test looks at them.
    let hub = TestHub::start_with(backend, &[("STREAMING_HUB_ROLE", "ingest")]).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let sub = hub
        .subscribe(&key, json!({"name": "w", "event_types": ["loan_application.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let uuid = uuid::Uuid::parse_str(&id).expect("uuid");
    hub.wait_until_active(&key, &id).await;
    hub.post_event(&key, &Event::new("t1")).await;
    hub.post_event(&key, &Event::of("t1", "account", "created")).await;
    let jobs = hub.store.list_jobs("t1", uuid, None, None, 10).await.expect("jobs");
    assert_eq!(jobs.len(), 1, "one job for the one matching event after activation");
    assert_eq!(jobs[0].state, hub_store::JobState::Pending);

    assert_eq!(hub.delete(&key, &format!("/v1/subscriptions/{id}")).await.0, StatusCode::NO_CONTENT);
    let jobs = hub.store.list_jobs("t1", uuid, None, None, 10).await.expect("jobs");
    assert!(jobs.iter().all(|j| j.state == hub_store::JobState::Cancelled), "{jobs:?}");
    assert_eq!(hub.get(&key, &format!("/v1/subscriptions/{id}")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(hub.delete(&key, &format!("/v1/subscriptions/{id}")).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn creation_validates_every_field_by_name() {
    let hub = TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "false")]).await;
    let key = hub.tenant_key("t1").await;
    let base = json!({"name": "s", "event_types": ["loan_application.*"], "sink": {"type": "pull"}});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let cases = [
        (with("name", json!("")), "name"),
        (with("event_types", json!(["loan_application"])), "event_types[0]"),
        (with("event_types", json!(["ok.ok", "loan*.x"])), "event_types[1]"),
        (with("origin", json!("Lender")), "origin"),
        (with("sink", json!({"type": "webhook", "url": "http://example.com"})), "sink.url"),
        (with("sink", json!({"type": "webhook", "url": "https://192.168.0.10/h"})), "sink.url"),
        (with("sink", json!({"type": "webhook", "url": "https://[fd00::1]/h"})), "sink.url"),
        (with("sink", json!({"type": "nope"})), "sink.type"),
        (with("sink", json!({"type": "sqs", "region": "us-east-1"})), "sink.queue_url"),
        (
            with(
                "sink",
                json!({"type": "rabbitmq", "url": "amqps://mq.example.com", "exchange": "x", "routing_key": "{x}"}),
            ),
            "sink.routing_key",
        ),
        (with("surprise", json!(1)), "surprise"),
        (json!({"event_types": [], "sink": {"type": "pull"}}), "name"),
    ];
    for (body, field) in cases {
        let (status, answer) = hub.post_json(&key, "/v1/subscriptions", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {answer}");
        assert_eq!(answer["title"], "validation_failed");
        assert!(answer["message"].as_str().expect("message").contains(field), "{field}: {answer}");
    }
    // Messages that teach what a new user most likely meant.
    for (pattern, hint) in [
        ("studio.lerian.lender.loan_application.approved", "use loan_application.approved"),
        ("*", "every event is *.*"),
        ("lender.loan_application.approved", "for example loan_application.approved"),
    ] {
        let (status, answer) = hub.post_json(&key, "/v1/subscriptions", &with("event_types", json!([pattern]))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{pattern}");
        assert!(answer["message"].as_str().expect("message").contains(hint), "{pattern}: {answer}");
    }
    let (_, listed) = hub.get(&key, "/v1/subscriptions").await;
    assert_eq!(listed["items"], json!([]), "nothing invalid was stored");
    // The admin token is not a tenant.
    assert_eq!(hub.post_json(&hub.admin, "/v1/subscriptions", &base).await.0, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn without_a_key_encryption_key_webhooks_are_refused() {
    let mut vars = crate::support::base_vars(Backend::Sqlite).await;
    vars.remove("STREAMING_HUB_DEV_KEK");
    vars.insert("STREAMING_HUB_ENV".into(), "staging".into());
    let hub = TestHub::start_vars(vars).await;
    let key = hub.tenant_key("t1").await;
    let body =
        json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": "https://example.com/h"}});
    let (status, answer) = hub.post_json(&key, "/v1/subscriptions", &body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["title"], "encryption_unavailable");
    assert!(answer["message"].as_str().expect("message").contains("STREAMING_HUB_KEK_REF"));
    // A pull subscription holds no secret and still works.
    hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
}

#[tokio::test]
async fn in_local_mode_a_key_is_generated_once_and_kept() {
    let mut vars = crate::support::base_vars(Backend::Sqlite).await;
    vars.remove("STREAMING_HUB_DEV_KEK");
    let hub = TestHub::start_vars(vars).await;
    let key = hub.tenant_key("t1").await;
    hub.subscribe(
        &key,
        json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": "https://example.com/h"}}),
    )
    .await;
    let kek_path = format!("{}.kek", hub.vars["STREAMING_HUB_SQLITE_PATH"]);
    let kept = std::fs::read_to_string(&kek_path).expect("the generated key is kept beside the database");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kek_path).expect("metadata").permissions().mode();
        assert_eq!(mode & 0o077, 0, "the key file is private to its owner");
    }
    // A second start reuses it rather than making a new one.
    let config =
        streaming_hub::config::Config::from_vars(hub.vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .expect("config");
    streaming_hub::testing::load_kek(&config).expect("load").expect("a key");
    assert_eq!(std::fs::read_to_string(&kek_path).expect("key"), kept);
}

#[tokio::test]
async fn patch_changes_fields_and_a_new_destination_must_be_verified_again() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let (first, second) = (Receiver::start(Script::Ok).await, Receiver::start(Script::Ok).await);
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "w", "event_types": ["*.*"], "origin": "lender",
            "sink": {"type": "webhook", "url": first.url}}),
        )
        .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(&key, &id).await;
    let path = format!("/v1/subscriptions/{id}");

    let (status, changed) =
        hub.patch_json(&key, &path, &json!({"name": "renamed", "event_types": ["account.*"], "origin": null})).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["name"], "renamed");
    assert_eq!(changed["event_types"], json!(["account.*"]));
    assert_eq!(changed["origin"], Value::Null);
    assert_eq!(changed["verification_state"], "active", "the destination did not change");

    let (_, changed) = hub.patch_json(&key, &path, &json!({"sink": {"type": "webhook", "url": second.url}})).await;
    assert_eq!(changed["sink"]["url"], second.url.as_str());
    assert_eq!(changed["verification_state"], "pending", "a new destination is verified again");
    // …and the hub probes it at once.
    hub.wait_until_active(&key, &id).await;

    let (_, changed) = hub.patch_json(&key, &path, &json!({"enabled": false})).await;
    assert_eq!(
        (changed["enabled"].clone(), changed["disabled_reason"].clone()),
        (json!(false), json!("disabled through the API"))
    );
    let (_, changed) = hub.patch_json(&key, &path, &json!({"enabled": true})).await;
    assert_eq!((changed["enabled"].clone(), changed["disabled_reason"].clone()), (json!(true), Value::Null));

    for (body, field) in [
        (json!({"sink": {"type": "pull"}}), "sink.type"),
        (json!({"event_types": ["bad"]}), "event_types[0]"),
        (json!({"id": "x"}), "id"),
        (json!({"origin": 5}), "origin"),
        (json!({"enabled": "yes"}), "enabled"),
        (json!({"name": 7}), "name"),
    ] {
        let (status, answer) = hub.patch_json(&key, &path, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert!(answer["message"].as_str().expect("message").contains(field), "{body}: {answer}");
    }
    let (_, read) = hub.get(&key, &path).await;
    assert_eq!(read["name"], "renamed", "a refused change leaves the subscription as it was");
}

#[tokio::test]
async fn listing_pages_through_every_subscription_once() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let mut created = Vec::new();
    for i in 0..5 {
        let sub =
            hub.subscribe(&key, json!({"name": format!("s{i}"), "event_types": [], "sink": {"type": "pull"}})).await;
        created.push(sub["id"].clone());
    }
    let (_, first) = hub.get(&key, "/v1/subscriptions?limit=2").await;
    let mut seen: Vec<Value> = first["items"].as_array().expect("items").iter().map(|s| s["id"].clone()).collect();
    let mut cursor = first["next_cursor"].as_str().map(str::to_owned);
    while let Some(c) = cursor {
        let (_, page) = hub.get(&key, &format!("/v1/subscriptions?limit=2&cursor={c}")).await;
        seen.extend(page["items"].as_array().expect("items").iter().map(|s| s["id"].clone()));
        cursor = page["next_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, created);
}
