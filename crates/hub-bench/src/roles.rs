//! The `roles` scenario: what one event costs each part of an install, for the capacity model
//! in docs/SCALING.md. One tenant, one webhook; events come from Apache Kafka.
//!
//! - **Ingest**: a hub of role `ingest` consumes `events` records into the inbox while no
//!   dispatcher runs: the Kafka consumer's and the ingest write's work, the jobs included.
//! - **Delivery**: a hub of role `delivery` started beside it on the same database delivers the
//!   waiting jobs to a receiver answering 204: the dispatcher's work.
//!
//! Each phase reports, per event: the hub's CPU, PostgreSQL's CPU (every server process), the
//! database's commits (`pg_stat_database.xact_commit`) and the WAL it wrote.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{BenchHub, BenchTopic, Broker, Db, Receiver, Usage, f0, report};
use crate::scenarios::{PATIENCE, wait_all};

/// The database's commits and WAL position.
#[derive(Debug, Clone, Copy)]
struct Counters {
    commits: i64,
    wal_bytes: i64,
}

async fn counters(hub: &BenchHub) -> anyhow::Result<Counters> {
    let Db::Postgres { pool, .. } = &hub.db else {
        anyhow::bail!("the roles scenario measures PostgreSQL: set STREAMING_HUB_POSTGRES_DSN");
    };
    // The cumulative statistics are flushed by each backend at most once a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (commits, wal_bytes): (i64, i64) = sqlx::query_as(
        "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
         FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await?;
    Ok(Counters { commits, wal_bytes })
}

/// One phase's figures per event.
fn phase(
    name: &str,
    events: usize,
    seconds: f64,
    spent: &Usage,
    before: Counters,
    after: Counters,
) -> serde_json::Value {
    let n = events.max(1) as f64;
    json!({
        "phase": name,
        "events_per_s": n / seconds.max(1e-9),
        "hub_cpu_ms": spent.hub_cpu_s * 1000.0 / n,
        "postgres_cpu_ms": spent.postgres_cpu_s * 1000.0 / n,
        "commits": (after.commits - before.commits) as f64 / n,
        "wal_bytes": (after.wal_bytes - before.wal_bytes) as f64 / n,
    })
}

pub async fn roles(events: usize, partitions: i32, json_out: &Path) -> anyhow::Result<()> {
    let role = |r: &str| [("STREAMING_HUB_ROLE", r.to_owned())];
    let broker = Broker::start().await?;
    broker.create_topic(partitions).await?;
    let hub = BenchHub::start_with(Some(&broker), &role("ingest")).await?;
    let receiver = Receiver::start().await?;
    let names = vec!["roles".to_owned()];
    // A delivery process verifies the webhook and delivers the warm-up (connections, the
    // consumer's group join), then stops: nothing is delivered while ingest is measured.
    let warming = hub.beside(&role("delivery")).await?;
    let key = hub.tenant("roles").await?;
    warming.subscribe(&key, json!({"type": "webhook", "url": receiver.url("roles", false)})).await?;
    eprintln!("roles: warming up");
    broker.produce(&names, partitions, partitions as usize).await?;
    wait_all(&receiver, &names, partitions as usize).await?;
    receiver.take("roles");
    warming.finish().await?;
    let warm = hub.inbox_count().await?;

    eprintln!("roles: ingest phase, {events} events");
    let (db, before) = (counters(&hub).await?, hub.usage());
    let started = Instant::now();
    broker.produce(&names, partitions, events).await?;
    let (_, stored) = hub.wait_inbox(warm + events as i64, PATIENCE).await?;
    let ingest_s = (stored - started).as_secs_f64();
    let spent = hub.usage().since(&before);
    let ingest = phase("ingest", events, ingest_s, &spent, db, counters(&hub).await?);

    eprintln!("roles: delivery phase");
    let db = counters(&hub).await?;
    let postgres_before = hub.usage();
    let started = Instant::now();
    let delivery_hub = hub.beside(&role("delivery")).await?;
    wait_all(&receiver, &names, events).await?;
    let delivery_s = started.elapsed().as_secs_f64();
    // The delivery process's own CPU (its start included), and PostgreSQL's over the phase.
    let mut spent = delivery_hub.usage();
    spent.postgres_cpu_s = hub.usage().since(&postgres_before).postgres_cpu_s;
    let delivery = phase("delivery", events, delivery_s, &spent, db, counters(&hub).await?);
    delivery_hub.finish().await?;
    let got = receiver.received("roles");

    let rows: Vec<(String, String)> = [&ingest, &delivery]
        .iter()
        .flat_map(|p| {
            let name = p["phase"].as_str().unwrap_or_default().to_owned();
            let f = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
            [
                (format!("{name}: events/s"), f0(f("events_per_s"))),
                (format!("{name}: hub CPU ms / event"), format!("{:.3}", f("hub_cpu_ms"))),
                (format!("{name}: PostgreSQL CPU ms / event"), format!("{:.3}", f("postgres_cpu_ms"))),
                (format!("{name}: commits / event"), format!("{:.3}", f("commits"))),
                (format!("{name}: WAL bytes / event"), f0(f("wal_bytes"))),
            ]
        })
        .collect();
    let store = hub.store_name();
    let figures = json!({
        "scenario": "roles", "store": store, "events": events, "partitions": partitions,
        "delivered": got.distinct(), "duplicates": got.duplicates(), "phases": [ingest, delivery],
    });
    let usage = hub.finish().await?;
    let rows: Vec<(&str, String)> = rows.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    report(
        &format!("roles ({store}, {events} events of ~1 KiB from Kafka, {partitions} partitions, one webhook)"),
        &rows,
        figures,
        &usage,
        json_out,
    )
}
