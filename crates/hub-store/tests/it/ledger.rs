//! The ledger: entries numbered per log without gaps (recorded attempts included), integrated
//! into signed checkpoints whose proofs verify, and every edit made to its rows behind the hub's
//! back caught and named.

use std::sync::Arc;

use chrono::{Duration, Utc};
use hub_core::delivery::{HealthChange, JobTransition};
use hub_core::ledger::checkpoint::{LedgerKey, Log};
use hub_core::ledger::export::{Line, Mismatch, verify};
use hub_core::ledger::proof::{consistency_plan, fill, inclusion_plan, nodes_of, verify_consistency, verify_inclusion};
use hub_core::ledger::{Hash, leaf_hash};
use hub_store::{NewLedgerEntry, PruneKind, Store};
use uuid::Uuid;

use crate::jobs::{claim, events, push_subscription, result};
use crate::support::TestDb;

pub fn key() -> LedgerKey {
    LedgerKey::from_pkcs8("test-key", &LedgerKey::generate().expect("key")).expect("key")
}

fn entry(log: &str, n: usize) -> NewLedgerEntry {
    NewLedgerEntry {
        log: log.to_owned(),
        at: Utc::now(),
        kind: "change",
        data: format!(r#"{{"what":"change {n} of {log}"}}"#),
        event_id: None,
        digest_key: None,
    }
}

/// Integrates everything appended to `log`, as the hub's sealer does.
async fn integrate(store: &Arc<dyn Store>, log: &str, key: &LedgerKey) -> Option<u64> {
    let mut last = None;
    while let Some(size) = store.integrate_ledger(log, 1000, &|i| i.seal(key, Utc::now())).await.expect("integrate") {
        last = Some(size);
    }
    last
}

/// The export of `log` read back from the store: what `GET /v1/ledger/export` answers.
async fn export(store: &Arc<dyn Store>, log: &str, key: &LedgerKey) -> Vec<String> {
    let mut lines = vec![Line::ledger(&Log::from_key(log)), Line::Key { jwk: key.jwk() }];
    let start = store.ledger_start(log).await.expect("start");
    if start.size > 0 {
        lines.push(Line::start(start.size, &start.peaks));
    }
    let mut checkpoints =
        store.ledger_checkpoints(log, 0, u64::MAX, 100_000).await.expect("checkpoints").into_iter().peekable();
    while let Some(c) = checkpoints.next_if(|c| c.size <= start.size) {
        lines.push(Line::Checkpoint(c));
    }
    // Each checkpoint right after the entries it covers, as the hub exports.
    for e in store.ledger_entries(log, start.size, 100_000).await.expect("entries") {
        lines.push(Line::entry(e.index, &e.data, &e.leaf_hash));
        while let Some(c) = checkpoints.next_if(|c| c.size <= e.index + 1) {
            lines.push(Line::Checkpoint(c));
        }
    }
    lines.extend(checkpoints.map(Line::Checkpoint));
    lines.iter().map(|l| serde_json::to_string(l).expect("line")).collect()
}

/// A checkpoint of "acme" checked with `key`: its root.
fn root(c: &hub_core::ledger::checkpoint::Checkpoint, key: &LedgerKey) -> Hash {
    let keys = [hub_core::ledger::checkpoint::jwk_public(&key.jwk()).expect("an Ed25519 JWK")];
    c.verify(&Log::Tenant("acme".into()), &keys).expect("a valid checkpoint")
}

async fn proof(store: &Arc<dyn Store>, log: &str, plan: &[(u64, u64)]) -> Vec<Hash> {
    let nodes = store.ledger_nodes(log, &nodes_of(plan)).await.expect("nodes");
    fill(plan, |n| nodes.iter().find(|(m, _)| *m == n).map(|(_, h)| *h)).expect("every node of the plan is stored")
}

pub async fn ledger_entries_are_numbered_per_log_and_sealed_into_verifiable_checkpoints(db: &TestDb) {
    let key = key();
    let batch: Vec<NewLedgerEntry> = (0..10).map(|n| entry(if n % 3 == 0 { "" } else { "acme" }, n)).collect();
    let numbers = db.store.append_ledger(&batch).await.expect("append");
    // Each log counts on its own, in the order given.
    assert_eq!(numbers, vec![0, 0, 1, 1, 2, 3, 2, 4, 5, 3]);
    assert_eq!(db.store.ledger_backlog().await.expect("backlog"), vec!["".to_owned(), "acme".to_owned()]);
    assert_eq!(integrate(&db.store, "acme", &key).await, Some(6));
    assert_eq!(integrate(&db.store, "", &key).await, Some(4));
    assert!(db.store.ledger_backlog().await.expect("backlog").is_empty());
    let changes = db.store.ledger_entries_of_kind("acme", "change", None, 2).await.expect("changes");
    assert_eq!(changes.iter().map(|e| e.index).collect::<Vec<_>>(), vec![5, 4], "newest first");
    let older = db.store.ledger_entries_of_kind("acme", "change", Some(4), 10).await.expect("changes");
    assert_eq!(older.iter().map(|e| e.index).collect::<Vec<_>>(), vec![3, 2, 1, 0]);
    assert!(db.store.ledger_entries_of_kind("acme", "delivery", None, 10).await.expect("none").is_empty());
    // Nothing new: nothing to integrate, no checkpoint.
    assert_eq!(integrate(&db.store, "acme", &key).await, None);

    let first = db.store.latest_ledger_checkpoint("acme").await.expect("latest").expect("one");
    assert_eq!(first.size, 6);
    let stored = db.store.ledger_entries("acme", 0, 100).await.expect("entries");
    assert_eq!(stored.len(), 6);
    for e in &stored {
        assert_eq!(e.leaf_hash, leaf_hash(e.index, e.data.as_bytes()), "the store's hash is the core's");
    }
    // Every entry's inclusion proof verifies against the checkpoint.
    for e in &stored {
        let plan = inclusion_plan(e.index, 6).expect("plan");
        let hashes = proof(&db.store, "acme", &plan).await;
        assert_eq!(verify_inclusion(e.index, 6, &e.leaf_hash, &hashes, &root(&first, &key)), Ok(()));
    }

    // The log grows; the new checkpoint extends the old one.
    let more: Vec<NewLedgerEntry> = (10..31).map(|n| entry("acme", n)).collect();
    assert_eq!(db.store.append_ledger(&more).await.expect("append"), (6..27).collect::<Vec<u64>>());
    assert_eq!(integrate(&db.store, "acme", &key).await, Some(27));
    let second = db.store.latest_ledger_checkpoint("acme").await.expect("latest").expect("one");
    let plan = consistency_plan(6, 27).expect("plan");
    let hashes = proof(&db.store, "acme", &plan).await;
    assert_eq!(verify_consistency(6, 27, &root(&first, &key), &root(&second, &key), &hashes), Ok(()));
    let listed = db.store.ledger_checkpoints("acme", 0, u64::MAX, 10).await.expect("checkpoints");
    assert_eq!(listed.iter().map(|c| c.size).collect::<Vec<_>>(), vec![6, 27]);
    assert_eq!(db.store.ledger_checkpoints("acme", 7, 26, 10).await.expect("checkpoints"), vec![]);
    // The export verifies offline.
    let v = verify(export(&db.store, "acme", &key).await).expect("verifies");
    assert_eq!((v.entries, v.checkpoints, v.signed_size), (27, 2, 27));
}

pub async fn recorded_attempts_append_their_entries_in_the_same_transaction(db: &TestDb) {
    let key = key();
    push_subscription(db, "t1").await;
    events(db, "t1", 5).await;
    let jobs = db.store.claim_jobs(&claim(5, None)).await.expect("claim").jobs;
    assert_eq!(jobs.len(), 5);
    let mut results: Vec<_> =
        jobs.iter().map(|j| result(j, "delivered", JobTransition::Succeeded, HealthChange::Success)).collect();
    // An outcome without an entry takes no number.
    results[2].ledger = None;
    db.store.complete_attempts(&results).await.expect("record");
    let entries = db.store.ledger_entries("t1", 0, 100).await.expect("entries");
    assert_eq!(entries.len(), 4);
    let attempts =
        db.store.attempts_for_jobs("t1", &jobs.iter().map(|j| j.id).collect::<Vec<_>>()).await.expect("attempts");
    for (i, j) in jobs.iter().enumerate() {
        let a = attempts.iter().find(|a| a.job_id == j.id).expect("attempt");
        if i == 2 {
            assert_eq!(a.ledger_index, None);
            continue;
        }
        let index = a.ledger_index.expect("numbered") as usize;
        assert!(entries[index].data.contains(&j.id.to_string()), "attempt {i} names its own entry");
        assert_eq!(entries[index].leaf_hash, leaf_hash(index as u64, entries[index].data.as_bytes()));
    }
    assert_eq!(integrate(&db.store, "t1", &key).await, Some(4));
    assert_eq!(db.store.digest_key("t1", 0).await.expect("key"), Some(vec![7; 16]));
    // Erasure forgets the digest keys of its events; the entries, and the tree, stay.
    let forgotten = db.store.forget_digest_keys("t1", &[jobs[0].id, jobs[1].id, Uuid::now_v7()]).await.expect("forget");
    assert_eq!(forgotten, 2);
    assert_eq!(db.store.ledger_entries("t1", 0, 100).await.expect("entries"), entries);
    let kept: Vec<_> = futures_keys(&db.store, 4).await;
    assert_eq!(kept.iter().filter(|k| k.is_none()).count(), 2);
    assert!(verify(export(&db.store, "t1", &key).await).is_ok());
}

async fn futures_keys(store: &Arc<dyn Store>, n: u64) -> Vec<Option<Vec<u8>>> {
    let mut keys = Vec::new();
    for i in 0..n {
        keys.push(store.digest_key("t1", i).await.expect("key"));
    }
    keys
}

pub async fn concurrent_appends_leave_no_gap(db: &TestDb) {
    let key = key();
    let mut tasks = Vec::new();
    for t in 0..6 {
        let store = db.replica().await;
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for round in 0..10 {
                let batch: Vec<_> = (0..5).map(|n| entry("acme", t * 100 + round * 5 + n)).collect();
                mine.extend(store.append_ledger(&batch).await.expect("append"));
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("appender"));
    }
    all.sort_unstable();
    assert_eq!(all, (0..300).collect::<Vec<u64>>(), "every number once, none skipped");
    assert_eq!(integrate(&db.store, "acme", &key).await, Some(300));
    assert!(verify(export(&db.store, "acme", &key).await).is_ok());
}

/// Each way of editing the ledger's rows in the database is caught by the offline verification
/// and names the entry (or, where the hash was rewritten too, the checkpoint that no longer
/// fits and the entries it covers); an edit made before integration is refused by the sealer.
pub async fn edits_behind_the_hubs_back_are_caught_and_named(db: &TestDb) {
    let key = key();
    let fresh = |from: usize| (from..from + 40).map(|n| entry("acme", n)).collect::<Vec<_>>();
    db.store.append_ledger(&fresh(0)).await.expect("append");
    integrate(&db.store, "acme", &key).await;
    db.store.append_ledger(&fresh(40)).await.expect("append");
    integrate(&db.store, "acme", &key).await;
    assert!(verify(export(&db.store, "acme", &key).await).is_ok());

    let untouched = db.store.ledger_entries("acme", 0, 1000).await.expect("entries");
    let restore = || async {
        db.execute("DELETE FROM ledger_entries WHERE log = 'acme'").await;
        for e in &untouched {
            db.execute(&format!(
                "INSERT INTO ledger_entries (log, idx, recorded_at, kind, data, leaf_hash) VALUES ('acme', {}, {}, 'change', '{}', {})",
                e.index,
                if db.schema().is_some() { "now()".to_owned() } else { "0".to_owned() },
                e.data,
                blob(&hex(&e.leaf_hash), db)
            ))
            .await;
        }
        assert!(verify(export(&db.store, "acme", &key).await).is_ok());
    };

    // Data edited.
    db.execute(
        "UPDATE ledger_entries SET data = replace(data, 'change 12', 'change 99') WHERE log = 'acme' AND idx = 12",
    )
    .await;
    assert!(matches!(verify(export(&db.store, "acme", &key).await), Err(Mismatch::Altered { index: 12, .. })));
    restore().await;

    // Data and its hash edited together: the checkpoint after it no longer fits.
    let forged = r#"{"what":"forged"}"#;
    let hash = hex(&leaf_hash(50, forged.as_bytes()));
    db.execute(&format!(
        "UPDATE ledger_entries SET data = '{forged}', leaf_hash = {} WHERE log = 'acme' AND idx = 50",
        blob(&hash, db)
    ))
    .await;
    match verify(export(&db.store, "acme", &key).await) {
        Err(Mismatch::Root { size: 80, from: 40, last: 79, .. }) => {}
        other => panic!("{other:?}"),
    }
    restore().await;

    // Two entries swapped (their numbers exchanged): each hash binds its position.
    db.execute("UPDATE ledger_entries SET idx = -1 WHERE log = 'acme' AND idx = 20").await;
    db.execute("UPDATE ledger_entries SET idx = 20 WHERE log = 'acme' AND idx = 21").await;
    db.execute("UPDATE ledger_entries SET idx = 21 WHERE log = 'acme' AND idx = -1").await;
    assert!(matches!(verify(export(&db.store, "acme", &key).await), Err(Mismatch::Altered { index: 20, .. })));
    restore().await;

    // An entry removed.
    db.execute("DELETE FROM ledger_entries WHERE log = 'acme' AND idx = 33").await;
    assert!(matches!(
        verify(export(&db.store, "acme", &key).await),
        Err(Mismatch::Missing { expected: 33, found: 34, .. })
    ));
    restore().await;

    // An entry inserted, the later ones renumbered to make room: the inserted one fits its own
    // hash, and the first entry moved is named.
    db.execute("UPDATE ledger_entries SET idx = -idx - 1 WHERE log = 'acme' AND idx >= 60").await;
    db.execute("UPDATE ledger_entries SET idx = -idx WHERE log = 'acme' AND idx < 0").await;
    let inserted = r#"{"what":"inserted"}"#;
    db.execute(&format!(
        "INSERT INTO ledger_entries (log, idx, recorded_at, kind, data, leaf_hash) VALUES ('acme', 60, {}, 'change', '{inserted}', {})",
        if db.schema().is_some() { "now()" } else { "0" },
        blob(&hex(&leaf_hash(60, inserted.as_bytes())), db)
    ))
    .await;
    assert!(matches!(verify(export(&db.store, "acme", &key).await), Err(Mismatch::Altered { index: 61, .. })));
    restore().await;

    // Edited before it was sealed: the sealer refuses it, by name, and writes nothing.
    db.store.append_ledger(&fresh(80)).await.expect("append");
    db.execute("UPDATE ledger_entries SET data = 'x' WHERE log = 'acme' AND idx = 85").await;
    let refused = db.store.integrate_ledger("acme", 1000, &|i| i.seal(&key, Utc::now())).await;
    assert!(matches!(&refused, Err(hub_store::StoreError::Corrupt(why)) if why.contains("entry 85")), "{refused:?}");
    assert_eq!(db.store.latest_ledger_checkpoint("acme").await.expect("latest").map(|c| c.size), Some(80));
}

fn hex(h: &Hash) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// A blob literal in the test database's dialect.
fn blob(hex: &str, db: &TestDb) -> String {
    if db.schema().is_some() { format!("'\\x{hex}'::bytea") } else { format!("X'{hex}'") }
}

/// Two replicas recording outcomes of one tenant's subscription at once, one batch all delivered
/// (which clears the subscription's failure marks) beside one with failures (which sets them):
/// each takes the subscription before the tenant's ledger head, so none waits on the other in a
/// cycle, and every outcome is recorded with its entry.
pub async fn replicas_recording_one_tenant_at_once_never_deadlock(db: &TestDb) {
    let sub = push_subscription(db, "t1").await;
    events(db, "t1", 400).await;
    let other = db.replica().await;
    let mut tasks = Vec::new();
    for (n, store) in [Arc::clone(&db.store), other].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut recorded = 0;
            for round in 0..20 {
                let jobs = store.claim_jobs(&claim(10, None)).await.expect("claim").jobs;
                let failing = (round + n) % 2 == 0;
                let results: Vec<_> = jobs
                    .iter()
                    .map(|j| {
                        if failing {
                            let at = Utc::now();
                            result(
                                j,
                                "failed",
                                JobTransition::Retry { due_at: at },
                                HealthChange::Failure { at, disable: None },
                            )
                        } else {
                            result(j, "delivered", JobTransition::Succeeded, HealthChange::Success)
                        }
                    })
                    .collect();
                store.complete_attempts(&results).await.expect("recorded without a deadlock");
                recorded += results.len();
            }
            recorded
        }));
    }
    let mut recorded = 0;
    for t in tasks {
        recorded += t.await.expect("recorder");
    }
    let entries = db.store.ledger_entries("t1", 0, 10_000).await.expect("entries");
    assert_eq!(entries.len(), recorded);
    assert!(entries.iter().enumerate().all(|(i, e)| e.index == i as u64));
    let _ = sub;
}

/// Appends `n` changes to `log` recorded at `at`, and seals them.
pub async fn append_at(db: &TestDb, log: &str, from: usize, n: usize, at: chrono::DateTime<Utc>, key: &LedgerKey) {
    let batch: Vec<NewLedgerEntry> = (from..from + n).map(|i| NewLedgerEntry { at, ..entry(log, i) }).collect();
    db.store.append_ledger(&batch).await.expect("append");
    integrate(&db.store, log, key).await.expect("sealed");
}

/// Proves every kept entry of `log` in its latest signed tree, and the consistency of each
/// kept size with it.
pub async fn every_kept_entry_proves(db: &TestDb, log: &str, key: &LedgerKey) {
    let start = db.store.ledger_start(log).await.expect("start").size;
    let latest = db.store.latest_ledger_checkpoint(log).await.expect("checkpoint").expect("signed");
    let keys = [hub_core::ledger::checkpoint::jwk_public(&key.jwk()).expect("an Ed25519 JWK")];
    let top = latest.verify(&Log::from_key(log), &keys).expect("a valid checkpoint");
    for e in db.store.ledger_entries(log, 0, 100_000).await.expect("entries") {
        assert!(e.index >= start, "entry {} is below the start {start}", e.index);
        let plan = inclusion_plan(e.index, latest.size).expect("plan");
        let path = proof(&db.store, log, &plan).await;
        verify_inclusion(e.index, latest.size, &e.leaf_hash, &path, &top)
            .unwrap_or_else(|err| panic!("entry {} in {}: {err}", e.index, latest.size));
    }
    for c in db.store.ledger_checkpoints(log, 0, latest.size, 100_000).await.expect("checkpoints") {
        assert!(c.size >= start, "a checkpoint of {} entries outlived them (start {start})", c.size);
        let old = c.verify(&Log::from_key(log), &keys).expect("a valid checkpoint");
        let plan = consistency_plan(c.size, latest.size).expect("plan");
        let path = proof(&db.store, log, &plan).await;
        verify_consistency(c.size, latest.size, &old, &top, &path)
            .unwrap_or_else(|err| panic!("{} to {}: {err}", c.size, latest.size));
    }
    let lines = export(&db.store, log, key).await;
    let verified = verify(&lines).expect("the export verifies");
    assert_eq!(verified.start, start);
    assert_eq!(verified.signed_size, latest.size);
}

/// Retention makes a log begin after its entries recorded before the cutoff, a budget at a time:
/// they are gone with the nodes and checkpoints wholly over them, every kept entry still proves
/// against the signed tree, every kept checkpoint is consistent with it, and the export (which
/// begins with the start's peaks) verifies. Entries not yet sealed are never dropped.
pub async fn a_log_past_retention_begins_at_its_peaks_and_still_verifies(db: &TestDb) {
    let key = key();
    let long_ago = Utc::now() - Duration::days(100);
    // 37 old entries sealed in three checkpoints, then 21 new ones, in another log too.
    append_at(db, "acme", 0, 13, long_ago, &key).await;
    append_at(db, "acme", 13, 11, long_ago, &key).await;
    append_at(db, "acme", 24, 13, long_ago + Duration::minutes(1), &key).await;
    append_at(db, "other", 0, 5, long_ago, &key).await;
    append_at(db, "acme", 37, 21, Utc::now(), &key).await;
    every_kept_entry_proves(db, "acme", &key).await;
    let cutoff = Utc::now() - Duration::days(30);

    // A budget of 10 entries: the first 10 of one log go.
    assert_eq!(db.store.prune(PruneKind::Ledger, cutoff, 10).await.expect("prune"), Some(10));
    assert_eq!(db.store.ledger_start("acme").await.expect("start").size, 10);
    every_kept_entry_proves(db, "acme", &key).await;
    // Then the rest of what is old, in both logs.
    assert_eq!(db.store.prune(PruneKind::Ledger, cutoff, 1000).await.expect("prune"), Some(27 + 5));
    let start = db.store.ledger_start("acme").await.expect("start");
    assert_eq!(start.size, 37);
    assert_eq!(start.peaks.iter().map(|(n, _)| *n).collect::<Vec<_>>(), hub_core::ledger::peaks(37));
    assert_eq!(db.store.ledger_entries("acme", 0, 1).await.expect("entries")[0].index, 37);
    every_kept_entry_proves(db, "acme", &key).await;
    assert_eq!(db.store.ledger_start("other").await.expect("start").size, 5);
    assert!(db.store.ledger_entries("other", 0, 10).await.expect("entries").is_empty());
    assert_eq!(db.store.prune(PruneKind::Ledger, cutoff, 1000).await.expect("prune"), Some(0), "nothing more");

    // The log grows on from its start, and what is old but not sealed stays.
    append_at(db, "acme", 58, 9, Utc::now(), &key).await;
    every_kept_entry_proves(db, "acme", &key).await;
    db.store.append_ledger(&[NewLedgerEntry { at: long_ago, ..entry("fresh", 0) }]).await.expect("append");
    assert_eq!(db.store.prune(PruneKind::Ledger, cutoff, 1000).await.expect("prune"), Some(0), "unsealed entries stay");
    assert_eq!(db.store.ledger_entries("fresh", 0, 10).await.expect("entries").len(), 1);
}
