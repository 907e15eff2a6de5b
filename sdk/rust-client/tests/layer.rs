//! The client's own layer against a local server: retries of 429 and 503 honouring Retry-After,
//! the typed error, and what each publishing mode sends.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use streaming_hub_client::apis::subscriptions_api;
use streaming_hub_client::{Client, Error, Event, Typed, retry_after};

#[derive(Default)]
struct Seen {
    requests: Vec<(HeaderMap, Bytes)>,
}

/// Answers the first `refusals` requests with `status` (and Retry-After), then success.
async fn flaky(refusals: usize, status: StatusCode, after: Option<&'static str>) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let state = Arc::clone(&seen);
    let answer = move |headers: HeaderMap, body: Bytes| {
        let state = Arc::clone(&state);
        async move {
            let n = {
                let mut seen = state.lock().expect("lock");
                seen.requests.push((headers, body));
                seen.requests.len()
            };
            if n <= refusals {
                let mut headers = HeaderMap::new();
                if let Some(after) = after {
                    headers.insert("retry-after", after.parse().expect("header"));
                }
                let body = r#"{"code":429,"title":"rate_limited","message":"slow down"}"#;
                return (status, headers, body).into_response();
            }
            (StatusCode::ACCEPTED, [("content-type", "application/json")], r#"{"verdict":"accepted","seq":1}"#)
                .into_response()
        }
    };
    let app = axum::Router::new()
        .route("/v1/events", post(answer.clone()))
        .route("/v1/subscriptions/{id}/redrive", post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn event() -> Event {
    Event::new("lender", "loan", "approved", "t1", "1.0.0").json(&serde_json::json!({"amount": 100}))
}

#[tokio::test]
async fn a_retried_publish_sends_the_same_id_and_body() {
    let (url, seen) = flaky(2, StatusCode::TOO_MANY_REQUESTS, Some("0")).await;
    let answer = Client::new(&url, "k").expect("client").publish(&event()).await.expect("published");
    assert_eq!(answer.verdict, "accepted");
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.requests.len(), 3);
    for (headers, body) in &seen.requests {
        assert_eq!(headers["ce-id"], seen.requests[0].0["ce-id"]);
        assert_eq!(headers["authorization"], "Bearer k");
        assert_eq!(&body[..], br#"{"amount":100}"#);
    }
}

#[tokio::test]
async fn a_503_is_retried_on_generated_operations_too() {
    let (url, seen) = flaky(1, StatusCode::SERVICE_UNAVAILABLE, None).await;
    let client = Client::new(&url, "k").expect("client");
    // The redrive route answers 202 here; the generated operation reads it as an error answer,
    // which is fine: what counts is that it was sent twice with the same body.
    let _ = subscriptions_api::redrive_deliveries(client.config(), "01a23d6c-0843-7024-9ce1-4bf4179866b4", None).await;
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.requests.len(), 2);
    assert_eq!(seen.requests[0].1, seen.requests[1].1);
}

#[tokio::test]
async fn retries_stop_and_the_typed_error_is_answered() {
    let (url, seen) = flaky(100, StatusCode::TOO_MANY_REQUESTS, Some("0")).await;
    let client = Client::with_retries(&url, "k", 2, Duration::from_secs(30)).expect("client");
    match client.publish(&event()).await {
        Err(Error::Hub(e)) => {
            assert_eq!((e.status, e.title.as_str(), e.message.as_str()), (429, "rate_limited", "slow down"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(seen.lock().expect("lock").requests.len(), 3);
}

#[tokio::test]
async fn a_retry_after_beyond_max_wait_is_answered_not_waited() {
    let (url, seen) = flaky(100, StatusCode::TOO_MANY_REQUESTS, Some("3600")).await;
    let client = Client::with_retries(&url, "k", 5, Duration::from_secs(1)).expect("client");
    assert!(matches!(client.publish(&event()).await, Err(Error::Hub(e)) if e.status == 429));
    assert_eq!(seen.lock().expect("lock").requests.len(), 1);
}

#[tokio::test]
async fn structured_mode_carries_every_attribute_and_the_data() {
    let (url, seen) = flaky(0, StatusCode::OK, None).await;
    let client = Client::new(&url, "k").expect("client");
    let mut e = event();
    e.subject = Some("loan-7".into());
    client.publish_structured(&e).await.expect("published");
    let mut binary = event();
    binary.data_content_type = Some("application/octet-stream".into());
    binary.data = vec![0, 1, 2];
    client.publish_structured(&binary).await.expect("published");
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.requests[0].0["content-type"], "application/cloudevents+json");
    let doc: serde_json::Value = serde_json::from_slice(&seen.requests[0].1).expect("json");
    assert_eq!(doc["type"], "studio.lerian.lender.loan.approved");
    assert_eq!(doc["subject"], "loan-7");
    assert_eq!(doc["id"], e.id.to_string());
    assert_eq!(doc["data"], serde_json::json!({"amount": 100}));
    let doc: serde_json::Value = serde_json::from_slice(&seen.requests[1].1).expect("json");
    assert_eq!(doc["data_base64"], "AAEC");
}

#[test]
fn retry_after_reads_seconds_and_dates() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_299_200); // Thu, 03 Dec 2026 12:00:00 GMT
    assert_eq!(retry_after("3", now), Some(Duration::from_secs(3)));
    assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
    assert_eq!(retry_after("Thu, 03 Dec 2026 12:00:05 GMT", now), Some(Duration::from_secs(5)));
    assert_eq!(retry_after("Thu, 03 Dec 2026 11:00:00 GMT", now), Some(Duration::ZERO));
    for bad in ["-1", "soon", ""] {
        assert_eq!(retry_after(bad, now), None, "{bad:?}");
    }
}

#[test]
fn bad_settings_are_named() {
    assert!(matches!(Client::new("hub:8080", "k"), Err(Error::Config(m)) if m.starts_with("base_url")));
    assert!(matches!(Client::new("http://hub", ""), Err(Error::Config(m)) if m.starts_with("api_key")));
}

#[test]
fn typed_keeps_a_success() {
    let ok: Result<u8, streaming_hub_client::apis::Error<()>> = Ok(7);
    assert_eq!(ok.typed().expect("ok"), 7);
}
