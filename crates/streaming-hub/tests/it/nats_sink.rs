//! NATS end to end: an event ingested over HTTP is found, with its body and headers, in a real
//! JetStream stream, read back by the test's own client; a login the server no longer takes fails
//! every attempt on the retry curve, and the credential is in no error.

use std::time::Duration;

use hub_testkit::nats::{Auth, NatsServer};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Backend, Event, TestHub};

const PASSWORD: &str = "nats-e2e-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_a_jetstream_stream_and_a_refused_login_follows_the_curve() {
    let server = NatsServer::start(Auth::Users { passwords: vec![("hub".into(), PASSWORD.into())], nkeys: Vec::new() })
        .await
        .expect("nats-server is required for these tests (scripts/services nats)");
    let mut client = server.client(json!({"user": "hub", "pass": PASSWORD})).await.expect("client");
    client.create_stream("LENDER", &["lender.>"]).await.expect("stream");

    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s,20ms,20ms")],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "to-nats", "event_types": ["loan_application.*"],
                   "sink": {"type": "nats", "servers": server.url(), "subject": "lender.loans",
                            "credentials": {"username": "hub", "password": PASSWORD}}}),
        )
        .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    assert_eq!(
        sub["sink"],
        json!({"type": "nats", "servers": server.url(), "subject": "lender.loans", "jetstream": true})
    );
    assert!(!sub.to_string().contains(PASSWORD), "the password is never shown");
    hub.wait_until_active(&key, &id).await;

    let event = Event::new("t1").set("ce-subject", "loan-77");
    assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);
    // The verification message first, then the event.
    let stored = client.all_stored("LENDER", 2).await.expect("read back");
    let ce_id = event.id().to_string();
    let message = stored.iter().find(|m| m.header("ce-id") == Some(ce_id.as_str())).expect("the event in the stream");
    assert_eq!(message.subject, "lender.loans");
    assert_eq!(message.data, event.body);
    assert_eq!(message.header("Nats-Msg-Id"), Some(ce_id.as_str()));
    assert_eq!(message.header("ce-subject"), Some("loan-77"));
    assert_eq!(message.header("ce-tenantid"), Some("t1"));
    assert!(stored.iter().any(|m| m.header("ce-type") == Some("streaming_hub.verification")));

    // The server no longer takes the hub's password: every attempt fails, on the whole curve.
    let sealer = streaming_hub::testing::Sealer::new(Some(hub_core::seal::Kek::derive(&[0x4b; 32]).expect("kek")));
    let uuid: uuid::Uuid = id.parse().expect("uuid");
    let record = hub.store.subscription("t1", uuid).await.expect("read").expect("exists");
    let wrong = json!({"username": "hub", "password": "not-the-password"}).to_string();
    let sealed = sealer.seal(uuid, streaming_hub::testing::Purpose::Credentials, wrong.as_bytes()).expect("seal");
    let patch = hub_store::SubscriptionPatch {
        destination: Some(hub_store::DestinationChange {
            sink_config: record.sink_config,
            credentials: Some(Some(sealed)),
            reverify: false,
            pace_bucket: None,
        }),
        now: chrono::Utc::now(),
        ..hub_store::SubscriptionPatch::default()
    };
    assert!(hub.store.patch_subscription("t1", uuid, &patch).await.expect("update").is_some());
    hub.post_event(&key, &Event::new("t1")).await;
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    let items = loop {
        let (_, page) = hub.get(&key, &format!("/v1/subscriptions/{id}/deliveries")).await;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        if items.len() == 2 && items[1]["state"] == "dead" {
            break items;
        }
        assert!(tokio::time::Instant::now() < end, "the second delivery never died: {items:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log = items[1]["attempt_log"].as_array().expect("log");
    assert_eq!(log.len(), 3, "the whole curve");
    assert!(log.iter().all(|a| a["error"].as_str().is_some_and(|e| e.starts_with("unauthorized"))), "{log:?}");
    assert!(!Value::from(items.clone()).to_string().contains("not-the-password"), "no credential in any error");
    assert_eq!(client.stream_messages("LENDER").await.expect("count"), 2, "nothing more reached the stream");
}
