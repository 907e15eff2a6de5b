//! `peer`: the `slow-receivers` measurement made of another delivery service (Svix or Hookdeck
//! Outpost), so this hub's figures stand beside a competitor's from the same harness: the same
//! ~1 KiB payloads, the same receiver (here on the one fixed address the peer's endpoint points
//! at, answering after `latency_ms`), the same counting by event id and latency from `sent_at_us`.
//!
//! The peer is started beforehand by its start script (`shared/peers/<peer>/start.sh`), which
//! writes its API token and the PIDs of its processes into a run folder; this scenario reads them
//! there, posts through the peer's API and reads the CPU of the peer's processes, of PostgreSQL and
//! of the broker it queues on from /proc.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::fanout::wait;
use crate::harness::{Latency, Receiver, body, cpu_of_named, f0, f1, now_us, postgres_cpu, usage_of, write_json};

/// The services measured beside this hub.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Peer {
    /// svix-server (queue on its own Redis), `shared/peers/svix`.
    Svix,
    /// Hookdeck Outpost (queue on RabbitMQ, cache on Redis), `shared/peers/outpost`.
    Outpost,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Self::Svix => "svix",
            Self::Outpost => "outpost",
        }
    }

    /// The PID files its start script writes: the server first.
    fn pid_files(self) -> &'static [&'static str] {
        match self {
            Self::Svix => &["svix-server.pid", "redis.pid"],
            Self::Outpost => &["outpost.pid", "redis.pid"],
        }
    }

    fn publish_url(self, base: &str) -> String {
        match self {
            Self::Svix => format!("{base}/api/v1/app/bench/msg/"),
            Self::Outpost => format!("{base}/api/v1/publish"),
        }
    }

    fn message(self, payload: Value) -> Value {
        match self {
            Self::Svix => json!({"eventType": "bench.event", "payload": payload}),
            Self::Outpost => json!({
                "id": uuid::Uuid::now_v7().to_string(), "tenant_id": "bench", "topic": "bench.event", "data": payload,
            }),
        }
    }
}

/// CPU seconds of the processes named by PID files in `run`, and the first one's peak RSS.
fn peer_usage(run: &Path, peer: Peer) -> anyhow::Result<(f64, f64)> {
    let mut cpu = 0.0;
    let mut rss = 0.0;
    for (i, file) in peer.pid_files().iter().enumerate() {
        let pid =
            std::fs::read_to_string(run.join(file)).with_context(|| format!("reading {}", run.join(file).display()))?;
        let (c, r) = usage_of(pid.trim());
        cpu += c;
        if i == 0 {
            rss = r;
        }
    }
    Ok((cpu, rss))
}

#[derive(Debug, Clone, Copy)]
struct Spent {
    peer: f64,
    postgres: f64,
    broker: f64,
}

fn spent_now(run: &Path, peer: Peer) -> anyhow::Result<(Spent, f64)> {
    let (cpu, rss) = peer_usage(run, peer)?;
    Ok((Spent { peer: cpu, postgres: postgres_cpu(), broker: cpu_of_named("beam.smp") }, rss))
}

/// Posts `n` events to the peer from `producers` concurrent producers; how long it took.
async fn post_many(
    http: &reqwest::Client,
    peer: Peer,
    base: &str,
    token: &str,
    n: usize,
    producers: usize,
) -> anyhow::Result<Duration> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..producers.min(n).max(1) {
        let (http, next, url, token) = (http.clone(), Arc::clone(&next), peer.publish_url(base), token.to_owned());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let payload: Value = serde_json::from_str(&body(now_us()))?;
                let response = http.post(&url).bearer_auth(&token).json(&peer.message(payload)).send().await?;
                let status = response.status();
                anyhow::ensure!(status.is_success(), "{} answered {status}: {}", peer.name(), response.text().await?);
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// `events` events posted to `peer` (running, started from the run folder `run`, its API at
/// `base`), delivered to a receiver on `receiver` answering after `latency_ms`.
#[allow(clippy::too_many_arguments)]
pub async fn peer(
    peer: Peer,
    run: PathBuf,
    base: String,
    receiver: String,
    latency_ms: u64,
    events: usize,
    producers: usize,
    json_out: &Path,
) -> anyhow::Result<()> {
    let token = std::fs::read_to_string(run.join("token")).context("reading the peer's token from its run folder")?;
    let token = token.lines().next().unwrap_or_default().trim().to_owned();
    let label = "peer";
    let sink = Receiver::start_on(&receiver, &format!("delay-{latency_ms}"), label).await?;
    hub_sinks::install_crypto_provider();
    let http = reqwest::Client::builder().pool_max_idle_per_host(producers).build()?;

    // Warm up (connections, the endpoint's first attempt), then forget it.
    post_many(&http, peer, &base, &token, 1, 1).await?;
    wait(&|| sink.delivered(label), 1).await?;
    sink.take(label);

    let (before, _) = spent_now(&run, peer)?;
    let started = Instant::now();
    let accepted = post_many(&http, peer, &base, &token, events, producers).await?;
    wait(&|| sink.delivered(label), events).await?;
    let (after, rss) = spent_now(&run, peer)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = sink.received(label);
    let delivered = r.distinct();
    let per_s = delivered as f64 / r.last_at.map_or(f64::NAN, |l| (l - started).as_secs_f64());
    let latency: Latency = r.latency();
    let n = delivered.max(1) as f64;
    let (peer_ms, pg_ms, broker_ms) = (
        (after.peer - before.peer) * 1000.0 / n,
        (after.postgres - before.postgres) * 1000.0 / n,
        (after.broker - before.broker) * 1000.0 / n,
    );
    let figures = json!({
        "scenario": "peer", "peer": peer.name(), "latency_ms": latency_ms, "events": events,
        "deliveries": delivered, "duplicates": r.duplicates(), "delivered_per_s": per_s,
        "accepted_per_s": events as f64 / accepted.as_secs_f64(), "e2e_latency_ms": latency.json(),
        "receiver_in_flight": {"max": r.max_in_flight},
        "cpu_ms_per_delivery": {"peer": peer_ms, "postgres": pg_ms, "rabbitmq": broker_ms, "total": peer_ms + pg_ms + broker_ms},
        "peer_server_peak_rss_mib": rss,
    });
    println!("peer: {} ({events} events of ~1 KiB to one webhook answering in {latency_ms} ms)", peer.name());
    for (name, value) in [
        ("deliveries", format!("{delivered} ({} duplicates)", r.duplicates())),
        ("accepted/s", f0(events as f64 / accepted.as_secs_f64())),
        ("delivered/s", f0(per_s)),
        ("e2e p50 / p99 ms", format!("{} / {}", f1(latency.p50), f1(latency.p99))),
        ("in flight at the receiver: max", r.max_in_flight.to_string()),
        ("peer CPU ms per event (server + Redis)", format!("{peer_ms:.3}")),
        ("PostgreSQL CPU ms per event", format!("{pg_ms:.3}")),
        ("RabbitMQ CPU ms per event", format!("{broker_ms:.3}")),
        ("all CPU ms per event", format!("{:.3}", peer_ms + pg_ms + broker_ms)),
        ("peer server peak RSS MiB", f1(rss)),
    ] {
        println!("  {name:<40} {value:>12}");
    }
    write_json(&figures, json_out)
}
