//! `scale`: whether a full hub is as fast as an empty one. For each history size, a fresh hub
//! whose tenant already holds that many events (received over the last day; on PostgreSQL loaded
//! with `COPY` and analysed as autovacuum would, on SQLite written by one statement), a pull
//! stream over all of them, and finished jobs with one attempt each for the newest of them, up to
//! `--jobs` (what waits for retention); then the same measures on each:
//! ingest and delivery of a burst, steady latency, a pull page from the middle of the history, a
//! page of the event log by type and by time (the last five minutes, which hold the same events
//! whatever the history), and the subscription listing.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Value, json};

use crate::harness::{BenchHub, Db, History, Latency, Receiver, f0, f1, f2, load_history, write_json};
use crate::scenarios::paced_for;

const TENANT: &str = "scale";
/// The burst: events posted at once, by this many producers.
const BURST: usize = 20_000;
const PRODUCERS: usize = 16;
/// The steady phase.
const RATE: u32 = 500;
const STEADY: Duration = Duration::from_secs(10);
/// Each read is timed this many times.
const READS: usize = 20;

/// What one history size measured.
struct Measured {
    history: usize,
    jobs: usize,
    load_s: f64,
    accepted_per_s: f64,
    delivered_per_s: f64,
    steady: Latency,
    /// The steady phase's second whose slowest delivery was slowest.
    slowest_second: Latency,
    pull_ms: Latency,
    by_type_ms: Latency,
    by_time_ms: Latency,
    listing_ms: Latency,
    rss_mib: f64,
}

pub async fn scale(histories: &[usize], jobs: usize, json_out: &Path) -> anyhow::Result<()> {
    let mut all = Vec::new();
    let mut store = "";
    for &history in histories {
        let (m, kind) = measure(history, history.min(jobs)).await?;
        all.push(m);
        store = kind;
    }
    println!(
        "scale ({store}, one tenant with a day's history, a burst of {BURST} and {RATE}/s for {} s to a webhook answering at once)",
        STEADY.as_secs()
    );
    let empty = &all[0];
    let row = |name: &str, value: &dyn Fn(&Measured) -> f64, digits: usize| {
        let mut line = format!("  {name:<34}");
        for m in &all {
            let v = value(m);
            let base = value(empty);
            let cell = if digits == 0 {
                f0(v)
            } else if digits == 1 {
                f1(v)
            } else {
                f2(v)
            };
            // What the history itself cost is compared with nothing.
            if std::ptr::eq(m, empty) || name.starts_with("load") {
                line.push_str(&format!(" {cell:>20}"));
            } else {
                line.push_str(&format!(" {:>20}", format!("{cell} ({:+.0} %)", 100.0 * (v / base - 1.0))));
            }
        }
        println!("{line}");
    };
    for (what, value) in [
        ("events already stored", (|m: &Measured| m.history) as fn(&Measured) -> usize),
        ("finished jobs already stored", |m| m.jobs),
    ] {
        let mut head = format!("  {what:<34}");
        for m in &all {
            head.push_str(&format!(" {:>20}", value(m)));
        }
        println!("{head}");
    }
    row("load s (events, jobs, streams)", &|m| m.load_s, 1);
    row("ingest accepted/s", &|m| m.accepted_per_s, 0);
    row("burst delivered/s", &|m| m.delivered_per_s, 0);
    row("steady e2e p50 ms", &|m| m.steady.p50, 1);
    row("steady e2e p99 ms", &|m| m.steady.p99, 1);
    row("steady slowest second p99 ms", &|m| m.slowest_second.p99, 1);
    row("steady slowest second max ms", &|m| m.slowest_second.max, 1);
    row("pull page of 100 p50 ms", &|m| m.pull_ms.p50, 1);
    row("event log by type p50 ms", &|m| m.by_type_ms.p50, 1);
    row("event log by time p50 ms", &|m| m.by_time_ms.p50, 1);
    row("GET /v1/subscriptions p50 ms", &|m| m.listing_ms.p50, 1);
    row("hub peak RSS MiB", &|m| m.rss_mib, 1);
    let runs: Vec<Value> = all
        .iter()
        .map(|m| {
            json!({"history": m.history, "finished_jobs": m.jobs, "load_s": m.load_s, "accepted_per_s": m.accepted_per_s,
                "delivered_per_s": m.delivered_per_s, "steady_latency_ms": m.steady.json(),
                "steady_slowest_second_ms": m.slowest_second.json(),
                "pull_page_ms": m.pull_ms.json(), "event_log_by_type_ms": m.by_type_ms.json(),
                "event_log_by_time_ms": m.by_time_ms.json(), "subscriptions_ms": m.listing_ms.json(),
                "hub_peak_rss_mib": m.rss_mib})
        })
        .collect();
    write_json(&json!({"scenario": "scale", "store": store, "runs": runs}), json_out)
}

async fn measure(history: usize, jobs: usize) -> anyhow::Result<(Measured, &'static str)> {
    let hub = BenchHub::start(None).await?;
    let store = hub.store_name();
    let receiver = Receiver::start().await?;
    let key = hub.tenant(TENANT).await?;
    let webhook = hub
        .subscribe_with(
            &key,
            json!({"name": "webhook", "event_types": ["*.*"],
            "sink": {"type": "webhook", "url": receiver.url(TENANT, false)}}),
        )
        .await?;
    let pull =
        hub.subscribe_with(&key, json!({"name": "stream", "event_types": ["*.*"], "sink": {"type": "pull"}})).await?;

    let started = Instant::now();
    if history > 0 {
        let now = Utc::now();
        let loaded = History {
            tenants: &[TENANT],
            first: now - chrono::Duration::hours(24),
            until: now - chrono::Duration::hours(1),
            events: history,
            payload: 0,
            origin: "http",
        };
        let (webhook, pull) = (uuid::Uuid::parse_str(&webhook)?, uuid::Uuid::parse_str(&pull)?);
        match &hub.db {
            Db::Postgres { pool, schema } => {
                load_history(pool, Some(schema), &loaded).await?;
                finished_jobs_and_streams(pool, schema, webhook, pull, jobs).await?;
            }
            Db::Sqlite { path } => sqlite_history(path, &loaded, webhook, pull, jobs).await?,
        }
    }
    let load_s = started.elapsed().as_secs_f64();

    // Warm up (connections, plans), then forget it.
    let who = [(key.clone(), TENANT.to_owned())];
    hub.post_many(&who, 100, 4).await?;
    anyhow::ensure!(receiver.wait_for(TENANT, 100, Duration::from_secs(60)).await, "the warm-up was not delivered");
    receiver.take(TENANT);

    let posted = Instant::now();
    let accepted = hub.post_many(&who, BURST, PRODUCERS).await?;
    anyhow::ensure!(receiver.wait_for(TENANT, BURST, Duration::from_secs(300)).await, "the burst was not delivered");
    let burst = receiver.take(TENANT);
    let delivered_s = burst.last_at.map_or(f64::NAN, |l| (l - posted).as_secs_f64());

    let paced = paced_for(&hub, &key, TENANT, RATE, STEADY).await?;
    anyhow::ensure!(
        receiver.wait_for(TENANT, paced.sent(), Duration::from_secs(120)).await,
        "the steady phase was not delivered"
    );
    let steady_received = receiver.take(TENANT);
    let steady = steady_received.latency();
    let slowest_second = steady_received.worst_seconds(1).first().map_or(Latency::default(), |(.., l)| *l);

    let middle = history / 2;
    let five_minutes_ago =
        (Utc::now() - chrono::Duration::minutes(5)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let reads = [
        format!("/v1/subscriptions/{pull}/events?after={middle}&limit=100"),
        format!("/v1/events?event_type=payment.settled&after={middle}&limit=100"),
        format!("/v1/events?since={five_minutes_ago}&limit=100"),
        "/v1/subscriptions".to_owned(),
    ];
    let mut timed = Vec::new();
    for path in &reads {
        timed.push(time_reads(&hub, &key, path).await?);
    }
    let usage = hub.finish().await?;
    let [pull_ms, by_type_ms, by_time_ms, listing_ms] =
        <[Latency; 4]>::try_from(timed).map_err(|_| anyhow::anyhow!("four reads were timed"))?;
    Ok((
        Measured {
            history,
            jobs,
            load_s,
            accepted_per_s: BURST as f64 / accepted.as_secs_f64(),
            delivered_per_s: burst.distinct() as f64 / delivered_s,
            steady,
            slowest_second,
            pull_ms,
            by_type_ms,
            by_time_ms,
            listing_ms,
            rss_mib: usage.hub_peak_rss_mib,
        },
        store,
    ))
}

/// `READS` timed reads of `path`, each answered 200.
async fn time_reads(hub: &BenchHub, key: &str, path: &str) -> anyhow::Result<Latency> {
    let mut took = Vec::new();
    for _ in 0..READS {
        let (status, answer, t) = hub.call(reqwest::Method::GET, path, Some(key), None).await?;
        anyhow::ensure!(status == 200, "GET {path} answered {status}: {answer}");
        took.push(u64::try_from(t.as_micros()).unwrap_or(u64::MAX));
    }
    Ok(Latency::of(&took))
}

/// The history's stream entries (the pull subscription's), and one finished job with its one
/// attempt for each of the newest `jobs` events (the webhook's, each job's id of its event's
/// arrival, as the hub makes them), as a day of delivery leaves them; then analysed.
async fn finished_jobs_and_streams(
    pool: &sqlx::PgPool,
    schema: &str,
    webhook: uuid::Uuid,
    pull: uuid::Uuid,
    jobs: usize,
) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    sqlx::query(&format!("SET search_path TO \"{schema}\"")).execute(&mut *conn).await?;
    let jobs = i64::try_from(jobs)?;
    // Each statement takes the subscription it fills, the tenant and the jobs.
    for (sql, subscription) in [
        (
            "INSERT INTO pull_entries (subscription_id, seq, tenant_id)
             SELECT $1, seq, tenant_id FROM events WHERE tenant_id = $2 AND $3 >= 0",
            pull,
        ),
        (
            "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, attempts, due_at,
                                        event_received_at, window_start, created_at, updated_at, finished_at)
             SELECT (lpad(to_hex((extract(epoch FROM received_at) * 1000)::bigint), 12, '0')
                     || substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid,
                    tenant_id, $1, seq, 'succeeded', 1, received_at, received_at, received_at,
                    received_at, received_at + interval '50 milliseconds', received_at + interval '50 milliseconds'
             FROM (SELECT * FROM events WHERE tenant_id = $2 ORDER BY seq DESC LIMIT $3) e",
            webhook,
        ),
        (
            "INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms,
                                            outcome, status_code)
             SELECT gen_random_uuid(), id, tenant_id, subscription_id, 1, created_at, 20, 'delivered', 204
             FROM delivery_jobs WHERE subscription_id = $1 AND tenant_id = $2 AND $3 >= 0",
            webhook,
        ),
    ] {
        sqlx::query(sql).bind(subscription).bind(TENANT).bind(jobs).execute(&mut *conn).await?;
    }
    // As a hub that has run for a day finds them: vacuumed (visibility known, so index-only
    // reads stay so) and analysed. Left to autovacuum, it runs over the new rows during the
    // measures.
    sqlx::query("VACUUM (ANALYZE) events, delivery_jobs, delivery_attempts, pull_entries").execute(&mut *conn).await?;
    // And with the load's writes on disk: a checkpoint still writing them out (a load of ten
    // million rows leaves gigabytes of dirty pages) would take the disk from the measures.
    sqlx::query("CHECKPOINT").execute(&mut *conn).await?;
    Ok(())
}

/// [`History`] written into a hub's SQLite file by one statement (SQLite has no `COPY`; a
/// recursive count makes the rows in the engine), with the same stream entries, finished jobs and
/// attempts as [`finished_jobs_and_streams`]; left unanalysed, as the hub leaves its own file.
async fn sqlite_history(
    path: &Path,
    h: &History<'_>,
    webhook: uuid::Uuid,
    pull: uuid::Uuid,
    jobs: usize,
) -> anyhow::Result<()> {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(60));
    let mut conn = sqlx::ConnectOptions::connect(&options).await?;
    let mut tx = sqlx::Connection::begin(&mut conn).await?;
    let [tenant] = h.tenants else { anyhow::bail!("the SQLite history is one tenant's") };
    let last: i64 = sqlx::query_scalar(
        "INSERT INTO tenant_sequences (tenant_id, last_seq) VALUES (?1, 0)
         ON CONFLICT (tenant_id) DO UPDATE SET last_seq = last_seq RETURNING last_seq",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await?;
    let first = h.first.timestamp_micros();
    let span = (h.until - h.first).num_microseconds().unwrap_or(0);
    let events = i64::try_from(h.events)?;
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?3)
         INSERT INTO events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type, event_time,
                             schema_version, subject, extensions, payload, origin, received_at)
         SELECT ?1, ?2 + i + 1, printf('%08x-%04x-7000-8000-%012x', (?4 + ?5 * i / ?3) / 1000 >> 16, (?4 + ?5 * i / ?3) / 1000 & 65535, i), 'bench', 'studio.lerian.bench.payment.settled',
                'payment', 'settled',
                strftime('%Y-%m-%dT%H:%M:%f+00:00', (?4 + ?5 * i / ?3) / 1000000.0, 'unixepoch'),
                '1.0.0', 'customer-' || (i % 1000), '{}',
                CAST(printf('{\"n\":%12d,\"amount\":%d,\"p\":\"\"}', i, i % 997) AS BLOB), ?6, ?4 + ?5 * i / ?3
         FROM n",
    )
    .bind(tenant)
    .bind(last)
    .bind(events)
    .bind(first)
    .bind(span)
    .bind(h.origin)
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE tenant_sequences SET last_seq = ?2 WHERE tenant_id = ?1")
        .bind(tenant)
        .bind(last + events)
        .execute(&mut *tx)
        .await?;
    let (webhook, pull) = (webhook.hyphenated().to_string(), pull.hyphenated().to_string());
    let jobs = i64::try_from(jobs)?;
    for (sql, subscription) in [
        (
            "INSERT INTO pull_entries (subscription_id, seq, tenant_id)
             SELECT ?1, seq, tenant_id FROM events WHERE tenant_id = ?2 AND ?3 >= 0",
            &pull,
        ),
        (
            // Ids of UUIDv7's shape, made from the time and the event's seq (the events' too).
            "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, attempts, due_at,
                                        event_received_at, window_start, created_at, updated_at, finished_at)
             SELECT printf('%08x-%04x-7000-9000-%012x', received_at / 1000 >> 16, received_at / 1000 & 65535, seq), tenant_id, ?1, seq,
                    'succeeded', 1, received_at, received_at, received_at, received_at, received_at + 50000,
                    received_at + 50000
             FROM (SELECT * FROM events WHERE tenant_id = ?2 ORDER BY seq DESC LIMIT ?3)",
            &webhook,
        ),
        (
            "INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms,
                                            outcome, status_code)
             SELECT substr(id, 1, 15) || '1' || substr(id, 17), id, tenant_id, subscription_id, 1, created_at, 20,
                    'delivered', 204
             FROM delivery_jobs WHERE subscription_id = ?1 AND tenant_id = ?2 AND ?3 >= 0",
            &webhook,
        ),
    ] {
        sqlx::query(sql).bind(subscription).bind(tenant).bind(jobs).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    // The load's pages moved from the write-ahead log into the file, as the hub's own checkpoints
    // would have done over the day, before the measures.
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut conn).await?;
    Ok(())
}
