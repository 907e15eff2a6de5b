//! `simulate`: a draft selection tried on a large inbox (SPEC §10, "History tools"). The hub's
//! schema is loaded with `--events` events of one tenant spread over the last 24 hours with
//! `COPY` (one in a thousand of them for the subject the subscription's filter names), then
//! `POST …/simulate` is timed over that day with a draft filter, three times.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::harness::{BenchHub, Db, History, f0, f2, load_history, write_json};

const TENANT: &str = "sim";

/// [`TENANT`]'s `events` events received from `first` to `until`.
fn of_tenant(first: DateTime<Utc>, until: DateTime<Utc>, events: usize) -> History<'static> {
    History { tenants: &[TENANT], first, until, events, payload: 0, origin: "http" }
}

pub async fn simulate(events: usize, json_out: &Path) -> anyhow::Result<()> {
    let hub = BenchHub::start(None).await?;
    let Db::Postgres { pool, schema } = &hub.db else {
        anyhow::bail!("the simulate bench loads PostgreSQL with COPY (set STREAMING_HUB_POSTGRES_DSN)");
    };
    let key = hub.tenant(TENANT).await?;
    let sub = hub
        .subscribe_with(
            &key,
            json!({"name": "one-customer", "event_types": ["payment.*"], "filters": [{"sql": "subject = 'customer-7'"}],
                "sink": {"type": "pull"}}),
        )
        .await?;
    let now = Utc::now();
    let since = now - chrono::Duration::hours(24);
    let started = Instant::now();
    let history = of_tenant(since + chrono::Duration::seconds(1), now - chrono::Duration::seconds(1), events);
    load_history(pool, Some(schema), &history).await?;
    sqlx::query(&format!("ANALYZE \"{schema}\".events")).execute(pool).await?;
    let loaded = started.elapsed();
    let body = json!({"since": since.to_rfc3339(), "until": now.to_rfc3339(),
        "filters": [{"sql": "subject IN ('customer-7', 'customer-8')"}]});
    let mut runs = Vec::new();
    let mut last = Value::Null;
    for _ in 0..3 {
        let (status, answer, took) = hub
            .call(reqwest::Method::POST, &format!("/v1/subscriptions/{sub}/simulate"), Some(&key), Some(&body))
            .await?;
        anyhow::ensure!(status == 200, "simulate answered {status}: {answer}");
        runs.push(took.as_secs_f64());
        last = answer;
    }
    hub.finish().await?;
    println!("simulate (postgres, {events} events of one tenant over the last 24 h, a draft filter)");
    println!("  {:<38} {:>12}", "load with COPY s", f2(loaded.as_secs_f64()));
    for (i, s) in runs.iter().enumerate() {
        println!("  {:<38} {:>12}", format!("simulate {} s", i + 1), f2(*s));
    }
    println!("  {:<38} {:>12}", "scanned", f0(last["scanned"].as_f64().unwrap_or(f64::NAN)));
    println!("  {:<38} {:>12}", "current / draft", format!("{} / {}", last["current"], last["draft"]));
    let figures = json!({"scenario": "simulate", "events": events, "load_s": loaded.as_secs_f64(),
        "simulate_s": runs, "answer": {"current": last["current"], "draft": last["draft"],
        "scanned": last["scanned"], "complete": last["complete"]}});
    write_json(&figures, json_out)
}

/// How long the writer runs before the erasure starts.
const BASELINE: std::time::Duration = std::time::Duration::from_secs(10);

/// `erasure`: the same inbox as `simulate` (`customer-<i % 1000>`: a thousand events each), then
/// one customer erased through `POST /admin/erasures` while a writer ingests `rate` events a
/// second into the same inbox through the store (as the retention bench's writer does). Figures:
/// how long the erasure takes from the request to `done`, what it changed, and the writer's
/// p50/p99 before and during.
pub async fn erasure(events: usize, rate: u32, json_out: &Path) -> anyhow::Result<()> {
    use crate::harness::quantile_ms;

    let hub = BenchHub::start(None).await?;
    let Db::Postgres { pool, schema } = &hub.db else {
        anyhow::bail!("the erasure bench loads PostgreSQL with COPY (set STREAMING_HUB_POSTGRES_DSN)");
    };
    let now = Utc::now();
    let started = Instant::now();
    let history = of_tenant(now - chrono::Duration::hours(24), now - chrono::Duration::seconds(1), events);
    load_history(pool, Some(schema), &history).await?;
    sqlx::query(&format!("ANALYZE \"{schema}\".events")).execute(pool).await?;
    let loaded = started.elapsed();
    sqlx::query("CHECKPOINT").execute(pool).await?;

    let dsn = std::env::var("STREAMING_HUB_POSTGRES_DSN").context("STREAMING_HUB_POSTGRES_DSN")?;
    let store = hub_store::PgStore::connect(&dsn, Some(schema), 4).await?;
    let writer = crate::retention::PacedWriter::start(&store, rate);
    tokio::time::sleep(BASELINE).await;
    let request = json!({"tenant_id": TENANT, "match": {"subject": "customer-7"}, "reason": "bench"});
    let began = Instant::now();
    let (status, answer, _) = hub.call(reqwest::Method::POST, "/admin/erasures", None, Some(&request)).await?;
    anyhow::ensure!(status == 202, "the erasure was answered {status}: {answer}");
    let id = answer["id"].as_str().context("an erasure id")?.to_owned();
    let done = loop {
        let record = hub.admin_get(&format!("/admin/erasures/{id}")).await?;
        if record["state"] == "done" {
            break record;
        }
        anyhow::ensure!(began.elapsed() < std::time::Duration::from_secs(600), "the erasure did not end: {record}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let took = began.elapsed();
    tokio::time::sleep(std::time::Duration::from_secs(3).saturating_sub(took)).await;
    let during_until = Instant::now().max(began + std::time::Duration::from_secs(3));
    let phase = writer.stop().await?;
    let before = phase(began - BASELINE, began);
    let during = phase(began, during_until);
    anyhow::ensure!(!before.is_empty() && !during.is_empty(), "the writer wrote nothing");
    store.pool().close().await;
    hub.finish().await?;

    let counts = &done["counts"];
    println!("erasure (postgres, {events} events of one tenant, one customer's {} erased)", counts["events"]);
    println!("  {:<38} {:>12}", "load with COPY s", f2(loaded.as_secs_f64()));
    println!("  {:<38} {:>12}", "erasure, request to done s", f2(took.as_secs_f64()));
    println!("  {:<38} {:>12}", "events scanned / erased", format!("{} / {}", counts["scanned"], counts["events"]));
    println!(
        "  {:<38} {:>12}",
        "writer p50 ms before / during",
        format!("{} / {}", f2(quantile_ms(&before, 0.5)), f2(quantile_ms(&during, 0.5)))
    );
    println!(
        "  {:<38} {:>12}",
        "writer p99 ms before / during",
        format!("{} / {}", f2(quantile_ms(&before, 0.99)), f2(quantile_ms(&during, 0.99)))
    );
    let figures = json!({"scenario": "erasure", "events": events, "rate": rate, "load_s": loaded.as_secs_f64(),
        "erasure_s": took.as_secs_f64(), "counts": counts,
        "before_p50_ms": quantile_ms(&before, 0.5), "before_p99_ms": quantile_ms(&before, 0.99),
        "during_p50_ms": quantile_ms(&during, 0.5), "during_p99_ms": quantile_ms(&during, 0.99),
        "during_max_ms": quantile_ms(&during, 1.0), "during_writes": during.len()});
    write_json(&figures, json_out)
}

/// `simulate-fairness`: the same inbox as `simulate`, then another tenant ingests `rate` events a
/// second over HTTP, alone and while the first runs simulations of the whole day back to back
/// (and asks for a second at once, which the hub refuses: one at a time per tenant). Figures: the
/// other tenant's HTTP ingest p50/p99 alone and beside; issue #62's target is a p99 within 50 ms.
pub async fn simulate_fairness(events: usize, rate: u32, json_out: &Path) -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use crate::harness::{Latency, f1};
    use crate::scenarios::paced_for;

    const WINDOW: std::time::Duration = std::time::Duration::from_secs(15);
    let hub = Arc::new(BenchHub::start(None).await?);
    let Db::Postgres { pool, schema } = &hub.db else {
        anyhow::bail!("the simulate-fairness bench loads PostgreSQL with COPY (set STREAMING_HUB_POSTGRES_DSN)");
    };
    let key = hub.tenant(TENANT).await?;
    let sub = hub
        .subscribe_with(&key, json!({"name": "draft", "event_types": ["payment.*"], "sink": {"type": "pull"}}))
        .await?;
    let other = hub.tenant("other").await?;
    let now = Utc::now();
    let since = now - chrono::Duration::hours(24);
    let history = of_tenant(since + chrono::Duration::seconds(1), now - chrono::Duration::seconds(1), events);
    load_history(pool, Some(schema), &history).await?;
    sqlx::query(&format!("ANALYZE \"{schema}\".events")).execute(pool).await?;
    // Warm the other tenant's path, then measure it alone.
    paced_for(&hub, &other, "other", rate, std::time::Duration::from_secs(2)).await?;
    let alone = Latency::of(&paced_for(&hub, &other, "other", rate, WINDOW).await?.answered_us);

    let body = json!({"since": since.to_rfc3339(), "until": now.to_rfc3339(),
        "filters": [{"sql": "subject IN ('customer-7', 'customer-8')"}]});
    let stop = Arc::new(AtomicBool::new(false));
    let (runs, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let simulating = {
        let (hub, key, body, stop, runs, refused) =
            (Arc::clone(&hub), key.clone(), body.clone(), Arc::clone(&stop), Arc::clone(&runs), Arc::clone(&refused));
        tokio::spawn(async move {
            let path = format!("/v1/subscriptions/{sub}/simulate");
            while !stop.load(Ordering::SeqCst) {
                // Two at once: the second is refused while the first runs.
                let (first, second) =
                    tokio::join!(hub.call(reqwest::Method::POST, &path, Some(&key), Some(&body)), async {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        hub.call(reqwest::Method::POST, &path, Some(&key), Some(&body)).await
                    });
                for (status, answer, _) in [first?, second?] {
                    match status {
                        200 => runs.fetch_add(1, Ordering::SeqCst),
                        429 => refused.fetch_add(1, Ordering::SeqCst),
                        _ => anyhow::bail!("simulate answered {status}: {answer}"),
                    };
                }
            }
            Ok::<_, anyhow::Error>(())
        })
    };
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let beside = Latency::of(&paced_for(&hub, &other, "other", rate, WINDOW).await?.answered_us);
    stop.store(true, Ordering::SeqCst);
    simulating.await??;
    let (runs, refused) = (runs.load(Ordering::SeqCst), refused.load(Ordering::SeqCst));
    let hub = Arc::into_inner(hub).context("the hub is no longer shared")?;
    hub.finish().await?;
    let excess = beside.p99 - alone.p99;
    println!(
        "simulate-fairness (postgres, {events} events of one tenant simulated back to back; another ingests {rate}/s)"
    );
    println!("  {:<38} {:>12}", "ingest alone p50 / p99 ms", format!("{} / {}", f1(alone.p50), f1(alone.p99)));
    println!("  {:<38} {:>12}", "ingest beside p50 / p99 ms", format!("{} / {}", f1(beside.p50), f1(beside.p99)));
    println!("  {:<38} {:>12}", "p99 beside minus alone ms", f1(excess));
    println!("  {:<38} {:>12}", "simulations run / refused", format!("{runs} / {refused}"));
    let figures = json!({"scenario": "simulate-fairness", "events": events, "rate": rate,
        "ingest_alone_ms": alone.json(), "ingest_beside_ms": beside.json(), "p99_excess_ms": excess,
        "simulations_run": runs, "simulations_refused": refused});
    write_json(&figures, json_out)
}
