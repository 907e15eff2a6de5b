//! The pull helper against a server that answers like the hub's pull route.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::json;
use streaming_hub_receiver::pull::{Error, PullConsumer, retry_after};

#[derive(Clone, Default)]
struct Hub {
    events: i64,
    cursor: Arc<Mutex<i64>>,
    limited: Arc<Mutex<u32>>,
    requests: Arc<Mutex<Vec<String>>>,
}

async fn pull(
    State(hub): State<Hub>,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<std::collections::HashMap<String, i64>>,
) -> impl IntoResponse {
    hub.requests.lock().expect("requests").push(uri.to_string());
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer key-1")
        || uri.path() != "/v1/subscriptions/sub-1/events"
    {
        let body = json!({"code": 404, "title": "not_found", "message": "no such subscription"});
        return (StatusCode::NOT_FOUND, [("retry-after", "")], body.to_string());
    }
    {
        let mut limited = hub.limited.lock().expect("limited");
        if *limited > 0 {
            *limited -= 1;
            let body = json!({"code": 429, "title": "rate_limited", "message": "slow down"});
            return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "0.2")], body.to_string());
        }
    }
    let limit = q.get("limit").copied().unwrap_or(100);
    let mut cursor = hub.cursor.lock().expect("cursor");
    let after = q.get("after").copied().unwrap_or(*cursor);
    let items: Vec<_> = (after + 1..=hub.events)
        .take(limit as usize)
        .map(|s| json!({"seq": s, "ceId": format!("id-{s}"), "type": "a.b", "payload": {}}))
        .collect();
    let last = items.last().map(|i| i["seq"].as_i64().expect("seq"));
    if let Some(last) = last {
        *cursor = (*cursor).max(last);
    }
    let next = if items.len() as i64 == limit { last } else { None };
    (StatusCode::OK, [("retry-after", "")], json!({"items": items, "next_cursor": next}).to_string())
}

async fn start(hub: Hub) -> String {
    let app = axum::Router::new().fallback(pull).with_state(hub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn drain_pages_to_the_end_and_waits_out_rate_limits() {
    let hub = Hub { events: 25, limited: Arc::new(Mutex::new(2)), ..Hub::default() };
    let url = start(hub.clone()).await;
    let mut consumer = PullConsumer::new(&format!("{url}/"), "key-1", "sub-1");
    consumer.limit = Some(10);
    let started = Instant::now();
    let mut seen = Vec::new();
    assert_eq!(consumer.drain(|e| seen.push(e.seq)).await.expect("drain"), 25);
    assert_eq!(seen, (1..=25).collect::<Vec<_>>());
    assert!(started.elapsed() >= Duration::from_millis(400), "two Retry-After of 0.2 s were waited out");
    assert_eq!(
        *hub.requests.lock().expect("requests"),
        [
            "/v1/subscriptions/sub-1/events?limit=10",
            "/v1/subscriptions/sub-1/events?limit=10",
            "/v1/subscriptions/sub-1/events?limit=10",
            "/v1/subscriptions/sub-1/events?after=10&limit=10",
            "/v1/subscriptions/sub-1/events?after=20&limit=10",
        ]
    );
}

#[tokio::test]
async fn errors_come_in_the_hubs_shape() {
    let url = start(Hub { events: 3, ..Hub::default() }).await;
    match PullConsumer::new(&url, "key-1", "other").next_page().await {
        Err(Error::Api { code: 404, title, .. }) => assert_eq!(title, "not_found"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn retry_after_forms() {
    let cap = Duration::from_secs(30);
    assert_eq!(retry_after(Some("2"), cap), Duration::from_secs(2));
    assert_eq!(retry_after(Some("0"), cap), Duration::from_millis(100));
    assert_eq!(retry_after(Some("3600"), Duration::from_secs(5)), Duration::from_secs(5));
    assert_eq!(retry_after(Some("nonsense"), cap), Duration::from_secs(1));
    assert_eq!(retry_after(None, cap), Duration::from_secs(1));
    assert_eq!(retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT"), cap), Duration::from_secs(1), "a past date");
    let soon = httpdate_in(3);
    let got = retry_after(Some(&soon), cap);
    assert!(got >= Duration::from_secs(1) && got <= Duration::from_secs(3), "{got:?}");
}

fn httpdate_in(secs: u64) -> String {
    httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(secs))
}

/// An item that cannot be read is handed on in its place; the items around it are read, and the
/// page's cursor is kept. (Deep nesting is no such item here: serde_json reads a raw payload
/// without recursing.)
#[test]
fn an_item_that_cannot_be_parsed_never_costs_its_page() {
    let deep = "tru";
    let body = format!(
        r#"{{"items": [{{"seq": 1, "ceId": "a", "type": "x.y", "payload": {{"s": "[{{\"x"}}}},
                       {{"seq": 2, "ceId": "b", "type": "x.y", "payload": {deep}}},
                       {{"seq": 3, "ceId": "c", "type": "x.y", "payload": [1, {{"k": "]"}}]}}], "next_cursor": 3}}"#
    );
    let page = streaming_hub_receiver::pull::Page::parse(body.as_bytes()).expect("a page");
    assert_eq!(page.items.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 3]);
    assert_eq!(page.next_cursor, Some(3));
    assert_eq!(page.unreadable.len(), 1);
    assert_eq!(page.unreadable[0].index, 1);
    assert!(page.unreadable[0].raw.starts_with(r#"{"seq": 2"#), "{}", page.unreadable[0].raw);
    assert!(!page.unreadable[0].error.is_empty());
}

#[tokio::test]
async fn drain_all_hands_an_unreadable_item_on_in_its_place() {
    let deep = "tru";
    let body = format!(
        r#"{{"items": [{{"seq": 1, "ceId": "a", "type": "x.y", "payload": {{}}}}, {{"seq": 2, "ceId": "b", "type": "x.y", "payload": {deep}}}, {{"seq": 3, "ceId": "c", "type": "x.y", "payload": {{}}}}], "next_cursor": null}}"#
    );
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { body }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut consumer = PullConsumer::new(&format!("http://{addr}"), "k", "s");
    let order = std::cell::RefCell::new(Vec::new());
    let n = consumer
        .drain_all(|e| order.borrow_mut().push(e.ce_id), |u| order.borrow_mut().push(format!("bad {}", u.index)))
        .await
        .expect("drain");
    assert_eq!(n, 3);
    assert_eq!(order.into_inner(), vec!["a".to_owned(), "bad 1".to_owned(), "c".to_owned()]);
}
