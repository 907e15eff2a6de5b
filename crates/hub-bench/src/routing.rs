//! The routing scenarios: what content filters cost ingest (`routing`), and what ordering by key
//! costs delivery (`ordered`). Each runs the same load twice on a fresh hub — without, then with
//! the feature — and prints both and their ratio.

use std::path::Path;
use std::time::{Duration, Instant};

use hub_core::routing::{EventView, Filters};
use serde_json::{Value, json};

use crate::harness::{self, BenchHub, Receiver, Usage, f0, f1, report};
use crate::scenarios::{PATIENCE, cpu_json, cpu_rows};

/// The filters of subscription `i`: a CESQL expression and a content pattern that every benchmark
/// event passes, so a run with them writes exactly the rows a run without them writes, and the
/// difference is the filters' own cost. Each subscription's text differs (no two share a
/// compiled filter).
fn filters(i: usize) -> Value {
    json!([
        {"sql": format!("resourcetype = 'payment' AND eventtype IN ('settled', 'refunded') AND source LIKE 'ben%' AND LENGTH(id) = 36 AND {i} >= 0")},
        {"data": {"sent_at_us": [{"numeric": [">", 0]}], "filler": [{"prefix": "xxx"}], "$or": [{"currency": ["BRL"]}, {"filler": [{"exists": true}]}]}}
    ])
}

/// Evaluations per measurement of the in-process cost.
const EVALUATIONS: u32 = 200_000;

/// The in-process cost of the filters on one benchmark event, in ns: evaluating a compiled list
/// on an event already parsed, and viewing a new event (its body parsed once) then evaluating.
fn evaluation_cost() -> anyhow::Result<(f64, f64)> {
    let headers = harness::ce_headers("routing");
    let body = harness::body(harness::now_us());
    let hub_core::Verdict::Accept(envelope) =
        hub_core::judge(headers.iter().map(|(k, v)| (*k, v.as_str())), body.as_bytes(), None, &Default::default())
    else {
        anyhow::bail!("the benchmark event was not accepted");
    };
    let compiled = Filters::compile(&filters(7)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let view = EventView::new(&*envelope, body.as_bytes());
    anyhow::ensure!(compiled.matches(&view), "the benchmark filters must pass the benchmark event");
    let started = Instant::now();
    for _ in 0..EVALUATIONS {
        std::hint::black_box(compiled.matches(std::hint::black_box(&view)));
    }
    let warm = started.elapsed().as_nanos() as f64 / f64::from(EVALUATIONS);
    let started = Instant::now();
    for _ in 0..EVALUATIONS / 10 {
        let fresh = EventView::new(&*envelope, body.as_bytes());
        std::hint::black_box(compiled.matches(std::hint::black_box(&fresh)));
    }
    let cold = started.elapsed().as_nanos() as f64 / f64::from(EVALUATIONS / 10);
    Ok((warm, cold))
}

struct IngestRun {
    accepted_per_s: f64,
    spent: Usage,
    usage: Usage,
}

async fn ingest_run(
    events: usize,
    subscriptions: usize,
    producers: usize,
    filtered: bool,
) -> anyhow::Result<IngestRun> {
    let hub = BenchHub::start(None).await?;
    let key = hub.tenant("routing").await?;
    for i in 0..subscriptions {
        let f = if filtered { filters(i) } else { json!([]) };
        hub.subscribe_with(
            &key,
            json!({"name": format!("s{i}"), "event_types": ["*.*"], "sink": {"type": "pull"}, "filters": f}),
        )
        .await?;
    }
    let who = [(key, "routing".to_owned())];
    hub.post_many(&who, 200, producers).await?;
    let before = hub.usage();
    let took = hub.post_many(&who, events, producers).await?;
    let spent = hub.usage().since(&before);
    let usage = hub.finish().await?;
    Ok(IngestRun { accepted_per_s: events as f64 / took.as_secs_f64(), spent, usage })
}

/// `routing`: ingest throughput with `subscriptions` pull subscriptions of one tenant, each with
/// a CESQL filter and a content pattern, against the same subscriptions without filters.
pub async fn routing(events: usize, subscriptions: usize, producers: usize, json_out: &Path) -> anyhow::Result<()> {
    let (warm_ns, cold_ns) = evaluation_cost()?;
    let plain = ingest_run(events, subscriptions, producers, false).await?;
    let filtered = ingest_run(events, subscriptions, producers, true).await?;
    let ratio = filtered.accepted_per_s / plain.accepted_per_s;
    let (plain_hub, _) = plain.spent.per_event_ms(events);
    let (filtered_hub, _) = filtered.spent.per_event_ms(events);
    let measured_us_per_sub = (filtered_hub - plain_hub) * 1000.0 / subscriptions as f64;
    let store = if plain.usage.postgres_cpu_s > 0.0 { "postgres" } else { "sqlite" };
    let figures = json!({
        "scenario": "routing", "store": store, "events": events, "subscriptions": subscriptions,
        "producers": producers,
        "accepted_per_s": {"without_filters": plain.accepted_per_s, "with_filters": filtered.accepted_per_s, "ratio": ratio},
        "cpu_ms_per_event": {"without_filters": cpu_json(&plain.spent, events), "with_filters": cpu_json(&filtered.spent, events)},
        "filter_cost_ns_per_event_per_subscription": {"in_process_parsed": warm_ns, "in_process_with_parse": cold_ns,
            "hub_cpu_difference": measured_us_per_sub * 1000.0},
    });
    let [plain_cpu, _, plain_both] = cpu_rows(&plain.spent, events);
    let [filtered_cpu, _, filtered_both] = cpu_rows(&filtered.spent, events);
    report(
        &format!(
            "routing ({store}, {events} events, {subscriptions} pull subscriptions of one tenant, each with a CESQL filter and a content pattern every event passes)"
        ),
        &[
            ("accepted/s without filters", f0(plain.accepted_per_s)),
            ("accepted/s with filters", f0(filtered.accepted_per_s)),
            ("with / without", format!("{:.1} %", ratio * 100.0)),
            ("without: hub CPU ms per event", plain_cpu.1),
            ("without: hub + PostgreSQL CPU ms/event", plain_both.1),
            ("with: hub CPU ms per event", filtered_cpu.1),
            ("with: hub + PostgreSQL CPU ms/event", filtered_both.1),
            ("filter ns/event/sub (in process)", f0(warm_ns)),
            ("filter ns/event/sub (body parse incl.)", f0(cold_ns)),
            ("filter ns/event/sub (hub CPU diff.)", f0(measured_us_per_sub * 1000.0)),
        ],
        figures,
        &filtered.usage,
        json_out,
    )
}

struct DeliveryRun {
    delivered_per_s: f64,
    latency: harness::Latency,
    delivered: usize,
    duplicates: usize,
    spent: Usage,
    usage: Usage,
}

async fn delivery_run(events: usize, keys: usize, producers: usize, ordered: bool) -> anyhow::Result<DeliveryRun> {
    let hub = BenchHub::start(None).await?;
    let receiver = Receiver::start().await?;
    let label = if ordered { "ordered" } else { "unordered" };
    let key = hub.tenant(label).await?;
    hub.subscribe_with(
        &key,
        json!({"name": label, "event_types": ["*.*"], "ordering": if ordered { "key" } else { "none" },
               "sink": {"type": "webhook", "url": receiver.url(label, false)}}),
    )
    .await?;
    let who = [(key, label.to_owned())];
    hub.post_many_keyed(&who, 100, producers, keys).await?;
    anyhow::ensure!(receiver.wait_for(label, 100, PATIENCE).await, "the warm-up was not delivered");
    receiver.take(label);
    let before = hub.usage();
    let started = Instant::now();
    hub.post_many_keyed(&who, events, producers, keys).await?;
    anyhow::ensure!(receiver.wait_for(label, events, PATIENCE).await, "not every event was delivered");
    let spent = hub.usage().since(&before);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = receiver.received(label);
    let delivered_s = got.last_at.map_or(f64::NAN, |l| (l - started).as_secs_f64());
    let usage = hub.finish().await?;
    Ok(DeliveryRun {
        delivered_per_s: got.distinct() as f64 / delivered_s,
        latency: got.latency(),
        delivered: got.distinct(),
        duplicates: got.duplicates(),
        spent,
        usage,
    })
}

/// `ordered`: a burst to one webhook with events spread over `keys` ordering keys, delivered
/// unordered and then ordered by key.
pub async fn ordered(events: usize, keys: usize, producers: usize, json_out: &Path) -> anyhow::Result<()> {
    let unordered = delivery_run(events, keys, producers, false).await?;
    let ordered = delivery_run(events, keys, producers, true).await?;
    let ratio = ordered.delivered_per_s / unordered.delivered_per_s;
    let store = if ordered.usage.postgres_cpu_s > 0.0 { "postgres" } else { "sqlite" };
    let run_json = |r: &DeliveryRun| {
        json!({"delivered_per_s": r.delivered_per_s, "delivered": r.delivered, "duplicates": r.duplicates,
               "latency_ms": r.latency.json(), "cpu_ms_per_event": cpu_json(&r.spent, r.delivered)})
    };
    let figures = json!({
        "scenario": "ordered", "store": store, "events": events, "keys": keys, "producers": producers,
        "unordered": run_json(&unordered), "ordered": run_json(&ordered), "ratio": ratio,
    });
    let [_, _, unordered_cpu] = cpu_rows(&unordered.spent, unordered.delivered);
    let [_, _, ordered_cpu] = cpu_rows(&ordered.spent, ordered.delivered);
    report(
        &format!("ordered ({store}, {events} events of ~1 KiB over {keys} keys, one webhook)"),
        &[
            ("unordered: delivered/s", f0(unordered.delivered_per_s)),
            ("ordered by key: delivered/s", f0(ordered.delivered_per_s)),
            ("ordered / unordered", format!("{:.1} %", ratio * 100.0)),
            ("unordered: latency p50 ms", f1(unordered.latency.p50)),
            ("unordered: latency p99 ms", f1(unordered.latency.p99)),
            ("ordered: latency p50 ms", f1(ordered.latency.p50)),
            ("ordered: latency p99 ms", f1(ordered.latency.p99)),
            ("unordered: hub + PostgreSQL CPU ms/event", unordered_cpu.1),
            ("ordered: hub + PostgreSQL CPU ms/event", ordered_cpu.1),
            ("ordered: delivered", format!("{} of {events}", ordered.delivered)),
            ("ordered: duplicates", ordered.duplicates.to_string()),
        ],
        figures,
        &ordered.usage,
        json_out,
    )
}
