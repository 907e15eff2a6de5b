//! Server limits: idle and half-open connections cannot exhaust the server, slow requests are
//! cut off, and every refusal comes in the error shape.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Backend, TestHub};

const WAIT: Duration = Duration::from_secs(20);

fn addr(hub: &TestHub) -> String {
    hub.base.trim_start_matches("http://").to_owned()
}

/// Reads what the server sends until it closes the connection (or `deadline`).
async fn read_all(tcp: &mut TcpStream, deadline: Duration) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(deadline, tcp.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

fn json_body(response: &str) -> Value {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not a JSON body ({e}): {response:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_exhaust_the_server() {
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[("STREAMING_HUB_HTTP_MAX_CONNECTIONS", "20"), ("STREAMING_HUB_HTTP_HEADER_TIMEOUT", "1s")],
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(addr(&hub)).await.expect("connect"));
    }
    // Over the cap: answered 503 in the error shape, and closed.
    let mut extra = TcpStream::connect(addr(&hub)).await.expect("connect");
    let answer = read_all(&mut extra, WAIT).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    let body = json_body(&answer);
    assert_eq!((body["code"].as_u64(), body["title"].as_str()), (Some(503), Some("too_many_connections")));
    // The idle connections are closed by the header timeout, and the server answers again.
    for tcp in &mut idle {
        let closed = read_all(tcp, WAIT).await;
        assert!(!closed.starts_with("HTTP/1.1 2"), "an idle connection got an answer: {closed:?}");
    }
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        match hub.client.get(hub.url("/healthz")).send().await {
            Ok(r) if r.status() == StatusCode::OK => break,
            other => assert!(tokio::time::Instant::now() < end, "the server never answered again: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_body_never_comes_is_cut_off_in_the_error_shape() {
    let hub = TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_HTTP_REQUEST_TIMEOUT", "1s")]).await;
    let key = hub.tenant_key("t1").await;
    let mut tcp = TcpStream::connect(addr(&hub)).await.expect("connect");
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nhost: hub\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n\r\n{{\"partial\":"
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    let answer = read_all(&mut tcp, WAIT).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert_eq!(json_body(&answer)["title"], "request_timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_hyper_refuses_before_the_router_is_answered_in_the_error_shape() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let many_headers: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let huge_header = format!("x-big: {}\r\n", "a".repeat(600 * 1024));
    let cases = [
        ("GET /healthz HTTP/1.1\r\nhost: hub\r\nbad header line\r\n\r\n".to_owned(), 400, "bad_request"),
        ("GE\x01T /healthz HTTP/1.1\r\nhost: hub\r\n\r\n".to_owned(), 400, "bad_request"),
        (format!("GET /healthz HTTP/1.1\r\nhost: hub\r\n{many_headers}\r\n"), 431, "request_header_fields_too_large"),
        (format!("GET /healthz HTTP/1.1\r\nhost: hub\r\n{huge_header}\r\n"), 431, "request_header_fields_too_large"),
    ];
    for (request, code, title) in cases {
        let mut tcp = TcpStream::connect(addr(&hub)).await.expect("connect");
        // The server may answer and close before the whole request is written.
        let _ = tcp.write_all(request.as_bytes()).await;
        let answer = read_all(&mut tcp, WAIT).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {code} ")), "{answer:?}");
        let body = json_body(&answer);
        assert_eq!((body["code"].as_u64(), body["title"].as_str()), (Some(code), Some(title)), "{answer:?}");
        assert!(answer.to_ascii_lowercase().contains("content-type: application/json"), "{answer:?}");
    }
    // A good request on a kept-alive connection after another is answered as usual.
    let mut tcp = TcpStream::connect(addr(&hub)).await.expect("connect");
    tcp.write_all(
        b"GET /healthz HTTP/1.1\r\nhost: hub\r\n\r\nGET /healthz HTTP/1.1\r\nhost: hub\r\nconnection: close\r\n\r\n",
    )
    .await
    .expect("write");
    let answer = read_all(&mut tcp, WAIT).await;
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 2, "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_redrive_body_is_refused_in_the_error_shape() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    let sub =
        hub.subscribe(&key, serde_json::json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let path = format!("/v1/subscriptions/{}/redrive", sub["id"].as_str().expect("id"));
    let big = vec![b' '; 3 * 1024 * 1024];
    let request =
        hub.client.post(hub.url(&path)).bearer_auth(&key).header("content-type", "application/json").body(big);
    let (status, body) = hub.send(request).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["title"], "payload_too_large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_quotas_answer_at_their_limits_with_nothing_stored() {
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[
            ("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", "2"),
            ("STREAMING_HUB_MAX_PATTERNS_PER_SUBSCRIPTION", "3"),
            ("STREAMING_HUB_INGEST_RATE", "1"),
            ("STREAMING_HUB_INGEST_BURST", "2"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let pull = |types: Value| serde_json::json!({"name": "p", "event_types": types, "sink": {"type": "pull"}});
    let (status, body) =
        hub.post_json(&key, "/v1/subscriptions", &pull(serde_json::json!(["a.*", "b.*", "c.*", "d.*"]))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().expect("message").starts_with("event_types"), "{body}");
    for _ in 0..2 {
        assert_eq!(
            hub.post_json(&key, "/v1/subscriptions", &pull(serde_json::json!(["*.*"]))).await.0,
            StatusCode::CREATED
        );
    }
    let (status, body) = hub.post_json(&key, "/v1/subscriptions", &pull(serde_json::json!(["*.*"]))).await;
    assert_eq!((status, body["title"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("quota_exceeded")), "{body}");
    let (_, listed) = hub.get(&key, "/v1/subscriptions").await;
    assert_eq!(listed["items"].as_array().expect("items").len(), 2, "nothing stored over the quota");
    // Another tenant has its own quota.
    let other = hub.tenant_key("t2").await;
    assert_eq!(
        hub.post_json(&other, "/v1/subscriptions", &pull(serde_json::json!(["*.*"]))).await.0,
        StatusCode::CREATED
    );

    // Ingest: the burst passes, the next is 429 with Retry-After and is not stored.
    for _ in 0..2 {
        assert_eq!(hub.post_event(&key, &crate::support::Event::new("t1")).await.0, StatusCode::ACCEPTED);
    }
    let over = crate::support::Event::new("t1");
    let request = hub.client.post(hub.url("/v1/events")).bearer_auth(&key);
    let request = over.headers.iter().fold(request, |r, (k, v)| r.header(k, v)).body(over.body.clone());
    let response = request.send().await.expect("send");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().get("retry-after").is_some());
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["title"], "rate_limited");
    assert!(hub.store.event_by_ce_id("t1", over.id()).await.expect("read").is_none(), "nothing stored");
    assert_eq!(
        hub.post_event(&other, &crate::support::Event::new("t2")).await.0,
        StatusCode::ACCEPTED,
        "t2 has its own rate"
    );
}
