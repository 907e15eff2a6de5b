//! A real webhook receiver on loopback, as a subscriber would run one: it answers verification
//! challenges, checks signatures, and fails, stalls or succeeds as a test scripts it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// How deliveries (not verification probes) are answered.
#[derive(Debug, Clone)]
pub enum Script {
    /// 204.
    Ok,
    /// 500 for the first `n` deliveries, then 204.
    FailFirst(usize),
    /// Always 503.
    Fail,
    /// Sleep, then 204.
    Slow(Duration),
    /// Never answer (until the connection is dropped).
    Hang,
    /// 503 for events with this subject (`X-Lerian-Subject`), 204 for the others.
    FailSubject(String),
    /// 500 with the delivered body echoed in the answer (what a receiver's error page may do).
    FailEcho,
    /// Serves this many deliveries at once, each taking the duration, and answers 503 at once
    /// beyond them.
    Capacity(usize, Duration),
    /// `429` with `Retry-After` (seconds) for the first `n` deliveries, then 204.
    TooManyFirst(usize, u64),
}

/// One delivery as received.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The request's path (and query).
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// Whether a signature verified with one of the receiver's secrets.
    pub verified: bool,
    /// When it arrived.
    pub received_at: std::time::Instant,
}

impl Delivery {
    pub fn header(&self, name: &str) -> String {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
    }
}

#[derive(Clone)]
struct Shared {
    script: Arc<Mutex<Script>>,
    secrets: Arc<Mutex<Vec<String>>>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    /// The deliveries answered 2xx, in the order their answers were decided.
    accepted: Arc<Mutex<Vec<Delivery>>>,
    probes: Arc<AtomicUsize>,
    failures_left: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    /// Verification probes wait while this is false.
    probes_open: Arc<tokio::sync::watch::Sender<bool>>,
    /// `WebHook-Allowed-Rate` sent with verification answers.
    allowed_rate: Arc<Mutex<Option<String>>>,
    /// Deliveries answered 503 for want of capacity (`Script::Capacity`).
    refused: Arc<AtomicUsize>,
}

pub struct Receiver {
    pub url: String,
    shared: Shared,
}

impl Receiver {
    pub async fn start(script: Script) -> Self {
        let failures = match script {
            Script::FailFirst(n) | Script::TooManyFirst(n, _) => n,
            _ => 0,
        };
        let shared = Shared {
            script: Arc::new(Mutex::new(script)),
            secrets: Arc::new(Mutex::new(Vec::new())),
            deliveries: Arc::new(Mutex::new(Vec::new())),
            accepted: Arc::new(Mutex::new(Vec::new())),
            probes: Arc::new(AtomicUsize::new(0)),
            failures_left: Arc::new(AtomicUsize::new(failures)),
            in_flight: Arc::new(AtomicUsize::new(0)),
            max_in_flight: Arc::new(AtomicUsize::new(0)),
            probes_open: Arc::new(tokio::sync::watch::Sender::new(true)),
            allowed_rate: Arc::new(Mutex::new(None)),
            refused: Arc::new(AtomicUsize::new(0)),
        };
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, shared }
    }

    /// The secrets signatures are checked against.
    pub fn trust(&self, secret: &str) {
        self.shared.secrets.lock().expect("secrets").push(secret.to_owned());
    }

    /// Makes verification probes wait for an answer (`false`) until they are let through again
    /// (`true`).
    pub fn open_probes(&self, open: bool) {
        self.shared.probes_open.send_replace(open);
    }

    /// Verification answers declare this rate (`WebHook-Allowed-Rate`, requests per minute).
    pub fn declare_rate(&self, per_minute: &str) {
        *self.shared.allowed_rate.lock().expect("rate") = Some(per_minute.to_owned());
    }

    /// Deliveries refused for want of capacity.
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }

    pub fn set_script(&self, script: Script) {
        *self.shared.script.lock().expect("script") = script;
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.deliveries.lock().expect("deliveries").clone()
    }

    /// The deliveries answered 2xx.
    pub fn accepted(&self) -> Vec<Delivery> {
        self.shared.accepted.lock().expect("accepted").clone()
    }

    /// How many deliveries were answered with a success (without copying them).
    pub fn accepted_len(&self) -> usize {
        self.shared.accepted.lock().expect("accepted").len()
    }

    /// Deliveries being answered now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Waits, with a deadline, until at least `n` deliveries arrived.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> Vec<Delivery> {
        let end = tokio::time::Instant::now() + deadline;
        loop {
            let got = self.deliveries();
            if got.len() >= n {
                return got;
            }
            assert!(tokio::time::Instant::now() < end, "only {} of {n} deliveries arrived in time", got.len());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn handle(State(s): State<Shared>, uri: axum::http::Uri, headers: HeaderMap, body: Bytes) -> Response {
    let is_probe = headers.get("x-lerian-event-type").is_some_and(|v| v == "streaming_hub.verification");
    if is_probe {
        s.probes.fetch_add(1, Ordering::SeqCst);
        let _ = s.probes_open.subscribe().wait_for(|open| *open).await;
        let challenge =
            serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["challenge"].as_str().map(str::to_owned));
        let mut answer = (StatusCode::OK, challenge.unwrap_or_default()).into_response();
        if let Some(rate) = s.allowed_rate.lock().expect("rate").clone()
            && let Ok(v) = axum::http::HeaderValue::from_str(&rate)
        {
            answer.headers_mut().insert("webhook-allowed-rate", v);
        }
        return answer;
    }
    let secrets = s.secrets.lock().expect("secrets").clone();
    let verified = hub_testkit::signature_verifies(&headers, &body, &secrets);
    let subject_header = headers.get("x-lerian-subject").map(|v| v.as_bytes().to_vec());
    let path = uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let delivery = Delivery { path, headers, body: body.to_vec(), verified, received_at: std::time::Instant::now() };
    s.deliveries.lock().expect("deliveries").push(delivery.clone());
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    s.max_in_flight.fetch_max(now, Ordering::SeqCst);
    // Counted out however the request ends: answered, or dropped when the client gave up.
    struct Out(Arc<AtomicUsize>);
    impl Drop for Out {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _out = Out(Arc::clone(&s.in_flight));
    let script = s.script.lock().expect("script").clone();
    let response = match script {
        Script::Ok => StatusCode::NO_CONTENT.into_response(),
        Script::FailFirst(_) => {
            let left = s.failures_left.load(Ordering::SeqCst);
            if left > 0 {
                s.failures_left.fetch_sub(1, Ordering::SeqCst);
                (StatusCode::INTERNAL_SERVER_ERROR, "not yet").into_response()
            } else {
                StatusCode::NO_CONTENT.into_response()
            }
        }
        Script::Fail => (StatusCode::SERVICE_UNAVAILABLE, "down").into_response(),
        Script::TooManyFirst(_, seconds) => {
            let left = s.failures_left.load(Ordering::SeqCst);
            if left > 0 {
                s.failures_left.fetch_sub(1, Ordering::SeqCst);
                s.refused.fetch_add(1, Ordering::SeqCst);
                (StatusCode::TOO_MANY_REQUESTS, [("retry-after", seconds.to_string())], "slow down").into_response()
            } else {
                StatusCode::NO_CONTENT.into_response()
            }
        }
        Script::FailEcho => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot take {}", String::from_utf8_lossy(&body)))
                .into_response()
        }
        Script::Slow(d) => {
            tokio::time::sleep(d).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Script::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Script::Capacity(n, d) => {
            if now > n {
                s.refused.fetch_add(1, Ordering::SeqCst);
                (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
            } else {
                tokio::time::sleep(d).await;
                StatusCode::NO_CONTENT.into_response()
            }
        }
        Script::FailSubject(subject) => {
            if subject_header.as_deref() == Some(subject.as_bytes()) {
                (StatusCode::SERVICE_UNAVAILABLE, "down for this subject").into_response()
            } else {
                StatusCode::NO_CONTENT.into_response()
            }
        }
    };
    if response.status().is_success() {
        s.accepted.lock().expect("accepted").push(delivery);
    }
    response
}
