//! `transform-cost`: what a subscription's transform costs a delivery. The same events go to one
//! webhook over TLS (a receiver of a private CA, answering at once) three ways, a fresh hub each:
//! no transform, a trivial one (`return event`), and a realistic one that maps fields, renames,
//! drops a personal field and adds headers (the receiver counts deliveries by their path, so the
//! path stays). What differs is the hub's own work: its CPU
//! per delivery, and the transform runs' own time as the hub measures it
//! (`streaming_hub_transform_duration_seconds`, the wait for a transform thread included).

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use crate::fanout::wait;
use crate::harness::{BenchHub, Receiver, f0, f1, metric_sum, write_json};
use crate::scenarios::cpu_json;

const TRIVIAL: &str = "function handler(event) { return event; }";

/// A legacy endpoint's shape: fields renamed and nested, the 1 KiB filler cut to a note, headers
/// from the event (the send time stays: the receiver measures latency from it).
const REALISTIC: &str = r#"
function handler(event) {
  const d = event.data || {};
  event.data = {
    sent_at_us: d.sent_at_us,
    reference: event.id,
    kind: event.type,
    occurred_at: event.time,
    customer: { id: event.subject, segment: d.segment || "retail" },
    amount: { value: d.amount, currency: d.currency || "BRL" },
    lines: (d.items || []).map((item, i) => ({ line: i + 1, sku: item.sku, quantity: item.qty })),
    note: (d.filler || "").slice(0, 64).toUpperCase(),
  };
  event.headers["x-team"] = "risk";
  event.headers["x-partner-key"] = "ledger-" + (event.subject || "none");
  event.headers["x-event-kind"] = encodeURIComponent(event.type);
  return event;
}
"#;

pub async fn transform_cost(events: usize, producers: usize, json_out: &Path) -> anyhow::Result<()> {
    let pki = hub_testkit::tls::Pki::new();
    let mut rows = Vec::new();
    let mut figures = serde_json::Map::new();
    for (way, code) in [("none", None), ("trivial", Some(TRIVIAL)), ("realistic", Some(REALISTIC))] {
        let receiver = Receiver::start_tls(&pki, false).await;
        let url = receiver.url_as("fast", way);
        let mut subscription = json!({"name": way, "event_types": ["*.*"],
            "sink": {"type": "webhook", "url": url, "tls": {"ca_pem": pki.ca_pem}}});
        if let Some(code) = code {
            subscription["transform"] = json!({"language": "javascript", "code": code});
        }
        let hub = BenchHub::start(None).await?;
        let key = hub.tenant(way).await?;
        hub.subscribe_with(&key, subscription).await?;
        let who = [(key, way.to_owned())];
        // Warm up (the connection, the compiled handler), then forget it.
        hub.post_many(&who, 1, 1).await?;
        wait(&|| receiver.delivered(way), 1).await?;
        receiver.take(way);
        let runs_before = transform_runs(&hub.metrics().await?);

        let before = hub.usage();
        let started = Instant::now();
        hub.post_many(&who, events, producers).await?;
        wait(&|| receiver.delivered(way), events).await?;
        let spent = hub.usage().since(&before);
        let metrics = hub.metrics().await?;
        let got = receiver.received(way);
        let usage = hub.finish().await?;
        let (runs, seconds) = transform_runs(&metrics);
        let run_us = (seconds - runs_before.1) * 1e6 / (runs - runs_before.0).max(1.0);
        let per_s = got.distinct() as f64 / got.last_at.map_or(f64::NAN, |l| (l - started).as_secs_f64());
        let latency = got.latency();
        let cpu = cpu_json(&spent, got.distinct());
        rows.push((way, per_s, latency, cpu.clone(), code.map(|_| run_us), usage.hub_peak_rss_mib));
        figures.insert(
            way.to_owned(),
            json!({"delivered_per_s": per_s, "e2e_latency_ms": latency.json(), "cpu_ms_per_delivery": cpu,
                "transform_run_us": code.map(|_| run_us), "deliveries": got.distinct(), "duplicates": got.duplicates(),
                "hub_peak_rss_mib": usage.hub_peak_rss_mib}),
        );
    }

    println!(
        "transform-cost ({events} events of ~1 KiB to one webhook over TLS answering at once, a fresh hub each way)"
    );
    println!(
        "  {:<10} {:>12} {:>16} {:>24} {:>16} {:>9}",
        "transform", "delivered/s", "p50 / p99 ms", "CPU ms (hub + PG)", "run µs (hub's)", "RSS MiB"
    );
    let none = rows[0].3["hub"].as_f64().unwrap_or(f64::NAN);
    for (way, per_s, latency, cpu, run_us, rss) in &rows {
        let hub_ms = cpu["hub"].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {:<10} {:>12} {:>16} {:>24} {:>16} {:>9}",
            way,
            f0(*per_s),
            format!("{} / {}", f1(latency.p50), f1(latency.p99)),
            format!("{hub_ms:.3} ({:+.3}) + {:.3}", hub_ms - none, cpu["postgres"].as_f64().unwrap_or(f64::NAN)),
            run_us.map_or("—".to_owned(), |us| format!("{us:.1}")),
            f1(*rss),
        );
    }
    let mut figures = Value::Object(figures);
    figures["scenario"] = json!("transform-cost");
    figures["events"] = json!(events);
    write_json(&figures, json_out)
}

/// Transform runs so far and the seconds they took.
fn transform_runs(metrics: &str) -> (f64, f64) {
    (
        metric_sum(metrics, "streaming_hub_transform_duration_seconds_count", &[]),
        metric_sum(metrics, "streaming_hub_transform_duration_seconds_sum", &[]),
    )
}
