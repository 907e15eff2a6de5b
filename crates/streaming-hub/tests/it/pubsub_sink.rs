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

/// Google's endpoints take no publish without a key: a destination there is refused without one,
/// at create and at a change that moves to them or clears the key, naming the field; an
/// emulator's endpoint takes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pubsub_destination_at_google_needs_its_key() {
    let hub = TestHub::start_with(Backend::Sqlite, &[]).await;
    let key = hub.tenant_key("t1").await;
    let refused = |body: &serde_json::Value| {
        body["message"].as_str().unwrap_or_default().starts_with("sink.credentials_json: is required")
    };
    for endpoint in
        [None, Some("https://europe-west1-pubsub.googleapis.com"), Some("https://PUBSUB.googleapis.com:443")]
    {
        let mut sink = json!({"type": "pubsub", "project": "lerian-test", "topic": "loans"});
        if let Some(e) = endpoint {
            sink["endpoint_url"] = json!(e);
        }
        let (status, body) =
            hub.post_json(&key, "/v1/subscriptions", &json!({"name": "g", "event_types": ["*.*"], "sink": sink})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{endpoint:?}: {body}");
        assert!(refused(&body), "{endpoint:?}: {body}");
    }

    // An emulator's endpoint takes no key; moving it to Google's without one is refused, and the
    // subscription keeps what it had.
    let emulator = "http://127.0.0.1:8085";
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "e", "event_types": ["*.*"], "sink": {"type": "pubsub", "project": "lerian-test", "topic": "loans", "endpoint_url": emulator}}),
        )
        .await;
    let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
    let (status, body) = hub
        .patch_json(&key, &path, &json!({"sink": {"type": "pubsub", "project": "lerian-test", "topic": "loans"}}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(refused(&body), "{body}");
    let (_, now) = hub.get(&key, &path).await;
    assert_eq!(now["sink"]["endpoint_url"], emulator, "{now}");

    // With a key the same destination is taken, and clearing the key is then refused.
    let google = json!({"type": "pubsub", "project": "lerian-test", "topic": "loans",
                        "credentials_json": hub_testkit::pubsub::service_account_key("lerian-test")});
    let sub = hub.subscribe(&key, json!({"name": "k", "event_types": ["*.*"], "sink": google})).await;
    assert!(sub["sink"].get("credentials_json").is_none(), "the key is never shown: {sub}");
    let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
    let (status, body) = hub
        .patch_json(
            &key,
            &path,
            &json!({"sink": {"type": "pubsub", "project": "lerian-test", "topic": "other", "credentials_json": null}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(refused(&body), "{body}");
    // A change that leaves the key as it is keeps it.
    let (status, body) = hub
        .patch_json(&key, &path, &json!({"sink": {"type": "pubsub", "project": "lerian-test", "topic": "other"}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["sink"]["topic"], "other", "{body}");
}
