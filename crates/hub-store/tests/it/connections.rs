//! PostgreSQL only: connections the server ends while they sit in the pool or are kept between
//! hot statements (a restart, a failover, an operator) cost no write. Pooled connections are
//! checked only after a second idle, so the store tries again on another connection when one
//! turns out to be gone. And a store closed when the hub stops ends its sessions itself.

use hub_core::SinkKind;
use hub_store::{HealthChange, JobTransition, PgStore, WriteOutcome};
use uuid::Uuid;

use crate::jobs::{claim, result};
use crate::support::{TestDb, accepted, postgres_dsn, subscription};

/// The server pids of `n` of the pool's connections (opened if need be).
async fn backend_pids(pool: &sqlx::PgPool, n: usize) -> Vec<i32> {
    let mut held = Vec::new();
    while held.len() < n {
        held.push(pool.acquire().await.expect("acquire"));
    }
    let mut pids = Vec::new();
    for conn in &mut held {
        pids.push(sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut **conn).await.expect("pid"));
    }
    pids
}

/// Waits until the server lists none of `pids`.
async fn until_gone(admin: &PgStore, pids: &[i32], what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
            .bind(pids)
            .fetch_one(admin.pool())
            .await
            .expect("activity");
        if left == 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{left} {what} still listed after 10 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The server pids of the sessions of the store on `schema`, by their application name.
async fn sessions_of(admin: &PgStore, schema: &str) -> Vec<i32> {
    sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE application_name = $1")
        .bind(format!("streaming-hub/{schema}"))
        .fetch_all(admin.pool())
        .await
        .expect("sessions")
}

/// Ends, from another session, every session of the store on `schema` (those in its pool and
/// those it keeps between hot statements, found by their application name), and waits until the
/// server has let them all go. Returns how many there were.
async fn end_every_session(schema: &str) -> usize {
    let admin = PgStore::connect(&postgres_dsn(), None, 1).await.expect("admin connection");
    let pids = sessions_of(&admin, schema).await;
    let ended: Vec<bool> = sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM UNNEST($1::int[]) AS p(pid)")
        .bind(&pids)
        .fetch_all(admin.pool())
        .await
        .expect("terminate");
    assert!(ended.iter().all(|e| *e), "every session is ended: {ended:?}");
    until_gone(&admin, &pids, "ended connections").await;
    admin.pool().close().await;
    pids.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_server_ended_while_pooled_cost_no_write() {
    let db = TestDb::postgres().await;
    let schema = db.schema().expect("a PostgreSQL store");
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("create");
    // Every connection of the pool opened, and some kept between hot statements.
    let pool = db.postgres_store().expect("a PostgreSQL store").pool();
    backend_pids(pool, pool.options().get_max_connections() as usize / 2).await;
    db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");

    // An ingest write right after every session was ended is written.
    assert!(end_every_session(schema).await >= 2, "the store had sessions to end");
    let written = db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write after the end");
    assert!(matches!(written[..], [WriteOutcome::Inserted { seq: 2 }]), "{written:?}");

    // So are outcomes.
    let jobs = db.store.claim_jobs(&claim(2, None)).await.expect("claim").jobs;
    assert_eq!(jobs.len(), 2);
    end_every_session(schema).await;
    let results: Vec<_> =
        jobs.iter().map(|job| result(job, "delivered", JobTransition::Succeeded, HealthChange::Success)).collect();
    let done = db.store.complete_attempts(&results).await.expect("record after the end");
    assert!(done.iter().all(|d| d.job_updated), "the jobs moved: {done:?}");
    let stored = db.store.list_jobs("t1", sub.id, None, None, 10).await.expect("jobs");
    assert_eq!(stored.iter().map(|j| j.state.as_str()).collect::<Vec<_>>(), ["succeeded", "succeeded"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_store_ends_its_sessions() {
    let db = TestDb::postgres().await;
    let schema = db.schema().expect("a PostgreSQL store");
    backend_pids(db.postgres_store().expect("a PostgreSQL store").pool(), 3).await;
    // And one kept between hot statements.
    db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
    let admin = PgStore::connect(&postgres_dsn(), None, 1).await.expect("admin connection");
    let pids = sessions_of(&admin, schema).await;
    assert!(pids.len() >= 3, "the store's sessions are named after it: {pids:?}");

    db.store.close().await;
    assert!(db.store.ping().await.is_err(), "a closed store takes no statement");
    until_gone(&admin, &pids, "sessions of the closed store").await;
    admin.pool().close().await;
}

/// Every session of the store runs without JIT compilation, the server's default
/// notwithstanding: on a large job table the estimates of a claim pass `jit_above_cost`, and
/// compiling it took a thousand times as long as running it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_without_jit() {
    let db = TestDb::postgres().await;
    let admin = PgStore::connect(&postgres_dsn(), None, 1).await.expect("admin connection");
    let server_default: String = sqlx::query_scalar("SELECT boot_val FROM pg_settings WHERE name = 'jit'")
        .fetch_one(admin.pool())
        .await
        .expect("setting");
    assert_eq!(server_default, "on", "the server compiles by default, so the test can tell");
    // Hot statements keep connections of their own, taken from the pool; then half the pool.
    db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
    db.store.claim_jobs(&claim(2, None)).await.expect("claim");
    let pool = db.postgres_store().expect("a PostgreSQL store").pool();
    let mut held = Vec::new();
    while held.len() < pool.options().get_max_connections() as usize / 2 {
        held.push(pool.acquire().await.expect("acquire"));
    }
    for conn in &mut held {
        let jit: String =
            sqlx::query_scalar("SELECT current_setting('jit')").fetch_one(&mut **conn).await.expect("jit");
        assert_eq!(jit, "off");
    }
}
