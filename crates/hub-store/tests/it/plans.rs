//! Reads whose cost must not grow with the inbox, held to their page whatever the statistics
//! say: a page of the event log (no filter, by type, by time) and a pull stream's page, run under
//! `EXPLAIN ANALYZE` against a full inbox twice, once with the statistics of an empty one (the
//! plan a new install makes and caches before autovacuum looks again) and once analyzed full.
//! What each plan touched is counted from PostgreSQL's own account: the rows each scan returned
//! and those it read and dropped. (Claims and outcome records are held the same way by
//! `claims_and_records_read_no_more_than_they_take_whatever_the_statistics_say`.) On SQLite, whose
//! plans are fixed when the statement is, a time window's page and the count of open jobs are
//! held to their indexes with no statistics (as the hub leaves its file) and analysed.

use chrono::{DateTime, Duration, Utc};
use hub_core::SinkKind;
use hub_store::{EventQuery, IngestRecord, JobState, PgStore};
use serde_json::Value;
use uuid::Uuid;

use crate::support::{TestDb, headers, subscription};

/// Events of the tenant that reads, and as many of another tenant's, received over an hour.
const EVENTS: usize = 4_000;
/// One event in this many is of the rare type.
const RARE: usize = 100;
const PAGE: u32 = 20;

/// What a plan's scans read: rows returned and rows read then dropped by a filter, over every
/// loop; and the scans that walked a table holding rows (not an index of it).
#[derive(Debug, Default)]
struct Touched {
    rows: f64,
    seq_scans: Vec<String>,
}

fn touched(plan: &Value) -> Touched {
    fn walk(node: &Value, into: &mut Touched) {
        let loops = node["Actual Loops"].as_f64().unwrap_or(1.0);
        if let Some(relation) = node["Relation Name"].as_str() {
            let returned = node["Actual Rows"].as_f64().unwrap_or(0.0);
            let dropped = node["Rows Removed by Filter"].as_f64().unwrap_or(0.0)
                + node["Rows Removed by Index Recheck"].as_f64().unwrap_or(0.0);
            into.rows += (returned + dropped) * loops;
            // An empty partition is read whole at no cost; one that holds rows must be probed.
            if node["Node Type"] == "Seq Scan" && returned + dropped > 0.0 {
                into.seq_scans.push(relation.to_owned());
            }
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            walk(child, into);
        }
    }
    let mut into = Touched::default();
    walk(&plan[0]["Plan"], &mut into);
    into
}

fn event(tenant: &str, at: DateTime<Utc>, rare: bool) -> IngestRecord {
    let (resource, kind) = if rare { ("loan", "defaulted") } else { ("loan", "approved") };
    let mut record = hub_testkit::accepted_with(headers(tenant, Uuid::now_v7(), resource, kind), br#"{"amount":1}"#);
    if let IngestRecord::Accepted(accepted) = &mut record {
        accepted.received_at = at;
    }
    record
}

/// Every read, each held to what its page needs: `window` is how many of the tenant's events
/// the time window holds (a search by time reads those at most, never the rest of the inbox).
async fn every_read_takes_its_page(pg: &PgStore, pull: Uuid, start: DateTime<Utc>, stats: &str) -> Vec<String> {
    let mut over = Vec::new();
    let page = f64::from(PAGE);
    let query = |f: &dyn Fn(&mut EventQuery)| {
        let mut q = EventQuery { limit: PAGE, ..EventQuery::default() };
        f(&mut q);
        q
    };
    let half = (EVENTS / 2) as i64;
    // The window: a tenth of the hour, starting at its middle.
    let since = start + Duration::seconds(1800);
    let until = start + Duration::seconds(2160);
    let window = (EVENTS / 10) as f64;
    let reads: Vec<(&str, EventQuery, f64)> = vec![
        ("a page from the start", query(&|_| {}), page),
        ("a page from the middle", query(&|q| q.after = half), page),
        ("the newest page", query(&|q| q.newest_first = true), page),
        (
            "a page of the rare type",
            query(&|q| {
                q.resource_type = Some("loan".into());
                q.event_type = Some("defaulted".into());
            }),
            page,
        ),
        (
            "the newest of the rare type",
            query(&|q| {
                q.resource_type = Some("loan".into());
                q.event_type = Some("defaulted".into());
                q.newest_first = true;
            }),
            page,
        ),
        (
            "a page of the common type from the middle",
            query(&|q| {
                q.after = half;
                q.resource_type = Some("loan".into());
                q.event_type = Some("approved".into());
            }),
            // What it reads beside its page: the rare type's entries it steps over.
            page * 2.0,
        ),
        (
            "a page of a time window",
            query(&|q| {
                q.since = Some(since);
                q.until = Some(until);
            }),
            window + page,
        ),
        (
            "the newest page of a time window",
            query(&|q| {
                q.since = Some(since);
                q.until = Some(until);
                q.newest_first = true;
            }),
            window + page,
        ),
    ];
    for (what, q, most) in reads {
        let plan = pg.explain_event_log("t1", &q).await.expect("explain");
        // A page's rows in each of the scans that make it (the events and, for a join, the
        // index it probes), and a little slack for the partitions' own probes.
        judge(&mut over, &format!("{what} ({stats})"), &plan, 2.0 * most + 16.0);
    }
    for (what, after) in [("a pull page from the start", 0), ("a pull page from the middle", half)] {
        let plan = pg.explain_pull_page("t1", pull, after, PAGE).await.expect("explain");
        judge(&mut over, &format!("{what} ({stats})"), &plan, 2.0 * page + 16.0);
    }
    over
}

/// Notes in `over` what a plan read beyond `most` rows, or a table it read whole.
fn judge(over: &mut Vec<String>, what: &str, plan: &Value, most: f64) {
    let t = touched(plan);
    if !t.seq_scans.is_empty() || t.rows > most {
        over.push(format!(
            "{what}: {} rows read (at most {most}), tables read whole {:?}\n{plan:#}",
            t.rows, t.seq_scans
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_log_and_pull_pages_read_their_page_whatever_the_statistics_say() {
    let db = TestDb::postgres().await;
    let pg = db.postgres_store().expect("a PostgreSQL store");
    // Two streams of the tenant: a page of one never reads the other's entries.
    let pull = subscription("t1", SinkKind::PULL, &["*.*"], None);
    db.store.create_subscription(&pull).await.expect("pull subscription");
    let other = subscription("t1", SinkKind::PULL, &["*.*"], None);
    db.store.create_subscription(&other).await.expect("pull subscription");
    // Statistics stay what this test makes them: no autovacuum on its tables.
    db.execute(
        "DO $$ DECLARE r record; BEGIN
           FOR r IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = current_schema() AND c.relkind = 'r'
                      AND (c.relname LIKE 'events%' OR c.relname = 'pull_entries') LOOP
             EXECUTE format('ALTER TABLE %I SET (autovacuum_enabled = false)', r.relname);
           END LOOP; END $$",
    )
    .await;
    let start = Utc::now() - Duration::hours(1);
    // One event each, analyzed: the statistics of a new install.
    db.store.write_batch(&[event("t1", start, false), event("t2", start, false)]).await.expect("write");
    db.execute("ANALYZE").await;
    // Then the hour's events of both tenants, interleaved.
    let step = 3600.0 / EVENTS as f64;
    let mut batch = Vec::new();
    for i in 1..EVENTS {
        let at = start + Duration::milliseconds((i as f64 * step * 1000.0) as i64);
        batch.push(event("t1", at, i % RARE == 0));
        batch.push(event("t2", at, i % RARE == 0));
        if batch.len() >= 500 {
            db.store.write_batch(&std::mem::take(&mut batch)).await.expect("write");
        }
    }
    db.store.write_batch(&batch).await.expect("write");

    let mut over = every_read_takes_its_page(pg, pull.id, start, "statistics of an empty inbox").await;
    db.execute("ANALYZE").await;
    over.extend(every_read_takes_its_page(pg, pull.id, start, "statistics of a full one").await);
    assert!(over.is_empty(), "{} reads read more than their page:\n{}", over.len(), over.join("\n"));
}

/// SQLite: a page of a time window reads the window's keys from `events_by_time` and only its
/// page's rows by the primary key (sorting the window's whole rows cost a full hub three times an
/// empty one's); the count of a subscription's open jobs reads each open state's own index and
/// never the index of all its jobs, finished ones included (240 ms beside a million).
#[tokio::test]
async fn sqlite_reads_a_window_and_open_jobs_from_their_own_indexes() {
    let db = TestDb::sqlite().await;
    let store = db.sqlite_store().expect("a SQLite store");
    let sub = Uuid::now_v7().hyphenated().to_string();
    // Two thousand events of the tenant over an hour, each with a finished job.
    db.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
         INSERT INTO events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type, event_time,
                             schema_version, extensions, payload, origin, received_at)
         SELECT 't1', i, printf('00000000-0000-7000-8000-%012x', i), 'test', 'studio.lerian.test.loan.approved',
                'loan', 'approved', '2026-12-07T00:00:00+00:00', '1.0.0', '{}', X'7B7D', 'http', i * 1800000
         FROM n",
    )
    .await;
    db.execute(&format!(
        "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, attempts, due_at,
                                    event_received_at, window_start, created_at, updated_at, finished_at)
         SELECT printf('00000000-0000-7000-9000-%012x', seq), tenant_id, '{sub}', seq, 'succeeded', 1, received_at,
                received_at, received_at, received_at, received_at, received_at
         FROM events"
    ))
    .await;
    let window = |newest_first| EventQuery {
        limit: PAGE,
        since: DateTime::from_timestamp_micros(1000 * 1_800_000),
        until: DateTime::from_timestamp_micros(1200 * 1_800_000),
        newest_first,
        ..EventQuery::default()
    };
    for stats in ["no statistics", "analysed"] {
        for newest_first in [false, true] {
            let plan = store.explain_event_log("t1", &window(newest_first)).await.expect("plan");
            let found = |what: &str| plan.iter().any(|line| line.contains(what));
            assert!(
                found(
                    "SEARCH events USING COVERING INDEX events_by_time (tenant_id=? AND received_at>? AND received_at<?)"
                ) && found("SEARCH events USING PRIMARY KEY (tenant_id=? AND seq=?)")
                    && !plan.iter().any(|line| line.starts_with("SCAN events")),
                "a window's page (newest first: {newest_first}, {stats}): {plan:#?}"
            );
        }
        for (name, plan) in store.explain_open_jobs().await.expect("plans") {
            let indexes: &[&str] = match name {
                "backlogs" => &["delivery_jobs_pending_by_subscription", "delivery_jobs_held_by_subscription"],
                _ => &[
                    "delivery_jobs_pending_by_subscription",
                    "delivery_jobs_held_by_subscription",
                    "delivery_jobs_dead_by_subscription",
                    "delivery_jobs_leased",
                ],
            };
            for index in indexes {
                assert!(
                    plan.iter()
                        .any(|line| line.contains(&format!("INDEX {index} "))
                            || line.ends_with(&format!("INDEX {index}"))),
                    "{name}: counted through {index} ({stats}): {plan:#?}"
                );
            }
            assert!(
                !plan.iter().any(|line| line.contains("delivery_jobs_subscription") || line == "SCAN delivery_jobs"),
                "{name}: counted without reading finished jobs ({stats}): {plan:#?}"
            );
        }
        db.execute("ANALYZE").await;
    }
}

/// The counts the metrics and the statistics refresh every few seconds (the jobs of each open
/// state, each subscription's backlog) read the open jobs alone, whatever the statistics say:
/// beside five million finished jobs, a count of every job by state and a backlog read with a
/// condition on two states took 100–700 ms of a core at each refresh (hub-bench scale). The
/// finished states are PostgreSQL's estimate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_counts_read_open_jobs_only_whatever_the_statistics_say() {
    const FINISHED: usize = 5_000;
    let db = TestDb::postgres().await;
    let pg = db.postgres_store().expect("a PostgreSQL store");
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("subscription");
    // Statistics stay what this test makes them: no autovacuum on any partition of the jobs.
    db.execute(
        "DO $$ DECLARE r record; BEGIN
           FOR r IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                    WHERE i.inhparent = 'delivery_jobs'::regclass LOOP
             EXECUTE format('ALTER TABLE %I SET (autovacuum_enabled = false)', r.relname);
           END LOOP; END $$",
    )
    .await;
    let job = |state: &str, n: usize, from: usize| {
        format!(
            "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at, event_received_at,
                                        window_start, created_at, updated_at, finished_at)
             SELECT (left(hub_day_uuid((now() AT TIME ZONE 'UTC')::date)::text, 8)
                     || substr(gen_random_uuid()::text, 9))::uuid,
                    't1', '{}', i, '{state}', now(), now(), now(), now(), now(),
                    CASE WHEN '{state}' IN ('succeeded', 'cancelled', 'dead') THEN now() END
             FROM generate_series({from}, {}) i",
            sub.id,
            from + n - 1
        )
    };
    // A few open jobs, analysed: the statistics of a new install.
    for (state, n, from) in [("pending", 3, 1), ("held", 2, 10), ("leased", 1, 20), ("dead", 1, 30)] {
        db.execute(&job(state, n, from)).await;
    }
    db.execute("ANALYZE delivery_jobs").await;
    // Then the history: thousands of finished jobs.
    db.execute(&job("succeeded", FINISHED, 100)).await;
    db.execute(&job("cancelled", FINISHED / 10, 100 + FINISHED)).await;
    let open = 7.0;
    for stats in ["statistics of a new install", "statistics of a full table"] {
        for (name, plan) in pg.explain_job_counts().await.expect("plans") {
            let read = touched(&plan);
            assert!(
                read.rows <= 2.0 * open + 2.0 && !read.seq_scans.iter().any(|t| t.starts_with("delivery_jobs")),
                "{name} read {} rows ({:?} read whole) for {open} open jobs ({stats}): {plan:#}",
                read.rows,
                read.seq_scans
            );
        }
        db.execute("ANALYZE delivery_jobs").await;
    }
    let counts: std::collections::HashMap<_, _> = db.store.job_counts().await.expect("counts").into_iter().collect();
    for (state, n) in [(JobState::Pending, 3), (JobState::Held, 2), (JobState::Leased, 1), (JobState::Dead, 1)] {
        assert_eq!(counts.get(&state), Some(&n), "{state:?} counted exactly");
    }
    // Analysed whole (a table this small is sampled entirely), the estimates are the counts.
    assert_eq!(counts.get(&JobState::Succeeded), Some(&(FINISHED as i64)), "succeeded from the statistics");
    assert_eq!(counts.get(&JobState::Cancelled), Some(&(FINISHED as i64 / 10)), "cancelled from the statistics");
    let backlogs = db.store.backlogs().await.expect("backlogs");
    assert_eq!(backlogs.len(), 1);
    assert_eq!((backlogs[0].subscription_id, backlogs[0].jobs, backlogs[0].tenant_id.as_str()), (sub.id, 5, "t1"));
}
