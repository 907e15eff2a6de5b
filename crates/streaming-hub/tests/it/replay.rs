//! The inbox as a feature (SPEC §8): the event log, replay into push and pull subscriptions, and
//! the recovery of a disabled subscription, on both backends, against real receivers.

use std::collections::HashSet;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::on_both_backends;
use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, TestHub};

on_both_backends!(
    a_new_webhook_subscription_replays_the_inbox_exactly_once,
    a_new_pull_subscription_replays_the_inbox_exactly_once,
    a_disabled_subscription_recovers_its_disabled_window_with_verify,
    the_event_log_pages_and_filters_the_inbox,
    an_event_shows_what_became_of_it_in_each_subscription,
    only_undelivered_gives_again_exactly_what_an_outage_cost,
    a_replays_own_filters_select_in_place_of_the_subscriptions,
    simulate_compares_a_draft_with_the_current_selection_and_changes_nothing,
);

const WAIT: Duration = Duration::from_secs(60);

fn fast() -> Vec<(&'static str, &'static str)> {
    vec![("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s")]
}

/// Posts `n` events of tenant t1, eight at a time; returns their ids in posting order.
async fn post_many(hub: &TestHub, key: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(8) {
        let events: Vec<Event> =
            chunk.iter().map(|i| Event::new("t1").body(format!(r#"{{"n":{i}}}"#).into_bytes())).collect();
        let posts = events.iter().map(|e| hub.post_event(key, e));
        for (status, body) in futures_util::future::join_all(posts).await {
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        }
        ids.extend(events.iter().map(|e| e.id().to_string()));
    }
    ids
}

/// Polls a replay until it is no longer running.
async fn replay_done(hub: &TestHub, key: &str, sub: &str, replay: &Value) -> Value {
    let path = format!("/v1/subscriptions/{sub}/replays/{}", replay["replay_id"].as_str().expect("replay_id"));
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, r) = hub.get(key, &path).await;
        assert_eq!(status, StatusCode::OK, "{r}");
        if r["state"] != "running" {
            return r;
        }
        assert!(tokio::time::Instant::now() < end, "the replay never finished: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn replay(hub: &TestHub, key: &str, sub: &str, window: Value) -> Value {
    let (status, r) = hub.post_json(key, &format!("/v1/subscriptions/{sub}/replay"), &window).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{r}");
    replay_done(hub, key, sub, &r).await
}

fn counts(r: &Value) -> (u64, u64, u64) {
    (
        r["matched"].as_u64().expect("matched"),
        r["created"].as_u64().expect("created"),
        r["skipped"].as_u64().expect("skipped"),
    )
}

/// A verified webhook subscription of `types` to `receiver`, which trusts its secret; its id.
pub async fn webhook(hub: &TestHub, key: &str, receiver: &Receiver, types: Value) -> String {
    let sub = hub
        .subscribe(key, json!({"name": "hook", "event_types": types, "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    receiver.trust(sub["signing_secret"].as_str().expect("secret"));
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(key, &id).await;
    id
}

fn event_ids(deliveries: &[crate::receiver::Delivery]) -> Vec<String> {
    deliveries.iter().map(|d| d.header("x-lerian-event-id")).collect()
}

/// A webhook subscription to `loan_application.*` events whose subject is `a`, verified; then
/// events with subjects a, b, b of its types and one b of another type: its receiver, its id and
/// the events.
async fn a_only(hub: &TestHub, key: &str) -> (Receiver, String, [Event; 4]) {
    let receiver = Receiver::start(Script::Ok).await;
    let sub = hub
        .subscribe(
            key,
            json!({"name": "a-only", "event_types": ["loan_application.*"], "filters": [{"sql": "subject = 'a'"}],
                "sink": {"type": "webhook", "url": receiver.url}}),
        )
        .await;
    let sub = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(key, &sub).await;
    let events = [
        Event::new("t1").set("ce-subject", "a"),
        Event::new("t1").set("ce-subject", "b"),
        Event::new("t1").set("ce-subject", "b"),
        Event::of("t1", "payment", "settled").set("ce-subject", "b"),
    ];
    for e in &events {
        assert_eq!(hub.post_event(key, e).await.0, StatusCode::ACCEPTED);
    }
    (receiver, sub, events)
}

/// A replay with filters of its own selects by them instead of the subscription's, within the
/// subscription's event types; bad filters are refused naming the filter.
async fn a_replays_own_filters_select_in_place_of_the_subscriptions(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast()).await;
    let key = hub.tenant_key("t1").await;
    let (receiver, sub, [a, b1, b2, _]) = a_only(&hub, &key).await;
    let first = receiver.wait_for(1, WAIT).await;
    assert_eq!(event_ids(&first), vec![a.id().to_string()], "the subscription's own filter");

    let (status, bad) = hub
        .post_json(
            &key,
            &format!("/v1/subscriptions/{sub}/replay"),
            &json!({"from_seq": 1, "filters": [{"sql": "subject ="}]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    assert!(bad["message"].as_str().expect("message").starts_with("filters[0]"), "{bad}");

    let done = replay(&hub, &key, &sub, json!({"from_seq": 1, "filters": [{"sql": "subject = 'b'"}]})).await;
    assert_eq!(done["filters"], json!([{"sql": "subject = 'b'"}]), "{done}");
    assert_eq!(counts(&done), (2, 2, 0), "the two b events of its types, not the payment: {done}");
    let got = receiver.wait_for(3, WAIT).await;
    let mut replayed = event_ids(&got[1..]);
    replayed.sort();
    let mut expected = vec![b1.id().to_string(), b2.id().to_string()];
    expected.sort();
    assert_eq!(replayed, expected);
    // Without filters of its own, the replay selects by the subscription's: a, delivered already.
    let plain = replay(&hub, &key, &sub, json!({"from_seq": 1})).await;
    assert_eq!(counts(&plain), (1, 0, 1), "{plain}");
}

/// `simulate` counts what a draft selection would have matched beside the current one, with the
/// differences sampled first, changes nothing, and agrees with a replay selecting by the draft.
async fn simulate_compares_a_draft_with_the_current_selection_and_changes_nothing(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast()).await;
    let key = hub.tenant_key("t1").await;
    let since = (chrono::Utc::now() - chrono::Duration::seconds(5)).to_rfc3339();
    let filters = json!([{"sql": "subject = 'a'"}]);
    let (receiver, sub, [a, b1, b2, _]) = a_only(&hub, &key).await;
    receiver.wait_for(1, WAIT).await;
    let path = format!("/v1/subscriptions/{sub}/simulate");
    let simulate = |body: Value| {
        let (hub, key, path) = (&hub, &key, &path);
        async move { hub.post_json(key, path, &body).await }
    };

    let draft = json!([{"sql": "subject IN ('a', 'b')"}]);
    let (status, got) = simulate(json!({"since": since, "filters": draft})).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    let count = |v: &Value, k: &str| v[k].as_u64().expect(k);
    assert_eq!(
        [count(&got, "current"), count(&got, "draft"), count(&got, "only_current"), count(&got, "only_draft")],
        [1, 3, 0, 2],
        "{got}"
    );
    // The window also holds the hub's own operational event of the verification, matched by neither.
    assert!(count(&got, "scanned") >= 4 && got["complete"] == true, "{got}");
    let samples: Vec<(String, String)> = got["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| (s["ce_id"].as_str().expect("id").to_owned(), s["in"].as_str().expect("in").to_owned()))
        .collect();
    assert_eq!(
        samples,
        vec![
            (b1.id().to_string(), "draft".to_owned()),
            (b2.id().to_string(), "draft".to_owned()),
            (a.id().to_string(), "both".to_owned())
        ],
        "differences first"
    );
    let (_, got) = simulate(
        json!({"since": since, "event_types": ["payment.*"], "filters": [{"sql": "subject = 'b'"}], "limit": 1}),
    )
    .await;
    assert_eq!(
        [count(&got, "current"), count(&got, "draft"), count(&got, "only_current"), count(&got, "only_draft")],
        [1, 1, 1, 1],
        "{got}"
    );
    assert_eq!(got["samples"].as_array().map(Vec::len), Some(1), "the limit");

    // What a replay selecting by the draft matches is what the simulation counted.
    let replayed = replay(&hub, &key, &sub, json!({"since": since, "filters": draft, "include_delivered": true})).await;
    assert_eq!(counts(&replayed).0, 3, "{replayed}");

    for (body, field) in [
        (json!({"filters": draft}), "since: is required"),
        (json!({"since": "yesterday"}), "since:"),
        (json!({"since": since, "until": "2000-01-01T00:00:00Z"}), "until:"),
        (json!({"since": since, "filters": [{"sql": "subject ="}]}), "filters[0]"),
        (json!({"since": since, "event_types": ["nope"]}), "event_types[0]"),
        (json!({"since": since, "limit": 0}), "limit:"),
    ] {
        let (status, err) = simulate(body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {err}");
        assert!(err["message"].as_str().expect("message").starts_with(field), "{body}: {err}");
    }
    let (_, read) = hub.get(&key, &format!("/v1/subscriptions/{sub}")).await;
    assert_eq!(read["filters"], filters, "nothing changed");
    assert_eq!(read["event_types"], json!(["loan_application.*"]));
}

fn urlencode(raw: &str) -> String {
    raw.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A receiver refuses one subject's events until they are dead-lettered; fixed, a replay with
/// `only_undelivered` over the whole window gives it exactly those events, once each, and nothing
/// it had (delivered) or never had (an event from before the subscription existed).
async fn only_undelivered_gives_again_exactly_what_an_outage_cost(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast()).await;
    let key = hub.tenant_key("t1").await;
    let since = chrono::Utc::now() - chrono::Duration::seconds(5);
    let before = Event::new("t1");
    assert_eq!(hub.post_event(&key, &before).await.0, StatusCode::ACCEPTED);
    let receiver = Receiver::start(Script::FailSubject("payment-7".to_owned())).await;
    let sub = webhook(&hub, &key, &receiver, json!(["*.*"])).await;
    let mut lost = Vec::new();
    for i in 0..6 {
        let event = if i % 3 == 0 { Event::new("t1").set("ce-subject", "payment-7") } else { Event::new("t1") };
        if i % 3 == 0 {
            lost.push(event.id().to_string());
        }
        assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);
    }
    // Four delivered, two dead-lettered (one attempt each on this curve).
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, dead) = hub.get(&key, &format!("/v1/subscriptions/{sub}/deliveries?state=dead")).await;
        if dead["items"].as_array().is_some_and(|d| d.len() == 2) && receiver.accepted().len() == 4 {
            break;
        }
        assert!(tokio::time::Instant::now() < end, "never 2 dead and 4 delivered: {dead}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    receiver.set_script(Script::Ok);

    // What was missed, listed: the two, oldest first, a page at a time.
    let undelivered = |query: String| {
        let (hub, key, sub) = (&hub, &key, &sub);
        async move {
            let (status, page) = hub.get(key, &format!("/v1/subscriptions/{sub}/undelivered?{query}")).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            page
        }
    };
    let since_q = format!("since={}", urlencode(&since.to_rfc3339()));
    let first = undelivered(format!("{since_q}&limit=1")).await;
    assert_eq!(first["items"][0]["ce_id"], lost[0].as_str(), "{first}");
    assert_eq!(first["items"][0]["state"], "dead");
    assert_eq!(first["items"][0]["attempts"], 1);
    assert!(first["items"][0]["last_error"].as_str().is_some_and(|e| e.contains("503")), "{first}");
    let cursor = first["next_cursor"].as_str().expect("a next page").to_owned();
    let second = undelivered(format!("{since_q}&limit=1&cursor={cursor}")).await;
    assert_eq!(second["items"][0]["ce_id"], lost[1].as_str(), "{second}");
    let rest =
        undelivered(format!("{since_q}&limit=5&cursor={}", second["next_cursor"].as_str().expect("cursor"))).await;
    assert_eq!(rest["items"], json!([]), "{rest}");
    let (status, bad) = hub.get(&key, &format!("/v1/subscriptions/{sub}/undelivered?since=yesterday")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert!(bad["message"].as_str().expect("message").starts_with("since:"), "{bad}");

    let both = json!({"since": since.to_rfc3339(), "only_undelivered": true, "include_delivered": true});
    let (status, body) = hub.post_json(&key, &format!("/v1/subscriptions/{sub}/replay"), &both).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().expect("message").starts_with("only_undelivered:"), "{body}");

    let window = json!({"since": since.to_rfc3339(), "only_undelivered": true});
    let done = replay(&hub, &key, &sub, window.clone()).await;
    assert_eq!(done["only_undelivered"], true, "{done}");
    assert_eq!(counts(&done), (7, 2, 5), "{done}");
    // Deliveries count the two refused ones too: wait for the two accepted again.
    let end = tokio::time::Instant::now() + WAIT;
    while receiver.accepted().len() < 6 {
        assert!(tokio::time::Instant::now() < end, "the replayed events never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = receiver.deliveries();
    let mut again: Vec<String> =
        receiver.accepted().iter().map(|d| d.header("x-lerian-event-id")).filter(|id| lost.contains(id)).collect();
    again.sort();
    let mut expected = lost.clone();
    expected.sort();
    assert_eq!(again, expected, "each lost event delivered once");
    assert!(event_ids(&got).iter().all(|id| *id != before.id().to_string()), "nothing it never had");
    // Nothing is missed any more: none listed, and the same replay creates nothing.
    assert_eq!(undelivered(since_q.clone()).await["items"], json!([]));
    let again = replay(&hub, &key, &sub, window).await;
    assert_eq!(counts(&again), (7, 0, 7), "{again}");
    assert_eq!(receiver.accepted().len(), 6, "four delivered at first, the two lost ones once each");
}

/// 1 000 events arrive before the subscription exists; a replay gives each exactly once, signed;
/// the same replay again creates nothing, and the live path goes on beside it.
async fn a_new_webhook_subscription_replays_the_inbox_exactly_once(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast()).await;
    let key = hub.tenant_key("t1").await;
    let before = post_many(&hub, &key, 1000).await;
    let receiver = Receiver::start(Script::Ok).await;
    let sub = webhook(&hub, &key, &receiver, json!(["*.*"])).await;

    let done = replay(&hub, &key, &sub, json!({"from_seq": 1})).await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(counts(&done), (1000, 1000, 0), "{done}");
    let got = receiver.wait_for(1000, WAIT).await;
    assert!(got.iter().all(|d| d.verified), "every replayed delivery is signed");
    let ids: HashSet<String> = event_ids(&got).into_iter().collect();
    assert_eq!(ids, before.iter().cloned().collect::<HashSet<_>>());

    // Twice over the same window: everything was delivered, nothing is created.
    let again = replay(&hub, &key, &sub, json!({"from_seq": 1})).await;
    assert_eq!(counts(&again), (1000, 0, 1000), "{again}");
    // A live event after it is the next and only new delivery.
    let live = Event::new("t1");
    assert_eq!(hub.post_event(&key, &live).await.0, StatusCode::ACCEPTED);
    let got = receiver.wait_for(1001, WAIT).await;
    assert_eq!(got.len(), 1001, "nothing but the live event came after the second replay");
    assert_eq!(got[1000].header("x-lerian-event-id"), live.id().to_string());

    // Asking for delivered ones gives exactly the window again.
    let some =
        replay(&hub, &key, &sub, json!({"from_seq": 1, "to_seq": 10, "include_delivered": true, "rate": 40})).await;
    assert_eq!(counts(&some), (10, 10, 0), "{some}");
    assert_eq!((&done["rate"], &some["rate"]), (&json!(250), &json!(40)), "the default rate, and the one asked for");
    let got = receiver.wait_for(1011, WAIT).await;
    let mut replayed: Vec<String> = event_ids(&got[1001..]);
    replayed.sort();
    let (_, log) = hub.get(&key, "/v1/events?limit=10").await;
    let mut first: Vec<String> = log["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|e| e["ce_id"].as_str().expect("ce_id").to_owned())
        .collect();
    first.sort();
    assert_eq!(replayed, first, "seqs 1 to 10, once each");

    // Deliveries name their event.
    let (_, page) = hub.get(&key, &format!("/v1/subscriptions/{sub}/deliveries?limit=5")).await;
    let items = page["items"].as_array().expect("items");
    assert!(items.iter().all(|d| before.contains(&d["ce_id"].as_str().unwrap_or_default().to_owned())), "{page}");
}

/// The same through a pull subscription: replayed entries land at the end of the stream, so a
/// reader that already moved its cursor still reads each of them, once.
async fn a_new_pull_subscription_replays_the_inbox_exactly_once(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let started = chrono::Utc::now() - chrono::Duration::minutes(5);
    let before = post_many(&hub, &key, 1000).await;
    let sub = hub.subscribe(&key, json!({"name": "puller", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let sub = sub["id"].as_str().expect("id").to_owned();
    // A live event the reader takes first: its cursor moves past every seq of the window.
    let live = Event::new("t1");
    assert_eq!(hub.post_event(&key, &live).await.0, StatusCode::ACCEPTED);
    let path = format!("/v1/subscriptions/{sub}/events?limit=1000");
    let (_, page) = hub.get(&key, &path).await;
    assert_eq!(page["items"].as_array().expect("items").len(), 1, "{page}");

    let done = replay(&hub, &key, &sub, json!({"since": started.to_rfc3339()})).await;
    assert_eq!(counts(&done), (1001, 1000, 1), "the live event was read already: {done}");
    let mut read: Vec<Value> = Vec::new();
    loop {
        let (status, page) = hub.get(&key, &path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let items = page["items"].as_array().expect("items").clone();
        if items.is_empty() {
            break;
        }
        read.extend(items);
    }
    let ids: HashSet<String> = read.iter().map(|i| i["ceId"].as_str().expect("ceId").to_owned()).collect();
    assert_eq!((ids.len(), ids), (1000, before.iter().cloned().collect()), "every event once");
    let event_seqs: Vec<i64> = read.iter().map(|i| i["eventSeq"].as_i64().expect("eventSeq")).collect();
    assert_eq!(event_seqs, (1..=1000).collect::<Vec<_>>());
    assert!(read.iter().all(|i| i["seq"].as_i64().expect("seq") > 1001), "appended after the live entry");

    let again = replay(&hub, &key, &sub, json!({"since": started.to_rfc3339()})).await;
    assert_eq!(counts(&again), (1001, 0, 1001), "{again}");
    let (_, page) = hub.get(&key, &path).await;
    assert_eq!(page["items"], json!([]), "nothing new in the stream");
}

/// A subscription auto-disabled after a long failure misses what arrives meanwhile; verify with
/// `replay_since_disabled` re-enables it and gives it exactly that window.
async fn a_disabled_subscription_recovers_its_disabled_window_with_verify(backend: Backend) {
    let hub = TestHub::start_with(backend, &fast()).await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::Fail).await;
    let sub = webhook(&hub, &key, &receiver, json!(["*.*"])).await;
    let path = format!("/v1/subscriptions/{sub}");
    let dead = |n: usize| {
        let (hub, key, path) = (&hub, &key, &path);
        async move {
            let end = tokio::time::Instant::now() + WAIT;
            loop {
                let (_, page) = hub.get(key, &format!("{path}/deliveries?state=dead")).await;
                if page["items"].as_array().expect("items").len() == n {
                    return;
                }
                assert!(tokio::time::Instant::now() < end, "never {n} dead: {page}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // Three failures spread over 121 hours disable it.
    for (n, advance) in [(1, 0), (2, 13), (3, 108)] {
        hub.clock.advance(Duration::from_secs(advance * 3600));
        hub.post_event(&key, &Event::new("t1")).await;
        dead(n).await;
    }
    let (_, disabled) = hub.get(&key, &path).await;
    assert_eq!(disabled["enabled"], false, "{disabled}");
    assert!(disabled["disabled_at"].is_string(), "{disabled}");

    // Verify without a disabled subscription to replay into is refused before any probe.
    let other = hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let (status, body) = hub
        .post_json(
            &key,
            &format!("/v1/subscriptions/{}/verify", other["id"].as_str().expect("id")),
            &json!({"replay_since_disabled": true}),
        )
        .await;
    assert_eq!((status, body["title"].as_str()), (StatusCode::CONFLICT, Some("not_disabled")), "{body}");

    let missed: Vec<String> = post_many(&hub, &key, 5).await;
    receiver.set_script(Script::Ok);
    let (status, verified) =
        hub.post_json(&key, &format!("{path}/verify"), &json!({"replay_since_disabled": true})).await;
    assert_eq!(status, StatusCode::OK, "{verified}");
    assert_eq!(verified["enabled"], true, "{verified}");
    let done = replay_done(&hub, &key, &sub, &verified["replay"]).await;
    assert_eq!(counts(&done), (5, 5, 0), "{done}");
    let got = receiver.wait_for(3 + 5, WAIT).await;
    let mut replayed = event_ids(&got[3..]);
    replayed.sort();
    let mut expected = missed.clone();
    expected.sort();
    assert_eq!(replayed, expected, "exactly the disabled window, once");
}

async fn the_event_log_pages_and_filters_the_inbox(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let other = hub.tenant_key("t2").await;
    for i in 0..6 {
        let (resource, event) = if i % 2 == 0 { ("account", "created") } else { ("loan", "approved") };
        let e = Event::of("t1", resource, event).body(format!(r#"{{"i":{i}}}"#).into_bytes());
        assert_eq!(hub.post_event(&key, &e).await.0, StatusCode::ACCEPTED);
    }
    assert_eq!(hub.post_event(&other, &Event::new("t2")).await.0, StatusCode::ACCEPTED);

    let (status, page) = hub.get(&key, "/v1/events?limit=4").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let seqs = |p: &Value| -> Vec<i64> {
        p["items"].as_array().expect("items").iter().map(|e| e["seq"].as_i64().expect("seq")).collect()
    };
    assert_eq!(seqs(&page), vec![1, 2, 3, 4]);
    assert_eq!(page["next_cursor"], 4);
    assert_eq!(page["items"][0]["payload"], json!({"i": 0}), "{page}");
    let (_, rest) = hub.get(&key, "/v1/events?limit=4&after=4").await;
    assert_eq!(seqs(&rest), vec![5, 6]);
    assert_eq!(rest["next_cursor"], Value::Null, "a short page ends the log");

    let (_, loans) = hub.get(&key, "/v1/events?event_type=loan.*").await;
    assert_eq!(seqs(&loans), vec![2, 4, 6]);
    let (_, created) = hub.get(&key, "/v1/events?event_type=*.created").await;
    assert_eq!(seqs(&created), vec![1, 3, 5]);
    let (_, approved) = hub.get(&key, "/v1/events?event_type=loan.approved&after=2&limit=1").await;
    assert_eq!(seqs(&approved), vec![4]);
    assert_eq!(approved["next_cursor"], 4);
    let (_, nothing) = hub.get(&key, "/v1/events?event_type=loan.created").await;
    assert_eq!(seqs(&nothing), Vec::<i64>::new());
    let (_, since) = hub
        .get(&key, "/v1/events?event_type=account.created&since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z")
        .await;
    assert_eq!(seqs(&since), vec![1, 3, 5]);
    let (_, none) = hub.get(&key, "/v1/events?source=nobody").await;
    assert_eq!(seqs(&none), Vec::<i64>::new());
    let (_, future) = hub.get(&key, "/v1/events?since=2999-01-01T00:00:00Z").await;
    assert_eq!(seqs(&future), Vec::<i64>::new());
    let (_, past) = hub.get(&key, "/v1/events?until=2999-01-01T00:00:00Z").await;
    assert_eq!(seqs(&past).len(), 6, "t2's event is not t1's");

    for (query, field) in [
        ("event_type=nodot", "event_type"),
        ("since=yesterday", "since"),
        ("since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "until"),
        ("after=-1", "after"),
        ("limit=0", "limit"),
        ("color=blue", "color"),
    ] {
        let (status, body) = hub.get(&key, &format!("/v1/events?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(body["message"].as_str().expect("message").contains(field), "{query}: {body}");
    }
}

/// Support starts from the id a receiver logged: the event, and per subscription its jobs with
/// attempts, its stream entries, or `none` when the subscription never got it.
async fn an_event_shows_what_became_of_it_in_each_subscription(backend: Backend) {
    let hub = TestHub::start_with(
        backend,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s,20ms")],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let receiver = Receiver::start(Script::FailFirst(1)).await;
    let hook = webhook(&hub, &key, &receiver, json!(["*.*"])).await;
    let pull = hub.subscribe(&key, json!({"name": "puller", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let pull = pull["id"].as_str().expect("id").to_owned();
    let unrelated =
        hub.subscribe(&key, json!({"name": "other", "event_types": ["nothing.here"], "sink": {"type": "pull"}})).await;
    let event = Event::new("t1");
    assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);
    receiver.wait_for(2, WAIT).await;
    let late = hub.subscribe(&key, json!({"name": "late", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    // Each way of writing a pattern that wants the key, and one whose filter refuses the event.
    let mut later = Vec::new();
    for types in [json!(["loan_application.*"]), json!(["other.x", "*.approved"]), json!(["loan_application.approved"])]
    {
        let sub = hub.subscribe(&key, json!({"name": "later", "event_types": types, "sink": {"type": "pull"}})).await;
        later.push(sub["id"].as_str().expect("id").to_owned());
    }
    let filtered = hub
        .subscribe(
            &key,
            json!({"name": "filtered", "event_types": ["*.*"], "filters": [{"exact": {"id": "none"}}],
                   "sink": {"type": "pull"}}),
        )
        .await;
    // A subscription that has the event is shown though it no longer wants it.
    let (status, body) =
        hub.patch_json(&key, &format!("/v1/subscriptions/{pull}"), &json!({"event_types": ["nothing.else"]})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let path = format!("/v1/events/{}", event.id());
    let end = tokio::time::Instant::now() + WAIT;
    let detail = loop {
        let (status, detail) = hub.get(&key, &path).await;
        assert_eq!(status, StatusCode::OK, "{detail}");
        let hook_state = detail["subscriptions"]
            .as_array()
            .expect("subs")
            .iter()
            .find(|s| s["subscription_id"] == hook.as_str())
            .map(|s| s["state"].clone());
        if hook_state == Some(json!("succeeded")) {
            break detail;
        }
        assert!(tokio::time::Instant::now() < end, "{detail}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(detail["event"]["ce_id"], event.id().to_string());
    let subs = detail["subscriptions"].as_array().expect("subs");
    let of = |id: &str| subs.iter().find(|s| s["subscription_id"] == id).cloned();
    let h = of(&hook).expect("the webhook");
    assert_eq!(h["deliveries"][0]["attempt_log"].as_array().expect("attempts").len(), 2, "{h}");
    assert_eq!(h["deliveries"][0]["ce_id"], event.id().to_string());
    assert_eq!(of(&pull).expect("the pull")["state"], "unread");
    assert_eq!(of(late["id"].as_str().expect("id")).expect("late")["state"], "none", "created after the event");
    assert!(of(unrelated["id"].as_str().expect("id")).is_none(), "a subscription that does not want it is left out");
    for id in &later {
        assert_eq!(of(id).expect("a pattern that wants the key")["state"], "none", "{id}");
    }
    assert!(of(filtered["id"].as_str().expect("id")).is_none(), "its filter refuses the event");
    assert_eq!(subs.len(), 6, "{subs:?}");
    // Replayed into the late subscription, the event is in its stream, unread.
    let late_id = late["id"].as_str().expect("id");
    replay(&hub, &key, late_id, json!({"from_seq": 1})).await;
    let (_, detail) = hub.get(&key, &path).await;
    let late_now =
        detail["subscriptions"].as_array().expect("subs").iter().find(|s| s["subscription_id"] == late_id).cloned();
    let late_now = late_now.expect("the late subscription");
    assert_eq!(
        (late_now["state"].as_str(), late_now["stream"].as_array().map(Vec::len)),
        (Some("unread"), Some(1)),
        "{late_now}"
    );

    let other = hub.tenant_key("t2").await;
    let (status, body) = hub.get(&other, &path).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's event is not found: {body}");
    let (status, _) = hub.get(&key, "/v1/events/not-a-uuid").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Bad replay requests name their field and start nothing.
#[tokio::test]
async fn replay_requests_are_checked() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let sub = hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let path = format!("/v1/subscriptions/{}/replay", sub["id"].as_str().expect("id"));
    for (body, status, needle) in [
        (json!({}), StatusCode::UNPROCESSABLE_ENTITY, "window"),
        (json!({"since": "2026-01-01T00:00:00Z", "from_seq": 1}), StatusCode::UNPROCESSABLE_ENTITY, "from_seq"),
        (
            json!({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "until",
        ),
        (json!({"from_seq": 0}), StatusCode::UNPROCESSABLE_ENTITY, "from_seq"),
        (json!({"from_seq": 5, "to_seq": 2}), StatusCode::UNPROCESSABLE_ENTITY, "to_seq"),
        (json!({"since": "yesterday"}), StatusCode::UNPROCESSABLE_ENTITY, "since"),
        (json!({"from_seq": 1, "speed": 2}), StatusCode::UNPROCESSABLE_ENTITY, "speed"),
        (json!({"from_seq": 1, "rate": 0}), StatusCode::UNPROCESSABLE_ENTITY, "rate"),
        (json!({"from_seq": 1, "rate": 100_001}), StatusCode::UNPROCESSABLE_ENTITY, "rate"),
        (json!({"from_seq": 1, "rate": 1.5}), StatusCode::UNPROCESSABLE_ENTITY, "rate"),
        (json!({"from_seq": 1, "rate": "fast"}), StatusCode::UNPROCESSABLE_ENTITY, "rate"),
    ] {
        let (got, answer) = hub.post_json(&key, &path, &body).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert!(answer["message"].as_str().expect("message").contains(needle), "{body}: {answer}");
    }
    let (status, _) = hub.send(hub.client.post(hub.url(&path)).bearer_auth(&key).body("{")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let other = hub.tenant_key("t2").await;
    let (status, _) = hub.post_json(&other, &path, &json!({"from_seq": 1})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's subscription");
    let (status, _) = hub
        .get(&key, &format!("/v1/subscriptions/{}/replays/{}", sub["id"].as_str().expect("id"), uuid::Uuid::now_v7()))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
