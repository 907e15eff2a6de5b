//! PostgreSQL only: jobs and their attempts partitioned by the day of the jobs' ids. Retention
//! drops a day's jobs and attempts together once every job of it finished before the cutoff,
//! deletes rows only where a drop cannot do the work, and never an open job; claims and records
//! find jobs in whichever partition holds them; and a database of the layout before is migrated in
//! place, its jobs still claimed, recorded and pruned.

use std::borrow::Cow;

use chrono::{DateTime, Duration, Utc};
use hub_core::SinkKind;
use hub_store::{HealthChange, JobTransition, PgStore, PruneKind, Store};
use uuid::Uuid;

use crate::jobs::{claim, result};
use crate::partitions::{PARTITIONED_JOBS, id_at, noon, today};
use crate::support::{TestDb, subscription};

fn day_name(table: &str, days: i64) -> String {
    format!("{table}_{}", (today() + Duration::days(days)).format("%Y%m%d"))
}

/// The partitions of `parent` by name, sorted.
async fn partitions(store: &PgStore, parent: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass ORDER BY 1",
    )
    .bind(parent)
    .fetch_all(store.pool())
    .await
    .expect("partitions")
}

/// Writes a job of subscription `sub` made at `made` (its id's time) in `state`, finished at
/// `finished`, with one attempt. Answers its id.
async fn job(store: &PgStore, sub: Uuid, made: DateTime<Utc>, state: &str, finished: Option<DateTime<Utc>>) -> Uuid {
    let id = id_at(made);
    sqlx::query(
        "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, attempts, due_at,
                                    event_received_at, window_start, created_at, updated_at, finished_at)
         VALUES ($1, 't1', $2, 1, $3, 1, $4, $4, $4, $4, COALESCE($5, $4), $5)",
    )
    .bind(id)
    .bind(sub)
    .bind(state)
    .bind(made)
    .bind(finished)
    .execute(store.pool())
    .await
    .expect("job");
    sqlx::query(
        "INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms,
                                        outcome, status_code)
         VALUES ($1, $2, 't1', $3, 1, $4, 20, 'failed', 500)",
    )
    .bind(Uuid::now_v7())
    .bind(id)
    .bind(sub)
    .bind(made)
    .execute(store.pool())
    .await
    .expect("attempt");
    id
}

/// Whether job `id` is stored, and how many attempts of it are.
async fn kept(store: &PgStore, id: Uuid) -> (bool, i64) {
    let job: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM delivery_jobs WHERE id = $1)")
        .bind(id)
        .fetch_one(store.pool())
        .await
        .expect("job");
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM delivery_attempts WHERE job_id = $1")
        .bind(id)
        .fetch_one(store.pool())
        .await
        .expect("attempts");
    (job, attempts)
}

/// Which partition holds job `id`.
async fn partition_of(store: &PgStore, id: Uuid) -> String {
    sqlx::query_scalar("SELECT tableoid::regclass::text FROM delivery_jobs WHERE id = $1")
        .bind(id)
        .fetch_one(store.pool())
        .await
        .expect("partition of job")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_retention_drops_whole_days_and_deletes_rows_only_where_it_must() {
    let db = TestDb::postgres().await;
    let pg = db.postgres_store().expect("postgres");
    // A store that has run for a while: day partitions from twelve days ago on (the tables of the
    // layout before, empty on a new install, give way to them), none for eleven days ago.
    db.execute("ALTER TABLE delivery_jobs DETACH PARTITION delivery_jobs_legacy").await;
    db.execute("ALTER TABLE delivery_attempts DETACH PARTITION delivery_attempts_legacy").await;
    db.execute("DROP TABLE delivery_jobs_legacy, delivery_attempts_legacy").await;
    db.execute("SELECT hub_job_partition(((now() AT TIME ZONE 'UTC')::date - 12) + n) FROM generate_series(0, 0) n")
        .await;
    db.execute("SELECT hub_job_partition(((now() AT TIME ZONE 'UTC')::date - 10) + n) FROM generate_series(0, 12) n")
        .await;
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("subscription");

    // Nine days ago: jobs that succeeded and died that day. The day goes whole, with its attempts.
    let done = job(pg, sub.id, noon(-9), "succeeded", Some(noon(-9))).await;
    let died = job(pg, sub.id, noon(-9), "dead", Some(noon(-9) + Duration::hours(3))).await;
    // Twelve days ago: one finished job, and one held since (its subscription paused). The day is
    // long past its time: the finished one is deleted with its attempt, the held one stays.
    let old = job(pg, sub.id, noon(-12), "cancelled", Some(noon(-12))).await;
    let held = job(pg, sub.id, noon(-12), "held", None).await;
    // Eleven days ago there is no partition: the default one takes it, and retention deletes it
    // as a row.
    let stray = job(pg, sub.id, noon(-11), "succeeded", Some(noon(-11))).await;
    // Eight days ago, but finished only five days ago (redriven): its day stays, untouched.
    let redriven = job(pg, sub.id, noon(-8), "succeeded", Some(noon(-5))).await;
    let beside = job(pg, sub.id, noon(-8), "succeeded", Some(noon(-8))).await;
    // Ten days ago: a job still retrying. Its day stays, and its finished neighbour waits with it
    // until the day is three days past its time (it ended nine days ago: two more days).
    let retrying = job(pg, sub.id, noon(-10), "pending", None).await;
    let neighbour = job(pg, sub.id, noon(-10), "succeeded", Some(noon(-10))).await;
    // Six days ago: within retention.
    let recent = job(pg, sub.id, noon(-6), "succeeded", Some(noon(-6))).await;
    assert_eq!(partition_of(pg, done).await, day_name("delivery_jobs", -9));
    assert_eq!(partition_of(pg, stray).await, "delivery_jobs_default");

    let cutoff = Utc::now() - Duration::days(7);
    let pruned = db.store.prune(PruneKind::FinishedJobs, cutoff, 100).await.expect("prune");
    assert_eq!(
        pruned,
        Some(4),
        "the day of nine days ago (two jobs), and as rows the one of twelve days ago and the stray"
    );
    let jobs = partitions(pg, "delivery_jobs").await;
    let attempts = partitions(pg, "delivery_attempts").await;
    assert!(!jobs.contains(&day_name("delivery_jobs", -9)), "dropped whole: {jobs:?}");
    assert!(!attempts.contains(&day_name("delivery_attempts", -9)), "its attempts with it: {attempts:?}");
    for days in [-12, -10, -8, -6, 0, 1, 2] {
        assert!(jobs.contains(&day_name("delivery_jobs", days)), "{days}: {jobs:?}");
        assert!(attempts.contains(&day_name("delivery_attempts", days)), "{days}: {attempts:?}");
    }
    for (what, id, stays) in [
        ("succeeded nine days ago", done, false),
        ("died nine days ago", died, false),
        ("cancelled twelve days ago", old, false),
        ("held twelve days ago", held, true),
        ("the stray", stray, false),
        ("redriven", redriven, true),
        ("beside the redriven", beside, true),
        ("retrying", retrying, true),
        ("beside the retrying", neighbour, true),
        ("recent", recent, true),
    ] {
        let (job, attempts) = kept(pg, id).await;
        assert_eq!((job, attempts), (stays, i64::from(stays)), "{what}: the job and its attempt");
    }
    assert_eq!(db.store.prune(PruneKind::FinishedJobs, cutoff, 100).await.expect("prune"), Some(0), "nothing more");

    // Once the redriven job is old too, its day goes whole.
    let later = noon(-5) + Duration::days(7) + Duration::minutes(1);
    let pruned = db.store.prune(PruneKind::FinishedJobs, later - Duration::days(7), 100).await.expect("prune");
    assert!(pruned.is_some_and(|n| n >= 2), "{pruned:?}");
    assert!(!partitions(pg, "delivery_jobs").await.contains(&day_name("delivery_jobs", -8)));
    assert_eq!(kept(pg, redriven).await, (false, 0));
    assert_eq!(kept(pg, neighbour).await, (false, 0), "its day three days past its time: deleted as a row");
    assert_eq!(kept(pg, retrying).await, (true, 1), "an open job is never retained away");
    assert_eq!(kept(pg, held).await, (true, 1), "an open job is never retained away");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_records_find_jobs_in_every_partition() {
    let db = TestDb::postgres().await;
    let pg = db.postgres_store().expect("postgres");
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("subscription");
    // A store that has run for a while: the tables before hold the oldest days, then day
    // partitions, with days missing (their jobs in the default partition). Due jobs in the tables
    // before, a day's partition and the default one, due in an order their partitions do not
    // follow. (A job's id is never later than its due time: the hub makes both from its clock.)
    db.execute("ALTER TABLE delivery_jobs DETACH PARTITION delivery_jobs_legacy").await;
    db.execute("ALTER TABLE delivery_attempts DETACH PARTITION delivery_attempts_legacy").await;
    db.execute("DROP TABLE delivery_jobs_legacy, delivery_attempts_legacy").await;
    db.execute("CREATE TABLE delivery_jobs_legacy (LIKE delivery_jobs INCLUDING DEFAULTS)").await;
    db.execute("CREATE TABLE delivery_attempts_legacy (LIKE delivery_attempts INCLUDING DEFAULTS)").await;
    db.execute("SELECT hub_job_indexes('delivery_jobs_legacy', 'delivery_attempts_legacy')").await;
    let cut = sqlx::query_scalar::<_, Uuid>("SELECT hub_day_uuid((now() AT TIME ZONE 'UTC')::date - 30)")
        .fetch_one(pg.pool())
        .await
        .expect("cut");
    for (parent, legacy) in
        [("delivery_jobs", "delivery_jobs_legacy"), ("delivery_attempts", "delivery_attempts_legacy")]
    {
        db.execute(&format!("ALTER TABLE {parent} ATTACH PARTITION {legacy} FOR VALUES FROM (MINVALUE) TO ('{cut}')"))
            .await;
    }
    db.execute("SELECT hub_job_partition((now() AT TIME ZONE 'UTC')::date - 3)").await;
    let day = job(pg, sub.id, noon(-3), "pending", None).await;
    let legacy = job(pg, sub.id, noon(-40), "pending", None).await;
    let stray = job(pg, sub.id, Utc::now(), "pending", None).await;
    for (id, due) in [(day, 3), (legacy, 2), (stray, 1)] {
        sqlx::query("UPDATE delivery_jobs SET due_at = now() - make_interval(mins => $2) WHERE id = $1")
            .bind(id)
            .bind(due)
            .execute(pg.pool())
            .await
            .expect("due");
    }
    assert_eq!(partition_of(pg, day).await, day_name("delivery_jobs", -3));
    assert_eq!(partition_of(pg, legacy).await, "delivery_jobs_legacy");
    assert_eq!(partition_of(pg, stray).await, "delivery_jobs_default");

    let got = db.store.claim_jobs(&claim(2, None)).await.expect("claim").jobs;
    let ids: Vec<Uuid> = got.iter().map(|j| j.id).collect();
    assert_eq!(ids, [day, legacy], "the oldest due first, whichever partition holds them");
    let rest = db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs;
    assert_eq!(rest.iter().map(|j| j.id).collect::<Vec<_>>(), [stray]);

    let results: Vec<_> = got
        .iter()
        .chain(&rest)
        .map(|j| result(j, "delivered", JobTransition::Succeeded, HealthChange::Success))
        .collect();
    let done = db.store.complete_attempts(&results).await.expect("record");
    assert!(done.iter().all(|d| d.job_updated), "every outcome recorded: {done:?}");
    for id in [day, legacy, stray] {
        let state: String = sqlx::query_scalar("SELECT state FROM delivery_jobs WHERE id = $1")
            .bind(id)
            .fetch_one(pg.pool())
            .await
            .expect("state");
        assert_eq!(state, "succeeded");
        assert_eq!(kept(pg, id).await, (true, 2), "its attempt beside the first");
    }
    // A lease given back is found by id in its partition too.
    let again = job(pg, sub.id, noon(-3) + Duration::hours(1), "pending", None).await;
    sqlx::query("UPDATE delivery_jobs SET due_at = now() - interval '1 minute' WHERE id = $1")
        .bind(again)
        .execute(pg.pool())
        .await
        .expect("due");
    let leased = db.store.claim_jobs(&claim(1, None)).await.expect("claim").jobs;
    assert_eq!(leased.iter().map(|j| j.id).collect::<Vec<_>>(), [again]);
    assert!(db.store.release_job(again, leased[0].token, Utc::now()).await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_the_jobs_layout_before_is_migrated_in_place() {
    // A schema at the layout before: every migration before partitioned jobs.
    let schema = hub_testkit::fresh_schema().await;
    let pg = PgStore::connect(&crate::support::postgres_dsn(), Some(&schema), 4).await.expect("connect");
    let old: &dyn Store = &pg;
    let all = sqlx::migrate!("./migrations/postgres");
    let before = sqlx::migrate::Migrator {
        migrations: Cow::Owned(all.migrations.iter().filter(|m| m.version < PARTITIONED_JOBS).cloned().collect()),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    before.run(pg.pool()).await.expect("migrate to the layout before");
    let plain: bool = sqlx::query_scalar("SELECT relkind = 'r' FROM pg_class WHERE oid = 'delivery_jobs'::regclass")
        .fetch_one(pg.pool())
        .await
        .expect("kind");
    assert!(plain, "the layout before is one table");
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    old.create_subscription(&sub).await.expect("subscription");
    let aged =
        job(&pg, sub.id, Utc::now() - Duration::days(9), "succeeded", Some(Utc::now() - Duration::days(9))).await;
    let due = job(&pg, sub.id, Utc::now() - Duration::minutes(5), "pending", None).await;
    // A job made by a replica whose clock ran a week ahead.
    let ahead = job(&pg, sub.id, noon(7), "succeeded", Some(Utc::now())).await;

    old.migrate().await.expect("migrate to partitioned jobs");
    assert!(partitions(&pg, "delivery_jobs").await.contains(&"delivery_jobs_legacy".to_owned()));
    assert_eq!(partition_of(&pg, due).await, "delivery_jobs_legacy", "the table before, now a partition");
    assert_ne!(partition_of(&pg, ahead).await, "delivery_jobs_legacy", "a job past the cutover moved to its place");
    assert_eq!(kept(&pg, ahead).await, (true, 1), "with its attempt");
    // The old rows are claimed, recorded and pruned as before.
    let got = old.claim_jobs(&claim(5, None)).await.expect("claim").jobs;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), [due]);
    let done = old
        .complete_attempts(&[result(&got[0], "delivered", JobTransition::Succeeded, HealthChange::Success)])
        .await
        .expect("record");
    assert!(done[0].job_updated);
    assert_eq!(kept(&pg, due).await, (true, 2));
    let pruned = old.prune(PruneKind::FinishedJobs, Utc::now() - Duration::days(7), 100).await.expect("prune");
    assert_eq!(pruned, Some(1), "the aged job, row by row from the table before");
    assert_eq!(kept(&pg, aged).await, (false, 0));
}
