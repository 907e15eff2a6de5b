//! The local webhook receiver of the benches: it counts deliveries by their event id (the hub's,
//! Svix's or Outpost's header), measures latency from the send timestamp in each payload, and can
//! answer late, refuse beyond a capacity, or never answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::{Value, json};

use super::{SLOW_ANSWER, now_us};

/// What one receiver label (one URL path) got.
#[derive(Debug, Default, Clone)]
pub struct Received {
    pub per_event: HashMap<String, u32>,
    pub latencies_us: Vec<u64>,
    /// When each delivered event was sent (µs since the epoch), in the order of `latencies_us`.
    pub sent_us: Vec<u64>,
    /// From each delivered event's send to its request reaching the receiver, before the
    /// receiver's own wait (µs), in the order of `latencies_us`: what the hub alone took.
    pub reached_us: Vec<u64>,
    pub first_at: Option<Instant>,
    pub last_at: Option<Instant>,
    /// Requests being answered now (refused ones included).
    pub in_flight: usize,
    /// The most requests that were being answered at once.
    pub max_in_flight: usize,
    /// Requests in flight as each one arrived (itself included): the hub's concurrency as the
    /// receiver saw it.
    pub concurrency: Vec<usize>,
    /// Requests answered 503 for want of capacity (`/cap-…` receivers).
    pub refused: usize,
}

impl Received {
    pub fn distinct(&self) -> usize {
        self.per_event.len()
    }
    pub fn duplicates(&self) -> usize {
        self.per_event.values().map(|n| *n as usize).sum::<usize>() - self.per_event.len()
    }
    /// Distinct deliveries per second between `since` and the last one.
    pub fn rate_since(&self, since: Instant) -> f64 {
        self.last_at.map_or(0.0, |last| self.distinct() as f64 / (last - since).as_secs_f64().max(1e-9))
    }
    pub fn latency(&self) -> Latency {
        Latency::of(&self.latencies_us)
    }
    /// From send to the receiver of the events sent within `[from_us, to_us)`.
    pub fn reached_of_sent(&self, from_us: u64, to_us: u64) -> (Latency, usize) {
        self.of_sent(&self.reached_us, from_us, to_us)
    }
    /// The latency of the events sent within `[from_us, to_us)`.
    pub fn latency_of_sent(&self, from_us: u64, to_us: u64) -> (Latency, usize) {
        self.of_sent(&self.latencies_us, from_us, to_us)
    }
    /// `samples` (one per delivery, in the order of `sent_us`) of the events sent within
    /// `[from_us, to_us)`.
    fn of_sent(&self, samples: &[u64], from_us: u64, to_us: u64) -> (Latency, usize) {
        let samples: Vec<u64> =
            samples.iter().zip(&self.sent_us).filter(|(_, s)| (from_us..to_us).contains(*s)).map(|(l, _)| *l).collect();
        (Latency::of(&samples), samples.len())
    }
    /// The `n` seconds of sending whose slowest delivery was slowest: each as (seconds since the
    /// first send, events sent in it, that second's latency), worst first. Where a p99 comes from
    /// a stall rather than a spread shows here.
    pub fn worst_seconds(&self, n: usize) -> Vec<(u64, usize, Latency)> {
        let Some(&start) = self.sent_us.iter().min() else { return Vec::new() };
        let mut by_second: HashMap<u64, Vec<u64>> = HashMap::new();
        for (l, s) in self.latencies_us.iter().zip(&self.sent_us) {
            by_second.entry((s - start) / 1_000_000).or_default().push(*l);
        }
        let mut seconds: Vec<(u64, usize, Latency)> =
            by_second.into_iter().map(|(second, l)| (second, l.len(), Latency::of(&l))).collect();
        seconds.sort_by(|a, b| b.2.max.total_cmp(&a.2.max));
        seconds.truncate(n);
        seconds
    }
}

type Tally = Arc<Mutex<HashMap<String, Received>>>;

/// A receiver's state: what it got, and how it answers a request whose path names no speed and
/// label (a peer's endpoint, made with one fixed URL).
#[derive(Debug, Clone)]
struct Answering {
    tally: Tally,
    plain: (String, String),
}

/// The headers an event's id arrives in: this hub's, Svix's and Outpost's.
const ID_HEADERS: [&str; 3] = ["x-lerian-event-id", "svix-id", "x-outpost-event-id"];

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A local webhook receiver: `/fast/<label>` answers 204 at once, `/slow/<label>` after
/// [`SLOW_ANSWER`], `/delay-<ms>/<label>` after that many milliseconds, `/cap-<n>-<ms>/<label>`
/// serves `n` requests of the label at once in `ms` each and answers 503 at once beyond them, and
/// `/hang/<label>` never answers. Verification requests are answered at once.
#[derive(Debug, Clone)]
pub struct Receiver {
    base: String,
    tally: Tally,
}

async fn receive(State(a): State<Answering>, uri: Uri, headers: HeaderMap, body: Bytes) -> (StatusCode, Bytes) {
    if headers.get("x-lerian-event-type").is_some_and(|v| v == "streaming_hub.verification") {
        return (StatusCode::OK, body);
    }
    let reached = now_us();
    let t = a.tally;
    let path = uri.path().trim_start_matches('/');
    let (speed, label) = match path.split_once('/') {
        Some((speed, label)) => (speed.to_owned(), label.to_owned()),
        None => a.plain.clone(),
    };
    let (wait, capacity) = match speed.split('-').collect::<Vec<_>>().as_slice() {
        ["slow"] => (SLOW_ANSWER, None),
        ["hang"] => (Duration::from_secs(3600), None),
        ["delay", ms] => (Duration::from_millis(ms.parse().unwrap_or(0)), None),
        ["cap", n, ms] => (Duration::from_millis(ms.parse().unwrap_or(0)), n.parse::<usize>().ok()),
        _ => (Duration::ZERO, None),
    };
    let now_serving = {
        let mut tally = lock(&t);
        let r = tally.entry(label.clone()).or_default();
        r.in_flight += 1;
        r.max_in_flight = r.max_in_flight.max(r.in_flight);
        let n = r.in_flight;
        r.concurrency.push(n);
        n
    };
    let leave = |refused: bool| {
        let mut tally = lock(&t);
        let r = tally.entry(label.clone()).or_default();
        r.in_flight = r.in_flight.saturating_sub(1);
        if refused {
            r.refused += 1;
        }
    };
    if capacity.is_some_and(|n| now_serving > n) {
        leave(true);
        return (StatusCode::SERVICE_UNAVAILABLE, Bytes::from_static(b"busy"));
    }
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    leave(false);
    let id =
        ID_HEADERS.iter().find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok())).unwrap_or_default().to_owned();
    // A peer may wrap the payload (`data`) where this hub sends it as it came.
    let sent = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["sent_at_us"].as_u64().or_else(|| v["data"]["sent_at_us"].as_u64()))
        .unwrap_or(0);
    let latency = now_us().saturating_sub(sent);
    let now = Instant::now();
    let mut tally = lock(&t);
    let r = tally.entry(label).or_default();
    *r.per_event.entry(id).or_default() += 1;
    r.latencies_us.push(latency);
    r.sent_us.push(sent);
    r.reached_us.push(reached.saturating_sub(sent));
    r.first_at.get_or_insert(now);
    r.last_at = Some(now);
    (StatusCode::NO_CONTENT, Bytes::new())
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_on("127.0.0.1:0", "fast", "").await
    }

    /// A receiver as [`Receiver::start`] over HTTPS with `pki`'s server certificate, requiring a
    /// client certificate of its CA when `client_certificates`.
    pub async fn start_tls(pki: &hub_testkit::tls::Pki, client_certificates: bool) -> Self {
        let tally: Tally = Arc::default();
        let answering = Answering { tally: Arc::clone(&tally), plain: ("fast".to_owned(), String::new()) };
        let app = axum::Router::new().fallback(receive).with_state(answering);
        let base = pki.serve(app, client_certificates).await;
        Self { base, tally }
    }

    /// A receiver on `addr` that answers a request to `/` as `speed` says and counts it under
    /// `label`: the one endpoint a peer's start script points at.
    pub async fn start_on(addr: &str, speed: &str, label: &str) -> anyhow::Result<Self> {
        let tally: Tally = Arc::default();
        let listener =
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding the receiver to {addr}"))?;
        let base = format!("http://{}", listener.local_addr()?);
        let answering = Answering { tally: Arc::clone(&tally), plain: (speed.to_owned(), label.to_owned()) };
        let app = axum::Router::new().fallback(receive).with_state(answering);
        // As production web servers do, answers go out without a Nagle delay.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { base, tally })
    }

    /// The URL of `label` answered as `speed` says (`fast`, `slow`, `delay-<ms>`,
    /// `cap-<n>-<ms>`, `hang`).
    pub fn url_as(&self, speed: &str, label: &str) -> String {
        format!("{}/{speed}/{label}", self.base)
    }

    pub fn url(&self, label: &str, slow: bool) -> String {
        format!("{}/{}/{label}", self.base, if slow { "slow" } else { "fast" })
    }

    pub fn delivered(&self, label: &str) -> usize {
        lock(&self.tally).get(label).map_or(0, Received::distinct)
    }

    /// A copy of what `label` received so far.
    pub fn received(&self, label: &str) -> Received {
        lock(&self.tally).get(label).cloned().unwrap_or_default()
    }

    /// Takes (and clears) what `label` received.
    pub fn take(&self, label: &str) -> Received {
        lock(&self.tally).remove(label).unwrap_or_default()
    }

    /// Waits until `label` got `n` distinct events; false at the deadline.
    pub async fn wait_for(&self, label: &str, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.delivered(label) < n {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(samples_us: &[u64]) -> Self {
        let mut sorted = samples_us.to_vec();
        sorted.sort_unstable();
        Self::of_sorted(&sorted)
    }
    /// The same of samples already in ascending order.
    pub fn of_sorted(sorted_us: &[u64]) -> Self {
        Self { p50: quantile_ms(sorted_us, 0.5), p99: quantile_ms(sorted_us, 0.99), max: quantile_ms(sorted_us, 1.0) }
    }
    pub fn json(&self) -> Value {
        json!({"p50": self.p50, "p99": self.p99, "max": self.max})
    }
}

/// The `p` quantile, in milliseconds, of microsecond samples in ascending order (0 for none).
pub fn quantile_ms(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    sorted_us[((sorted_us.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0
}
