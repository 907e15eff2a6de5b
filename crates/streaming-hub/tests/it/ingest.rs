//! HTTP ingest: every verdict with the status and body the spec fixes, on both backends.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Backend, Event, TestHub};

/// Runs an async test function once per backend, as `<name>::sqlite` and `<name>::postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($crate::support::Backend::Sqlite).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name($crate::support::Backend::Postgres).await;
            }
        }
    )*};
}

on_both_backends!(
    a_valid_event_is_accepted_and_stored_byte_for_byte,
    a_duplicate_is_reported_with_the_original_seq,
    a_system_event_is_discarded_and_nothing_is_stored,
    every_malformed_event_is_quarantined_with_its_reason_and_listed,
    structured_mode_is_judged_like_binary_mode,
    a_tenant_key_cannot_ingest_for_another_tenant,
    concurrent_posts_get_distinct_consecutive_seqs,
    random_input_never_crashes_the_server_or_corrupts_the_inbox,
);

async fn quarantine_count(hub: &TestHub) -> usize {
    let (status, body) = hub.admin_get("/admin/quarantine?limit=1000").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["items"].as_array().expect("items").len()
}

async fn a_valid_event_is_accepted_and_stored_byte_for_byte(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let body = br#"{ "amount": 100.50,  "note": "exact bytes" }"#;
    let event = Event::new("t1").set("ce-subject", "loan-1").body(body.to_vec());
    let (status, answer) = hub.post_event(&key, &event).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer, json!({"verdict": "accepted", "seq": 1}));

    let stored = hub.store.event_by_ce_id("t1", event.id()).await.expect("read").expect("stored");
    assert_eq!(stored.payload, body);
    assert_eq!(stored.subject.as_deref(), Some("loan-1"));
    assert_eq!(stored.event_key(), "loan_application.approved");
    assert_eq!(stored.data_content_type.as_deref(), Some("application/json"));

    let (status, answer) = hub.post_event(&key, &Event::new("t1")).await;
    assert_eq!((status, answer), (StatusCode::ACCEPTED, json!({"verdict": "accepted", "seq": 2})));
}

async fn a_duplicate_is_reported_with_the_original_seq(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let event = Event::new("t1");
    hub.post_event(&key, &Event::new("t1")).await;
    assert_eq!(hub.post_event(&key, &event).await.1, json!({"verdict": "accepted", "seq": 2}));
    // Same id, even with another body: nothing is written, the stored event stays.
    let replay = event.clone().body(br#"{"amount":999}"#.to_vec());
    let (status, answer) = hub.post_event(&key, &replay).await;
    assert_eq!((status, answer), (StatusCode::ACCEPTED, json!({"verdict": "duplicate", "seq": 2})));
    let stored = hub.store.event_by_ce_id("t1", event.id()).await.expect("read").expect("stored");
    assert_eq!(stored.payload, br#"{"amount":100}"#);
    assert_eq!(hub.store.events_after("t1", 0, 10).await.expect("read").len(), 2);
}

async fn a_system_event_is_discarded_and_nothing_is_stored(backend: Backend) {
    let hub = TestHub::start(backend).await;
    // A platform event carries no tenant: discarded before the tenant check.
    let event = Event::new("t1").without("ce-tenantid").set("ce-systemevent", "true");
    let (status, answer) = hub.post_event(&hub.admin, &event).await;
    assert_eq!((status, answer), (StatusCode::ACCEPTED, json!({"verdict": "discarded", "seq": null})));
    assert_eq!(quarantine_count(&hub).await, 0);
    assert!(hub.store.events_after("t1", 0, 10).await.expect("read").is_empty());
}

async fn every_malformed_event_is_quarantined_with_its_reason_and_listed(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let e = || Event::new("t1");
    let cases: Vec<(&str, Event, &str)> = vec![
        ("v4 id", e().set("ce-id", "9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a"), "ce-id"),
        ("no specversion", e().without("ce-specversion"), "ce-specversion"),
        ("no tenant", e().without("ce-tenantid"), "ce-tenantid"),
        ("bad source", e().set("ce-source", "Lender"), "ce-source"),
        ("type mismatch", e().set("ce-type", "studio.lerian.lender.loan_application.rejected"), "ce-type"),
        ("bad time", e().set("ce-time", "yesterday"), "ce-time"),
        ("bad schema version", e().set("ce-schemaversion", "v1"), "ce-schemaversion"),
        ("tab in subject", e().set("ce-subject", "a\tb"), "ce-subject"),
        ("long subject", e().set("ce-subject", &"s".repeat(1025)), "ce-subject"),
        ("invalid json", e().body(b"{oops".to_vec()), "body"),
        ("body over 1 MiB", e().body(format!("\"{}\"", "x".repeat(1024 * 1024)).into_bytes()), "body"),
    ];
    for (case, event, field) in &cases {
        // A tenant key must name its tenant (403 otherwise); the admin token's record is judged.
        let poster = if event.get("ce-tenantid").is_none() { hub.admin.as_str() } else { key.as_str() };
        let (status, answer) = hub.post_event(poster, event).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{case}: {answer}");
        assert_eq!(answer["code"], 422, "{case}");
        assert_eq!(answer["title"], "quarantined", "{case}");
        let message = answer["message"].as_str().expect("message");
        assert!(message.starts_with(&format!("{field}: ")), "{case}: {message}");
    }
    let (_, listed) = hub.admin_get("/admin/quarantine?limit=1000").await;
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), cases.len());
    // Newest first: the last case is the oversized body, kept capped with its true size.
    assert_eq!(items[0]["reason_code"], "body_too_large");
    assert_eq!(items[0]["body_truncated"], true);
    assert_eq!(items[0]["body_bytes"], 1024 * 1024 + 2);
    assert_eq!(items[0]["origin"], json!({"kind": "http"}));
    assert!(items.iter().any(|i| i["reason_code"] == "invalid_id" && i["tenant_id"] == "t1"));
    assert!(
        items.iter().all(|i| !i["headers"].as_object().expect("headers").contains_key("authorization")),
        "credentials are never kept with a quarantined record"
    );
    assert!(hub.store.events_after("t1", 0, 10).await.expect("read").is_empty(), "nothing malformed is accepted");
}

async fn structured_mode_is_judged_like_binary_mode(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let id = uuid::Uuid::now_v7();
    let doc = json!({
        "specversion": "1.0", "id": id.to_string(), "source": "lender",
        "type": "studio.lerian.lender.loan_application.approved", "time": "2026-11-30T10:00:00Z",
        "schemaversion": "1.0.0", "resourcetype": "loan_application", "eventtype": "approved",
        "tenantid": "t1", "subject": "loan-9", "data": {"amount": 7}
    });
    let post = |doc: Vec<u8>| {
        hub.client
            .post(hub.url("/v1/events"))
            .bearer_auth(&key)
            .header("content-type", "application/cloudevents+json; charset=utf-8")
            .body(doc)
    };
    let (status, answer) = hub.send(post(serde_json::to_vec(&doc).expect("json"))).await;
    assert_eq!((status, answer), (StatusCode::ACCEPTED, json!({"verdict": "accepted", "seq": 1})));
    let stored = hub.store.event_by_ce_id("t1", id).await.expect("read").expect("stored");
    assert_eq!(stored.payload, br#"{"amount":7}"#);
    assert_eq!(stored.subject.as_deref(), Some("loan-9"));

    let (status, answer) = hub.send(post(serde_json::to_vec(&doc).expect("json"))).await;
    assert_eq!(answer["verdict"], "duplicate", "{status}");

    let mut bad = doc.clone();
    bad["id"] = json!("9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a");
    let (status, answer) = hub.send(post(serde_json::to_vec(&bad).expect("json"))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer["message"].as_str().expect("message").starts_with("ce-id: "), "{answer}");

    // A document that is no CloudEvent names no tenant: refused to a tenant key, quarantined
    // when the operator posts it.
    assert_eq!(hub.send(post(b"[1,2]".to_vec())).await.0, StatusCode::FORBIDDEN);
    let as_admin = hub
        .client
        .post(hub.url("/v1/events"))
        .bearer_auth(&hub.admin)
        .header("content-type", "application/cloudevents+json")
        .body(b"[1,2]".to_vec());
    let (status, answer) = hub.send(as_admin).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer["title"], "quarantined");
    assert_eq!(quarantine_count(&hub).await, 2);

    // A NUL (or any control character) in an attribute name is quarantined and stored, on
    // PostgreSQL as on SQLite, not a 500.
    let mut named = doc.clone();
    named["id"] = json!(uuid::Uuid::now_v7().to_string());
    named["x\u{0}y"] = json!("value");
    named["a\u{7}b"] = json!("bell");
    let (status, answer) = hub.send(post(serde_json::to_vec(&named).expect("json"))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["title"], "quarantined");
    assert_eq!(quarantine_count(&hub).await, 3);

    let batch = hub
        .client
        .post(hub.url("/v1/events"))
        .bearer_auth(&key)
        .header("content-type", "application/cloudevents-batch+json")
        .body("[]");
    let (status, answer) = hub.send(batch).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(answer["title"], "unsupported_media_type");
}

async fn a_tenant_key_cannot_ingest_for_another_tenant(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let event = Event::new("t2");
    let (status, answer) = hub.post_event(&key, &event).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["title"], "forbidden");
    // Not even a malformed record is recorded in another tenant's name.
    let malformed = Event::new("t2").set("ce-id", "nope");
    assert_eq!(hub.post_event(&key, &malformed).await.0, StatusCode::FORBIDDEN);
    // Nor one that names no tenant at all (SPEC §8).
    let tenantless = Event::new("t1").without("ce-tenantid");
    let (status, answer) = hub.post_event(&key, &tenantless).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(quarantine_count(&hub).await, 0);
    assert!(hub.store.events_after("t2", 0, 10).await.expect("read").is_empty());
    // The admin token ingests for any tenant; without a tenant the record is quarantined.
    assert_eq!(hub.post_event(&hub.admin, &event).await.1["verdict"], "accepted");
    assert_eq!(hub.post_event(&hub.admin, &tenantless).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(quarantine_count(&hub).await, 1);
}

async fn concurrent_posts_get_distinct_consecutive_seqs(backend: Backend) {
    let hub = std::sync::Arc::new(TestHub::start(backend).await);
    let key = hub.tenant_key("t1").await;
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let (hub, key) = (std::sync::Arc::clone(&hub), key.clone());
        tasks.push(tokio::spawn(async move { hub.post_event(&key, &Event::new("t1")).await }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        let (status, answer) = t.await.expect("task");
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        seqs.push(answer["seq"].as_i64().expect("seq"));
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
}

/// Seeded random mutations of a valid event: every answer is a verdict or a client error,
/// never a 5xx, and the inbox holds exactly the accepted events afterwards.
async fn random_input_never_crashes_the_server_or_corrupts_the_inbox(backend: Backend) {
    use rand::{Rng, SeedableRng};
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let keys = [
        "ce-id",
        "ce-source",
        "ce-type",
        "ce-time",
        "ce-tenantid",
        "ce-subject",
        "ce-schemaversion",
        "ce-systemevent",
        "ce-specversion",
        "ce-resourcetype",
        "ce-eventtype",
        "content-type",
        "ce-dataschema",
        "traceparent",
    ];
    let mut accepted = 0;
    for _ in 0..150 {
        let mut event = Event::new("t1");
        for _ in 0..rng.random_range(0..4) {
            let k = keys[rng.random_range(0..keys.len())];
            let len = rng.random_range(0..40);
            let v: String = (0..len).map(|_| char::from(rng.random_range(0x20u8..0x7f))).collect();
            event = if rng.random_bool(0.2) { event.without(k) } else { event.set(k, &v) };
        }
        if rng.random_bool(0.3) {
            let len = rng.random_range(0..64);
            event = event.body((0..len).map(|_| rng.random::<u8>()).collect::<Vec<u8>>());
        }
        let (status, answer) = hub.post_event(&key, &event).await;
        assert!(!status.is_server_error(), "{status}: {answer}");
        if answer["verdict"] == "accepted" {
            accepted += 1;
        }
        let allowed = [StatusCode::ACCEPTED, StatusCode::UNPROCESSABLE_ENTITY, StatusCode::FORBIDDEN];
        assert!(allowed.contains(&status), "{status}: {answer}");
        assert!(answer["code"].is_number() || answer["verdict"].is_string(), "{answer}");
    }
    let stored = hub.store.events_after("t1", 0, 1000).await.expect("read");
    assert_eq!(stored.len(), accepted);
    assert!(stored.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    let (status, _) = hub.send(hub.client.get(hub.url("/readyz"))).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn single_tenant_mode_quarantines_other_tenants() {
    let hub = TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_TENANT_ID", "acme")]).await;
    let (status, answer) = hub.post_event(&hub.admin, &Event::new("other")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer["message"].as_str().expect("message").starts_with("ce-tenantid: "));
    assert_eq!(hub.post_event(&hub.admin, &Event::new("acme")).await.1["verdict"], "accepted");
}

#[tokio::test]
async fn a_body_over_the_request_limit_is_refused_with_413() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let event = Event::new("t1").body(vec![b'x'; 3 * 1024 * 1024]);
    let (status, answer) = hub.post_event(&hub.admin, &event).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer["title"], "payload_too_large");
    assert_eq!(answer["code"], 413);
}

#[tokio::test]
async fn ingest_requires_a_valid_bearer_token() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let event = Event::new("t1");
    let no_auth = hub.client.post(hub.url("/v1/events")).body("{}");
    let response = no_auth.send().await.expect("request");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers().get("www-authenticate").map(|v| v.as_bytes()), Some(&b"Bearer"[..]));
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["title"], "unauthorized");

    assert_eq!(hub.post_event("shk_not-a-real-key", &event).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(hub.post_event("garbage", &event).await.0, StatusCode::UNAUTHORIZED);

    let key = hub.tenant_key("t1").await;
    assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);
    let (_, keys) = hub.admin_get("/admin/api-keys").await;
    let id = keys["items"][0]["id"].as_str().expect("id").to_owned();
    let revoke = hub.client.delete(hub.url(&format!("/admin/api-keys/{id}"))).bearer_auth(&hub.admin);
    assert_eq!(hub.send(revoke).await.0, StatusCode::NO_CONTENT);
    assert_eq!(hub.post_event(&key, &Event::new("t1")).await.0, StatusCode::UNAUTHORIZED, "a revoked key is refused");
}

#[tokio::test]
async fn ingest_counts_verdicts_in_metrics() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let read = || async {
        let text = hub.client.get(hub.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
        let value = |verdict: &str| -> f64 {
            let prefix = format!("streaming_hub_ingest_records_total{{verdict=\"{verdict}\"}} ");
            text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        };
        [value("accepted"), value("duplicate"), value("discarded"), value("quarantined")]
    };
    let before = read().await;
    let event = Event::new("t1");
    hub.post_event(&hub.admin, &event).await;
    hub.post_event(&hub.admin, &event).await;
    hub.post_event(&hub.admin, &Event::new("t1").set("ce-systemevent", "true")).await;
    hub.post_event(&hub.admin, &Event::new("t1").set("ce-id", "x")).await;
    let after = read().await;
    // Other tests in this process may count too: each verdict grew by at least one.
    for (i, verdict) in ["accepted", "duplicate", "discarded", "quarantined"].iter().enumerate() {
        assert!(after[i] >= before[i] + 1.0, "{verdict}: {} -> {}", before[i], after[i]);
    }
}
