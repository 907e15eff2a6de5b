//! The benchmark scenarios. Each prints a table and writes its figures as JSON; none asserts a
//! speed. Where a receiver is involved, the figures are taken from what it received.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use anyhow::Context as _;
use streaming_hub::telemetry::metric;

use crate::harness::{self, BenchHub, BenchTopic, Broker, Latency, Receiver, Usage, f0, f1, f2, report};

/// How long any wait for deliveries may take before the scenario gives up.
pub(crate) const PATIENCE: Duration = Duration::from_secs(900);

/// Where push-burst events enter the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Via {
    Http,
    Kafka,
}

pub(crate) fn tenant_names(prefix: &str, n: usize) -> Vec<String> {
    (0..n.max(1)).map(|i| format!("{prefix}{i}")).collect()
}

/// Creates tenants, each with a webhook subscription to its own receiver path (label = tenant).
async fn webhook_tenants(
    hub: &BenchHub,
    receiver: &Receiver,
    names: &[String],
) -> anyhow::Result<Vec<(String, String)>> {
    let mut who = Vec::new();
    for name in names {
        let key = hub.tenant(name).await?;
        hub.subscribe(&key, json!({"type": "webhook", "url": receiver.url(name, false)})).await?;
        who.push((key, name.clone()));
    }
    Ok(who)
}

/// Merges what several labels received.
fn merged(receiver: &Receiver, labels: &[String], take: bool) -> harness::Received {
    let mut all = harness::Received::default();
    for label in labels {
        let r = if take { receiver.take(label) } else { receiver.received(label) };
        all.per_event.extend(r.per_event);
        all.latencies_us.extend(r.latencies_us);
        all.sent_us.extend(r.sent_us);
        all.first_at = match (all.first_at, r.first_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        all.last_at = all.last_at.max(r.last_at);
    }
    all
}

pub(crate) async fn wait_all(receiver: &Receiver, labels: &[String], total: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while labels.iter().map(|l| receiver.delivered(l)).sum::<usize>() < total {
        anyhow::ensure!(Instant::now() < deadline, "not every event was delivered within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------

/// `push-burst`: a burst of events (over HTTP or Kafka) to webhook receivers answering 204.
pub async fn push_burst(
    events: usize,
    producers: usize,
    tenants: usize,
    via: Via,
    json_out: &Path,
) -> anyhow::Result<()> {
    let partitions = 4;
    let broker = match via {
        Via::Kafka => {
            let b = Broker::start().await?;
            b.create_topic(partitions).await?;
            Some(b)
        }
        Via::Http => None,
    };
    let hub = BenchHub::start(broker.as_ref()).await?;
    let receiver = Receiver::start().await?;
    let names = tenant_names("burst", tenants);
    let who = webhook_tenants(&hub, &receiver, &names).await?;
    // Warm up (connections, the consumer's group join), then forget it.
    match &broker {
        Some(b) => {
            b.produce(&names, partitions, names.len()).await?;
        }
        None => {
            hub.post_many(&who, names.len(), 1).await?;
        }
    }
    wait_all(&receiver, &names, names.len()).await?;
    merged(&receiver, &names, true);
    let warm = hub.inbox_count().await?;

    let before = hub.usage();
    let started = Instant::now();
    let accepted_s = match &broker {
        Some(b) => {
            b.produce(&names, partitions, events).await?;
            let (_, all_in) = hub.wait_inbox(warm + events as i64, PATIENCE).await?;
            (all_in - started).as_secs_f64()
        }
        None => hub.post_many(&who, events, producers).await?.as_secs_f64(),
    };
    wait_all(&receiver, &names, events).await?;
    let spent = hub.usage().since(&before);
    // Let stragglers (duplicates, if any) arrive before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = merged(&receiver, &names, false);
    let delivered_s = got.last_at.map_or(f64::NAN, |l| (l - started).as_secs_f64());
    let latency = got.latency();
    let store = hub.store_name();
    let in_flight = hub.max_in_flight;
    let via_name = if via == Via::Kafka { "kafka" } else { "http" };
    let ledger = hub.ledger_bytes_per_delivery().await?;
    let figures = json!({
        "scenario": "push-burst", "via": via_name, "store": store, "events": events, "tenants": tenants,
        "producers": producers, "max_in_flight": in_flight, "accepted_per_s": events as f64 / accepted_s,
        "delivered_per_s": got.distinct() as f64 / delivered_s, "delivered": got.distinct(),
        "duplicates": got.duplicates(), "latency_ms": latency.json(),
        "measured": spent.json(), "cpu_ms_per_event": cpu_json(&spent, got.distinct()),
        "ledger_bytes_per_delivery": ledger,
    });
    let usage = hub.finish().await?;
    let [hub_cpu, pg_cpu, both_cpu] = cpu_rows(&spent, got.distinct());
    report(
        &format!(
            "push-burst ({store}, via {via_name}, {events} events of ~1 KiB, {tenants} tenants, {in_flight} in flight at most)"
        ),
        &[
            ("accepted/s", f0(events as f64 / accepted_s)),
            ("delivered/s", f0(got.distinct() as f64 / delivered_s)),
            ("delivered", format!("{} of {events}", got.distinct())),
            ("duplicates", got.duplicates().to_string()),
            ("latency p50 ms", f1(latency.p50)),
            ("latency p99 ms", f1(latency.p99)),
            ("latency max ms", f1(latency.max)),
            hub_cpu,
            pg_cpu,
            both_cpu,
            ("ledger bytes/delivery", ledger.map_or_else(|| "—".to_owned(), f0)),
        ],
        figures,
        &usage,
        json_out,
    )
}

/// CPU per delivered event over the measured phase, as report rows: the hub, PostgreSQL, both.
pub(crate) fn cpu_rows(spent: &Usage, delivered: usize) -> [(&'static str, String); 3] {
    let (hub, pg) = spent.per_event_ms(delivered);
    [
        ("hub CPU ms per event", format!("{hub:.3}")),
        ("PostgreSQL CPU ms per event", format!("{pg:.3}")),
        ("hub + PostgreSQL CPU ms per event", format!("{:.3}", hub + pg)),
    ]
}

pub(crate) fn cpu_json(spent: &Usage, delivered: usize) -> Value {
    let (hub, pg) = spent.per_event_ms(delivered);
    json!({"hub": hub, "postgres": pg, "total": hub + pg})
}

// ---------------------------------------------------------------------------------------------

/// What a paced sender sent: how long each post took to be answered (the hub answers once the
/// event is stored), in microseconds, one for each event sent.
pub(crate) struct Paced {
    pub(crate) answered_us: Vec<u64>,
}

impl Paced {
    pub(crate) fn sent(&self) -> usize {
        self.answered_us.len()
    }
}

/// Sends `rate` events per second of one tenant until `stop`, in ticks of 10 ms.
pub(crate) async fn paced(
    hub: &BenchHub,
    key: &str,
    tenant: &str,
    rate: u32,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Paced> {
    let per_tick = f64::from(rate) / 100.0;
    let mut interval = tokio::time::interval(Duration::from_millis(10));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let answered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut owed = 0.0;
    let mut tasks = tokio::task::JoinSet::new();
    while !stop.load(Ordering::SeqCst) {
        interval.tick().await;
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            let (poster, key, tenant, answered) =
                (hub.clone_client(), key.to_owned(), tenant.to_owned(), Arc::clone(&answered));
            tasks.spawn(async move {
                let began = Instant::now();
                poster.post(&key, &tenant).await?;
                let took = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
                answered.lock().map_err(|_| anyhow::anyhow!("a sender panicked"))?.push(took);
                Ok::<_, anyhow::Error>(())
            });
        }
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let answered_us = std::mem::take(&mut *answered.lock().map_err(|_| anyhow::anyhow!("a sender panicked"))?);
    Ok(Paced { answered_us })
}

pub(crate) async fn paced_for(
    hub: &BenchHub,
    key: &str,
    tenant: &str,
    rate: u32,
    for_: Duration,
) -> anyhow::Result<Paced> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let timer = tokio::spawn(async move {
        tokio::time::sleep(for_).await;
        flag.store(true, Ordering::SeqCst);
    });
    let sent = paced(hub, key, tenant, rate, stop).await;
    timer.abort();
    sent
}

/// `steady`: `rate` events per second for `seconds`, end-to-end latency.
pub async fn steady(rate: u32, seconds: u64, json_out: &Path) -> anyhow::Result<()> {
    let hub = BenchHub::start(None).await?;
    let receiver = Receiver::start().await?;
    let names = vec!["steady".to_owned()];
    let who = webhook_tenants(&hub, &receiver, &names).await?;
    hub.post_many(&who, 10, 1).await?;
    wait_all(&receiver, &names, 10).await?;
    receiver.take("steady");
    let before = hub.usage();
    let timed = [metric::INGEST_WRITE_SECONDS, metric::ATTEMPT_SECONDS];
    let timed_before = hub.histograms(&timed).await?;
    let paced = paced_for(&hub, &who[0].0, "steady", rate, Duration::from_secs(seconds)).await?;
    let (sent, answered) = (paced.sent(), Latency::of(&paced.answered_us));
    wait_all(&receiver, &names, sent).await?;
    let spent = hub.usage().since(&before);
    let timed_after = hub.histograms(&timed).await?;
    // The hub's own account: each write's mean (and how many events it carried), each attempt's.
    let [(write_s, writes), (attempt_s, attempts)] =
        std::array::from_fn(|i| (timed_after[i].0 - timed_before[i].0, timed_after[i].1 - timed_before[i].1));
    let write_ms = 1000.0 * write_s / writes.max(1.0);
    let attempt_ms = 1000.0 * attempt_s / attempts.max(1.0);
    let per_write = sent as f64 / writes.max(1.0);
    let got = receiver.take("steady");
    let latency = got.latency();
    let worst = got.worst_seconds(3);
    let store = hub.store_name();
    let figures = json!({
        "scenario": "steady", "store": store, "rate_per_s": rate, "seconds": seconds, "sent": sent,
        "delivered": got.distinct(), "duplicates": got.duplicates(), "latency_ms": latency.json(),
        "worst_seconds": worst.iter().map(|(second, sent, l)| json!({
            "second": second, "sent": sent, "latency_ms": l.json(),
        })).collect::<Vec<_>>(),
        "measured": spent.json(), "cpu_ms_per_event": cpu_json(&spent, got.distinct()),
        "answered_ms": answered.json(),
        "hub_timing": json!({
            "writes": writes, "events_per_write": per_write, "write_mean_ms": write_ms,
            "attempts": attempts, "attempt_mean_ms": attempt_ms,
        }),
    });
    let usage = hub.finish().await?;
    let [hub_cpu, pg_cpu, both_cpu] = cpu_rows(&spent, got.distinct());
    report(
        &format!("steady ({store}, {rate} events/s for {seconds} s, one tenant)"),
        &[
            ("sent", sent.to_string()),
            ("delivered", got.distinct().to_string()),
            ("latency p50 ms", f1(latency.p50)),
            ("latency p99 ms", f1(latency.p99)),
            ("latency max ms", f1(latency.max)),
            (
                "slowest second: at s, p99 ms",
                worst.first().map_or_else(String::new, |(second, _, l)| format!("{second}, {}", f1(l.p99))),
            ),
            ("post answered p50 / p99 ms", format!("{} / {}", f1(answered.p50), f1(answered.p99))),
            ("hub: write mean ms (events a write)", format!("{} ({})", f2(write_ms), f1(per_write))),
            ("hub: attempt mean ms", f2(attempt_ms)),
            hub_cpu,
            pg_cpu,
            both_cpu,
        ],
        figures,
        &usage,
        json_out,
    )
}

// ---------------------------------------------------------------------------------------------

/// `fairness`: one tenant floods `flood` events while another sends `rate` per second; the small
/// tenant's latency against its latency alone.
pub async fn fairness(flood: usize, rate: u32, json_out: &Path) -> anyhow::Result<()> {
    let hub = BenchHub::start(None).await?;
    let receiver = Receiver::start().await?;
    let names = vec!["flood".to_owned(), "small".to_owned()];
    let who = webhook_tenants(&hub, &receiver, &names).await?;
    let (flood_who, small_key) = (vec![who[0].clone()], who[1].0.clone());
    hub.post_many(&who, 2, 1).await?;
    wait_all(&receiver, &names, 2).await?;
    merged(&receiver, &names, true);

    // Alone.
    let alone = paced_for(&hub, &small_key, "small", rate, Duration::from_secs(10)).await?;
    wait_all(&receiver, &["small".to_owned()], alone.sent()).await?;
    let solo = receiver.take("small").latency();
    let solo_answered = Latency::of(&alone.answered_us);

    // Beside the flood, until the flood is delivered.
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let posting_from = harness::now_us();
    let flood_run = async {
        let flood_s = hub.post_many(&flood_who, flood, 32).await;
        let posted_at = harness::now_us();
        let ok = receiver.wait_for("flood", flood, PATIENCE).await;
        stop.store(true, Ordering::SeqCst);
        (flood_s, posted_at, ok)
    };
    let (small_sent, (flood_s, posted_at, ok)) =
        tokio::join!(paced(&hub, &small_key, "small", rate, Arc::clone(&stop)), flood_run);
    let (small, flood_s) = (small_sent?, flood_s?);
    let (small_sent, beside_answered) = (small.sent(), Latency::of(&small.answered_us));
    anyhow::ensure!(ok, "the flood was not delivered within {PATIENCE:?}");
    receiver.wait_for("small", small_sent, Duration::from_secs(120)).await;
    let beside = receiver.received("small");
    let flood_got = receiver.received("flood");
    let flood_rate = flood_got.rate_since(started);
    let under = beside.latency();
    let ratio = under.p99 / solo.p99.max(1e-9);
    // While the flood is posted the machine is shared with its ingest; after, with its backlog.
    let (while_posted, n_posted) = beside.latency_of_sent(posting_from, posted_at);
    let (backlog, n_backlog) = beside.latency_of_sent(posted_at, u64::MAX);
    let backlog_ratio = backlog.p99 / solo.p99.max(1e-9);
    let store = hub.store_name();
    let figures = json!({
        "scenario": "fairness", "store": store, "flood_events": flood, "small_rate_per_s": rate,
        "small_solo_latency_ms": solo.json(), "small_beside_flood_latency_ms": under.json(),
        "small_sent": small_sent, "small_delivered": beside.distinct(), "p99_ratio": ratio,
        "small_while_flood_posted_latency_ms": while_posted.json(), "small_while_flood_posted_events": n_posted,
        "small_during_flood_backlog_latency_ms": backlog.json(), "small_during_flood_backlog_events": n_backlog,
        "backlog_p99_ratio": backlog_ratio,
        "small_solo_answered_ms": solo_answered.json(), "small_beside_flood_answered_ms": beside_answered.json(),
        "flood_accepted_per_s": flood as f64 / flood_s.as_secs_f64(), "flood_delivered_per_s": flood_rate,
        "flood_duplicates": flood_got.duplicates(),
    });
    let usage = hub.finish().await?;
    report(
        &format!("fairness ({store}, one tenant floods {flood} events, another sends {rate}/s)"),
        &[
            ("small tenant solo p50 ms", f1(solo.p50)),
            ("small tenant solo p99 ms", f1(solo.p99)),
            ("small tenant beside flood p50 ms", f1(under.p50)),
            ("small tenant beside flood p99 ms", f1(under.p99)),
            ("p99 beside flood / solo", format!("{ratio:.2}x")),
            ("  while the flood is posted p99 ms", f1(while_posted.p99)),
            ("  during its backlog p99 ms", f1(backlog.p99)),
            ("  during its backlog / solo", format!("{backlog_ratio:.2}x")),
            (
                "small tenant's posts answered p99 ms, solo / beside",
                format!("{} / {}", f1(solo_answered.p99), f1(beside_answered.p99)),
            ),
            ("small tenant delivered", format!("{} of {small_sent}", beside.distinct())),
            ("flood accepted/s", f0(flood as f64 / flood_s.as_secs_f64())),
            ("flood delivered/s", f0(flood_rate)),
        ],
        figures,
        &usage,
        json_out,
    )
}

// ---------------------------------------------------------------------------------------------

/// `replay`: `history` events are delivered to one subscription; a second subscription of the
/// same tenant, created afterwards, replays them all while the tenant sends `rate` live events per
/// second; the replay at `replay_rate` per second, or the hub's default. The live events' latency
/// beside the replay against alone, and the replay's rate.
pub async fn replay(history: usize, rate: u32, replay_rate: Option<u32>, json_out: &Path) -> anyhow::Result<()> {
    let hub = BenchHub::start(None).await?;
    let receiver = Receiver::start().await?;
    let names = vec!["live".to_owned()];
    let who = webhook_tenants(&hub, &receiver, &names).await?;
    let key = who[0].0.clone();
    hub.post_many(&who, history, 32).await?;
    wait_all(&receiver, &names, history).await?;
    receiver.take("live");

    // Alone.
    let sent = paced_for(&hub, &key, "live", rate, Duration::from_secs(10)).await?.sent();
    wait_all(&receiver, &names, sent).await?;
    let solo = receiver.take("live").latency();

    // Beside a replay of the whole inbox into a new subscription.
    let sub = hub.subscribe(&key, json!({"type": "webhook", "url": receiver.url("replayed", false)})).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let replay_run = async {
        let result = async {
            let answer: Value = hub
                .http
                .post(format!("{}/v1/subscriptions/{sub}/replay", hub.base))
                .bearer_auth(&key)
                .json(&match replay_rate {
                    Some(r) => json!({"from_seq": 1, "rate": r}),
                    None => json!({"from_seq": 1}),
                })
                .send()
                .await?
                .json()
                .await?;
            let id = answer["replay_id"].as_str().ok_or_else(|| anyhow::anyhow!("no replay started: {answer}"))?;
            let deadline = Instant::now() + PATIENCE;
            let done = loop {
                let r: Value = hub
                    .http
                    .get(format!("{}/v1/subscriptions/{sub}/replays/{id}", hub.base))
                    .bearer_auth(&key)
                    .send()
                    .await?
                    .json()
                    .await?;
                if r["state"] != "running" {
                    break r;
                }
                anyhow::ensure!(Instant::now() < deadline, "the replay did not finish within {PATIENCE:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let created = done["created"].as_u64().unwrap_or(0) as usize;
            anyhow::ensure!(
                receiver.wait_for("replayed", created, PATIENCE).await,
                "replayed events were not delivered"
            );
            Ok::<_, anyhow::Error>((done, started.elapsed()))
        }
        .await;
        stop.store(true, Ordering::SeqCst);
        result
    };
    let (live_sent, replayed) = tokio::join!(paced(&hub, &key, "live", rate, Arc::clone(&stop)), replay_run);
    let (live_sent, (done, took)) = (live_sent?.sent(), replayed?);
    anyhow::ensure!(receiver.wait_for("live", live_sent, Duration::from_secs(120)).await, "live events were lost");
    let beside = receiver.take("live");
    let under = beside.latency();
    let ratio = under.p99 / solo.p99.max(1e-9);
    let created = done["created"].as_u64().unwrap_or(0);
    let replayed_per_s = created as f64 / took.as_secs_f64();
    let store = hub.store_name();
    let figures = json!({
        "scenario": "replay", "store": store, "history": history, "live_rate_per_s": rate,
        "live_solo_latency_ms": solo.json(), "live_beside_replay_latency_ms": under.json(), "p99_ratio": ratio,
        "live_sent": live_sent, "live_delivered": beside.distinct(), "live_duplicates": beside.duplicates(),
        "replay": done, "replay_delivered_per_s": replayed_per_s,
    });
    let usage = hub.finish().await?;
    report(
        &format!("replay ({store}, {history} events replayed while one tenant sends {rate}/s)"),
        &[
            ("live solo p50 ms", f1(solo.p50)),
            ("live solo p99 ms", f1(solo.p99)),
            ("live beside replay p50 ms", f1(under.p50)),
            ("live beside replay p99 ms", f1(under.p99)),
            ("p99 beside replay / solo", format!("{ratio:.2}x")),
            ("live delivered", format!("{} of {live_sent}", beside.distinct())),
            ("replayed (created)", created.to_string()),
            ("replay rate asked (events/s)", done["rate"].to_string()),
            ("replay delivered/s", f0(replayed_per_s)),
        ],
        figures,
        &usage,
        json_out,
    )
}

// ---------------------------------------------------------------------------------------------

/// `slow-destination`: a fast subscription's throughput alone, beside a second fast one (the
/// same ingest and job work per event as the next phase), then beside a subscription whose
/// receiver takes 2 s per request.
pub async fn slow_destination(events: usize, json_out: &Path) -> anyhow::Result<()> {
    let hub = BenchHub::start(None).await?;
    let receiver = Receiver::start().await?;
    let key = hub.tenant("slowdest").await?;
    let who = vec![(key.clone(), "slowdest".to_owned())];
    hub.subscribe(&key, json!({"type": "webhook", "url": receiver.url("fast", false)})).await?;
    hub.post_many(&who, 10, 1).await?;
    receiver.wait_for("fast", 10, PATIENCE).await;
    receiver.take("fast");

    let started = Instant::now();
    hub.post_many(&who, events, 16).await?;
    anyhow::ensure!(receiver.wait_for("fast", events, PATIENCE).await, "the solo run was not delivered");
    let solo = receiver.take("fast").rate_since(started);

    // Every event now makes two jobs, both for fast receivers.
    let twin = hub.subscribe(&key, json!({"type": "webhook", "url": receiver.url("twin", false)})).await?;
    let started = Instant::now();
    hub.post_many(&who, events, 16).await?;
    anyhow::ensure!(receiver.wait_for("fast", events, PATIENCE).await, "the run beside a twin was not delivered");
    anyhow::ensure!(receiver.wait_for("twin", events, PATIENCE).await, "the twin's run was not delivered");
    let with_twin = receiver.take("fast").rate_since(started);
    hub.unsubscribe(&key, &twin).await?;

    hub.subscribe(&key, json!({"type": "webhook", "url": receiver.url("slow", true)})).await?;
    let started = Instant::now();
    hub.post_many(&who, events, 16).await?;
    anyhow::ensure!(receiver.wait_for("fast", events, PATIENCE).await, "the run beside the slow one was not delivered");
    let beside = receiver.take("fast").rate_since(started);
    let slow_done = receiver.delivered("slow");
    let ratio = beside / solo.max(1e-9);
    let ratio_twin = beside / with_twin.max(1e-9);
    let store = hub.store_name();
    let in_flight = hub.max_in_flight;
    let figures = json!({
        "scenario": "slow-destination", "store": store, "events": events, "max_in_flight": in_flight,
        "slow_answer_s": harness::SLOW_ANSWER.as_secs_f64(), "fast_solo_per_s": solo,
        "fast_beside_twin_per_s": with_twin, "fast_beside_slow_per_s": beside, "ratio": ratio,
        "ratio_to_twin": ratio_twin, "slow_delivered_meanwhile": slow_done,
    });
    let usage = hub.finish().await?;
    report(
        &format!("slow-destination ({store}, {events} events, a receiver taking 2 s beside a fast one)"),
        &[
            ("fast alone deliveries/s", f0(solo)),
            ("fast beside a fast twin deliveries/s", f0(with_twin)),
            ("fast beside slow deliveries/s", f0(beside)),
            ("beside slow / alone", format!("{:.0} %", ratio * 100.0)),
            ("beside slow / beside a fast twin", format!("{:.0} %", ratio_twin * 100.0)),
            ("slow deliveries meanwhile", slow_done.to_string()),
        ],
        figures,
        &usage,
        json_out,
    )
}

// ---------------------------------------------------------------------------------------------

/// `pull`: a pull consumer paging through `events` with `next_cursor`.
pub async fn pull(events: usize, page: u32, json_out: &Path) -> anyhow::Result<()> {
    let hub = BenchHub::start(None).await?;
    let key = hub.tenant("pull").await?;
    let sub = hub.subscribe(&key, json!({"type": "pull"})).await?;
    hub.post_many(&[(key.clone(), "pull".to_owned())], events, 32).await?;
    let started = Instant::now();
    let (mut read, mut pages, mut limited) = (0usize, 0usize, 0usize);
    let mut after: Option<i64> = None;
    loop {
        let mut url = format!("{}/v1/subscriptions/{sub}/events?limit={page}", hub.base);
        if let Some(a) = after {
            url.push_str(&format!("&after={a}"));
        }
        let response = hub.http.get(url).bearer_auth(&key).send().await?;
        if response.status().as_u16() == 429 {
            limited += 1;
            let wait =
                response.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse::<u64>().ok()).unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(wait)).await;
            continue;
        }
        anyhow::ensure!(response.status().is_success(), "pulling: {}", response.status());
        let body: Value = response.json().await?;
        pages += 1;
        read += body["items"].as_array().map_or(0, Vec::len);
        match body["next_cursor"].as_i64() {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let store = hub.store_name();
    let figures = json!({
        "scenario": "pull", "store": store, "events": events, "page": page, "read": read, "pages": pages,
        "rate_limited": limited, "events_per_s": read as f64 / secs, "pages_per_s": pages as f64 / secs,
    });
    let usage = hub.finish().await?;
    report(
        &format!("pull ({store}, {events} events, pages of {page})"),
        &[
            ("events read", format!("{read} of {events}")),
            ("events/s", f0(read as f64 / secs)),
            ("pages/s", f1(pages as f64 / secs)),
            ("rate-limited answers", limited.to_string()),
        ],
        figures,
        &usage,
        json_out,
    )
}

// ---------------------------------------------------------------------------------------------

/// `disk`: 8 KiB written at the next offset of a 16 MiB file and flushed with `fdatasync`, again
/// and again for `seconds`, as PostgreSQL flushes its WAL at each commit. Every end-to-end figure
/// waits for one such flush, so a stall here is a stall there.
pub fn disk(dir: &Path, seconds: u64, json_out: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::FileExt;
    const BLOCK: usize = 8192;
    const SPAN: u64 = 16 << 20;
    let path = dir.join(format!("hub-bench-disk-{}", uuid::Uuid::now_v7().simple()));
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("--dir {}: cannot create a file there", dir.display()))?;
    let block = vec![0x5a_u8; BLOCK];
    let (mut flushes_us, mut offset) = (Vec::new(), 0_u64);
    let until = Instant::now() + Duration::from_secs(seconds);
    let measured = (|| -> std::io::Result<()> {
        while Instant::now() < until {
            file.write_all_at(&block, offset)?;
            offset = (offset + BLOCK as u64) % SPAN;
            let started = Instant::now();
            file.sync_data()?;
            flushes_us.push(started.elapsed().as_micros() as u64);
        }
        Ok(())
    })();
    drop(file);
    let _ = std::fs::remove_file(&path);
    measured.with_context(|| format!("--dir {}: writing or flushing failed", dir.display()))?;
    let stalls = flushes_us.iter().filter(|us| **us > 50_000).count();
    flushes_us.sort_unstable();
    let (latency, p999) = (Latency::of_sorted(&flushes_us), harness::quantile_ms(&flushes_us, 0.999));
    let rate = flushes_us.len() as f64 / seconds as f64;
    let figures = json!({
        "scenario": "disk", "dir": dir.display().to_string(), "seconds": seconds, "flushes": flushes_us.len(),
        "flushes_per_s": rate, "flush_ms": {"p50": latency.p50, "p99": latency.p99, "p999": p999, "max": latency.max},
        "flushes_over_50ms": stalls,
    });
    println!("disk ({}, {seconds} s of 8 KiB writes, each flushed)", dir.display());
    for (name, value) in [
        ("flushes/s", f0(rate)),
        ("flush p50 ms", format!("{:.3}", latency.p50)),
        ("flush p99 ms", format!("{:.3}", latency.p99)),
        ("flush p99.9 ms", format!("{p999:.3}")),
        ("flush max ms", f1(latency.max)),
        ("flushes over 50 ms", stalls.to_string()),
    ] {
        println!("  {name:<38} {value:>12}");
    }
    harness::write_json(&figures, json_out)
}

// ---------------------------------------------------------------------------------------------

/// `commit`: no hub. The database's own floor under the hub's writes, from this process: one row
/// of an event's size inserted and committed per statement on one connection, first paced at
/// `rate` a second for `seconds` (as the steady scenario's writes come), then back to back for as
/// long. Each is the least any durable write costs at that pace; every end-to-end latency of the
/// hub holds at least one.
pub async fn commit(rate: u32, seconds: u64, json_out: &Path) -> anyhow::Result<()> {
    use sqlx::Connection as _;
    let dsn = std::env::var("STREAMING_HUB_POSTGRES_DSN")
        .map_err(|_| anyhow::anyhow!("STREAMING_HUB_POSTGRES_DSN: the commit scenario measures PostgreSQL; set it"))?;
    // One connection of its own, not a pool's: nothing but the statement goes to the server.
    let mut conn = sqlx::PgConnection::connect(&dsn).await.context("STREAMING_HUB_POSTGRES_DSN: cannot connect")?;
    let schema = format!("shbench_{}", uuid::Uuid::now_v7().simple());
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&mut conn).await?;
    let table = format!("{schema}.floor");
    let measured = async {
        sqlx::query(&format!("CREATE TABLE {table} (id BIGINT PRIMARY KEY, body BYTEA NOT NULL)"))
            .execute(&mut conn)
            .await?;
        let insert = format!("INSERT INTO {table} (id, body) VALUES ($1, $2)");
        let body = harness::body(0);
        let mut id = 0_i64;
        let mut one = async |id: i64| -> anyhow::Result<u64> {
            let started = Instant::now();
            sqlx::query(&insert).bind(id).bind(body.as_bytes()).execute(&mut conn).await?;
            Ok(started.elapsed().as_micros() as u64)
        };
        let mut paced = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let until = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < until {
            tick.tick().await;
            id += 1;
            paced.push(one(id).await?);
        }
        let mut back_to_back = Vec::new();
        let until = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < until {
            id += 1;
            back_to_back.push(one(id).await?);
        }
        anyhow::Ok((paced, back_to_back))
    }
    .await;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&mut conn).await?;
    conn.close().await?;
    let (mut paced, mut back_to_back) = measured?;
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64 / 1000.0;
    let (paced_mean, b2b_mean) = (mean(&paced), mean(&back_to_back));
    paced.sort_unstable();
    back_to_back.sort_unstable();
    let (p, b) = (Latency::of_sorted(&paced), Latency::of_sorted(&back_to_back));
    let figures = json!({
        "scenario": "commit", "store": "postgres", "rate": rate, "seconds": seconds,
        "payload_bytes": harness::body(0).len(),
        "paced_ms": {"statements": paced.len(), "mean": paced_mean, "p50": p.p50, "p99": p.p99, "max": p.max},
        "back_to_back_ms": {"statements": back_to_back.len(), "mean": b2b_mean, "p50": b.p50, "p99": b.p99, "max": b.max},
    });
    println!("commit (postgres, one ~1 KiB row inserted and committed a statement, one connection, no hub)");
    for (name, value) in [
        (format!("paced at {rate}/s: mean ms"), format!("{paced_mean:.3}")),
        (format!("paced at {rate}/s: p50 / p99 ms"), format!("{:.3} / {:.3}", p.p50, p.p99)),
        ("back to back: statements/s".to_owned(), f0(back_to_back.len() as f64 / seconds as f64)),
        ("back to back: mean ms".to_owned(), format!("{b2b_mean:.3}")),
        ("back to back: p50 / p99 ms".to_owned(), format!("{:.3} / {:.3}", b.p50, b.p99)),
    ] {
        println!("  {name:<38} {value:>12}");
    }
    harness::write_json(&figures, json_out)
}
