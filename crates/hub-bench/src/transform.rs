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

/// One way measured: its delivered/s, latency, CPU figures, run µs and the hub's peak RSS.
struct Measured {
    per_s: f64,
    latency: crate::harness::Latency,
    cpu: Value,
    run_us: Option<f64>,
    rss: f64,
    deliveries: usize,
    duplicates: usize,
}

impl Measured {
    fn hub_ms(&self) -> f64 {
        self.cpu["hub"].as_f64().unwrap_or(f64::NAN)
    }
}

async fn measure(
    pki: &hub_testkit::tls::Pki,
    way: &str,
    code: Option<&str>,
    events: usize,
    producers: usize,
) -> anyhow::Result<Measured> {
    let receiver = Receiver::start_tls(pki, false).await;
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
    Ok(Measured {
        per_s,
        latency: got.latency(),
        cpu: cpu_json(&spent, got.distinct()),
        run_us: code.map(|_| run_us),
        rss: usage.hub_peak_rss_mib,
        deliveries: got.distinct(),
        duplicates: got.duplicates(),
    })
}

const WAYS: [(&str, Option<&str>); 3] = [("none", None), ("trivial", Some(TRIVIAL)), ("realistic", Some(REALISTIC))];

/// `rounds` rounds of the three ways in turn (each round's transforms are set against that
/// round's `none`, measured minutes apart at most: the machine's own drift from one round to the
/// next is as large as what is measured), and the median, mean and range over the rounds.
pub async fn transform_cost(events: usize, producers: usize, rounds: usize, json_out: &Path) -> anyhow::Result<()> {
    let pki = hub_testkit::tls::Pki::new();
    println!(
        "transform-cost ({events} events of ~1 KiB to one webhook over TLS answering at once, a fresh hub each way, \
         {rounds} round(s))"
    );
    println!(
        "  {:<5} {:<10} {:>12} {:>16} {:>24} {:>16} {:>9}",
        "round", "transform", "delivered/s", "p50 / p99 ms", "CPU ms (hub + PG)", "run µs (hub's)", "RSS MiB"
    );
    let mut all: Vec<Vec<Measured>> = Vec::new();
    let mut json_rounds = Vec::new();
    for round in 1..=rounds {
        let mut measured = Vec::new();
        for (way, code) in WAYS {
            measured.push(measure(&pki, way, code, events, producers).await?);
        }
        let none = measured[0].hub_ms();
        let mut figures = serde_json::Map::new();
        for ((way, _), m) in WAYS.iter().zip(&measured) {
            println!(
                "  {:<5} {:<10} {:>12} {:>16} {:>24} {:>16} {:>9}",
                round,
                way,
                f0(m.per_s),
                format!("{} / {}", f1(m.latency.p50), f1(m.latency.p99)),
                format!(
                    "{:.3} ({:+.3}) + {:.3}",
                    m.hub_ms(),
                    m.hub_ms() - none,
                    m.cpu["postgres"].as_f64().unwrap_or(f64::NAN)
                ),
                m.run_us.map_or("—".to_owned(), |us| format!("{us:.1}")),
                f1(m.rss),
            );
            figures.insert(
                (*way).to_owned(),
                json!({"delivered_per_s": m.per_s, "e2e_latency_ms": m.latency.json(), "cpu_ms_per_delivery": m.cpu,
                    "transform_run_us": m.run_us, "deliveries": m.deliveries, "duplicates": m.duplicates,
                    "hub_peak_rss_mib": m.rss}),
            );
        }
        json_rounds.push(Value::Object(figures));
        all.push(measured);
    }
    let mut summary = serde_json::Map::new();
    println!("  over {rounds} round(s), each set against its round's none: median, mean [min, max]");
    for (i, (way, _)) in WAYS.iter().enumerate().skip(1) {
        let cpu_us = spread(all.iter().map(|r| (r[i].hub_ms() - r[0].hub_ms()) * 1000.0).collect());
        let rate = spread(all.iter().map(|r| r[i].per_s / r[0].per_s).collect());
        println!(
            "  {:<10} hub CPU µs a delivery beside none {:.0}, {:.0} [{:.0}, {:.0}]; delivered/s against none {:.2}, {:.2} [{:.2}, {:.2}]",
            way, cpu_us.median, cpu_us.mean, cpu_us.min, cpu_us.max, rate.median, rate.mean, rate.min, rate.max
        );
        summary.insert(
            (*way).to_owned(),
            json!({"hub_cpu_us_beside_none": cpu_us.json(), "rate_against_none": rate.json()}),
        );
    }
    let mut figures =
        json!({"scenario": "transform-cost", "events": events, "rounds": json_rounds, "summary": summary});
    // The first round's figures stay at the top, where a single round's report has them.
    if let Some(Value::Object(first)) = figures["rounds"].get(0).cloned() {
        for (way, value) in first {
            figures[way] = value;
        }
    }
    write_json(&figures, json_out)
}

/// The median, mean, least and most of some figures.
struct Spread {
    median: f64,
    mean: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn json(&self) -> Value {
        json!({"median": self.median, "mean": self.mean, "min": self.min, "max": self.max})
    }
}

fn spread(mut xs: Vec<f64>) -> Spread {
    xs.retain(|x| x.is_finite());
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return Spread { median: f64::NAN, mean: f64::NAN, min: f64::NAN, max: f64::NAN };
    }
    let median = if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 };
    Spread { median, mean: xs.iter().sum::<f64>() / n as f64, min: xs[0], max: xs[n - 1] }
}

/// Transform runs so far and the seconds they took.
fn transform_runs(metrics: &str) -> (f64, f64) {
    (
        metric_sum(metrics, "streaming_hub_transform_duration_seconds_count", &[]),
        metric_sum(metrics, "streaming_hub_transform_duration_seconds_sum", &[]),
    )
}
