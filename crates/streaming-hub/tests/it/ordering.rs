//! Ordering by key (SPEC §9) through the API on both backends: a webhook ordered by key gets each
//! key's events one at a time in seq order while a failing key holds back only itself; the
//! blocked key is shown with its head; a dead letter releases its key and says which; invalid
//! `ordering` values are refused.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::on_both_backends;
use crate::receiver::{Delivery, Receiver, Script};
use crate::support::{Backend, Event, TestHub};

on_both_backends!(
    a_failing_key_holds_back_only_itself_and_each_key_arrives_in_order,
    a_dead_letter_releases_its_key_and_says_which,
    ordering_is_validated,
);

const WAIT: Duration = Duration::from_secs(30);

fn keyed(subject: &str, n: usize) -> Event {
    Event::new("t1").set("ce-subject", subject).body(json!({ "n": n }).to_string().into_bytes())
}

fn n_of(d: &Delivery) -> u64 {
    serde_json::from_slice::<Value>(&d.body).ok().and_then(|v| v["n"].as_u64()).unwrap_or(0)
}

/// The `n` of each delivery of `subject`, in arrival order.
fn arrivals(receiver: &Receiver, subject: &str) -> Vec<u64> {
    receiver.deliveries().iter().filter(|d| d.header("x-lerian-subject") == subject).map(n_of).collect()
}

async fn ordered_webhook(hub: &TestHub, key: &str, receiver: &Receiver) -> Value {
    let sub = hub
        .subscribe(
            key,
            json!({"name": "ordered", "event_types": ["*.*"], "ordering": "key",
                   "sink": {"type": "webhook", "url": receiver.url}}),
        )
        .await;
    assert_eq!(sub["ordering"], "key", "{sub}");
    receiver.trust(sub["signing_secret"].as_str().expect("secret"));
    hub.wait_until_active(key, sub["id"].as_str().expect("id")).await;
    sub
}

async fn until<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
    crate::support::until(what, WAIT, probe).await
}

async fn a_failing_key_holds_back_only_itself_and_each_key_arrives_in_order(backend: Backend) {
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"),
            ("STREAMING_HUB_RETRY_CURVE", "0s,300ms,300ms,300ms,300ms,300ms,300ms,300ms"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::FailSubject("loan-a".to_owned())).await;
    let sub = ordered_webhook(&hub, &key, &receiver).await;
    for n in 1..=5 {
        for subject in ["loan-a", "loan-b", "loan-c"] {
            assert_eq!(hub.post_event(&key, &keyed(subject, n)).await.0, StatusCode::ACCEPTED);
        }
    }
    // b and c go through while a's first event is retried; a's others wait.
    until("b and c delivered", async || {
        (arrivals(&receiver, "loan-b").len() >= 5 && arrivals(&receiver, "loan-c").len() >= 5).then_some(())
    })
    .await;
    assert_eq!(arrivals(&receiver, "loan-b"), vec![1, 2, 3, 4, 5]);
    assert_eq!(arrivals(&receiver, "loan-c"), vec![1, 2, 3, 4, 5]);
    assert!(
        arrivals(&receiver, "loan-a").iter().all(|n| *n == 1),
        "only a's head was tried: {:?}",
        arrivals(&receiver, "loan-a")
    );

    let path = format!("/v1/subscriptions/{}/ordering", sub["id"].as_str().expect("id"));
    let (status, ordering) = hub.get(&key, &path).await;
    assert_eq!(status, StatusCode::OK, "{ordering}");
    assert_eq!(ordering["ordering"], "key");
    let blocked = ordering["blocked_keys"].as_array().expect("blocked");
    assert_eq!(blocked.len(), 1, "{ordering}");
    assert_eq!(blocked[0]["key"], "loan-a");
    assert_eq!(blocked[0]["waiting"], 4);
    assert!(blocked[0]["head"]["attempts"].as_i64().expect("attempts") >= 1, "{ordering}");
    let metrics = hub.client.get(hub.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    assert!(metrics.lines().any(|l| l.starts_with("streaming_hub_ordering_blocked_keys")), "the gauge is exported");

    // The receiver recovers: a's events follow, in order, each once delivered.
    receiver.set_script(Script::Ok);
    until("a delivered", async || {
        let a = arrivals(&receiver, "loan-a");
        (a.last() == Some(&5)).then_some(())
    })
    .await;
    let a = arrivals(&receiver, "loan-a");
    assert!(a.windows(2).all(|w| w[0] <= w[1]), "a's arrivals never go back: {a:?}");
    let mut distinct = a.clone();
    distinct.dedup();
    assert_eq!(distinct, vec![1, 2, 3, 4, 5]);
    let (_, ordering) = hub.get(&key, &path).await;
    assert_eq!(ordering["blocked_keys"], json!([]));
}

async fn a_dead_letter_releases_its_key_and_says_which(backend: Backend) {
    let hub = TestHub::start_with(
        backend,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s,20ms")],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let ops = hub
        .subscribe(
            &key,
            json!({"name": "ops", "event_types": ["streaming_hub.job_dead_lettered"], "sink": {"type": "pull"}}),
        )
        .await;
    let receiver = Receiver::start(Script::FailSubject("loan-a".to_owned())).await;
    ordered_webhook(&hub, &key, &receiver).await;
    for n in 1..=3 {
        assert_eq!(hub.post_event(&key, &keyed("loan-a", n)).await.0, StatusCode::ACCEPTED);
    }
    // Each dead letter lets the next event of the key go: all three are tried, twice each, in order.
    until("every a attempted twice", async || (arrivals(&receiver, "loan-a").len() >= 6).then_some(())).await;
    assert_eq!(arrivals(&receiver, "loan-a"), vec![1, 1, 2, 2, 3, 3]);
    // Reading a pull page acknowledges it: gather the notices page by page.
    let path = format!("/v1/subscriptions/{}/events?limit=100", ops["id"].as_str().expect("id"));
    let mut notices: Vec<Value> = Vec::new();
    until("three dead-letter notices", async || {
        let (_, page) = hub.get(&key, &path).await;
        notices.extend(page["items"].as_array().cloned().unwrap_or_default());
        (notices.len() >= 3).then_some(())
    })
    .await;
    assert!(notices.iter().all(|i| i["payload"]["ordering_key"] == "loan-a"), "{notices:#?}");
}

async fn ordering_is_validated(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let cases = [
        (json!({"type": "pull"}), json!("key"), "ordering: applies to push sinks"),
        (json!({"type": "pull"}), json!("fifo"), "ordering: must be \"none\" or \"key\""),
        (json!({"type": "pull"}), json!(1), "ordering: must be \"none\" or \"key\""),
    ];
    for (sink, ordering, message) in cases {
        let body = json!({"name": "x", "event_types": ["*.*"], "sink": sink, "ordering": ordering});
        let (status, answer) = hub.post_json(&key, "/v1/subscriptions", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert!(answer["message"].as_str().expect("message").starts_with(message), "{answer}");
    }
    let pull = hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    assert_eq!(pull["ordering"], "none");
    let path = format!("/v1/subscriptions/{}", pull["id"].as_str().expect("id"));
    let (status, answer) = hub.patch_json(&key, &path, &json!({"ordering": "key"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let receiver = Receiver::start(Script::Ok).await;
    let hook = hub
        .subscribe(&key, json!({"name": "h", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    let path = format!("/v1/subscriptions/{}", hook["id"].as_str().expect("id"));
    let (status, changed) = hub.patch_json(&key, &path, &json!({"ordering": "key"})).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["ordering"], "key");
}
