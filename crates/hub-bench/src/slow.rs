//! `slow-receivers` and `hanging`: delivery against receivers that take time to answer, as real
//! endpoints do, rather than at once.
//!
//! `slow-receivers` sends one tenant's events to webhook subscriptions whose receivers answer
//! after a delay (optionally serving only so many at once and answering `503` beyond), at the
//! hub's defaults, and reports deliveries per second, latency, CPU per delivery, the hub's peak
//! memory and, as the receivers saw it, how many attempts were out at once and how many were
//! refused. `hanging` times one tenant's deliveries alone and beside another tenant whose
//! subscriptions point at receivers that accept the connection and never answer.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::fanout::wait;
use crate::harness::{self, BenchHub, Latency, Receiver, f0, f1, report};
use crate::scenarios::{cpu_json, cpu_rows, paced, paced_for, wait_all};

fn label(i: usize) -> String {
    format!("s{i}")
}

/// `events` events of one tenant to `subscriptions` webhooks over `receivers` receivers answering
/// after `latency_ms` (serving `capacity` at once, if given).
pub async fn slow_receivers(
    latency_ms: u64,
    events: usize,
    subscriptions: usize,
    receivers: usize,
    capacity: Option<usize>,
    producers: usize,
    replicas: usize,
    tls: bool,
    json_out: &Path,
) -> anyhow::Result<()> {
    let quota = (subscriptions + 10).to_string();
    let vars = [("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", quota)];
    let hub = BenchHub::start_with(None, &vars).await?;
    let mut others = Vec::new();
    for _ in 1..replicas {
        others.push(hub.beside(&vars).await?);
    }
    harness::settled(&hub, &others).await?;
    // With `tls`, receivers of a private CA the subscriptions trust (`tls.ca_pem`).
    let pki = tls.then(hub_testkit::tls::Pki::new);
    let mut sinks = Vec::new();
    for _ in 0..receivers.max(1) {
        sinks.push(match &pki {
            Some(pki) => Receiver::start_tls(pki, false).await,
            None => Receiver::start().await?,
        });
    }
    let speed = capacity.map_or_else(|| format!("delay-{latency_ms}"), |n| format!("cap-{n}-{latency_ms}"));
    let key = hub.tenant("slow").await?;
    for i in 0..subscriptions {
        let url = sinks[i % sinks.len()].url_as(&speed, &label(i));
        let mut sink = json!({"type": "webhook", "url": url});
        if let Some(pki) = &pki {
            sink["tls"] = json!({"ca_pem": pki.ca_pem});
        }
        hub.subscribe_with(&key, json!({"name": label(i), "event_types": ["*.*"], "sink": sink})).await?;
    }
    let of = |i: usize| &sinks[i % sinks.len()];
    let who = [(key, "slow".to_owned())];

    // Warm up (connections, every destination's first attempt), then forget it.
    hub.post_many(&who, 1, 1).await?;
    let count = || (0..subscriptions).map(|i| of(i).delivered(&label(i))).sum::<usize>();
    wait(&count, subscriptions).await?;
    for i in 0..subscriptions {
        of(i).take(&label(i));
    }

    let before: Vec<_> = std::iter::once(&hub).chain(&others).map(BenchHub::usage).collect();
    let started = Instant::now();
    let accepted = hub.post_many(&who, events, producers).await?;
    let expected = events * subscriptions;
    wait(&count, expected).await?;
    let spent = std::iter::once(&hub)
        .chain(&others)
        .zip(&before)
        .map(|(h, b)| h.usage().since(b))
        .reduce(|a, b| a.beside(&b))
        .expect("one replica at least");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut all = harness::Received::default();
    let (mut refused, mut most, mut concurrency) = (0, 0, Vec::new());
    for i in 0..subscriptions {
        let r = of(i).received(&label(i));
        all.per_event.extend(r.per_event.into_iter().map(|(id, n)| (format!("{i}/{id}"), n)));
        all.latencies_us.extend(r.latencies_us);
        all.last_at = all.last_at.max(r.last_at);
        refused += r.refused;
        most = most.max(r.max_in_flight);
        concurrency.extend(r.concurrency);
    }
    let store = hub.store_name();
    for other in others {
        other.finish().await?;
    }
    let usage = hub.finish().await?;
    let delivered = all.distinct();
    let delivered_s = all.last_at.map_or(f64::NAN, |l| (l - started).as_secs_f64());
    let per_s = delivered as f64 / delivered_s;
    let latency = all.latency();
    concurrency.sort_unstable();
    let mean_out = concurrency.iter().sum::<usize>() as f64 / concurrency.len().max(1) as f64;
    let p90_out = concurrency.get(concurrency.len() * 9 / 10).copied().unwrap_or(0);
    let refused_share = refused as f64 / (refused + delivered).max(1) as f64;
    let figures = json!({
        "scenario": "slow-receivers", "store": store, "latency_ms": latency_ms, "events": events,
        "subscriptions": subscriptions, "receivers": receivers, "capacity": capacity, "replicas": replicas,
        "tls": tls, "deliveries": delivered, "duplicates": all.duplicates(), "delivered_per_s": per_s,
        "accepted_per_s": events as f64 / accepted.as_secs_f64(), "e2e_latency_ms": latency.json(),
        "receiver_in_flight": {"mean_at_arrival": mean_out, "p90_at_arrival": p90_out, "max": most},
        "refused": refused, "refused_share": refused_share,
        "cpu_ms_per_delivery": cpu_json(&spent, delivered), "hub_peak_rss_mib": usage.hub_peak_rss_mib,
    });
    let [hub_cpu, pg_cpu, both_cpu] = cpu_rows(&spent, delivered);
    let mut shape = capacity.map_or_else(String::new, |n| format!(", each serving {n} at once (503 beyond)"));
    if replicas > 1 {
        shape.push_str(&format!(", {replicas} delivery replicas"));
    }
    if tls {
        shape.push_str(", over TLS");
    }
    report(
        &format!(
            "slow-receivers ({store}, defaults, {events} events of ~1 KiB to {subscriptions} webhooks on {receivers} \
             receivers answering in {latency_ms} ms{shape})"
        ),
        &[
            ("deliveries", format!("{delivered} ({} duplicates)", all.duplicates())),
            ("delivered/s", f0(per_s)),
            ("e2e p50 / p99 ms", format!("{} / {}", f1(latency.p50), f1(latency.p99))),
            ("in flight at a receiver: mean / p90 / max", format!("{mean_out:.1} / {p90_out} / {most}")),
            ("refused (503)", format!("{refused} ({:.2} % of attempts)", refused_share * 100.0)),
            hub_cpu,
            pg_cpu,
            both_cpu,
            ("hub peak RSS MiB", f1(usage.hub_peak_rss_mib)),
        ],
        figures,
        &usage,
        json_out,
    )
}

/// One tenant's deliveries (a receiver answering in 20 ms, `rate` posts a second) alone, then
/// beside another tenant's `hanging` subscriptions whose receivers never answer (`flood` events
/// posted to them).
pub async fn hanging(hanging: usize, flood: usize, rate: u32, json_out: &Path) -> anyhow::Result<()> {
    let quota = (hanging + 10).to_string();
    let hub = BenchHub::start_with(None, &[("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", quota)]).await?;
    let hangs = Receiver::start().await?;
    let receiver = Receiver::start().await?;
    let small_key = hub.tenant("small").await?;
    hub.subscribe(&small_key, json!({"type": "webhook", "url": receiver.url_as("delay-20", "small")})).await?;
    let big_key = hub.tenant("hanging").await?;
    for i in 0..hanging {
        let url = hangs.url_as("hang", &label(i));
        hub.subscribe_with(
            &big_key,
            json!({"name": label(i), "event_types": ["*.*"], "sink": {"type": "webhook", "url": url}}),
        )
        .await?;
    }
    let small = vec!["small".to_owned()];
    hub.post_many(&[(small_key.clone(), "small".to_owned())], 5, 1).await?;
    wait_all(&receiver, &small, 5).await?;
    receiver.take("small");

    let alone = paced_for(&hub, &small_key, "small", rate, Duration::from_secs(10)).await?;
    wait_all(&receiver, &small, alone.sent()).await?;
    let solo = receiver.take("small").latency();

    // The hanging tenant's flood first, then the small tenant beside it for as long again.
    hub.post_many(&[(big_key, "hanging".to_owned())], flood, 8).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let timer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let beside_sent = paced(&hub, &small_key, "small", rate, stop).await?;
    timer.abort();
    wait_all(&receiver, &small, beside_sent.sent()).await?;
    let beside = receiver.take("small").latency();
    let hung_out = (0..hanging).map(|i| hangs.received(&label(i)).in_flight).sum::<usize>();
    let store = hub.store_name();
    let usage = hub.finish().await?;
    let excess = beside.p99 - solo.p99;
    let figures = json!({
        "scenario": "hanging", "store": store, "hanging_subscriptions": hanging, "flood_events": flood,
        "small_rate_per_s": rate, "small_solo_latency_ms": solo.json(),
        "small_beside_hanging_latency_ms": beside.json(), "p99_excess_ms": excess,
        "hanging_attempts_out_at_end": hung_out,
    });
    report(
        &format!(
            "hanging ({store}, a tenant at {rate}/s to a receiver answering in 20 ms, alone and beside another \
             tenant's {hanging} subscriptions to receivers that never answer, {flood} events posted to them)"
        ),
        &[
            ("alone p50 / p99 ms", format!("{} / {}", f1(solo.p50), f1(solo.p99))),
            ("beside p50 / p99 ms", format!("{} / {}", f1(beside.p50), f1(beside.p99))),
            ("p99 beside minus alone ms", f1(excess)),
            ("hanging attempts out at the end", hung_out.to_string()),
        ],
        figures,
        &usage,
        json_out,
    )
}

/// Handlers a hostile tenant may write: each spends its whole CPU budget, or its memory, or
/// throws, on every run, by every way the engine offers.
const HOSTILE: [&str; 8] = [
    "function handler(e) { for (;;) {} }",
    "function handler(e) { [].reverse.call({length: 2 ** 53 - 1}); return e; }",
    "function handler(e) { Array.prototype.copyWithin.call({length: 2 ** 32}, 1, 0); return e; }",
    "function handler(e) { 'x'.repeat(1 << 24).replaceAll('x', 'yy'); return e; }",
    "function handler(e) { /(a+)+$/.test('a'.repeat(40) + '!'); return e; }",
    "var kept = []; function handler(e) { for (;;) { kept.push('x'.repeat(1 << 16)); } }",
    "function handler(e) { function f() { return f() + 1; } return f(); }",
    "function handler(e) { Array.prototype.join.call({length: 2 ** 32}, ','); return e; }",
];

/// `transform-isolation`: one tenant's transformed deliveries (a trivial handler) at `rate` a
/// second, alone, then beside another tenant whose `hostile` subscriptions run handlers that spend
/// their whole budget on every run (loops, native built-ins on huge array-likes, catastrophic
/// regex, memory growth, recursion), `flood` events posted to them. Issue #61's target: the calm
/// tenant's p99 within 50 ms of alone.
pub async fn transform_isolation(hostile: usize, flood: usize, rate: u32, json_out: &Path) -> anyhow::Result<()> {
    let quota = (hostile + 10).to_string();
    let hub = BenchHub::start_with(None, &[("STREAMING_HUB_MAX_SUBSCRIPTIONS_PER_TENANT", quota)]).await?;
    let receiver = Receiver::start().await?;
    let trivial = "function handler(e) { return e; }";
    let calm_key = hub.tenant("calm").await?;
    hub.subscribe_with(
        &calm_key,
        json!({"name": "calm", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url_as("fast", "calm")},
            "transform": {"language": "javascript", "code": trivial}}),
    )
    .await?;
    let hostile_key = hub.tenant("hostile").await?;
    for i in 0..hostile {
        let code = HOSTILE[i % HOSTILE.len()];
        hub.subscribe_with(
            &hostile_key,
            json!({"name": label(i), "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url_as("fast", &label(i))},
                "transform": {"language": "javascript", "code": code}}),
        )
        .await?;
    }
    let calm = vec!["calm".to_owned()];
    hub.post_many(&[(calm_key.clone(), "calm".to_owned())], 5, 1).await?;
    wait_all(&receiver, &calm, 5).await?;
    receiver.take("calm");

    let alone = paced_for(&hub, &calm_key, "calm", rate, Duration::from_secs(15)).await?;
    wait_all(&receiver, &calm, alone.sent()).await?;
    let solo = receiver.take("calm").latency();

    let before = hub.usage();
    hub.post_many(&[(hostile_key, "hostile".to_owned())], flood, 8).await?;
    let beside_sent = paced_for(&hub, &calm_key, "calm", rate, Duration::from_secs(15)).await?;
    wait_all(&receiver, &calm, beside_sent.sent()).await?;
    let beside = receiver.take("calm").latency();
    let spent = hub.usage().since(&before);
    let metrics = hub.metrics().await?;
    let killed = harness::metric_sum(&metrics, "streaming_hub_transform_workers_stopped_total", &[]);
    let store = hub.store_name();
    let usage = hub.finish().await?;
    let excess = beside.p99 - solo.p99;
    let figures = json!({
        "scenario": "transform-isolation", "store": store, "hostile_subscriptions": hostile, "flood_events": flood,
        "calm_rate_per_s": rate, "calm_alone_latency_ms": solo.json(), "calm_beside_hostile_latency_ms": beside.json(),
        "p99_excess_ms": excess, "workers_stopped": killed, "hub_cpu_s_beside": spent.hub_cpu_s,
    });
    report(
        &format!(
            "transform-isolation ({store}, a tenant at {rate}/s through a trivial transform, alone and beside another \
             tenant's {hostile} subscriptions whose handlers spend their whole budget, {flood} events posted to them)"
        ),
        &[
            ("alone p50 / p99 ms", format!("{} / {}", f1(solo.p50), f1(solo.p99))),
            ("beside p50 / p99 ms", format!("{} / {}", f1(beside.p50), f1(beside.p99))),
            ("p99 beside minus alone ms", f1(excess)),
            ("workers stopped (budget, crash)", f0(killed)),
            ("hub CPU s beside (workers included)", f1(spent.hub_cpu_s)),
        ],
        figures,
        &usage,
        json_out,
    )
}

/// `keeps-up`: `rate` events a second for `seconds` to one webhook whose receiver answers after
/// `latency_ms` and keeps up (it serves any number at once): from each post to its request
/// reaching the receiver, before the receiver's wait, in the first five seconds (while the
/// destination's allowance grows to what the rate needs: rate × latency in flight) and after.
pub async fn keeps_up(rate: u32, seconds: u64, latency_ms: u64, json_out: &Path) -> anyhow::Result<()> {
    const START: u64 = 5;
    let hub = BenchHub::start(None).await?;
    let receiver = Receiver::start().await?;
    let key = hub.tenant("keeps").await?;
    let url = receiver.url_as(&format!("delay-{latency_ms}"), "k");
    hub.subscribe_with(&key, json!({"name": "k", "event_types": ["*.*"], "sink": {"type": "webhook", "url": url}}))
        .await?;
    // Warm up (a connection, the destination's first attempt), then forget it.
    let who = [(key.clone(), "keeps".to_owned())];
    hub.post_many(&who, 1, 1).await?;
    wait(&|| receiver.delivered("k"), 1).await?;
    receiver.take("k");

    let before = hub.usage();
    let sent = paced_for(&hub, &key, "keeps", rate, Duration::from_secs(seconds)).await?;
    let expected = sent.answered_us.len();
    wait(&|| receiver.delivered("k"), expected).await?;
    let spent = hub.usage().since(&before);
    let r = receiver.take("k");
    let store = hub.store_name();
    let usage = hub.finish().await?;

    let Some(&first) = r.sent_us.iter().min() else { anyhow::bail!("nothing was delivered") };
    let at = |s: u64| first + s * 1_000_000;
    let (start, start_n) = r.reached_of_sent(first, at(START));
    let (after, after_n) = r.reached_of_sent(at(START), u64::MAX);
    let mut seconds_after: Vec<(u64, Latency)> =
        (START..seconds).map(|s| (s, r.reached_of_sent(at(s), at(s + 1)).0)).collect();
    seconds_after.sort_by(|a, b| b.1.p99.total_cmp(&a.1.p99));
    let (worst_second, worst) = seconds_after.first().map_or((0, Latency::default()), |(s, l)| (*s, *l));
    let first_seconds: Vec<Latency> = (0..START).map(|s| r.reached_of_sent(at(s), at(s + 1)).0).collect();
    let mut concurrency = r.concurrency.clone();
    concurrency.sort_unstable();
    let p50_out = concurrency.get(concurrency.len() / 2).copied().unwrap_or(0);
    let figures = json!({
        "scenario": "keeps-up", "store": store, "rate": rate, "seconds": seconds, "latency_ms": latency_ms,
        "sent": expected, "deliveries": r.distinct(), "duplicates": r.duplicates(),
        "to_receiver_first_5_s_ms": start.json(), "to_receiver_first_5_s_events": start_n,
        "to_receiver_after_ms": after.json(), "to_receiver_after_events": after_n,
        "to_receiver_each_of_first_5_s_ms": first_seconds.iter().map(Latency::json).collect::<Vec<_>>(),
        "slowest_second_after": {"second": worst_second, "ms": worst.json()},
        "receiver_in_flight": {"p50_at_arrival": p50_out, "max": r.max_in_flight},
        "cpu_ms_per_delivery": cpu_json(&spent, r.distinct()), "hub_peak_rss_mib": usage.hub_peak_rss_mib,
    });
    let ms = |l: &Latency| format!("{} / {} / {}", f1(l.p50), f1(l.p99), f1(l.max));
    let mut rows = vec![
        ("deliveries", format!("{} of {expected} ({} duplicates)", r.distinct(), r.duplicates())),
        ("post to receiver, first 5 s: p50 / p99 / max ms", ms(&start)),
        ("post to receiver, after: p50 / p99 / max ms", ms(&after)),
        ("slowest second after the first 5", format!("second {worst_second}: {}", ms(&worst))),
        ("in flight at the receiver: p50 / max", format!("{p50_out} / {}", r.max_in_flight)),
    ];
    for (s, l) in first_seconds.iter().enumerate() {
        rows.push(("", format!("second {s}: {}", ms(l))));
    }
    let [hub_cpu, pg_cpu, both_cpu] = cpu_rows(&spent, r.distinct());
    rows.extend([hub_cpu, pg_cpu, both_cpu, ("hub peak RSS MiB", f1(usage.hub_peak_rss_mib))]);
    report(
        &format!(
            "keeps-up ({store}, {rate} events/s for {seconds} s to one webhook answering in {latency_ms} ms, \
             any number at once)"
        ),
        &rows,
        figures,
        &usage,
        json_out,
    )
}
