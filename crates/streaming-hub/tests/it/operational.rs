//! Operational events (SPEC §8): each kind reaches a subscription that asks for
//! `streaming_hub.*`, signed, with its documented payload; a failure is never sent to the
//! subscription it is about; producers cannot forge them.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::on_both_backends;
use crate::receiver::{Delivery, Receiver, Script};
use crate::replay::webhook;
use crate::support::{Backend, Event, TestHub};

on_both_backends!(
    every_operational_event_reaches_a_subscriber_with_its_payload,
    producers_cannot_send_operational_events
);

const WAIT: Duration = Duration::from_secs(30);

/// Waits for the `n`th operational event of `kind` about `subject`; returns it and its body.
async fn notice(receiver: &Receiver, kind: &str, subject: &str, n: usize) -> (Delivery, Value) {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let found: Vec<(Delivery, Value)> = receiver
            .deliveries()
            .into_iter()
            .filter(|d| d.header("x-lerian-event-type") == format!("streaming_hub.{kind}"))
            .map(|d| {
                let body: Value = serde_json::from_slice(&d.body).expect("a JSON body");
                (d, body)
            })
            .filter(|(_, body)| body["subscription_id"] == subject)
            .collect();
        if let Some(hit) = found.into_iter().nth(n - 1) {
            assert!(hit.0.verified, "signed like any delivery");
            assert_eq!(hit.0.header("x-lerian-subject"), subject);
            assert!(hit.1["occurred_at"].is_string(), "{}", hit.1);
            return hit;
        }
        let seen: Vec<String> = receiver.deliveries().iter().map(|d| d.header("x-lerian-event-type")).collect();
        assert!(tokio::time::Instant::now() < end, "no {kind} #{n} about {subject}; got {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn every_operational_event_reaches_a_subscriber_with_its_payload(backend: Backend) {
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"),
            ("STREAMING_HUB_RETRY_CURVE", "0s"),
            ("STREAMING_HUB_BREAKER_FAILURES", "1"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let ops_rx = Receiver::start(Script::Ok).await;
    let ops = webhook(&hub, &key, &ops_rx, json!(["streaming_hub.*"])).await;
    let bad_rx = Receiver::start(Script::Fail).await;
    // It wants everything, operational events included.
    let flaky = webhook(&hub, &key, &bad_rx, json!(["*.*", "streaming_hub.*"])).await;
    let (_, ok) = notice(&ops_rx, "verification_succeeded", &flaky, 1).await;
    assert_eq!(ok["subscription_id"], flaky.as_str());

    // One failed attempt on a one-attempt curve: dead-lettered, and the breaker opens.
    let event = Event::new("t1");
    assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);
    let (dead, body) = notice(&ops_rx, "job_dead_lettered", &flaky, 1).await;
    assert_eq!(body["event_id"], event.id().to_string(), "{body}");
    assert_eq!(body["event_type"], "loan_application.approved", "{body}");
    assert_eq!(body["attempts"], 1, "{body}");
    assert!(body["job_id"].is_string() && body["reason"].is_string(), "{body}");
    notice(&ops_rx, "breaker_opened", &flaky, 1).await;
    // The failing subscription wants `streaming_hub.*` but never gets news of its own failure.
    let (_, detail) = hub.get(&key, &format!("/v1/events/{}", dead.header("x-lerian-event-id"))).await;
    let of_flaky = detail["subscriptions"]
        .as_array()
        .expect("subs")
        .iter()
        .find(|s| s["subscription_id"] == flaky.as_str())
        .cloned();
    assert_eq!(of_flaky.expect("listed: its filter wants it")["state"], "none", "{detail}");
    assert_eq!(detail["event"]["source"], "streaming_hub");

    // A destination that does not answer fails its first verification.
    let closed = crate::support::closed_url();
    let nowhere = hub
        .subscribe(&key, json!({"name": "nowhere", "event_types": ["*.*"], "sink": {"type": "webhook", "url": closed}}))
        .await;
    let (_, failed) = notice(&ops_rx, "verification_failed", nowhere["id"].as_str().expect("id"), 1).await;
    assert_eq!(failed["error"], hub_sinks::NOT_REACHED, "{failed}");

    // Verified again on demand.
    let path = format!("/v1/subscriptions/{flaky}");
    bad_rx.set_script(Script::Ok);
    let (status, _) = hub.post_json(&key, &format!("{path}/verify"), &json!({})).await;
    assert_eq!(status, StatusCode::OK);
    notice(&ops_rx, "verification_succeeded", &flaky, 2).await;

    // After the cool-down a delivery gets through and the breaker closes.
    hub.clock.advance(Duration::from_secs(60));
    assert_eq!(hub.post_event(&key, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
    notice(&ops_rx, "breaker_closed", &flaky, 1).await;

    // A long, spread failure disables it.
    bad_rx.set_script(Script::Fail);
    for (n, hours) in [(2, 1), (3, 13), (4, 108)] {
        hub.clock.advance(Duration::from_secs(hours * 3600));
        assert_eq!(hub.post_event(&key, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
        notice(&ops_rx, "job_dead_lettered", &flaky, n).await;
    }
    let (_, disabled) = notice(&ops_rx, "subscription_disabled", &flaky, 1).await;
    assert!(disabled["reason"].as_str().expect("reason").starts_with("auto-disabled"), "{disabled}");

    // A replay's end, about the subscription that asked.
    let (status, replay) = hub
        .post_json(&key, &format!("/v1/subscriptions/{ops}/replay"), &json!({"since": "2999-01-01T00:00:00Z"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{replay}");
    let (_, finished) = notice(&ops_rx, "replay_finished", &ops, 1).await;
    assert_eq!(finished["replay_id"], replay["replay_id"]);
    assert_eq!((finished["state"].as_str(), finished["created"].as_u64()), (Some("done"), Some(0)));
}

async fn producers_cannot_send_operational_events(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let forged = Event::of("t1", "streaming_hub", "subscription_disabled");
    let (status, body) = hub.post_event(&key, &forged).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().expect("message").starts_with("ce-resourcetype"), "{body}");
    let (_, log) = hub.get(&key, "/v1/events").await;
    assert_eq!(log["items"], json!([]), "nothing stored");
}
