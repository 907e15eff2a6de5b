//! `streaming-hub bench`: measured figures, never test assertions.
//!
//! `push-burst`: N events posted over HTTP (concurrently) to a hub whose webhook subscription
//! points at a local receiver that answers 204, counts deliveries by `X-Lerian-Event-Id` and
//! measures latency from a send timestamp in each payload. Runs on the embedded SQLite store, or
//! on PostgreSQL when `STREAMING_HUB_POSTGRES_DSN` is set. Prints a table and writes JSON.
//!
//! The load generator and the receiver run in the hub's process, so CPU seconds and peak RSS
//! include them: they bound the hub's own figures from above.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

#[derive(Default)]
struct Tally {
    per_event: HashMap<String, u32>,
    latencies_us: Vec<u64>,
    last_at: Option<Instant>,
}

type Shared = Arc<Mutex<Tally>>;

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

async fn receive(State(t): State<Shared>, headers: HeaderMap, body: Bytes) -> (StatusCode, Bytes) {
    if headers.get("x-lerian-event-type").is_some_and(|v| v == "streaming_hub.verification") {
        return (StatusCode::OK, body);
    }
    let id = headers.get("x-lerian-event-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let sent = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["sent_at_us"].as_u64()).unwrap_or(0);
    let mut tally = t.lock().unwrap_or_else(|p| p.into_inner());
    *tally.per_event.entry(id).or_default() += 1;
    tally.latencies_us.push(now_us().saturating_sub(sent));
    tally.last_at = Some(Instant::now());
    (StatusCode::NO_CONTENT, Bytes::new())
}

/// CPU seconds (user + system) and peak RSS in MiB of this process, from /proc.
fn process_usage() -> (f64, f64) {
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            let f: Vec<&str> = after.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(0.0);
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0);
    (cpu, rss)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// Runs `push-burst` with `events` events and `concurrency` concurrent producers.
pub async fn push_burst(events: usize, concurrency: usize, json_out: &std::path::Path) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("streaming-hub-bench-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir)?;
    let mut vars: HashMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("STREAMING_HUB_")).collect();
    let store = if vars.contains_key("STREAMING_HUB_POSTGRES_DSN") { "postgres" } else { "sqlite" };
    for (k, v) in [
        ("STREAMING_HUB_ENV", "local".to_owned()),
        ("STREAMING_HUB_SQLITE_PATH", dir.join("bench.db").display().to_string()),
        ("STREAMING_HUB_HTTP_LISTEN_ADDR", "127.0.0.1:0".to_owned()),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_DEV_KEK", crate::keys::generate("")),
    ] {
        vars.entry(k.to_owned()).or_insert(v);
    }
    if store == "postgres" && !vars.contains_key("STREAMING_HUB_POSTGRES_SCHEMA") {
        anyhow::bail!("STREAMING_HUB_POSTGRES_SCHEMA: set a fresh schema for the benchmark (it writes data)");
    }
    let config = Config::from_vars(vars).map_err(|e| anyhow::anyhow!("{e}"))?;
    let workers = config.dispatch_workers;
    let shutdown = CancellationToken::new();
    let hub = crate::start(config, shutdown.clone()).await?;
    let base = format!("http://{}", hub.addr);

    let tally: Shared = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new().fallback(receive).with_state(Arc::clone(&tally));
    tokio::spawn(async move { axum::serve(listener, app).await });

    hub_sinks::webhook::install_crypto_provider();
    let http = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build()?;
    let key = crate::keys::issue(
        hub.store.as_ref(),
        &hub_core::TenantId::parse("bench").map_err(anyhow::Error::msg)?,
        "bench",
    )
    .await?
    .1;
    let sub: Value = http
        .post(format!("{base}/v1/subscriptions"))
        .bearer_auth(&key)
        .json(&json!({"name": "bench", "event_types": ["*.*"], "sink": {"type": "webhook", "url": url}}))
        .send()
        .await?
        .json()
        .await?;
    let sub_id = sub["id"].as_str().context("no subscription")?.to_owned();
    for _ in 0..200 {
        let s: Value =
            http.get(format!("{base}/v1/subscriptions/{sub_id}")).bearer_auth(&key).send().await?.json().await?;
        if s["verification_state"] == "active" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let filler = "x".repeat(900);
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut producers = Vec::new();
    for _ in 0..concurrency {
        let (http, base, key, next, filler) =
            (http.clone(), base.clone(), key.clone(), Arc::clone(&next), filler.clone());
        producers.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < events {
                let body = json!({"sent_at_us": now_us(), "filler": filler}).to_string();
                let response = http
                    .post(format!("{base}/v1/events"))
                    .bearer_auth(&key)
                    .header("content-type", "application/json")
                    .header("ce-specversion", "1.0")
                    .header("ce-id", uuid::Uuid::now_v7().to_string())
                    .header("ce-source", "bench")
                    .header("ce-type", "studio.lerian.bench.payment.settled")
                    .header("ce-time", chrono::Utc::now().to_rfc3339())
                    .header("ce-schemaversion", "1.0.0")
                    .header("ce-resourcetype", "payment")
                    .header("ce-eventtype", "settled")
                    .header("ce-tenantid", "bench")
                    .body(body)
                    .send()
                    .await;
                if !matches!(response.map(|r| r.status().as_u16()), Ok(202)) {
                    anyhow::bail!("an event was not accepted");
                }
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for p in producers {
        p.await??;
    }
    let ingest_secs = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let delivered = tally.lock().unwrap_or_else(|p| p.into_inner()).per_event.len();
        if delivered >= events || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (cpu, rss) = process_usage();
    let t = tally.lock().unwrap_or_else(|p| p.into_inner());
    let distinct = t.per_event.len();
    let total: u32 = t.per_event.values().sum();
    let delivered_secs = t.last_at.map_or(f64::NAN, |l| (l - started).as_secs_f64());
    let mut lat = t.latencies_us.clone();
    lat.sort_unstable();
    let result = json!({
        "scenario": "push-burst",
        "store": store,
        "events": events,
        "producers": concurrency,
        "workers": workers,
        "accepted_per_s": events as f64 / ingest_secs,
        "delivered_per_s": distinct as f64 / delivered_secs,
        "delivered": distinct,
        "duplicates": total as usize - distinct,
        "latency_ms": {"p50": percentile(&lat, 0.50), "p99": percentile(&lat, 0.99), "max": percentile(&lat, 1.0)},
        "process_cpu_s": cpu,
        "process_peak_rss_mib": rss,
    });
    drop(t);
    println!("push-burst ({store}, {events} events of ~1 KiB, {concurrency} producers, {workers} workers)");
    println!("  accepted/s        {:>10.0}", result["accepted_per_s"].as_f64().unwrap_or(0.0));
    println!("  delivered/s       {:>10.0}", result["delivered_per_s"].as_f64().unwrap_or(0.0));
    println!("  delivered         {:>10} of {events}", distinct);
    println!("  duplicates        {:>10}", total as usize - distinct);
    for p in ["p50", "p99", "max"] {
        println!("  latency {p:<4} ms   {:>10.1}", result["latency_ms"][p].as_f64().unwrap_or(0.0));
    }
    println!("  process CPU s     {cpu:>10.1}   (hub, load generator and receiver together)");
    println!("  process peak RSS  {rss:>10.1} MiB");
    if let Some(parent) = json_out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(json_out, serde_json::to_string_pretty(&result)?)?;
    println!("  written to {}", json_out.display());
    shutdown.cancel();
    hub.wait().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
