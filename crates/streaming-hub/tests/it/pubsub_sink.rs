//! Pub/Sub end to end: an event ingested over HTTP is found, with its data, attributes and
//! ordering key, in Google's own in-memory Pub/Sub server; a subscription to a topic that does not
//! exist fails its verification, naming the topic.

use hub_testkit::pubsub::PubSubServer;
use reqwest::StatusCode;
use serde_json::json;

use crate::support::{Backend, Event, TestHub};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_a_pubsub_topic_with_its_ordering_key() {
    let server = PubSubServer::start().await.expect("the Pub/Sub test server is required (scripts/services pubsub)");
    server.create_topic("lerian-test", "loans").await.expect("topic");
    let hub = TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20")]).await;
    let key = hub.tenant_key("t1").await;
    let sink =
        json!({"type": "pubsub", "project": "lerian-test", "topic": "loans", "endpoint_url": server.endpoint_url()});
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "to-pubsub", "event_types": ["loan_application.*"], "ordering": "key", "sink": sink}),
        )
        .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    assert_eq!(sub["sink"], sink);
    hub.wait_until_active(&key, &id).await;

    let event = Event::new("t1").set("ce-subject", "loan-77");
    assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);
    // The verification message first, then the event.
    let published = server.wait_for(2).await.expect("read back");
    let ce_id = event.id().to_string();
    let message = published.iter().find(|m| m.attributes.get("ce-id") == Some(&ce_id)).expect("the event in the topic");
    assert_eq!(message.data, event.body);
    assert_eq!(message.attributes["ce-subject"], "loan-77");
    assert_eq!(message.attributes["ce-tenantid"], "t1");
    assert_eq!(message.ordering_key, "loan-77", "ordered by key: the event's key (its subject) goes with it");
    assert!(
        published.iter().any(|m| m.attributes.get("ce-type").map(String::as_str) == Some("streaming_hub.verification"))
    );

    // A topic that does not exist: verification fails and says which.
    let missing =
        json!({"type": "pubsub", "project": "lerian-test", "topic": "nowhere", "endpoint_url": server.endpoint_url()});
    let sub = hub.subscribe(&key, json!({"name": "nowhere", "event_types": ["*.*"], "sink": missing})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let end = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, got) = hub.get(&key, &format!("/v1/subscriptions/{id}")).await;
        if got["verification_state"] == "failed" {
            assert!(got.to_string().contains("no such topic"), "{got}");
            break;
        }
        assert!(tokio::time::Instant::now() < end, "verification never failed: {got}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
