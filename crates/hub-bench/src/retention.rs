//! The `retention` scenario (PostgreSQL only): what inbox retention costs at scale, in the layout
//! before the partitioned inbox (one table; old events deleted in batches of 5 000, as the
//! retention loop did) and in the partitioned one (a day dropped whole). Each layout, in a schema
//! of its own, is loaded with `--events` events spread over eight whole UTC days with `COPY`;
//! then, while a writer ingests `--rate` events a second through the store, the oldest day is
//! retained away. Figures: the time retention takes, PostgreSQL's CPU meanwhile, the events gone,
//! the writer's p50/p99 before and during, and what is left for vacuum.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use hub_store::prelude::*;
use hub_store::{PgStore, PruneKind};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::harness::{History, f0, f1, f2, load_history, postgres_cpu, quantile_ms, write_json};

/// Whole days of events loaded; the oldest is retained away.
const DAYS: i64 = 8;
/// Tenants the loaded events belong to.
const TENANTS: usize = 10;
/// Rows deleted per statement in the layout before (the retention loop's batch).
const BATCH: u32 = 5000;
/// How long the writer runs before retention starts.
const BASELINE: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// One `events` table (migrations up to 0020).
    OneTable,
    /// The inbox partitioned by day (every migration).
    Partitioned,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::OneTable => "one table, rows deleted",
            Layout::Partitioned => "partitioned, day dropped",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Layout::OneTable => "one_table",
            Layout::Partitioned => "partitioned",
        }
    }
}

/// `retention`: both layouts, one after the other.
pub async fn retention(events: usize, payload: usize, rate: u32, json_out: &Path) -> anyhow::Result<()> {
    let dsn = std::env::var("STREAMING_HUB_POSTGRES_DSN")
        .context("the retention scenario needs PostgreSQL: set STREAMING_HUB_POSTGRES_DSN")?;
    let mut figures = json!({"events": events, "payload_bytes": payload, "days": DAYS, "rate": rate});
    let mut rows = Vec::new();
    for layout in [Layout::OneTable, Layout::Partitioned] {
        let run = in_a_schema(&dsn, |schema| measure(&dsn, schema, layout, events, payload, rate)).await?;
        rows.push((layout, run.clone()));
        figures[layout.key()] = run;
    }
    println!("retention of one day of {events} events over {DAYS} days ({payload}-byte payloads), writer at {rate}/s");
    for (layout, run) in &rows {
        let get = |k: &str| run[k].as_f64().unwrap_or(f64::NAN);
        println!("  {}", layout.name());
        for (label, value) in [
            ("load with COPY, events/s", f0(get("load_per_s"))),
            ("events removed", f0(get("removed"))),
            ("retention s", f2(get("retention_s"))),
            ("PostgreSQL CPU s during retention", f2(get("retention_postgres_cpu_s"))),
            ("writer p50 ms before / during", format!("{} / {}", f2(get("before_p50_ms")), f2(get("during_p50_ms")))),
            ("writer p99 ms before / during", format!("{} / {}", f2(get("before_p99_ms")), f2(get("during_p99_ms")))),
            ("writer max ms during", f1(get("during_max_ms"))),
            ("dead rows left for vacuum", f0(get("dead_rows"))),
            ("inbox MiB after", f0(get("inbox_mib_after"))),
        ] {
            println!("    {label:<40} {value:>16}");
        }
    }
    write_json(&figures, json_out)
}

/// Runs `measure` in a schema of its own, dropped afterwards whatever the outcome.
async fn in_a_schema<F, Fut>(dsn: &str, measure: F) -> anyhow::Result<Value>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    let admin = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(dsn).await.context("connecting")?;
    let schema = format!("shbench_{}", Uuid::now_v7().simple());
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await?;
    let result = measure(schema.clone()).await;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin).await?;
    result
}

/// Migrates a schema to the layout before (every migration before `first_of_partitions`) or to
/// the partitioned one as an install that has run for `DAYS` days finds it (its tables of the
/// layout before, empty, detached and dropped, and a partition per day made by `make`).
async fn migrate_layout(
    store: &PgStore,
    layout: Layout,
    first_of_partitions: i64,
    legacy: &[(&str, &str)],
    make: &str,
) -> anyhow::Result<()> {
    match layout {
        Layout::OneTable => {
            let all = sqlx::migrate!("../hub-store/migrations/postgres");
            let before = sqlx::migrate::Migrator {
                migrations: std::borrow::Cow::Owned(
                    all.migrations.iter().filter(|m| m.version < first_of_partitions).cloned().collect(),
                ),
                ..sqlx::migrate::Migrator::DEFAULT
            };
            before.run(store.pool()).await?;
        }
        Layout::Partitioned => {
            store.migrate().await?;
            for (parent, table) in legacy {
                sqlx::query(&format!("ALTER TABLE {parent} DETACH PARTITION {table}")).execute(store.pool()).await?;
                sqlx::query(&format!("DROP TABLE {table}")).execute(store.pool()).await?;
            }
            sqlx::query(&format!(
                "SELECT {make}(((now() AT TIME ZONE 'UTC')::date - {DAYS}) + n) FROM generate_series(0, {DAYS} + 2) n"
            ))
            .execute(store.pool())
            .await?;
        }
    }
    Ok(())
}

/// What retention did beside the paced writer.
struct Retained {
    removed: u64,
    seconds: f64,
    postgres_cpu_s: f64,
    /// The writer's sorted latencies (µs) for `BASELINE` before retention began, and from then
    /// until three seconds at least after.
    before: Vec<u64>,
    during: Vec<u64>,
}

impl Retained {
    /// The figures every layout reports.
    fn figures(&self) -> Value {
        json!({
            "removed": self.removed,
            "retention_s": self.seconds,
            "retention_postgres_cpu_s": self.postgres_cpu_s,
            "before_p50_ms": quantile_ms(&self.before, 0.5),
            "before_p99_ms": quantile_ms(&self.before, 0.99),
            "during_p50_ms": quantile_ms(&self.during, 0.5),
            "during_p99_ms": quantile_ms(&self.during, 0.99),
            "during_max_ms": quantile_ms(&self.during, 1.0),
            "during_writes": self.during.len(),
        })
    }
}

/// Runs `retain` while a writer ingests `rate` events a second, after `BASELINE` of writing alone.
async fn retain_beside_a_writer<Fut>(store: &PgStore, rate: u32, retain: Fut) -> anyhow::Result<Retained>
where
    Fut: std::future::Future<Output = anyhow::Result<u64>>,
{
    let writer = PacedWriter::start(store, rate);
    tokio::time::sleep(BASELINE).await;
    let cpu_before = postgres_cpu();
    let began = Instant::now();
    let removed = retain.await?;
    let seconds = began.elapsed().as_secs_f64();
    let postgres_cpu_s = postgres_cpu() - cpu_before;
    // At least a few seconds of writes during retention, however quick it was.
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(began.elapsed())).await;
    let until = Instant::now().max(began + Duration::from_secs(3));
    let phase = writer.stop().await?;
    let (before, during) = (phase(began - BASELINE, began), phase(began, until));
    anyhow::ensure!(!before.is_empty() && !during.is_empty(), "the writer wrote nothing");
    Ok(Retained { removed, seconds, postgres_cpu_s, before, during })
}

/// The store's own retention of `kind`, batch after batch until one comes back short.
async fn prune_to_the_end(store: &PgStore, kind: PruneKind, cutoff: DateTime<Utc>) -> anyhow::Result<u64> {
    let mut removed = 0;
    loop {
        let n = store.prune(kind, cutoff, BATCH).await?.context("the prune lock was taken")?;
        removed += n;
        if n < u64::from(BATCH) {
            return Ok(removed);
        }
    }
}

async fn measure(
    dsn: &str,
    schema: String,
    layout: Layout,
    events: usize,
    payload: usize,
    rate: u32,
) -> anyhow::Result<Value> {
    let store = PgStore::connect(dsn, Some(&schema), 8).await?;
    let today = Utc::now().date_naive().and_hms_opt(0, 0, 0).context("midnight")?.and_utc();
    let first = today - chrono::Duration::days(DAYS);
    // The layout before: every migration up to 0020.
    migrate_layout(&store, layout, 21, &[("events", "events_legacy")], "hub_event_partition").await?;
    let started = Instant::now();
    let tenants: Vec<String> = (0..TENANTS).map(|t| format!("bench{t}")).collect();
    let tenants: Vec<&str> = tenants.iter().map(String::as_str).collect();
    let history = History { tenants: &tenants, first, until: today, events, payload, origin: "kafka" };
    load_history(store.pool(), None, &history).await?;
    let load_s = started.elapsed().as_secs_f64();
    sqlx::query("ANALYZE events").execute(store.pool()).await?;
    sqlx::query("CHECKPOINT").execute(store.pool()).await?;

    let cutoff = first + chrono::Duration::days(1);
    let retained = retain_beside_a_writer(&store, rate, async {
        match layout {
            Layout::OneTable => delete_in_batches(&store, cutoff).await,
            Layout::Partitioned => prune_to_the_end(&store, PruneKind::Events, cutoff).await,
        }
    })
    .await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE received_at < $1 AND tenant_id <> 'live'")
        .bind(cutoff)
        .fetch_one(store.pool())
        .await?;
    anyhow::ensure!(left == 0, "{left} events older than the cutoff are left");
    let dead: Option<i64> = sqlx::query_scalar(
        "SELECT sum(n_dead_tup)::bigint FROM pg_stat_user_tables WHERE schemaname = $1 AND relname LIKE 'events%'",
    )
    .bind(&schema)
    .fetch_one(store.pool())
    .await?;
    let bytes: Option<i64> = sqlx::query_scalar(
        "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname LIKE 'events%' AND c.relkind IN ('r', 'p')",
    )
    .bind(&schema)
    .fetch_one(store.pool())
    .await?;
    store.pool().close().await;
    let mut figures = retained.figures();
    figures["load_s"] = json!(load_s);
    figures["load_per_s"] = json!(events as f64 / load_s);
    figures["dead_rows"] = json!(dead.unwrap_or(0));
    figures["inbox_mib_after"] = json!(bytes.unwrap_or(0) as f64 / 1048576.0);
    Ok(figures)
}

/// Retention as the layout before did it: statements of `BATCH` rows, oldest first, each in its
/// own transaction with the events' pull-stream entries, until one comes back short.
async fn delete_in_batches(store: &PgStore, cutoff: DateTime<Utc>) -> anyhow::Result<u64> {
    let mut removed = 0;
    loop {
        let mut tx = store.pool().begin().await?;
        let gone: Vec<(String, i64)> = sqlx::query_as(
            "DELETE FROM events WHERE (tenant_id, seq) IN (
                SELECT e.tenant_id, e.seq FROM events e
                WHERE e.received_at < $1
                  AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.tenant_id = e.tenant_id AND j.event_seq = e.seq)
                ORDER BY e.received_at LIMIT $2)
             RETURNING tenant_id, seq",
        )
        .bind(cutoff)
        .bind(i64::from(BATCH))
        .fetch_all(&mut *tx)
        .await?;
        let (tenants, seqs): (Vec<String>, Vec<i64>) = gone.iter().cloned().unzip();
        sqlx::query(
            "DELETE FROM pull_entries
             WHERE (tenant_id, COALESCE(event_seq, seq)) IN (SELECT * FROM UNNEST($1::text[], $2::bigint[]))",
        )
        .bind(&tenants)
        .bind(&seqs)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        removed += gone.len() as u64;
        if gone.len() < BATCH as usize {
            return Ok(removed);
        }
    }
}

/// A writer ingesting one event a statement through the store at a steady rate, each write's
/// latency noted with when it began: what a quiet HTTP producer does to the inbox, beside
/// whatever a scenario measures.
pub struct PacedWriter {
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl PacedWriter {
    /// Starts writing `rate` events a second of tenant `live`.
    pub fn start(store: &PgStore, rate: u32) -> Self {
        let samples: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let (store, samples, stop) = (store.clone(), samples.clone(), stop.clone());
            tokio::spawn(async move {
                let gap = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
                let mut next = Instant::now();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let record = hub_testkit::accepted_with(
                        hub_testkit::event_headers("live", Uuid::now_v7(), "payment", "settled"),
                        br#"{"amount":1}"#,
                    );
                    let began = Instant::now();
                    store.write_batch(&[record]).await?;
                    samples.lock().expect("samples").push((began, began.elapsed().as_micros() as u64));
                    next += gap;
                    tokio::time::sleep_until(next.into()).await;
                }
                anyhow::Ok(())
            })
        };
        Self { samples, stop, task }
    }

    /// Stops it; answers the sorted latencies (µs) of the writes begun in a span of time.
    pub async fn stop(self) -> anyhow::Result<impl Fn(Instant, Instant) -> Vec<u64>> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await??;
        let samples = self.samples.lock().expect("samples").clone();
        Ok(move |from: Instant, to: Instant| {
            let mut v: Vec<u64> = samples.iter().filter(|(at, _)| *at >= from && *at < to).map(|(_, us)| *us).collect();
            v.sort_unstable();
            v
        })
    }
}

/// Jobs of one subscription spread over the loaded days, each finished with one attempt.
const JOB_TENANT: &str = "bench0";

/// `job-retention`: what retention of finished jobs and their attempts costs, in the layout
/// before partitioned jobs (one table each; finished jobs selected and deleted with their attempts
/// in batches of 5 000, as the retention loop did) and in the partitioned one (a day's jobs and
/// attempts dropped). Each layout, in a schema of its own, holds `jobs` finished jobs with one
/// attempt each, spread over eight whole UTC days (each job's id of its day, as the hub makes
/// them); then, while a writer ingests `rate` events a second that each make a job, the oldest
/// day is retained away. Figures as `retention`'s, with PostgreSQL's CPU per retained row.
pub async fn job_retention(jobs: usize, rate: u32, json_out: &Path) -> anyhow::Result<()> {
    let dsn = std::env::var("STREAMING_HUB_POSTGRES_DSN")
        .context("the job-retention scenario needs PostgreSQL: set STREAMING_HUB_POSTGRES_DSN")?;
    let mut figures = json!({"jobs": jobs, "days": DAYS, "rate": rate});
    let mut rows = Vec::new();
    for layout in [Layout::OneTable, Layout::Partitioned] {
        let run = in_a_schema(&dsn, |schema| measure_jobs(&dsn, schema, layout, jobs, rate)).await?;
        rows.push((layout, run.clone()));
        figures[layout.key()] = run;
    }
    println!("retention of one day of {jobs} finished jobs with an attempt each over {DAYS} days, writer at {rate}/s");
    for (layout, run) in &rows {
        let get = |k: &str| run[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {}",
            if *layout == Layout::OneTable { "one table each, rows deleted" } else { "partitioned, day dropped" }
        );
        for (label, value) in [
            ("load, jobs/s", f0(get("load_per_s"))),
            ("jobs removed (with as many attempts)", f0(get("removed"))),
            ("retention s", f2(get("retention_s"))),
            ("PostgreSQL CPU s during retention", f2(get("retention_postgres_cpu_s"))),
            ("PostgreSQL CPU µs per retained row", f2(get("postgres_cpu_us_per_row"))),
            ("writer p50 ms before / during", format!("{} / {}", f2(get("before_p50_ms")), f2(get("during_p50_ms")))),
            ("writer p99 ms before / during", format!("{} / {}", f2(get("before_p99_ms")), f2(get("during_p99_ms")))),
            ("writer max ms during", f1(get("during_max_ms"))),
            ("dead rows left for vacuum", f0(get("dead_rows"))),
        ] {
            println!("    {label:<40} {value:>16}");
        }
    }
    write_json(&figures, json_out)
}

async fn measure_jobs(dsn: &str, schema: String, layout: Layout, jobs: usize, rate: u32) -> anyhow::Result<Value> {
    let store = PgStore::connect(dsn, Some(&schema), 8).await?;
    let today = Utc::now().date_naive().and_hms_opt(0, 0, 0).context("midnight")?.and_utc();
    let first = today - chrono::Duration::days(DAYS);
    // The layout before: every migration before partitioned jobs (0038).
    migrate_layout(
        &store,
        layout,
        38,
        &[("delivery_jobs", "delivery_jobs_legacy"), ("delivery_attempts", "delivery_attempts_legacy")],
        "hub_job_partition",
    )
    .await?;
    let live = hub_testkit::subscription("live", hub_core::SinkKind::named("webhook"), &["*.*"], None);
    store.create_subscription(&live).await?;
    let started = Instant::now();
    let webhook = Uuid::now_v7();
    let span_ms = (today - first).num_milliseconds();
    // Job i finished at an even step over the days, 50 ms after it was made; its id begins with
    // its time (the rest random), as the hub's UUIDv7s do.
    sqlx::query(
        "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, attempts, due_at,
                                    event_received_at, window_start, created_at, updated_at, finished_at)
         SELECT (lpad(to_hex(ms), 12, '0') || substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid,
                $1, $2, i, 'succeeded', 1, t, t, t, t, t + interval '50 milliseconds', t + interval '50 milliseconds'
         FROM generate_series(1, $3) AS i
         CROSS JOIN LATERAL (SELECT $4 + (i - 1) * $5 / $3 AS ms) m
         CROSS JOIN LATERAL (SELECT to_timestamp(m.ms / 1000.0) AS t) tt",
    )
    .bind(JOB_TENANT)
    .bind(webhook)
    .bind(i64::try_from(jobs)?)
    .bind(first.timestamp_millis())
    .bind(span_ms)
    .execute(store.pool())
    .await?;
    sqlx::query(
        "INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms,
                                        outcome, status_code)
         SELECT gen_random_uuid(), id, tenant_id, subscription_id, 1, created_at, 20, 'delivered', 204
         FROM delivery_jobs WHERE subscription_id = $1",
    )
    .bind(webhook)
    .execute(store.pool())
    .await?;
    let load_s = started.elapsed().as_secs_f64();
    sqlx::query("VACUUM (ANALYZE) delivery_jobs, delivery_attempts").execute(store.pool()).await?;
    sqlx::query("CHECKPOINT").execute(store.pool()).await?;

    let cutoff = first + chrono::Duration::days(1);
    let retained = retain_beside_a_writer(&store, rate, async {
        match layout {
            Layout::OneTable => delete_jobs_in_batches(&store, cutoff).await,
            Layout::Partitioned => prune_to_the_end(&store, PruneKind::FinishedJobs, cutoff).await,
        }
    })
    .await?;
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM delivery_jobs WHERE subscription_id = $1 AND finished_at < $2")
            .bind(webhook)
            .bind(cutoff)
            .fetch_one(store.pool())
            .await?;
    anyhow::ensure!(left == 0, "{left} jobs finished before the cutoff are left");
    let orphans: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_attempts a WHERE a.subscription_id = $1
           AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.id = a.job_id)",
    )
    .bind(webhook)
    .fetch_one(store.pool())
    .await?;
    anyhow::ensure!(orphans == 0, "{orphans} attempts are left without their job");
    let dead: Option<i64> = sqlx::query_scalar(
        "SELECT sum(n_dead_tup)::bigint FROM pg_stat_user_tables
         WHERE schemaname = $1 AND (relname LIKE 'delivery_jobs%' OR relname LIKE 'delivery_attempts%')",
    )
    .bind(&schema)
    .fetch_one(store.pool())
    .await?;
    store.pool().close().await;
    // A job and its attempt: two rows retained each.
    let rows = 2.0 * retained.removed as f64;
    let mut figures = retained.figures();
    figures["load_s"] = json!(load_s);
    figures["load_per_s"] = json!(jobs as f64 / load_s);
    figures["postgres_cpu_us_per_row"] =
        json!(if rows > 0.0 { retained.postgres_cpu_s * 1e6 / rows } else { f64::NAN });
    figures["dead_rows"] = json!(dead.unwrap_or(0));
    Ok(figures)
}

/// Job retention as the layout before did it: `BATCH` finished jobs selected, their attempts and
/// then they deleted, each batch in its own transaction, until one comes back short.
async fn delete_jobs_in_batches(store: &PgStore, cutoff: DateTime<Utc>) -> anyhow::Result<u64> {
    let mut removed = 0;
    loop {
        let mut tx = store.pool().begin().await?;
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM delivery_jobs
             WHERE state IN ('succeeded', 'dead', 'cancelled') AND COALESCE(finished_at, updated_at) < $1 LIMIT $2",
        )
        .bind(cutoff)
        .bind(i64::from(BATCH))
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM delivery_attempts WHERE job_id = ANY($1)").bind(&ids).execute(&mut *tx).await?;
        let done = sqlx::query("DELETE FROM delivery_jobs WHERE id = ANY($1)").bind(&ids).execute(&mut *tx).await?;
        tx.commit().await?;
        removed += done.rows_affected();
        if ids.len() < BATCH as usize {
            return Ok(removed);
        }
    }
}
