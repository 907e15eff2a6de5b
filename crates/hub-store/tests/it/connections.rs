//! PostgreSQL only: connections the server ends while they sit in the pool (a restart, a
//! failover, an operator) cost no write. Pooled connections are checked only after a second
//! idle, so the store tries again on another connection when one turns out to be gone. And a
//! store closed when the hub stops ends its sessions itself.

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

/// Ends, from another session, every connection the store's pool holds, and waits until the
/// server has let them all go.
async fn end_every_pooled_connection(store: &PgStore) {
    let pool = store.pool();
    let pids = backend_pids(pool, pool.options().get_max_connections() as usize).await;
    let admin = PgStore::connect(&postgres_dsn(), None, 1).await.expect("admin connection");
    let ended: Vec<bool> = sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM UNNEST($1::int[]) AS p(pid)")
        .bind(&pids)
        .fetch_all(admin.pool())
        .await
        .expect("terminate");
    assert!(ended.iter().all(|e| *e), "every pooled connection is ended: {ended:?}");
    until_gone(&admin, &pids, "ended connections").await;
    admin.pool().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_server_ended_while_pooled_cost_no_write() {
    let db = TestDb::postgres().await;
    let pg = db.postgres_store().expect("a PostgreSQL store");
    let sub = subscription("t1", SinkKind::Webhook, &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("create");

    // An ingest write right after every pooled connection was ended is written.
    end_every_pooled_connection(pg).await;
    let written = db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write after the end");
    assert!(matches!(written[..], [WriteOutcome::Inserted { seq: 1 }]), "{written:?}");

    // So is an outcome.
    let job = db.store.claim_jobs(&claim(1, None)).await.expect("claim").jobs.remove(0);
    end_every_pooled_connection(pg).await;
    let result = result(&job, "delivered", JobTransition::Succeeded, HealthChange::Success);
    let done = db.store.complete_attempts(std::slice::from_ref(&result)).await.expect("record after the end");
    assert!(done[0].job_updated, "the job moved: {done:?}");
    let stored = db.store.list_jobs("t1", sub.id, None, None, 10).await.expect("jobs");
    assert_eq!(stored.iter().map(|j| j.state.as_str()).collect::<Vec<_>>(), ["succeeded"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_store_ends_its_sessions() {
    let db = TestDb::postgres().await;
    let pids = backend_pids(db.postgres_store().expect("a PostgreSQL store").pool(), 3).await;

    db.store.close().await;
    assert!(db.store.ping().await.is_err(), "a closed store takes no statement");
    let admin = PgStore::connect(&postgres_dsn(), None, 1).await.expect("admin connection");
    until_gone(&admin, &pids, "sessions of the closed store").await;
    admin.pool().close().await;
}
