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

/// Code that spends `loops` turns of a plain loop (its CPU time is calibrated from it).
fn busy_code(loops: u64) -> String {
    format!(
        "function handler(event) {{ let x = 0; for (let i = 0; i < {loops}; i++) {{ x = (x + i) % 1000003; }} \
         event.data = {{ sent_at_us: (event.data || {{}}).sent_at_us, x }}; return event; }}"
    )
}

/// The mean time of a transform run, µs, over the runs since `before` (runs, seconds).
fn mean_run_us(metrics: &str, before: (f64, f64)) -> f64 {
    let (runs, seconds) = transform_runs(metrics);
    (seconds - before.1) * 1e6 / (runs - before.0).max(1.0)
}

/// A tenant named `label` (the bench's events are labelled by their tenant) subscribed through
/// [`busy_code`] of `loops` to the receiver, its handler compiled by a first event not counted:
/// its key and the subscription's id.
async fn busy_tenant(hub: &BenchHub, receiver: &Receiver, label: &str, loops: u64) -> anyhow::Result<(String, String)> {
    let key = hub.tenant(label).await?;
    let url = receiver.url(label, false);
    let id = hub
        .subscribe_with(
            &key,
            json!({"name": label, "event_types": ["*.*"], "sink": {"type": "webhook", "url": url},
                "transform": {"language": "javascript", "code": busy_code(loops)}}),
        )
        .await?;
    hub.post_many(&[(key.clone(), label.to_owned())], 1, 1).await?;
    wait(&|| receiver.delivered(label), 1).await?;
    receiver.take(label);
    Ok((key, id))
}

/// Posts one event at a time to `who` (each delivered before the next): its runs meet an idle
/// worker, so their time is their CPU time. The mean run, µs.
async fn timed_alone(hub: &BenchHub, receiver: &Receiver, who: &[(String, String)], n: usize) -> anyhow::Result<f64> {
    let label = who[0].1.clone();
    let before = transform_runs(&hub.metrics().await?);
    for i in 1..=n {
        hub.post_many(who, 1, 1).await?;
        wait(&|| receiver.delivered(&label), i).await?;
    }
    receiver.take(&label);
    Ok(mean_run_us(&hub.metrics().await?, before))
}

/// The budget is CPU time (issue #61): a handler calibrated to need `cpu_ms` of CPU (under the
/// default 5 ms budget) runs on `events` events while `spinners` threads of this process keep
/// every core busy; none of its runs may be refused. Reports the runs by result, the workers
/// stopped, and how much longer a run took in wall time than alone.
pub async fn transform_busy(events: usize, cpu_ms: f64, spinners: usize, json_out: &Path) -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let hub = BenchHub::start(None).await?;
    // Calibrated on an idle machine: a first guess, then scaled to the CPU sought.
    let mut loops: u64 = 20_000;
    let mut alone_us = 0.0;
    for round in 0..3 {
        let label = format!("calibrate{round}");
        let (key, id) = busy_tenant(&hub, &receiver, &label, loops).await?;
        let who = [(key.clone(), label.clone())];
        alone_us = timed_alone(&hub, &receiver, &who, 20).await?;
        hub.unsubscribe(&key, &id).await?;
        if round < 2 {
            loops = ((loops as f64) * cpu_ms * 1000.0 / alone_us.max(1.0)).round().max(1.0) as u64;
        }
    }
    let label = "busy".to_owned();
    let (key, subscription) = busy_tenant(&hub, &receiver, &label, loops).await?;
    let who = [(key.clone(), label.clone())];
    let before_metrics = hub.metrics().await?;
    let before = transform_runs(&before_metrics);
    let stopped_before = metric_sum(&before_metrics, "streaming_hub_transform_workers_stopped_total", &[]);
    let failed_before =
        metric_sum(&before_metrics, "streaming_hub_transform_runs_total", &["result=\"failed\"".into()]);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinning: Vec<_> = (0..spinners)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
        })
        .collect();
    let started = Instant::now();
    let posted = hub.post_many(&who, events, 8).await;
    let deadline = Instant::now() + std::time::Duration::from_secs(1800);
    while posted.is_ok() && receiver.delivered(&label) < events && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinning {
        let _ = s.join();
    }
    posted?;
    let metrics = hub.metrics().await?;
    let got = receiver.received(&label);
    let refusals = failed_attempts(&hub, &key, &subscription).await?;
    hub.finish().await?;
    let (runs, _) = transform_runs(&metrics);
    let busy_us = mean_run_us(&metrics, before);
    let failed =
        metric_sum(&metrics, "streaming_hub_transform_runs_total", &["result=\"failed\"".into()]) - failed_before;
    let stopped = metric_sum(&metrics, "streaming_hub_transform_workers_stopped_total", &[]) - stopped_before;
    let runs = runs - before.0;

    println!(
        "transform-busy ({events} events through a handler of about {cpu_ms} ms of CPU, budget 5 ms, {spinners} threads \
         spinning on {} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("  handler's run alone (calibrated), ms      {:.2}", alone_us / 1000.0);
    println!("  … beside the spinning threads, wall ms    {:.2}", busy_us / 1000.0);
    println!("  runs                                      {runs:.0}");
    println!("  runs refused (failed)                     {failed:.0}");
    println!("  workers stopped                           {stopped:.0}");
    println!(
        "  delivered                                 {} of {events} ({} duplicates)",
        got.distinct(),
        got.duplicates()
    );
    println!("  took s                                    {:.1}", took.as_secs_f64());
    for (error, count) in &refusals {
        println!("  refused {count} time(s): {error}");
    }
    let figures = json!({"scenario": "transform-busy", "events": events, "spinners": spinners, "loops": loops,
        "run_alone_ms": alone_us / 1000.0, "run_busy_wall_ms": busy_us / 1000.0, "runs": runs, "failed": failed,
        "workers_stopped": stopped, "delivered": got.distinct(), "duplicates": got.duplicates(),
        "seconds": took.as_secs_f64(), "refusals": refusals.iter().map(|(e, n)| json!({"error": e, "count": n})).collect::<Vec<_>>()});
    write_json(&figures, json_out)?;
    anyhow::ensure!(got.distinct() == events, "only {} of {events} delivered", got.distinct());
    Ok(())
}

/// The errors of a subscription's failed attempts, with how often each came.
async fn failed_attempts(hub: &BenchHub, key: &str, subscription: &str) -> anyhow::Result<Vec<(String, usize)>> {
    let mut errors = std::collections::BTreeMap::<String, usize>::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/subscriptions/{subscription}/deliveries?limit=1000");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page, _) = hub.call(reqwest::Method::GET, &path, Some(key), None).await?;
        anyhow::ensure!(status == 200, "listing deliveries: {status} {page}");
        for job in page["items"].as_array().into_iter().flatten() {
            for attempt in job["attempt_log"].as_array().into_iter().flatten() {
                if attempt["outcome"] == "failed" {
                    *errors.entry(attempt["error"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
                }
            }
        }
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            return Ok(errors.into_iter().collect());
        }
    }
}
