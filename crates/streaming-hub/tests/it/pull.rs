//! The pull API (SPEC §4) on both backends: each rule with a test that fails if it breaks.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::on_both_backends;
use crate::support::{Backend, Event, TestHub};

on_both_backends!(
    paging_returns_each_matching_event_once_in_seq_order,
    a_forward_jump_skips_for_good,
    a_backward_read_never_rewinds,
    concurrent_readers_never_move_the_cursor_backwards,
    a_stored_body_that_is_not_what_it_says_never_costs_the_page,
    an_after_beyond_the_newest_seq_is_refused_and_moves_nothing,
    two_readers_of_one_subscription_never_get_the_same_event,
    head_never_reaches_a_read_that_moves_a_cursor,
);

/// A JSON body with invalid UTF-8 inside a string is quarantined at ingest; a stored body that is
/// not the JSON its content type says (written before bodies were checked throughout) is shown as
/// base64, and the page with it and the good events around it is served before the cursor moves.
async fn a_stored_body_that_is_not_what_it_says_never_costs_the_page(backend: Backend) {
    let (hub, key, path) = pull_setup(backend).await;
    let bad = Event::new("t1").body(b"{\"a\":\"\xff\"}".to_vec());
    let (status, body) = hub.post_event(&key, &bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["title"], "quarantined");
    // So is a body nested deeper than receivers can parse (SPEC §9: at most 64 levels).
    let deep = Event::new("t1").body(format!("{}{}", "[".repeat(1001), "]".repeat(1001)).into_bytes());
    let (status, body) = hub.post_event(&key, &deep).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().expect("message").contains("levels deep"), "{body}");

    post_events(&hub, &key, 10).await;
    // Plant an invalid body in the fifth event, as an older version of the hub could have stored.
    hub.execute_raw(
        "UPDATE events SET payload = $1 WHERE tenant_id = 't1' AND seq = 5",
        "UPDATE events SET payload = ?1 WHERE tenant_id = 't1' AND seq = 5",
        b"{\"a\":\"\xff\"}",
    )
    .await;
    let (status, page) = hub.get(&key, &format!("{path}?limit=100")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(seqs(&page), (1..=10).collect::<Vec<_>>());
    let planted = &page["items"][4];
    assert_eq!(planted["payloadEncoding"], "base64", "{planted}");
    assert!(page["items"][3]["payload"]["n"].is_number());
    let (_, again) = hub.get(&key, &path).await;
    assert!(seqs(&again).is_empty(), "the page was acknowledged: {again}");
}

/// `after` beyond the newest seq (a typo, a millisecond timestamp) is refused and moves nothing:
/// the unread events are all still there.
async fn an_after_beyond_the_newest_seq_is_refused_and_moves_nothing(backend: Backend) {
    let (hub, key, path) = pull_setup(backend).await;
    let ids = post_events(&hub, &key, 6).await;
    for after in ["9223372036854775807", "1764700000000", "7"] {
        let (status, body) = hub.get(&key, &format!("{path}?after={after}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{after}: {body}");
        assert_eq!(body["title"], "invalid_query");
        assert!(body["message"].as_str().expect("message").starts_with("after:"), "{body}");
    }
    // At the newest seq: an empty page that skips what exists, as before.
    let (status, page) = hub.get(&key, &format!("{path}?after=2")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(seqs(&page), vec![3, 4, 5, 6]);
    let got: Vec<&str> =
        page["items"].as_array().expect("items").iter().map(|i| i["ceId"].as_str().expect("id")).collect();
    assert_eq!(got, ids[2..].iter().map(String::as_str).collect::<Vec<_>>());
    let (status, page) = hub.get(&key, &format!("{path}?after=6")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(seqs(&page).is_empty());
}

/// Reading is the acknowledgement, so two loops reading one subscription at once (here, on two
/// connections in parallel) must each get events of their own: every event once, none twice.
async fn two_readers_of_one_subscription_never_get_the_same_event(backend: Backend) {
    let (hub, key, path) = pull_setup(backend).await;
    let total = 600;
    post_events(&hub, &key, total).await;
    let hub = Arc::new(hub);
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (hub, key, path) = (Arc::clone(&hub), key.clone(), path.clone());
        readers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let (status, page) = hub.get(&key, &format!("{path}?limit=7")).await;
                assert_eq!(status, StatusCode::OK, "{page}");
                let s = seqs(&page);
                if s.is_empty() {
                    return got;
                }
                got.extend(s);
            }
        }));
    }
    let mut all = Vec::new();
    for r in readers {
        all.extend(r.await.expect("reader"));
    }
    let read = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(read, all.len(), "{} events were served to two readers", read - all.len());
    assert_eq!(all, (1..=total as i64).collect::<Vec<_>>(), "every event once");
}

async fn pull_setup(backend: Backend) -> (TestHub, String, String) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    let sub = hub
        .subscribe(&key, json!({"name": "loans", "event_types": ["loan_application.*"], "sink": {"type": "pull"}}))
        .await;
    assert_eq!(sub["verification_state"], "active", "pull subscriptions are active from creation");
    let path = format!("/v1/subscriptions/{}/events", sub["id"].as_str().expect("id"));
    (hub, key, path)
}

async fn post_events(hub: &TestHub, key: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let event = Event::new("t1").body(format!(r#"{{"n":{i}}}"#).into_bytes());
        assert_eq!(hub.post_event(key, &event).await.0, StatusCode::ACCEPTED);
        ids.push(event.id().to_string());
    }
    ids
}

fn seqs(page: &Value) -> Vec<i64> {
    page["items"].as_array().expect("items").iter().map(|i| i["seq"].as_i64().expect("seq")).collect()
}

async fn paging_returns_each_matching_event_once_in_seq_order(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let key = hub.tenant_key("t1").await;
    // Before the subscription exists: never delivered to it.
    hub.post_event(&key, &Event::new("t1")).await;
    let sub = hub
        .subscribe(&key, json!({"name": "loans", "event_types": ["loan_application.*"], "sink": {"type": "pull"}}))
        .await;
    let path = format!("/v1/subscriptions/{}/events", sub["id"].as_str().expect("id"));
    let mut expected = Vec::new();
    for i in 0..7 {
        // Interleave events the filter does not match.
        hub.post_event(&key, &Event::of("t1", "account", "created")).await;
        let event =
            Event::new("t1").set("ce-subject", &format!("loan-{i}")).body(format!(r#"{{"i":{i}}}"#).into_bytes());
        hub.post_event(&key, &event).await;
        expected.push(event.id().to_string());
    }

    let mut got = Vec::new();
    let mut next = format!("{path}?limit=3");
    loop {
        let (status, page) = hub.get(&key, &next).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let items = page["items"].as_array().expect("items");
        for item in items {
            got.push(item["ceId"].as_str().expect("ceId").to_owned());
            assert_eq!(item["type"], "loan_application.approved");
            assert_eq!(item["source"], "lender");
            assert_eq!(item["schemaVersion"], "1.0.0");
            assert!(item["payload"]["i"].is_number(), "the payload is the event's JSON: {item}");
        }
        let s = seqs(&page);
        assert!(s.windows(2).all(|w| w[0] < w[1]), "ascending seq: {s:?}");
        match page["next_cursor"].as_i64() {
            Some(cursor) => {
                assert_eq!(Some(&cursor), s.last(), "next_cursor is the highest seq returned");
                assert_eq!(items.len(), 3, "only a full page has a cursor");
                next = format!("{path}?limit=3&after={cursor}");
            }
            None => {
                assert!(items.len() < 3, "a short page ends the paging");
                break;
            }
        }
    }
    assert_eq!(got, expected, "each matching event exactly once, in order");
    // Reading was the acknowledgement: without `after` there is nothing left.
    let (_, page) = hub.get(&key, &path).await;
    assert!(page["items"].as_array().expect("items").is_empty());
    assert_eq!(page["next_cursor"], Value::Null);
}

/// `HEAD` runs a `GET` route's handler with the body dropped: on a pull read it would move the
/// cursor unseen. The API refuses `HEAD` (405) before any handler runs, with a key or a
/// session; health, metrics and the document keep it.
async fn head_never_reaches_a_read_that_moves_a_cursor(backend: Backend) {
    let (hub, key, path) = pull_setup(backend).await;
    post_events(&hub, &key, 3).await;
    for token in [key.as_str(), hub.admin.as_str()] {
        let head = hub.client.head(hub.url(&path)).bearer_auth(token).header("X-Streaming-Hub-Tenant", "t1");
        let response = head.send().await.expect("head");
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
    for route in ["/v1/subscriptions", "/v1/events", "/admin/api-keys", "/v1/event-types"] {
        let response = hub.client.head(hub.url(route)).bearer_auth(&key).send().await.expect("head");
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{route}");
    }
    let (_, page) = hub.get(&key, &path).await;
    assert_eq!(seqs(&page), vec![1, 2, 3], "nothing was consumed by HEAD: {page}");
    for public in ["/healthz", "/metrics", "/openapi.json"] {
        let response = hub.client.head(hub.url(public)).send().await.expect("head");
        assert_eq!(response.status(), StatusCode::OK, "{public}");
    }
}

async fn a_forward_jump_skips_for_good(backend: Backend) {
    let (hub, key, path) = pull_setup(backend).await;
    post_events(&hub, &key, 10).await;
    let (_, page) = hub.get(&key, &format!("{path}?after=6")).await;
    assert_eq!(seqs(&page), vec![7, 8, 9, 10]);
    // The cursor moved past 6: seqs 1..=6 are never delivered.
    let (_, page) = hub.get(&key, &path).await;
    assert!(seqs(&page).is_empty(), "{page}");
    // A jump past the end is refused and moves nothing (SPEC §8).
    let (status, _) = hub.get(&key, &format!("{path}?after=50")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    post_events(&hub, &key, 2).await;
    let (_, page) = hub.get(&key, &path).await;
    assert_eq!(seqs(&page), vec![11, 12], "{page}");
}

async fn a_backward_read_never_rewinds(backend: Backend) {
    let (hub, key, path) = pull_setup(backend).await;
    post_events(&hub, &key, 5).await;
    let (_, page) = hub.get(&key, &path).await;
    assert_eq!(seqs(&page), vec![1, 2, 3, 4, 5]);
    // An older page is readable again…
    let (_, page) = hub.get(&key, &format!("{path}?after=1&limit=2")).await;
    assert_eq!(seqs(&page), vec![2, 3]);
    assert_eq!(page["next_cursor"], 3);
    // …and the cursor stayed at 5.
    post_events(&hub, &key, 1).await;
    let (_, page) = hub.get(&key, &path).await;
    assert_eq!(seqs(&page), vec![6]);
}

async fn concurrent_readers_never_move_the_cursor_backwards(backend: Backend) {
    let (hub, key, path) = pull_setup(backend).await;
    post_events(&hub, &key, 30).await;
    let hub = Arc::new(hub);
    let mut tasks = Vec::new();
    for after in (0..30).rev() {
        let (hub, key, path) = (Arc::clone(&hub), key.clone(), path.clone());
        tasks.push(tokio::spawn(async move { hub.get(&key, &format!("{path}?after={after}&limit=1")).await }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("task").0, StatusCode::OK);
    }
    // The reader at after=29 returned seq 30: the cursor is there, whatever order the reads ran in.
    let (_, page) = hub.get(&key, &path).await;
    assert!(seqs(&page).is_empty(), "the cursor went backwards: {page}");
}

#[tokio::test]
async fn pull_reads_are_rate_limited_per_tenant() {
    let hub =
        TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_PULL_RATE", "1"), ("STREAMING_HUB_PULL_BURST", "2")])
            .await;
    let key = hub.tenant_key("t1").await;
    let sub = hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let path = format!("/v1/subscriptions/{}/events", sub["id"].as_str().expect("id"));
    assert_eq!(hub.get(&key, &path).await.0, StatusCode::OK);
    assert_eq!(hub.get(&key, &path).await.0, StatusCode::OK);
    let response = hub.client.get(hub.url(&path)).bearer_auth(&key).send().await.expect("request");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response.headers()["retry-after"].to_str().expect("header").parse().expect("seconds");
    assert!((1..=2).contains(&retry_after), "{retry_after}");
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["title"], "rate_limited");
    assert_eq!(body["code"], 429);

    // Another tenant has its own bucket.
    let other = hub.tenant_key("t2").await;
    let sub = hub.subscribe(&other, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let path = format!("/v1/subscriptions/{}/events", sub["id"].as_str().expect("id"));
    assert_eq!(hub.get(&other, &path).await.0, StatusCode::OK);
}

#[tokio::test]
async fn pull_parameters_and_sink_type_are_checked() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let sub = hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let path = format!("/v1/subscriptions/{}/events", sub["id"].as_str().expect("id"));
    for (query, param) in
        [("limit=0", "limit"), ("limit=1001", "limit"), ("after=-1", "after"), ("after=x", "after"), ("x=1", "x")]
    {
        let (status, body) = hub.get(&key, &format!("{path}?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(body["message"].as_str().expect("message").contains(param), "{query}: {body}");
    }
    let hook = hub
        .subscribe(
            &key,
            json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": "https://example.com/h"}}),
        )
        .await;
    let (status, body) = hub.get(&key, &format!("/v1/subscriptions/{}/events", hook["id"].as_str().expect("id"))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["title"], "not_pull_subscription");
}

#[tokio::test]
async fn non_json_payloads_are_returned_as_text() {
    let (hub, key, path) = pull_setup(Backend::Sqlite).await;
    let event = Event::new("t1").set("content-type", "text/plain").body(b"plain words".to_vec());
    assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);
    let (_, page) = hub.get(&key, &path).await;
    assert_eq!(page["items"][0]["payload"], "plain words");
    assert_eq!(page["items"][0]["dataContentType"], "text/plain");
}
