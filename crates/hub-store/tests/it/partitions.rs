//! PostgreSQL only: the inbox partitioned by the day of its ids. Retention drops a day whole once
//! it may go, deletes rows only where a drop cannot do the work, keeps what a job or a pull
//! stream still needs; and a database of the layout before is migrated in place, its events still
//! found, deduplicated and pruned.

use std::borrow::Cow;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use hub_core::SinkKind;
use hub_store::{IngestRecord, PgStore, PruneKind, Store, WriteOutcome};
use uuid::{NoContext, Timestamp, Uuid};

use crate::support::{TestDb, accepted, subscription};

/// The first migration after the partitioned inbox's (0021–0024): the layout-before schemas these
/// tests build take it and every later one, since this build's store code reads their columns.
const LATER_THAN_THE_INBOX: i64 = 25;
/// The later migration that alters the inbox table itself (erasure's `erased_by`, 0029): in any
/// real upgrade it runs after the inbox's steps, so a schema stopped between those steps has not
/// taken it (it takes the others, whose columns this build's store code reads).
const ALTERS_THE_INBOX: i64 = 29;
/// The later migration that builds on the partitioned inbox (events by time, 0036: an index on
/// each partition and 0023's partition function replaced): the upgrade runs it, after the inbox's.
const BUILDS_ON_THE_INBOX: i64 = 36;
/// The first of the partitioned jobs' migrations (0038–0040), which build on the inbox's: an
/// upgrade runs them after it.
pub(crate) const PARTITIONED_JOBS: i64 = 38;

/// A UUIDv7 of the time `at`.
pub(crate) fn id_at(at: DateTime<Utc>) -> Uuid {
    let nanos = at.timestamp_subsec_nanos();
    Uuid::new_v7(Timestamp::from_unix(NoContext, u64::try_from(at.timestamp()).expect("after 1970"), nanos))
}

/// An event of `tenant` whose id is of `id_time` and which arrived at `received`.
fn event(tenant: &str, id_time: DateTime<Utc>, received: DateTime<Utc>) -> (Uuid, IngestRecord) {
    let id = id_at(id_time);
    let mut record = accepted(tenant, id);
    if let IngestRecord::Accepted(e) = &mut record {
        e.received_at = received;
    }
    (id, record)
}

pub(crate) fn today() -> NaiveDate {
    Utc::now().date_naive()
}

/// Noon of the day `days` from today.
pub(crate) fn noon(days: i64) -> DateTime<Utc> {
    (today() + Duration::days(days)).and_hms_opt(12, 0, 0).expect("noon").and_utc()
}

/// The partitions of `events` by name, sorted.
async fn partitions(store: &PgStore) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'events'::regclass ORDER BY 1",
    )
    .fetch_all(store.pool())
    .await
    .expect("partitions")
}

/// Which partition holds the event `id`.
async fn partition_of(store: &PgStore, id: Uuid) -> String {
    sqlx::query_scalar("SELECT tableoid::regclass::text FROM events WHERE ce_id = $1")
        .bind(id)
        .fetch_one(store.pool())
        .await
        .expect("partition of event")
}

fn day_name(days: i64) -> String {
    format!("events_{}", (today() + Duration::days(days)).format("%Y%m%d"))
}

async fn seq_of(db: &TestDb, tenant: &str, id: Uuid) -> Option<i64> {
    db.store.event_by_ce_id(tenant, id).await.expect("read").map(|e| e.seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_whole_days_and_deletes_rows_only_where_it_must() {
    let db = TestDb::postgres().await;
    let pg = db.postgres_store().expect("postgres");
    // A store that has run for a while: day partitions from ten days ago on (the table of the
    // layout before, empty on a new install, gives way to them).
    db.execute("ALTER TABLE events DETACH PARTITION events_legacy").await;
    db.execute("DROP TABLE events_legacy").await;
    db.execute("SELECT hub_event_partition(((now() AT TIME ZONE 'UTC')::date - 10) + n) FROM generate_series(0, 1) n")
        .await;
    db.execute("SELECT hub_event_partition(((now() AT TIME ZONE 'UTC')::date - 6) + n) FROM generate_series(0, 5) n")
        .await;
    let before = partitions(pg).await;
    assert!(before.contains(&day_name(-10)) && before.contains(&day_name(-1)), "{before:?}");
    assert!(!before.contains(&day_name(-8)), "no partition for eight days ago: {before:?}");

    let pull = subscription("t2", SinkKind::PULL, &["*.*"], None);
    db.store.create_subscription(&pull).await.expect("pull");
    let push = subscription("t3", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&push).await.expect("push");
    // Nine days ago: one event, nothing refers to it. The day goes whole.
    let (gone, e1) = event("t1", noon(-9), noon(-9));
    // Nine days ago too, in a pull stream: its entry goes with the day.
    let (pulled, e2) = event("t2", noon(-9), noon(-9));
    // Ten days ago: one event a push job still needs, and one nothing needs. The day stays,
    // and only the one nothing needs is deleted (the day is long past its time).
    let (needed, e3) = event("t3", noon(-10), noon(-10));
    let (spare, e4) = event("t4", noon(-10) + Duration::minutes(1), noon(-10));
    // Eight days ago there is no partition: the default one takes it, and retention deletes it
    // as a row.
    let (stray, e5) = event("t5", noon(-8), noon(-8));
    // Six days ago: within retention.
    let (recent, e6) = event("t6", noon(-6), noon(-6));
    // An id of five days ago that arrived only now: its day stays until it is old too.
    let (late, e7) = event("t7", noon(-5), Utc::now());
    db.store.write_batch(&[e1, e2, e3, e4, e5, e6, e7]).await.expect("write");
    assert_eq!(partition_of(pg, gone).await, day_name(-9));
    assert_eq!(partition_of(pg, stray).await, "events_default");
    db.execute("ANALYZE events").await;
    assert_eq!(db.store.inbox_size().await.expect("size"), 7, "the partitions' estimates, summed");
    let stream = db.store.pull_events("t2", pull.id, 0, 10).await.expect("pull");
    assert_eq!(stream.len(), 1, "the old event is in the pull stream");

    let cutoff = Utc::now() - Duration::days(7);
    let pruned = db.store.prune(PruneKind::Events, cutoff, 100).await.expect("prune");
    assert_eq!(pruned, Some(4), "the day of nine days ago (two events), the spare one and the stray one");
    let after = partitions(pg).await;
    assert!(!after.contains(&day_name(-9)), "dropped whole: {after:?}");
    assert!(after.contains(&day_name(-10)), "a job still needs one of its events: {after:?}");
    for (days, what) in [(-5, "a late event"), (-6, "recent events"), (0, "today"), (1, "tomorrow"), (2, "ahead")] {
        assert!(after.contains(&day_name(days)), "{what}: {after:?}");
    }
    for (tenant, id, kept) in [
        ("t1", gone, false),
        ("t2", pulled, false),
        ("t3", needed, true),
        ("t4", spare, false),
        ("t5", stray, false),
        ("t6", recent, true),
        ("t7", late, true),
    ] {
        assert_eq!(seq_of(&db, tenant, id).await.is_some(), kept, "{tenant}");
    }
    let entries: i64 = sqlx::query_scalar("SELECT count(*) FROM pull_entries WHERE subscription_id = $1")
        .bind(pull.id)
        .fetch_one(pg.pool())
        .await
        .expect("entries");
    assert_eq!(entries, 0, "the dropped day's pull-stream entry went with it");
    assert_eq!(db.store.prune(PruneKind::Events, cutoff, 100).await.expect("prune"), Some(0), "nothing more");

    // An id of the dropped day, written again now, is a new event, in the default partition.
    let (again, e8) = event("t1", noon(-9), Utc::now());
    db.store.write_batch(&[e8]).await.expect("write");
    assert_eq!(partition_of(pg, again).await, "events_default");
    // An id of a day made ahead lands there; written twice, it is one event.
    let (ahead, e9) = event("t1", noon(2), Utc::now());
    let first = db.store.write_batch(std::slice::from_ref(&e9)).await.expect("write");
    let second = db.store.write_batch(&[e9]).await.expect("write again");
    assert_eq!(partition_of(pg, ahead).await, day_name(2));
    match (&first[0], &second[0]) {
        (WriteOutcome::Inserted { seq }, WriteOutcome::Duplicate { seq: again }) => assert_eq!(seq, again),
        other => panic!("one event, then a duplicate: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_the_layout_before_is_migrated_in_place() {
    // A schema at the layout before: every migration up to 0020, and those after the inbox's
    // that the store's code of this build reads (subscriptions' delivery limits, 0025).
    let schema = hub_testkit::fresh_schema().await;
    let old = PgStore::connect(&crate::support::postgres_dsn(), Some(&schema), 4).await.expect("connect");
    let all = sqlx::migrate!("./migrations/postgres");
    let before = sqlx::migrate::Migrator {
        migrations: Cow::Owned(
            all.migrations
                .iter()
                .filter(|m| {
                    m.version <= 20
                        || (m.version >= LATER_THAN_THE_INBOX
                            && m.version != BUILDS_ON_THE_INBOX
                            && m.version < PARTITIONED_JOBS)
                })
                .cloned()
                .collect(),
        ),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    before.run(old.pool()).await.expect("migrate to the layout before");
    let plain: bool = sqlx::query_scalar("SELECT relkind = 'r' FROM pg_class WHERE oid = 'events'::regclass")
        .fetch_one(old.pool())
        .await
        .expect("kind");
    assert!(plain, "the layout before is one table");

    let store: &dyn Store = &old;
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    store.create_subscription(&sub).await.expect("subscription");
    let (aged, e1) = event("t1", Utc::now() - Duration::days(9), Utc::now() - Duration::days(9));
    let (kept, e2) = event("t1", Utc::now(), Utc::now());
    // A producer whose clock runs a week ahead.
    let (ahead, e3) = event("t1", noon(7), Utc::now());
    let written = store.write_batch(&[e1.clone(), e2.clone(), e3.clone()]).await.expect("write");
    assert_eq!(written.len(), 3);
    // The aged event's job is done with (retention deletes finished jobs first).
    sqlx::query("DELETE FROM delivery_jobs").execute(old.pool()).await.expect("jobs");

    store.migrate().await.expect("migrate to the partitioned inbox");
    let parts = partitions(&old).await;
    assert!(parts.contains(&"events_legacy".to_owned()) && parts.contains(&"events_default".to_owned()), "{parts:?}");
    assert_eq!(partition_of(&old, kept).await, "events_legacy", "the table of the layout before, now a partition");
    assert_ne!(partition_of(&old, ahead).await, "events_legacy", "an id past the cutover moved to its place");
    // Every event is found by id and by seq, with its seq; written again, each is a duplicate.
    let again = store.write_batch(&[e1, e2, e3]).await.expect("write again");
    for (outcome, first) in again.iter().zip(&written) {
        match (outcome, first) {
            (WriteOutcome::Duplicate { seq }, WriteOutcome::Inserted { seq: stored }) => assert_eq!(seq, stored),
            other => panic!("a duplicate of the stored event: {other:?}"),
        }
    }
    let seqs: Vec<i64> = store.events_after("t1", 0, 10).await.expect("read").iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    // A new event goes on from the last seq.
    let (_, e4) = event("t1", Utc::now(), Utc::now());
    match &store.write_batch(&[e4]).await.expect("write")[0] {
        WriteOutcome::Inserted { seq: 4 } => {}
        other => panic!("seq 4: {other:?}"),
    }
    // The old rows age out row by row.
    let pruned = store.prune(PruneKind::Events, Utc::now() - Duration::days(7), 100).await;
    assert_eq!(pruned.expect("prune"), Some(1));
    assert!(store.event_by_ce_id("t1", aged).await.expect("read").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_migration_runs_an_id_past_the_cutover_is_refused_for_a_retry() {
    // A database between the first step of the migration and the last (a replica of the version
    // before still writing while the new one migrates).
    let schema = hub_testkit::fresh_schema().await;
    let pg = PgStore::connect(&crate::support::postgres_dsn(), Some(&schema), 4).await.expect("connect");
    let all = sqlx::migrate!("./migrations/postgres");
    let first_step = sqlx::migrate::Migrator {
        migrations: Cow::Owned(
            all.migrations
                .iter()
                .filter(|m| {
                    m.version <= 21
                        || (m.version >= LATER_THAN_THE_INBOX
                            && ![ALTERS_THE_INBOX, BUILDS_ON_THE_INBOX].contains(&m.version)
                            && m.version < PARTITIONED_JOBS)
                })
                .cloned()
                .collect(),
        ),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    first_step.run(pg.pool()).await.expect("migrate to the first step");
    let store: &dyn Store = &pg;
    let (_, now) = event("t1", Utc::now(), Utc::now());
    assert!(matches!(store.write_batch(&[now]).await.expect("write")[..], [WriteOutcome::Inserted { .. }]));
    let (ahead, e) = event("t1", noon(7), Utc::now());
    let refused = store.write_batch(std::slice::from_ref(&e)).await.expect_err("an id past the cutover");
    assert!(refused.is_transient(), "answered as a database briefly out of reach, not a failure: {refused}");
    // Once the migration is done, the same write is taken.
    store.migrate().await.expect("migrate to the partitioned inbox");
    assert!(matches!(store.write_batch(&[e]).await.expect("write again")[..], [WriteOutcome::Inserted { .. }]));
    assert!(store.event_by_ce_id("t1", ahead).await.expect("read").is_some());
}

/// Ingest looks a stored id up through the unique `(tenant_id, ce_id)` index of the id's
/// partition and nothing else, even with its plan made while the partitions were empty and known
/// to be (an `ANALYZE` then), or never analyzed: with equalities alone the planner took another
/// index led by `tenant_id` and read the tenant's every event of the day for each id it checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_probes_ids_through_the_unique_index_whatever_the_statistics_say() {
    ingest_probes_only_the_unique_index(false).await;
    ingest_probes_only_the_unique_index(true).await;
}

async fn ingest_probes_only_the_unique_index(analyzed_empty: bool) {
    let db = TestDb::postgres().await;
    let store = db.postgres_store().expect("a PostgreSQL store");
    if analyzed_empty {
        sqlx::query("ANALYZE events").execute(store.pool()).await.expect("analyze");
    }
    const WRITES: i64 = 200;
    let mut last = Uuid::nil();
    for _ in 0..WRITES {
        last = Uuid::now_v7();
        db.store.write_batch(&[accepted("t1", last)]).await.expect("write");
    }
    let again = db.store.write_batch(&[accepted("t1", last)]).await.expect("write a duplicate");
    assert!(matches!(again[..], [WriteOutcome::Duplicate { seq: WRITES }]), "{again:?}");

    // The server's index statistics of the partition, once they count every probe.
    let partition = partition_of(store, last).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let reads = loop {
        let reads: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT i.indexdef, s.idx_scan, s.idx_tup_read FROM pg_stat_user_indexes s
             JOIN pg_indexes i ON i.schemaname = s.schemaname AND i.indexname = s.indexrelname
             WHERE s.schemaname = current_schema() AND s.relname = $1",
        )
        .bind(&partition)
        .fetch_all(store.pool())
        .await
        .expect("index statistics");
        let probes: i64 =
            reads.iter().filter(|(def, ..)| def.contains("(tenant_id, ce_id)")).map(|(_, scans, _)| scans).sum();
        if probes > WRITES {
            break reads;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{probes} probes of the unique index counted of {} after 30 s: {reads:?}",
            WRITES + 1
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    for (def, _, read) in &reads {
        if !def.contains("(tenant_id, ce_id)") {
            assert_eq!(*read, 0, "ingest read {read} entries of {def} (analyzed while empty: {analyzed_empty})");
        }
    }
}

/// The ledger's partitions (of entries, nodes and checkpoints) by name, sorted.
async fn ledger_partitions(store: &PgStore) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent IN ('ledger_entries'::regclass, 'ledger_nodes'::regclass, 'ledger_checkpoints'::regclass)
         ORDER BY 1",
    )
    .fetch_all(store.pool())
    .await
    .expect("partitions")
}

/// The ledger keeps a month in partitions of its own (entries, nodes and checkpoints): once the
/// month is past retention it is dropped whole, whatever the budget, each log it held then
/// beginning after its last entry there; rows recorded in a month without a partition wait in
/// the default partitions and are deleted row by row; the month of today and the next are made
/// ahead. Every kept entry still proves and the export verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_retention_drops_whole_months() {
    use chrono::Datelike;
    let db = TestDb::postgres().await;
    let store = db.postgres_store().expect("postgres");
    let key = crate::ledger::key();
    let long_ago = Utc::now() - Duration::days(100);
    let month = long_ago.date_naive().with_day(1).expect("first of the month");
    db.execute(&format!("SELECT hub_ledger_partition('{month}')")).await;
    let suffix = month.format("%Y%m").to_string();
    let of_month: Vec<String> =
        ["ledger_checkpoints", "ledger_entries", "ledger_nodes"].iter().map(|t| format!("{t}_{suffix}")).collect();
    let before = ledger_partitions(store).await;
    assert!(of_month.iter().all(|p| before.contains(p)), "{before:?}");

    crate::ledger::append_at(&db, "acme", 0, 13, long_ago, &key).await;
    crate::ledger::append_at(&db, "acme", 13, 6, long_ago + Duration::hours(1), &key).await;
    crate::ledger::append_at(&db, "other", 0, 3, long_ago, &key).await;
    crate::ledger::append_at(&db, "acme", 19, 7, Utc::now(), &key).await;
    let held: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM ledger_entries_{suffix}"))
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(held, 22, "the month's entries are in its partition");

    // A budget of 5 entries: the month goes whole all the same.
    let pruned = db.store.prune(PruneKind::Ledger, Utc::now() - Duration::days(30), 5).await.expect("prune");
    assert_eq!(pruned, Some(22));
    let after = ledger_partitions(store).await;
    assert!(of_month.iter().all(|p| !after.contains(p)), "the month is dropped: {after:?}");
    let this = Utc::now().date_naive().with_day(1).expect("first of the month");
    for m in [this, this + chrono::Months::new(1)] {
        let name = format!("ledger_entries_{}", m.format("%Y%m"));
        assert!(after.contains(&name), "{name} is made ahead: {after:?}");
    }
    assert_eq!(db.store.ledger_start("acme").await.expect("start").size, 19);
    assert_eq!(db.store.ledger_start("other").await.expect("start").size, 3);
    crate::ledger::every_kept_entry_proves(&db, "acme", &key).await;

    // A month without a partition: its rows wait in the default partitions, deleted row by row.
    let older = long_ago - Duration::days(200);
    crate::ledger::append_at(&db, "late", 0, 9, older, &key).await;
    crate::ledger::append_at(&db, "late", 9, 2, Utc::now(), &key).await;
    let pruned = db.store.prune(PruneKind::Ledger, Utc::now() - Duration::days(30), 4).await.expect("prune");
    assert_eq!(pruned, Some(4), "row by row, within the budget");
    let pruned = db.store.prune(PruneKind::Ledger, Utc::now() - Duration::days(30), 100).await.expect("prune");
    assert_eq!(pruned, Some(5));
    assert_eq!(db.store.ledger_start("late").await.expect("start").size, 9);
    crate::ledger::every_kept_entry_proves(&db, "late", &key).await;
}

/// A ledger written before its partitions (migration 0032's layout, with times that go back
/// within a log, as two replicas' clocks make them) is migrated in place: every entry, node and
/// checkpoint lands in its month, the times are made non-decreasing, the log proves and grows on,
/// and its old month is then dropped by retention like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_of_the_layout_before_is_partitioned_in_place() {
    use hub_core::ledger::checkpoint::{Log, TreeHead};
    let schema = hub_testkit::fresh_schema().await;
    let old = PgStore::connect(&crate::support::postgres_dsn(), Some(&schema), 4).await.expect("connect");
    let all = sqlx::migrate!("./migrations/postgres");
    let before = sqlx::migrate::Migrator {
        migrations: Cow::Owned(all.migrations.iter().filter(|m| m.version <= 32).cloned().collect()),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    before.run(old.pool()).await.expect("migrate to the ledger before its partitions");

    // 11 entries, recorded 100 days ago give or take a minute (entry 6 a minute before entry 5).
    let key = crate::ledger::key();
    let long_ago = Utc::now() - Duration::days(100);
    let mut leaves = Vec::new();
    for i in 0..11u64 {
        let data = format!(r#"{{"what":"change {i} before"}}"#);
        let at = if i == 6 { long_ago - Duration::minutes(1) } else { long_ago + Duration::seconds(i as i64) };
        leaves.push(hub_core::ledger::leaf_hash(i, data.as_bytes()));
        sqlx::query(
            "INSERT INTO ledger_entries (log, idx, recorded_at, kind, data, leaf_hash)
             VALUES ('acme', $1, $2, 'change', $3, sha256('\\x00'::bytea || int8send($1) || convert_to($3, 'UTF8')))",
        )
        .bind(i as i64)
        .bind(at)
        .bind(&data)
        .execute(old.pool())
        .await
        .expect("entry");
    }
    sqlx::query("INSERT INTO ledger_heads (log, size) VALUES ('acme', 11)").execute(old.pool()).await.expect("head");
    // Sealed at 7 and at 11, as the sealer of that layout wrote them.
    let mut peaks = Vec::new();
    let mut size = 0u64;
    for upto in [7u64, 11] {
        let grown = hub_core::ledger::grow(size, &peaks, &leaves[size as usize..upto as usize]).expect("grow");
        for (n, h) in &grown.nodes {
            sqlx::query("INSERT INTO ledger_nodes (log, level, idx, hash) VALUES ('acme', $1, $2, $3)")
                .bind(i16::from(n.level))
                .bind(n.index as i64)
                .bind(h.to_vec())
                .execute(old.pool())
                .await
                .expect("node");
        }
        let c = key.sign(&TreeHead { log: Log::Tenant("acme".into()), size: upto, root: grown.root, time: Utc::now() });
        sqlx::query(
            "INSERT INTO ledger_checkpoints (log, size, root, time, kid, signature, note, signed_at)
             VALUES ('acme', $1, $2, $3, $4, $5, $6, now())",
        )
        .bind(upto as i64)
        .bind(&c.root)
        .bind(&c.time)
        .bind(&c.kid)
        .bind(&c.signature)
        .bind(&c.note)
        .execute(old.pool())
        .await
        .expect("checkpoint");
        peaks = grown.peaks;
        size = upto;
    }
    let stored: Vec<u8> =
        peaks.iter().flat_map(|(n, h)| [&[n.level][..], &n.index.to_be_bytes(), h].concat()).collect();
    sqlx::query("INSERT INTO ledger_trees (log, size, peaks) VALUES ('acme', 11, $1)")
        .bind(stored)
        .execute(old.pool())
        .await
        .expect("tree");

    let store: &dyn Store = &old;
    store.migrate().await.expect("migrate to the partitioned ledger");
    let month = format!("ledger_entries_{}", long_ago.format("%Y%m"));
    assert!(ledger_partitions(&old).await.contains(&month), "the month of the old entries has its partition");
    let times: Vec<chrono::DateTime<Utc>> =
        store.ledger_entries("acme", 0, 100).await.expect("entries").iter().map(|e| e.at).collect();
    assert_eq!(times.len(), 11);
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "times never go back within a log: {times:?}");
    let db = TestDb::postgres_of(old.clone(), &schema);
    crate::ledger::every_kept_entry_proves(&db, "acme", &key).await;
    crate::ledger::append_at(&db, "acme", 11, 5, Utc::now(), &key).await;
    crate::ledger::every_kept_entry_proves(&db, "acme", &key).await;
    let pruned = db.store.prune(PruneKind::Ledger, Utc::now() - Duration::days(30), 1000).await.expect("prune");
    assert_eq!(pruned, Some(11));
    assert!(!ledger_partitions(&old).await.contains(&month));
    crate::ledger::every_kept_entry_proves(&db, "acme", &key).await;
}
