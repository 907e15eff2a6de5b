//! The Kafka sink end to end, on both stores: events ingested over HTTP are read back from the
//! tenant's topic (over a SCRAM login) with the binding's headers and keys; a broker that goes down
//! fails attempts on the retry curve and opens the destination's breaker, and once it is back every
//! event is delivered; a topic that does not exist dead-letters at once.

use std::collections::HashMap;
use std::time::Duration;

use hub_testkit::kafka::{Broker, SASL_PASSWORD, SASL_USER};
use rdkafka::ClientConfig;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::kafka_support::KafkaPeer;
use crate::support::{Backend, Event, TestHub, until};

const WAIT: Duration = Duration::from_secs(60);

crate::on_both_backends!(
    events_reach_the_tenants_topic_and_survive_its_broker_going_down,
    a_missing_topic_is_dead_at_once
);

async fn broker() -> Broker {
    let home = hub_testkit::kafka::kafka_home();
    assert!(home.join("lib").is_dir(), "Apache Kafka is required ({}); scripts/test installs it", home.display());
    Broker::apache(&home, true).await.expect("start Apache Kafka")
}

/// Every record of `topic` but verification messages as `(key, value, headers)`, once `expected`
/// arrived.
async fn read_back(brokers: &str, topic: &str, expected: usize) -> Vec<(String, Vec<u8>, HashMap<String, String>)> {
    hub_testkit::kafka::read_topic(brokers, topic, expected + 1, WAIT)
        .await
        .into_iter()
        .filter(|r| r.headers.get("ce_type").map(String::as_str) != Some("streaming_hub.verification"))
        .map(|r| (String::from_utf8_lossy(&r.key).into_owned(), r.value, r.headers))
        .collect()
}

async fn subscription(hub: &TestHub, key: &str, id: &str) -> Value {
    let (_, page) = hub.get(key, "/v1/subscriptions?limit=100").await;
    page["items"].as_array().and_then(|items| items.iter().find(|s| s["id"] == id).cloned()).expect("listed")
}

async fn events_reach_the_tenants_topic_and_survive_its_broker_going_down(backend: Backend) {
    let mut broker = broker().await;
    let peer = KafkaPeer::on(broker.brokers.clone());
    let topic = format!("tenant-events-{}", Uuid::now_v7().simple());
    peer.create_topic(&topic, 3).await;
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"),
            ("STREAMING_HUB_RETRY_CURVE", "200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms"),
            ("STREAMING_HUB_BREAKER_FAILURES", "3"),
            ("STREAMING_HUB_BREAKER_COOLDOWN", "1s"),
            ("STREAMING_HUB_BREAKER_MAX_COOLDOWN", "2s"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "k", "event_types": ["loan_application.*"], "sink": {"type": "kafka",
                "brokers": broker.sasl_brokers.clone().expect("a SASL listener"), "topic": topic,
                "sasl": {"mechanism": "SCRAM-SHA-256", "username": SASL_USER, "password": SASL_PASSWORD}}}),
        )
        .await;
    assert!(!sub.to_string().contains(SASL_PASSWORD), "the password is never shown: {sub}");
    assert_eq!(sub["sink"]["sasl"], json!({"mechanism": "SCRAM-SHA-256", "username": SASL_USER}));
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(&key, &id).await;

    let mut sent = HashMap::new();
    for i in 0..30 {
        let mut event = Event::new("t1").body(format!(r#"{{"n":{i}}}"#));
        if i % 2 == 0 {
            event = event.set("ce-partitionkey", &format!("account-{}", i % 5));
        }
        let key = event.get("ce-partitionkey").or(event.get("ce-subject")).unwrap_or("t1").to_owned();
        sent.insert(event.id(), (event.body.clone(), key));
        hub.post_event(&hub.tenant_key("t1").await, &event).await;
    }
    let got = read_back(&broker.brokers, &topic, 30).await;
    assert_eq!(got.len(), 30, "every event once");
    for (record_key, value, headers) in &got {
        let id: Uuid = headers["ce_id"].parse().expect("ce_id");
        let (body, key) = &sent[&id];
        assert_eq!(value, body);
        assert_eq!(record_key, key);
        assert_eq!(headers["ce_tenantid"], "t1");
        assert_eq!(headers["ce_type"], "studio.lerian.lender.loan_application.approved");
        assert_eq!(headers["content-type"], "application/json");
    }

    // The broker goes down: attempts fail on the curve and the destination's breaker opens.
    broker.kill();
    let late = Event::new("t1");
    hub.post_event(&key, &late).await;
    until("the breaker opens", WAIT, async || {
        let s = subscription(&hub, &key, &id).await;
        (s["health"]["breaker"] == "open").then_some(())
    })
    .await;
    let (_, page) = hub.get(&key, &format!("/v1/subscriptions/{id}/deliveries")).await;
    let failed = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|d| d["ce_id"] == late.id().to_string())
        .cloned()
        .expect("the late event's job");
    // Waiting for its next attempt, or in it (a half-open breaker lets one through): not dead.
    assert!(failed["state"] == "pending" || failed["state"] == "leased", "retried, not dead: {failed}");
    assert!(
        failed["last_error"].as_str().is_some_and(|e| e.starts_with("unreachable") || e.starts_with("timeout")),
        "{failed}"
    );

    // Back: the breaker lets a probe through, and the event is delivered.
    broker.start_again(true).await.expect("the broker again");
    let got = until("the late event is delivered", WAIT, async || {
        let got = read_back(&broker.brokers, &topic, 31).await;
        (got.len() == 31).then_some(got)
    })
    .await;
    assert!(got.iter().any(|(_, _, h)| h["ce_id"] == late.id().to_string()));
    until("the breaker closes", WAIT, async || {
        let s = subscription(&hub, &key, &id).await;
        (s["health"]["breaker"] == "closed").then_some(())
    })
    .await;
}

async fn a_missing_topic_is_dead_at_once(backend: Backend) {
    let broker = broker().await;
    let peer = KafkaPeer::on(broker.brokers.clone());
    let topic = format!("short-lived-{}", Uuid::now_v7().simple());
    peer.create_topic(&topic, 1).await;
    let hub = TestHub::start_with(backend, &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20")]).await;
    let key = hub.tenant_key("t1").await;
    let sink = |topic: &str| json!({"type": "kafka", "brokers": broker.brokers, "topic": topic});
    // A topic that does not exist fails the verification, saying so.
    let missing =
        hub.subscribe(&key, json!({"name": "m", "event_types": ["*.*"], "sink": sink("no-such-topic")})).await;
    let missing = missing["id"].as_str().expect("id").to_owned();
    let s = until("verification fails", WAIT, async || {
        let (_, s) = hub.get(&key, &format!("/v1/subscriptions/{missing}")).await;
        (s["verification_state"] == "failed").then_some(s)
    })
    .await;
    assert!(s.to_string().contains("the topic no-such-topic does not exist"), "{s}");

    // A topic deleted after verification: the first attempt is refused for good, and the event is
    // a dead letter at once instead of waiting out the retry curve.
    let sub = hub.subscribe(&key, json!({"name": "k", "event_types": ["*.*"], "sink": sink(&topic)})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(&key, &id).await;
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &broker.brokers).create().expect("admin");
    admin.delete_topics(&[&topic], &rdkafka::admin::AdminOptions::new()).await.expect("delete the topic");
    hub.post_event(&key, &Event::new("t1")).await;
    let dead = until("the event is dead", WAIT, async || {
        let (_, page) = hub.get(&key, &format!("/v1/subscriptions/{id}/deliveries")).await;
        page["items"].as_array()?.iter().find(|d| d["state"] == "dead").cloned()
    })
    .await;
    assert_eq!(dead["attempts"], 1, "{dead}");
    assert!(
        dead["last_error"].as_str().is_some_and(|e| e.contains("does not exist") || e.contains("UNKNOWN_TOPIC")),
        "{dead}"
    );
}

/// TLS to the tenant's brokers with a SCRAM login, the broker's certificate issued by a private CA:
/// a hub whose trust store holds that CA (`SSL_CERT_FILE`) delivers; one whose store does not fails
/// verification instead of sending the password to a broker it cannot authenticate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_brokers_are_trusted_only_through_the_trust_store() {
    let broker = broker().await;
    let peer = KafkaPeer::on(broker.brokers.clone());
    let topic = format!("tls-events-{}", Uuid::now_v7().simple());
    peer.create_topic(&topic, 2).await;
    let sink = json!({"type": "kafka", "brokers": broker.tls_brokers.clone().expect("a TLS listener"), "topic": topic,
                      "tls": true, "sasl": {"mechanism": "SCRAM-SHA-512", "username": SASL_USER, "password": SASL_PASSWORD}});

    // The system's trust store does not know the test CA.
    let untrusting = TestHub::start(Backend::Sqlite).await;
    let key = untrusting.tenant_key("t1").await;
    let sub = untrusting.subscribe(&key, json!({"name": "k", "event_types": ["*.*"], "sink": sink})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    until("verification fails", WAIT, async || {
        let (_, s) = untrusting.get(&key, &format!("/v1/subscriptions/{id}")).await;
        (s["verification_state"] == "failed").then_some(())
    })
    .await;

    // A hub process whose trust store is the test CA.
    let admin = format!("admin-{}", Uuid::now_v7().simple());
    let hub = crate::support::HubProcess::start(&[
        ("STREAMING_HUB_ENV", "local".to_owned()),
        ("STREAMING_HUB_SQLITE_PATH", crate::support::temp_sqlite_path().display().to_string()),
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20".to_owned()),
        ("SSL_CERT_FILE", broker.tls_ca.clone().expect("the test CA").display().to_string()),
    ])
    .await;
    let client = crate::support::http_client();
    let key: Value = client
        .post(format!("{}/admin/api-keys", hub.base))
        .bearer_auth(&admin)
        .json(&json!({"tenant_id": "t1", "name": "tls"}))
        .send()
        .await
        .expect("key")
        .json()
        .await
        .expect("json");
    let key = key["key"].as_str().expect("key").to_owned();
    let sub: Value = client
        .post(format!("{}/v1/subscriptions", hub.base))
        .bearer_auth(&key)
        .json(&json!({"name": "k", "event_types": ["*.*"], "sink": sink}))
        .send()
        .await
        .expect("subscribe")
        .json()
        .await
        .expect("json");
    let id = sub["id"].as_str().expect("id").to_owned();
    until("verified over TLS", WAIT, async || {
        let s: Value = client
            .get(format!("{}/v1/subscriptions/{id}", hub.base))
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (s["verification_state"] == "active").then_some(())
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let event = Event::new("t1");
        ids.push(event.id().to_string());
        hub.post_event(&key, &event).await;
    }
    let got = read_back(&broker.brokers, &topic, 3).await;
    let mut read: Vec<String> = got.iter().map(|(_, _, h)| h["ce_id"].clone()).collect();
    read.sort();
    ids.sort();
    assert_eq!(read, ids, "every event over TLS, once");
}
