//! `fanout`: one tenant's events delivered to many webhook subscriptions spread over several
//! receivers (each its own address, so its own destination). Two runs, each on a fresh hub:
//! every subscription takes every event; then many subscriptions with a CESQL filter each, of
//! which every event passes a few.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{self, BenchHub, Latency, Receiver, Usage, f0, f1, report};
use crate::scenarios::{PATIENCE, cpu_json, cpu_rows};

struct Run {
    deliveries: usize,
    delivered_per_s: f64,
    accepted_per_s: f64,
    latency: Latency,
    duplicates: usize,
    spent: Usage,
    usage: Usage,
}

/// The labels subscription `i` is received under: its own, at receiver `i % receivers`.
fn label(i: usize) -> String {
    format!("s{i}")
}

/// Posts `events` events (`ce-partitionkey: key-<i % keys>`) to `subscriptions` webhook
/// subscriptions spread over `receivers` receivers; `filter(i)` is subscription `i`'s filters.
/// `expected` deliveries are waited for.
async fn run(
    events: usize,
    subscriptions: usize,
    receivers: usize,
    producers: usize,
    keys: usize,
    filter: impl Fn(usize) -> Value,
    expected: usize,
) -> anyhow::Result<Run> {
    let quota = (subscriptions + 10).to_string();
    let hub = BenchHub::start_with(None, &[("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", quota)]).await?;
    let mut sinks = Vec::new();
    for _ in 0..receivers.max(1) {
        sinks.push(Receiver::start().await?);
    }
    let key = hub.tenant("fanout").await?;
    for i in 0..subscriptions {
        let receiver = &sinks[i % sinks.len()];
        hub.subscribe_with(
            &key,
            json!({"name": label(i), "event_types": ["*.*"], "filters": filter(i),
                "sink": {"type": "webhook", "url": receiver.url(&label(i), false)}}),
        )
        .await?;
    }
    let who = [(key, "fanout".to_owned())];
    let delivered = |take: bool| {
        let mut all = harness::Received::default();
        for i in 0..subscriptions {
            let receiver = &sinks[i % sinks.len()];
            let r = if take { receiver.take(&label(i)) } else { receiver.received(&label(i)) };
            all.per_event.extend(r.per_event.into_iter().map(|(id, n)| (format!("{i}/{id}"), n)));
            all.latencies_us.extend(r.latencies_us);
            all.last_at = all.last_at.max(r.last_at);
        }
        all
    };
    let count = || (0..subscriptions).map(|i| sinks[i % sinks.len()].delivered(&label(i))).sum::<usize>();

    // Warm up (connections, every destination's first attempts), then forget it.
    let warm_events = keys.max(1);
    hub.post_many_keyed(&who, warm_events, producers, keys).await?;
    let warm_expected = expected * warm_events / events.max(1);
    wait(&count, warm_expected).await?;
    delivered(true);

    let before = hub.usage();
    let started = Instant::now();
    let accepted = hub.post_many_keyed(&who, events, producers, keys).await?;
    wait(&count, expected).await?;
    let spent = hub.usage().since(&before);
    // Let stragglers (duplicates, if any) arrive before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = delivered(false);
    let delivered_s = got.last_at.map_or(f64::NAN, |l| (l - started).as_secs_f64());
    let usage = hub.finish().await?;
    Ok(Run {
        deliveries: got.distinct(),
        delivered_per_s: got.distinct() as f64 / delivered_s,
        accepted_per_s: events as f64 / accepted.as_secs_f64(),
        latency: got.latency(),
        duplicates: got.duplicates(),
        spent,
        usage,
    })
}

/// Waits until `count` reaches `n`, within [`PATIENCE`].
pub(crate) async fn wait(count: &impl Fn() -> usize, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while count() < n {
        anyhow::ensure!(Instant::now() < deadline, "only {} of {n} deliveries within {PATIENCE:?}", count());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn figures(run: &Run) -> Value {
    json!({
        "deliveries": run.deliveries, "duplicates": run.duplicates,
        "accepted_per_s": run.accepted_per_s, "delivered_per_s": run.delivered_per_s,
        "latency_ms": run.latency.json(), "measured": run.spent.json(),
        "cpu_ms_per_delivery": cpu_json(&run.spent, run.deliveries),
    })
}

/// `fanout`: `events` events to `subscriptions` webhooks on `receivers` receivers; then to
/// `filtered` webhooks with a CESQL filter each, every event passing `matches` of them.
pub async fn fanout(
    events: usize,
    subscriptions: usize,
    receivers: usize,
    filtered: usize,
    matches: usize,
    producers: usize,
    json_out: &Path,
) -> anyhow::Result<()> {
    let every = run(events, subscriptions, receivers, producers, 0, |_| json!([]), events * subscriptions).await?;
    // Subscription `i` takes the events of key `i % keys`: with `filtered / matches` keys, each
    // event passes exactly `matches` filters.
    let keys = (filtered / matches.max(1)).max(1);
    let sql = move |i: usize| json!([{"sql": format!("partitionkey = 'key-{}'", i % keys)}]);
    let expected = (0..events).map(|e| (0..filtered).filter(|i| i % keys == e % keys).count()).sum();
    let cesql = run(events, filtered, receivers, producers, keys, sql, expected).await?;

    let store = if every.usage.postgres_cpu_s > 0.0 { "postgres" } else { "sqlite" };
    let out = json!({
        "scenario": "fanout", "store": store, "events": events, "receivers": receivers, "producers": producers,
        "every": {"subscriptions": subscriptions, "figures": figures(&every)},
        "cesql": {"subscriptions": filtered, "matches_per_event": matches, "figures": figures(&cesql)},
    });
    let [_, _, every_cpu] = cpu_rows(&every.spent, every.deliveries);
    let [_, _, cesql_cpu] = cpu_rows(&cesql.spent, cesql.deliveries);
    report(
        &format!(
            "fanout ({store}, one tenant, {events} events of ~1 KiB, {receivers} receivers): {subscriptions} webhooks \
             taking every event; then {filtered} webhooks with a CESQL filter each, {matches} of them passing each event"
        ),
        &[
            ("every: deliveries", format!("{} ({} duplicates)", every.deliveries, every.duplicates)),
            ("every: events accepted/s", f0(every.accepted_per_s)),
            ("every: deliveries/s", f0(every.delivered_per_s)),
            ("every: latency p50 / p99 ms", format!("{} / {}", f1(every.latency.p50), f1(every.latency.p99))),
            ("every: hub + PostgreSQL CPU ms per delivery", every_cpu.1),
            ("cesql: deliveries", format!("{} ({} duplicates)", cesql.deliveries, cesql.duplicates)),
            ("cesql: events accepted/s", f0(cesql.accepted_per_s)),
            ("cesql: deliveries/s", f0(cesql.delivered_per_s)),
            ("cesql: latency p50 / p99 ms", format!("{} / {}", f1(cesql.latency.p50), f1(cesql.latency.p99))),
            ("cesql: hub + PostgreSQL CPU ms per delivery", cesql_cpu.1),
        ],
        out,
        &cesql.usage,
        json_out,
    )
}
