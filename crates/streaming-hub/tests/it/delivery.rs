//! Push delivery end to end (SPEC §3): real receivers on loopback, the real dispatcher, both
//! backends. Every rule has a test that fails if it breaks; none asserts a duration.

use std::collections::HashSet;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::on_both_backends;
use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, TestHub};

on_both_backends!(
    a_receiver_failing_twice_gets_the_event_three_times,
    a_receiver_that_always_fails_ends_dead_lettered_and_can_be_redriven,
    every_delivery_is_signed_and_a_rotation_signs_with_both_secrets,
    a_webhooks_basic_auth_is_sent_sealed_and_removed_with_the_auth,
    a_subscriptions_max_in_flight_holds_at_its_receiver,
    a_receiver_that_serves_few_at_once_is_not_flooded,
    a_receivers_declared_rate_is_never_exceeded,
    limits_are_validated_changed_and_shown,
    an_open_breaker_holds_jobs_back_but_lets_the_last_attempt_through,
    auto_disable_needs_a_long_spread_failure_and_verify_recovers,
    every_subscription_an_event_matches_gets_it_once,
    paused_subscriptions_of_many_tenants_never_stop_another_tenants_deliveries,
    a_changed_destination_holds_events_until_verified,
);

const WAIT: Duration = Duration::from_secs(20);

/// Fast retries, a quick idle loop.
fn fast(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut vars =
        vec![("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s,20ms,20ms,20ms")];
    vars.extend_from_slice(extra);
    vars
}

/// A verified webhook subscription to `receiver`, which trusts its secret.
async fn webhook(hub: &TestHub, key: &str, receiver: &Receiver, types: &[&str]) -> Value {
    let sub = hub
        .subscribe(key, json!({"name": "hook", "event_types": types, "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    receiver.trust(sub["signing_secret"].as_str().expect("secret"));
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(key, &id).await;
    sub
}

/// Polls the deliveries of a subscription until `done` holds, with a deadline.
async fn deliveries_until(hub: &TestHub, key: &str, sub: &Value, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let path = format!("/v1/subscriptions/{}/deliveries", sub["id"].as_str().expect("id"));
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, page) = hub.get(key, &path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let items = page["items"].as_array().expect("items").clone();
        if done(&items) {
            return items;
        }
        assert!(tokio::time::Instant::now() < end, "deliveries never reached the expected state: {items:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_receiver_failing_twice_gets_the_event_three_times(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::FailFirst(2)).await;
    let sub = webhook(&hub, &key, &receiver, &["loan_application.*"]).await;
    let event = Event::new("t1").body(br#"{"amount":42}"#.to_vec());
    assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);

    let got = receiver.wait_for(3, WAIT).await;
    assert_eq!(got.len(), 3);
    assert!(
        got.iter().all(|d| d.header("x-lerian-event-id") == event.id().to_string()),
        "the same event id every time"
    );
    let delivery_ids: HashSet<String> = got.iter().map(|d| d.header("x-lerian-delivery-id")).collect();
    assert_eq!(delivery_ids.len(), 3, "a new delivery id per attempt");
    let attempts: Vec<String> = got.iter().map(|d| d.header("x-lerian-attempt")).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    assert!(got.iter().all(|d| d.verified && d.body == br#"{"amount":42}"#), "signed, exact body");

    let items = deliveries_until(&hub, &key, &sub, |i| i.len() == 1 && i[0]["state"] == "succeeded").await;
    let log = items[0]["attempt_log"].as_array().expect("log");
    let outcomes: Vec<&str> = log.iter().map(|a| a["outcome"].as_str().expect("outcome")).collect();
    assert_eq!(outcomes, ["failed", "failed", "delivered"]);
    assert_eq!(log[0]["status_code"], 500);
    assert_eq!(items[0]["attempts"], 3);
    // No further delivery follows a success.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(receiver.deliveries().len(), 3);
}

async fn a_receiver_that_always_fails_ends_dead_lettered_and_can_be_redriven(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Fail).await;
    let sub = webhook(&hub, &key, &receiver, &["*.*"]).await;
    hub.post_event(&key, &Event::new("t1")).await;
    let items = deliveries_until(&hub, &key, &sub, |i| i.len() == 1 && i[0]["state"] == "dead").await;
    assert_eq!(items[0]["attempts"], 4, "the whole (shortened) curve");
    assert!(items[0]["last_error"].as_str().expect("error").contains("attempts exhausted"), "{}", items[0]);
    assert_eq!(receiver.deliveries().len(), 4);
    let path = format!("/v1/subscriptions/{}/deliveries?state=dead", sub["id"].as_str().expect("id"));
    assert_eq!(hub.get(&key, &path).await.1["items"].as_array().expect("items").len(), 1);

    receiver.set_script(Script::Ok);
    let redrive = format!("/v1/subscriptions/{}/redrive", sub["id"].as_str().expect("id"));
    let (status, answer) = hub.post_json(&key, &redrive, &json!({})).await;
    assert_eq!((status, answer), (StatusCode::OK, json!({"redriven": 1})));
    let items = deliveries_until(&hub, &key, &sub, |i| i[0]["state"] == "succeeded").await;
    assert_eq!(items[0]["attempts"], 1, "a redriven job starts a fresh curve");
    assert_eq!(receiver.deliveries().len(), 5);
    let (_, again) = hub.post_json(&key, &redrive, &json!({})).await;
    assert_eq!(again, json!({"redriven": 0}));
}

/// `sink.auth` through the API: deliveries carry it, no answer and no stored byte shows the
/// password, and a sink given again without `auth` sends none.
async fn a_webhooks_basic_auth_is_sent_sealed_and_removed_with_the_auth(backend: Backend) {
    use base64::Engine as _;
    const PASSWORD: &str = "pw-9d2f-c0ffee";
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let auth = json!({"type": "basic", "username": "hub", "password": PASSWORD});
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "hook", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url, "auth": auth}}),
        )
        .await;
    receiver.trust(sub["signing_secret"].as_str().expect("secret"));
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(&key, &id).await;
    assert_eq!(sub["sink"]["auth"], json!({"type": "basic", "username": "hub"}), "{sub}");

    hub.post_event(&key, &Event::new("t1")).await;
    let got = receiver.wait_for(1, WAIT).await.remove(0);
    let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("hub:{PASSWORD}")));
    assert_eq!(got.header("authorization"), expected);
    assert!(got.verified, "signed as well");

    let path = format!("/v1/subscriptions/{id}");
    let (_, read) = hub.get(&key, &path).await;
    let (_, listed) = hub.get(&key, "/v1/subscriptions").await;
    for answer in [&sub, &read, &listed] {
        assert!(!answer.to_string().contains(PASSWORD), "an answer shows the password: {answer}");
    }
    let raw = hub.raw_table_bytes("subscriptions").await;
    assert!(!raw.windows(PASSWORD.len()).any(|w| w == PASSWORD.as_bytes()), "the database holds it in clear");

    // The sink given again without `auth`: no authentication, the sealed password gone.
    let plain = json!({"sink": {"type": "webhook", "url": receiver.url}});
    let (status, patched) = hub.patch_json(&key, &path, &plain).await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert!(patched["sink"].get("auth").is_none(), "{patched}");
    assert_eq!(patched["credentials_set"], false, "{patched}");
    hub.wait_until_active(&key, &id).await;
    hub.post_event(&key, &Event::new("t1")).await;
    let second = receiver.wait_for(2, WAIT).await.remove(1);
    assert!(second.verified);
    assert_eq!(second.header("authorization"), "", "no credentials after the auth is removed");
}

async fn every_delivery_is_signed_and_a_rotation_signs_with_both_secrets(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let sub = webhook(&hub, &key, &receiver, &["*.*"]).await;
    let old = sub["signing_secret"].as_str().expect("secret").to_owned();
    hub.post_event(&key, &Event::new("t1")).await;
    let first = receiver.wait_for(1, WAIT).await.remove(0);
    assert!(first.verified);
    assert_eq!(first.headers.get_all("x-webhook-signature").iter().count(), 1);

    let rotate = format!("/v1/subscriptions/{}/rotate-secret", sub["id"].as_str().expect("id"));
    let (status, rotated) = hub.post_json(&key, &rotate, &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new = rotated["signing_secret"].as_str().expect("new secret").to_owned();
    assert!(new.starts_with("whsec_") && new != old);
    let expires: chrono::DateTime<chrono::Utc> =
        rotated["previous_secret_expires_at"].as_str().expect("expiry").parse().expect("time");
    let overlap = expires - chrono::Utc::now();
    assert!(overlap > chrono::Duration::hours(23) && overlap <= chrono::Duration::hours(24), "{overlap}");

    hub.post_event(&key, &Event::new("t1")).await;
    let second = receiver.wait_for(2, WAIT).await.remove(1);
    let ts: i64 = second.header("x-webhook-timestamp").parse().expect("timestamp");
    let sigs: Vec<String> =
        second.headers.get_all("x-webhook-signature").iter().map(|v| v.to_str().expect("ascii").to_owned()).collect();
    assert_eq!(sigs.len(), 2, "two signature headers during the overlap");
    assert!(hub_core::signature::verify(&new, ts, &second.body, &sigs[0]), "the first verifies with the new secret");
    assert!(hub_core::signature::verify(&old, ts, &second.body, &sigs[1]), "the second with the previous one");

    // After the overlap only the new secret signs.
    hub.clock.advance(Duration::from_secs(25 * 3600));
    hub.post_event(&key, &Event::new("t1")).await;
    let third = receiver.wait_for(3, WAIT).await.remove(2);
    let ts: i64 = third.header("x-webhook-timestamp").parse().expect("timestamp");
    let sigs: Vec<String> =
        third.headers.get_all("x-webhook-signature").iter().map(|v| v.to_str().expect("ascii").to_owned()).collect();
    assert_eq!(sigs.len(), 1);
    assert!(hub_core::signature::verify(&new, ts, &third.body, &sigs[0]));
}

async fn every_subscription_an_event_matches_gets_it_once(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let receivers =
        [Receiver::start(Script::Ok).await, Receiver::start(Script::Ok).await, Receiver::start(Script::Ok).await];
    for receiver in &receivers {
        webhook(&hub, &key, receiver, &["loan_application.*"]).await;
    }
    // The jobs of one event are usually claimed together: each must get the event.
    let events: Vec<Event> = (0..5).map(|_| Event::new("t1")).collect();
    for event in &events {
        assert_eq!(hub.post_event(&key, event).await.0, StatusCode::ACCEPTED);
    }
    let want: HashSet<String> = events.iter().map(|e| e.id().to_string()).collect();
    for receiver in &receivers {
        let got = receiver.wait_for(5, WAIT).await;
        let ids: Vec<String> = got.iter().map(|d| d.header("x-lerian-event-id")).collect();
        assert_eq!(ids.iter().cloned().collect::<HashSet<_>>(), want, "every event, to every subscription");
        assert_eq!(ids.len(), 5, "each once: {ids:?}");
        assert!(got.iter().all(|d| d.verified));
    }
}

async fn a_subscriptions_max_in_flight_holds_at_its_receiver(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let slow = Receiver::start(Script::Slow(Duration::from_millis(700))).await;
    let fast_rx = Receiver::start(Script::Ok).await;
    let sub = hub
        .subscribe(
            &key,
            json!({"name": "capped", "event_types": ["slow.*"], "limits": {"max_in_flight": 2},
                   "sink": {"type": "webhook", "url": slow.url}}),
        )
        .await;
    assert_eq!(sub["limits"], json!({"max_in_flight": 2, "per_second": null}));
    slow.trust(sub["signing_secret"].as_str().expect("secret"));
    hub.wait_until_active(&key, sub["id"].as_str().expect("id")).await;
    webhook(&hub, &key, &fast_rx, &["fast.*"]).await;
    for _ in 0..12 {
        hub.post_event(&key, &Event::of("t1", "slow", "happened")).await;
    }
    for _ in 0..20 {
        hub.post_event(&key, &Event::of("t1", "fast", "happened")).await;
    }
    fast_rx.wait_for(20, WAIT).await;
    assert!(slow.deliveries().len() < 12, "the fast destination finished while the capped one still had work");
    slow.wait_for(12, WAIT).await;
    assert_eq!(slow.max_in_flight(), 2, "the receiver saw at most (and at some point) two at once");
}

async fn a_receiver_that_serves_few_at_once_is_not_flooded(backend: Backend) {
    // Eight attempts each, and a breaker that does not open on the refusals this test counts.
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"),
            ("STREAMING_HUB_RETRY_CURVE", "0s,50ms,50ms,50ms,50ms,50ms,50ms,50ms"),
            ("STREAMING_HUB_BREAKER_FAILURES", "1000"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let rx = Receiver::start(Script::Capacity(3, Duration::from_millis(100))).await;
    webhook(&hub, &key, &rx, &["loan.*"]).await;
    let n = 40;
    for _ in 0..n {
        hub.post_event(&key, &Event::of("t1", "loan", "approved")).await;
    }
    let end = tokio::time::Instant::now() + WAIT * 2;
    while rx.accepted().len() < n {
        assert!(tokio::time::Instant::now() < end, "only {} of {n} accepted", rx.accepted().len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ids: HashSet<String> = rx.accepted().iter().map(|d| d.header("x-lerian-event-id")).collect();
    assert_eq!(ids.len(), n, "every event accepted, each once");
    // A fixed eight in flight against three would have most attempts refused; the allowance
    // halves on each round of 503s and regrows one at a time.
    assert!(rx.refused() < n / 2, "{} attempts refused for {n} events", rx.refused());
}

async fn a_receivers_declared_rate_is_never_exceeded(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let rx = Receiver::start(Script::Ok).await;
    rx.declare_rate("600");
    let sub = webhook(&hub, &key, &rx, &["loan.*"]).await;
    let id = sub["id"].as_str().expect("id");
    let (_, read) = hub.get(&key, &format!("/v1/subscriptions/{id}")).await;
    assert_eq!(read["allowed_rate"], json!(600.0), "{read}");
    for _ in 0..10 {
        hub.post_event(&key, &Event::of("t1", "loan", "approved")).await;
    }
    let got = rx.wait_for(10, WAIT).await;
    let at: Vec<std::time::Instant> = got.iter().map(|d| d.received_at).collect();
    // 600 a minute is 10 a second: over any stretch, at most that (and one at its start). The
    // times are the receiver's: a request may reach it up to 20 ms late (a new connection, a
    // busy machine) and the next on time, so each stretch is granted that.
    for (i, first) in at.iter().enumerate() {
        for (k, last) in at.iter().enumerate().skip(i + 1) {
            let span = last.duration_since(*first).as_secs_f64();
            assert!((k - i + 1) as f64 <= (span + 0.02) * 10.0 + 1.05, "{} deliveries in {span:.3} s", k - i + 1);
        }
    }
}

async fn limits_are_validated_changed_and_shown(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let rx = Receiver::start(Script::Ok).await;
    let sub = webhook(&hub, &key, &rx, &["loan.*"]).await;
    assert_eq!(sub["limits"], json!({"max_in_flight": null, "per_second": null}));
    let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
    for (limits, field) in [
        (json!({"max_in_flight": 0}), "limits.max_in_flight"),
        (json!({"max_in_flight": 5000}), "limits.max_in_flight"),
        (json!({"per_second": -1}), "limits.per_second"),
        (json!({"per_second": "fast"}), "limits.per_second"),
        (json!({"burst": 3}), "limits"),
        (json!("many"), "limits"),
    ] {
        let (status, body) = hub.patch_json(&key, &path, &json!({ "limits": limits })).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{limits}: {body}");
        assert!(body["message"].as_str().unwrap_or_default().contains(field), "{limits}: {body}");
    }
    let (status, body) = hub.patch_json(&key, &path, &json!({"limits": {"per_second": 2.5}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["limits"], json!({"max_in_flight": null, "per_second": 2.5}));
    let (_, listed) = hub.get(&key, "/v1/subscriptions").await;
    let item = &listed["items"][0];
    assert_eq!(item["limits"]["per_second"], json!(2.5));
    assert_eq!(item["health"]["delivery"]["rate_per_second"], json!(2.5), "{item}");
    let (status, body) = hub.patch_json(&key, &path, &json!({"limits": null})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["limits"], json!({"max_in_flight": null, "per_second": null}));
    // A pull consumer reads at its own pace.
    let (status, body) = hub
        .post_json(
            &key,
            "/v1/subscriptions",
            &json!({"name": "p", "event_types": ["loan.*"], "sink": {"type": "pull"},
                                              "limits": {"max_in_flight": 3}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

async fn an_open_breaker_holds_jobs_back_but_lets_the_last_attempt_through(backend: Backend) {
    // One failure opens the breaker: deterministic whatever order attempts run in.
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"),
            ("STREAMING_HUB_RETRY_CURVE", "0s,0s"),
            ("STREAMING_HUB_BREAKER_FAILURES", "1"),
            ("STREAMING_HUB_BREAKER_COOLDOWN", "1h"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Fail).await;
    let sub = webhook(&hub, &key, &receiver, &["*.*"]).await;
    // The first attempt fails and opens the breaker; the second is the job's last and still runs.
    hub.post_event(&key, &Event::new("t1")).await;
    deliveries_until(&hub, &key, &sub, |i| i.len() == 1 && i[0]["state"] == "dead").await;
    assert_eq!(receiver.deliveries().len(), 2, "the last attempt ran through the open breaker");

    // A new job's first attempt is not its last: it waits for the cool-down without an attempt.
    hub.post_event(&key, &Event::new("t1")).await;
    let later = chrono::Utc::now() + chrono::Duration::minutes(30);
    let items = deliveries_until(&hub, &key, &sub, |i| {
        i.len() == 2
            && i[1]["state"] == "pending"
            && i[1]["next_attempt_at"]
                .as_str()
                .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
                .is_some_and(|t| t > later)
    })
    .await;
    assert_eq!(items[1]["attempts"], 0, "holding back spends no attempt");
    assert_eq!(receiver.deliveries().len(), 2, "no attempt while open");

    // After the cool-down one probe goes through; it succeeds and the breaker closes.
    receiver.set_script(Script::Ok);
    hub.clock.advance(Duration::from_secs(3601));
    deliveries_until(&hub, &key, &sub, |i| i.len() == 2 && i[1]["state"] == "succeeded").await;
    hub.post_event(&key, &Event::new("t1")).await;
    deliveries_until(&hub, &key, &sub, |i| i.len() == 3 && i[2]["state"] == "succeeded").await;
}

async fn auto_disable_needs_a_long_spread_failure_and_verify_recovers(backend: Backend) {
    let hub = TestHub::start_with(
        backend,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s")],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Fail).await;
    let sub = webhook(&hub, &key, &receiver, &["*.*"]).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/subscriptions/{id}");
    let fail_once = async |n: usize| {
        hub.post_event(&key, &Event::new("t1")).await;
        receiver.wait_for(n, WAIT).await;
        deliveries_until(&hub, &key, &sub, |i| i.len() == n && i[n - 1]["state"] == "dead").await;
    };
    fail_once(1).await;
    hub.clock.advance(Duration::from_secs(13 * 3600));
    fail_once(2).await;
    assert_eq!(hub.get(&key, &path).await.1["enabled"], true, "spread, but not yet continuous for 120 h");
    hub.clock.advance(Duration::from_secs(108 * 3600));
    fail_once(3).await;

    let (_, disabled) = hub.get(&key, &path).await;
    assert_eq!(disabled["enabled"], false, "{disabled}");
    assert!(disabled["disabled_reason"].as_str().expect("reason").starts_with("auto-disabled"), "{disabled}");
    assert_eq!(disabled["verification_state"], "active", "auto-disable never touches verification");
    // The hub's own change is in the tenant's audit, with the hub as the one who made it.
    crate::support::until("the auto-disable in the audit", WAIT, async || {
        let (_, audit) = hub.get(&key, "/v1/audit").await;
        let items = audit["items"].as_array().cloned().unwrap_or_default();
        items
            .iter()
            .any(|c| c["change"]["action"] == "subscription.auto_disabled" && c["actor_label"] == "the hub")
            .then_some(())
    })
    .await;
    // A disabled subscription matches nothing new.
    hub.post_event(&key, &Event::new("t1")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(receiver.deliveries().len(), 3);

    // Recovery in place: a successful probe re-enables it and clears the period.
    receiver.set_script(Script::Ok);
    let (status, verified) = hub.post_json(&key, &format!("{path}/verify"), &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{verified}");
    assert_eq!((verified["enabled"].clone(), verified["disabled_reason"].clone()), (json!(true), Value::Null));
    assert_eq!(verified["verification_state"], "active");
    hub.post_event(&key, &Event::new("t1")).await;
    receiver.wait_for(4, WAIT).await;
}

#[tokio::test]
async fn one_success_clears_the_failure_period() {
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s")],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Fail).await;
    let sub = webhook(&hub, &key, &receiver, &["*.*"]).await;
    let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
    hub.post_event(&key, &Event::new("t1")).await;
    receiver.wait_for(1, WAIT).await;
    hub.clock.advance(Duration::from_secs(60 * 3600));
    receiver.set_script(Script::Ok);
    hub.post_event(&key, &Event::new("t1")).await;
    deliveries_until(&hub, &key, &sub, |i| i.len() == 2 && i[1]["state"] == "succeeded").await;
    receiver.set_script(Script::Fail);
    hub.clock.advance(Duration::from_secs(70 * 3600));
    hub.post_event(&key, &Event::new("t1")).await;
    deliveries_until(&hub, &key, &sub, |i| i.len() == 3 && i[2]["state"] == "dead").await;
    assert_eq!(hub.get(&key, &path).await.1["enabled"], true, "130 h of flapping is not one continuous failure");
}

#[tokio::test]
async fn a_failed_verification_answers_422_and_marks_the_subscription_failed() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    let sub = webhook(&hub, &key, &receiver, &["*.*"]).await;
    // Point it at a closed port.
    let closed = crate::support::closed_url();
    let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
    hub.patch_json(&key, &path, &json!({"sink": {"type": "webhook", "url": closed}})).await;
    let (status, answer) = hub.post_json(&key, &format!("{path}/verify"), &json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["title"], "verification_failed");
    assert_eq!(answer["message"], hub_sinks::NOT_REACHED, "{answer}");
    let (_, read) = hub.get(&key, &path).await;
    assert_eq!(read["verification_state"], "failed");
    assert!(read["verification_error"].is_string());
}

/// A tenant cannot map the internal network through verification: a name that does not
/// resolve, one that resolves to a private address and a port that refuses connections all
/// answer the same message (the cause is in the operator's log and metrics).
#[tokio::test]
async fn verification_tells_a_tenant_no_cause_of_an_unreached_destination() {
    let hub = TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "false")]).await;
    let key = hub.tenant_key("t1").await;
    let create = |url: &str| json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": url}});
    let unresolved = hub.subscribe(&key, create("https://no-such-host.invalid/h")).await;
    let private = hub.subscribe(&key, create("https://private-name.invalid/h")).await;
    // The name now resolves to loopback, as an internal name would (or DNS changed under it).
    hub.execute_raw(
        "",
        "UPDATE subscriptions SET sink_config = replace(sink_config, 'private-name.invalid', 'localhost') WHERE id = CAST(?1 AS TEXT)",
        private["id"].as_str().expect("id").as_bytes(),
    )
    .await;
    let mut messages = Vec::new();
    for sub in [&unresolved, &private] {
        let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
        let (status, answer) = hub.post_json(&key, &format!("{path}/verify"), &json!({})).await;
        assert_eq!((status, answer["title"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("verification_failed")));
        messages.push(answer["message"].clone());
        let (_, read) = hub.get(&key, &path).await;
        messages.push(read["verification_error"].clone());
    }
    assert!(messages.iter().all(|m| m == hub_sinks::NOT_REACHED), "{messages:?}");
    let text = hub.client.get(hub.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    assert!(
        text.lines()
            .any(|l| l.starts_with("streaming_hub_verification_failures_total") && l.contains("kind=\"forbidden\"")),
        "the operator sees the cause"
    );
}

#[tokio::test]
async fn deliveries_and_redrive_check_their_parameters() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let sub = hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let base = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
    let (status, body) = hub.get(&key, &format!("{base}/deliveries?state=lost")).await;
    assert_eq!((status, body["title"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_query")));
    let (status, body) = hub.post_json(&key, &format!("{base}/redrive"), &json!({"since": "yesterday"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = hub.post_json(&key, &format!("{base}/rotate-secret"), &json!({})).await;
    assert_eq!((status, body["title"].as_str()), (StatusCode::CONFLICT, Some("not_webhook_subscription")));
}

#[tokio::test]
async fn a_notification_wakes_another_replicas_dispatcher_at_once() {
    // Ingest on one hub, deliver on another, one PostgreSQL database. The delivering hub's idle
    // fallback is ten minutes: only the NOTIFY can bring the job to it within the deadline.
    let ingest = TestHub::start_with(Backend::Postgres, &[("STREAMING_HUB_ROLE", "ingest")]).await;
    let mut vars = ingest.vars.clone();
    vars.insert("STREAMING_HUB_ROLE".into(), "delivery".into());
    vars.insert("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS".into(), "600000".into());
    let delivery = TestHub::start_vars(vars).await;
    let key = ingest.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    webhook(&ingest, &key, &receiver, &["*.*"]).await;
    // Let the delivering dispatcher go idle first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    hub_post(&ingest, &key).await;
    receiver.wait_for(1, WAIT).await;
    drop(delivery);
}

async fn hub_post(hub: &TestHub, key: &str) {
    assert_eq!(hub.post_event(key, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn jobs_by_state_are_exported_as_a_gauge() {
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[("STREAMING_HUB_ROLE", "ingest"), ("STREAMING_HUB_METRICS_INTERVAL", "100ms")],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Ok).await;
    webhook(&hub, &key, &receiver, &["*.*"]).await;
    for _ in 0..3 {
        hub_post(&hub, &key).await;
    }
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let text = hub.client.get(hub.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
        // One pass sets the job gauges, then the inbox size: wait for a pass that set both. The
        // inbox holds the three events and the `verification_succeeded` notice of the webhook.
        let has = |line: &str| text.lines().any(|l| l == line);
        if has("streaming_hub_delivery_jobs{state=\"pending\"} 3") && has("streaming_hub_inbox_events 4") {
            assert!(text.contains("streaming_hub_delivery_jobs{state=\"dead\"} 0"), "every state is exported");
            break;
        }
        assert!(tokio::time::Instant::now() < end, "no pending gauge of 3 and inbox size of 4 in {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sixteen tenants and more, each with work for a subscription that was paused after the work
/// was created, never stop another tenant's deliveries: that work is held, not claimed, and
/// released on resume.
async fn paused_subscriptions_of_many_tenants_never_stop_another_tenants_deliveries(backend: Backend) {
    // An ingest-only hub takes the events, so that each tenant's job exists before the pause.
    let ingest = TestHub::start_with(backend, &fast(&[("STREAMING_HUB_ROLE", "ingest")])).await;
    let receiver = Receiver::start(Script::Ok).await;
    let mut paused = Vec::new();
    for t in 0..20 {
        let tenant = format!("p{t:02}");
        let key = ingest.tenant_key(&tenant).await;
        let sub = webhook(&ingest, &key, &receiver, &["*.*"]).await;
        assert_eq!(ingest.post_event(&key, &Event::new(&tenant)).await.0, StatusCode::ACCEPTED);
        let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
        let (status, body) = ingest.patch_json(&key, &path, &json!({"enabled": false})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        deliveries_until(&ingest, &key, &sub, |items| items.len() == 1 && items[0]["state"] == "held").await;
        paused.push((key, sub));
    }
    let vars = ingest.vars.clone();
    drop(ingest);
    let mut all = vars;
    all.insert("STREAMING_HUB_ROLE".into(), "all".into());
    let hub = TestHub::start_vars(all).await;
    let key = hub.tenant_key("zz").await;
    let live = Receiver::start(Script::Ok).await;
    webhook(&hub, &key, &live, &["*.*"]).await;
    for _ in 0..10 {
        assert_eq!(hub.post_event(&key, &Event::new("zz")).await.0, StatusCode::ACCEPTED);
    }
    assert_eq!(live.wait_for(10, WAIT).await.len(), 10);
    assert!(receiver.deliveries().is_empty(), "nothing went to a paused subscription");
    // Resuming one releases its job, and it is delivered.
    let (key, sub) = &paused[0];
    let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));
    assert_eq!(hub.patch_json(key, &path, &json!({"enabled": true})).await.0, StatusCode::OK);
    deliveries_until(&hub, key, sub, |items| items.len() == 1 && items[0]["state"] == "succeeded").await;
    assert_eq!(receiver.deliveries().len(), 1, "only the resumed subscription delivered");
}

/// A new timeout keeps a subscription active; a new URL makes it pending until the new
/// destination is verified, and the events that arrive meanwhile are held, then delivered there.
async fn a_changed_destination_holds_events_until_verified(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast(&[])).await;
    let key = hub.tenant_key("t1").await;
    let first = Receiver::start(Script::Ok).await;
    let sub = webhook(&hub, &key, &first, &["*.*"]).await;
    let path = format!("/v1/subscriptions/{}", sub["id"].as_str().expect("id"));

    let (status, changed) =
        hub.patch_json(&key, &path, &json!({"sink": {"type": "webhook", "url": first.url, "timeout_ms": 2000}})).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["verification_state"], "active", "a timeout proves nothing new is needed");
    assert_eq!(hub.post_event(&key, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
    first.wait_for(1, WAIT).await;

    let second = Receiver::start(Script::Ok).await;
    second.trust(sub["signing_secret"].as_str().expect("secret"));
    second.open_probes(false);
    let (status, moved) = hub.patch_json(&key, &path, &json!({"sink": {"type": "webhook", "url": second.url}})).await;
    assert_eq!(status, StatusCode::OK, "{moved}");
    assert_eq!(moved["verification_state"], "pending");
    for _ in 0..5 {
        assert_eq!(hub.post_event(&key, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
    }
    deliveries_until(&hub, &key, &sub, |items| items.iter().filter(|i| i["state"] == "held").count() == 5).await;
    assert!(second.deliveries().is_empty(), "nothing goes to an unverified destination");
    second.open_probes(true);
    hub.wait_until_active(&key, sub["id"].as_str().expect("id")).await;
    let got = second.wait_for(5, WAIT).await;
    assert!(got.iter().all(|d| d.verified), "signed with the subscription's secret");
    assert_eq!(first.deliveries().len(), 1, "the old destination got nothing more");
}
