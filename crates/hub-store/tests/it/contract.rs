//! The contract every backend keeps. Each function receives a fresh database.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{Duration, Utc};
use hub_store::{IngestRecord, NewApiKey, Origin, QuarantineFilter, WriteOutcome};
use uuid::Uuid;

use crate::support::{TestDb, accepted, accepted_with, headers, quarantined};

fn inserted(outcome: WriteOutcome) -> i64 {
    match outcome {
        WriteOutcome::Inserted { seq } => seq,
        other => panic!("expected an insert, got {other:?}"),
    }
}

pub async fn accepted_events_round_trip_with_every_attribute(db: &TestDb) {
    let id = Uuid::now_v7();
    let mut h = headers("t1", id, "loan_application", "approved");
    h.push(("ce-subject".into(), "loan-7".into()));
    h.push(("ce-datacontenttype".into(), "application/json; charset=utf-8".into()));
    h.push(("ce-dataschema".into(), "https://schemas.example.com/loan.json".into()));
    h.push(("traceparent".into(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()));
    h.push(("tracestate".into(), "k=v".into()));
    h.push(("ce-partner".into(), "acme".into()));
    let payload = br#"{ "amount" : 12.50, "spaces":  "kept" }"#;
    let mut record = accepted_with(h, payload);
    if let IngestRecord::Accepted(e) = &mut record {
        e.origin = Origin::Kafka { topic: "lerian.streaming.lender".into(), partition: 2, offset: 41 };
        e.trace = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01".into());
    }
    let out = db.store.write_batch(&[record]).await.expect("write");
    assert_eq!(out, vec![WriteOutcome::Inserted { seq: 1 }]);

    let e = db.store.event_by_ce_id("t1", id).await.expect("read").expect("stored");
    assert_eq!(e.seq, 1);
    assert_eq!(e.ce_id, id);
    assert_eq!(e.source, "lender");
    assert_eq!(e.ce_type, "studio.lerian.lender.loan_application.approved");
    assert_eq!(e.event_key(), "loan_application.approved");
    assert_eq!(e.event_time, "2026-11-30T10:00:00Z");
    assert_eq!(e.schema_version, "1.0.0");
    assert_eq!(e.subject.as_deref(), Some("loan-7"));
    assert_eq!(e.data_content_type.as_deref(), Some("application/json; charset=utf-8"));
    assert_eq!(e.data_schema.as_deref(), Some("https://schemas.example.com/loan.json"));
    assert_eq!(e.traceparent.as_deref(), Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    assert_eq!(e.tracestate.as_deref(), Some("k=v"));
    assert_eq!(e.trace.as_deref(), Some("00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"), "the hub's own");
    assert_eq!(e.extensions.get("partner").map(String::as_str), Some("acme"));
    assert_eq!(e.payload, payload, "the body is kept byte for byte");
    assert_eq!(e.origin, Origin::Kafka { topic: "lerian.streaming.lender".into(), partition: 2, offset: 41 });
    assert!((Utc::now() - e.received_at).num_seconds() < 60);

    // Another tenant cannot see it, even knowing its id.
    assert!(db.store.event_by_ce_id("t2", id).await.expect("read").is_none());
}

pub async fn a_duplicate_writes_nothing_and_reports_the_stored_seq(db: &TestDb) {
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let first = db.store.write_batch(&[accepted("t1", a), accepted("t1", b)]).await.expect("write");
    assert_eq!(first, vec![WriteOutcome::Inserted { seq: 1 }, WriteOutcome::Inserted { seq: 2 }]);

    let again = db.store.write_batch(&[accepted("t1", b), accepted("t1", Uuid::now_v7())]).await.expect("write");
    assert_eq!(again, vec![WriteOutcome::Duplicate { seq: 2 }, WriteOutcome::Inserted { seq: 3 }]);
    assert_eq!(db.store.events_after("t1", 0, 100).await.expect("read").len(), 3);

    // The same id under another tenant is another event.
    let other = db.store.write_batch(&[accepted("t2", a)]).await.expect("write");
    assert_eq!(other, vec![WriteOutcome::Inserted { seq: 1 }]);
}

pub async fn duplicates_within_one_batch_are_reported(db: &TestDb) {
    let a = Uuid::now_v7();
    let out = db
        .store
        .write_batch(&[accepted("t1", a), accepted("t1", Uuid::now_v7()), accepted("t1", a)])
        .await
        .expect("write");
    assert_eq!(
        out,
        vec![WriteOutcome::Inserted { seq: 1 }, WriteOutcome::Inserted { seq: 2 }, WriteOutcome::Duplicate { seq: 1 }]
    );
    assert_eq!(db.store.events_after("t1", 0, 100).await.expect("read").len(), 2);
}

pub async fn seq_is_per_tenant(db: &TestDb) {
    let batch = [accepted("t1", Uuid::now_v7()), accepted("t2", Uuid::now_v7()), accepted("t1", Uuid::now_v7())];
    let out = db.store.write_batch(&batch).await.expect("write");
    assert_eq!(
        out,
        vec![WriteOutcome::Inserted { seq: 1 }, WriteOutcome::Inserted { seq: 1 }, WriteOutcome::Inserted { seq: 2 }]
    );
    let t1: Vec<i64> = db.store.events_after("t1", 0, 10).await.expect("read").iter().map(|e| e.seq).collect();
    assert_eq!(t1, vec![1, 2]);
    let t1_after: Vec<i64> = db.store.events_after("t1", 1, 10).await.expect("read").iter().map(|e| e.seq).collect();
    assert_eq!(t1_after, vec![2]);
}

pub async fn a_failed_batch_writes_nothing(db: &TestDb) {
    db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
    // Break the quarantine table: the batch's last statement fails after its events were written.
    db.execute("ALTER TABLE quarantine RENAME TO quarantine_broken").await;
    let bad = quarantined(vec![("ce-id".into(), "x".into())], b"{}", Origin::Http);
    let result = db.store.write_batch(&[accepted("t1", Uuid::now_v7()), accepted("t2", Uuid::now_v7()), bad]).await;
    assert!(result.is_err(), "the batch must fail");
    db.execute("ALTER TABLE quarantine_broken RENAME TO quarantine").await;

    assert_eq!(db.store.events_after("t1", 0, 10).await.expect("read").len(), 1, "nothing of the batch was kept");
    assert!(db.store.events_after("t2", 0, 10).await.expect("read").is_empty());
    // The sequence did not move either: the next event takes seq 2.
    let out = db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
    assert_eq!(out, vec![WriteOutcome::Inserted { seq: 2 }]);
}

pub async fn concurrent_writers_keep_seq_strictly_increasing_and_gapless(db: &TestDb) {
    const WRITERS: usize = 8;
    const BATCHES: usize = 15;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = Arc::clone(&db.store);
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..BATCHES {
                // Two tenants in alternating order per writer: no deadlock may come of it.
                let (x, y) = if w % 2 == 0 { ("t1", "t2") } else { ("t2", "t1") };
                let batch: Vec<_> = (0..4).map(|i| accepted(if i % 2 == 0 { x } else { y }, Uuid::now_v7())).collect();
                let out = store.write_batch(&batch).await.expect("concurrent write");
                for (record, outcome) in batch.iter().zip(out) {
                    let IngestRecord::Accepted(e) = record else { unreachable!() };
                    ids.push((e.envelope.tenant().to_string(), e.envelope.id().as_uuid(), inserted(outcome)));
                }
            }
            ids
        }));
    }
    let mut written = Vec::new();
    for t in tasks {
        written.extend(t.await.expect("writer"));
    }
    for tenant in ["t1", "t2"] {
        let stored = db.store.events_after(tenant, 0, 1000).await.expect("read");
        let seqs: Vec<i64> = stored.iter().map(|e| e.seq).collect();
        let expected: Vec<i64> = (1..=(WRITERS * BATCHES * 2) as i64).collect();
        assert_eq!(seqs, expected, "{tenant}: seqs are 1..=N without gaps or repeats");
        for (t, id, seq) in written.iter().filter(|(t, _, _)| t == tenant) {
            let e = stored.iter().find(|e| e.ce_id == *id).unwrap_or_else(|| panic!("{t} {id} missing"));
            assert_eq!(e.seq, *seq, "the reported seq is the stored one");
        }
    }
}

pub async fn a_reader_never_sees_a_seq_appear_below_one_it_has_read(db: &TestDb) {
    const TOTAL: usize = 240;
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let store = Arc::clone(&db.store);
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut cursor = 0;
            let mut seen = 0;
            loop {
                let finished = done.load(Ordering::SeqCst);
                let page = store.events_after("t1", cursor, 50).await.expect("read");
                for e in &page {
                    assert_eq!(e.seq, cursor + 1, "a reader at {cursor} must see {} next, never a gap", cursor + 1);
                    cursor = e.seq;
                    seen += 1;
                }
                if finished && page.is_empty() {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let mut writers = Vec::new();
    for _ in 0..4 {
        let store = Arc::clone(&db.store);
        writers.push(tokio::spawn(async move {
            for _ in 0..TOTAL / 4 / 3 {
                let batch: Vec<_> = (0..3).map(|_| accepted("t1", Uuid::now_v7())).collect();
                store.write_batch(&batch).await.expect("write");
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, Ordering::SeqCst);
    assert_eq!(reader.await.expect("reader"), TOTAL, "the reader saw every event exactly once");
}

pub async fn quarantined_records_are_kept_capped_and_filterable(db: &TestDb) {
    let mut bad_id = headers("t1", Uuid::now_v7(), "loan_application", "approved");
    bad_id.retain(|(k, _)| k != "ce-id");
    bad_id.push(("ce-id".into(), "9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a".into()));
    bad_id.push(("authorization".into(), "Bearer do-not-store".into()));
    let big_body = vec![b'x'; 200 * 1024];
    let kafka = Origin::Kafka { topic: "lerian.streaming.lender".into(), partition: 1, offset: 7 };
    let batch = [
        quarantined(bad_id, b"{}", Origin::Http),
        quarantined(headers("t2", Uuid::now_v7(), "loan_application", "approved"), &big_body, kafka.clone()),
        accepted("t1", Uuid::now_v7()),
    ];
    let out = db.store.write_batch(&batch).await.expect("write");
    assert!(matches!(out[0], WriteOutcome::Quarantined { .. }));
    assert!(matches!(out[1], WriteOutcome::Quarantined { .. }));
    assert_eq!(out[2], WriteOutcome::Inserted { seq: 1 });

    let all = db.store.list_quarantine(&QuarantineFilter { limit: 10, ..Default::default() }).await.expect("list");
    assert_eq!(all.len(), 2);
    let (big, id) = (&all[0], &all[1]);
    assert_eq!(big.reason_code, "invalid_body");
    assert_eq!(big.body.len(), hub_store::QUARANTINE_BODY_CAP, "the body is capped");
    assert_eq!(big.body_bytes, 200 * 1024, "the original size is kept");
    assert_eq!(big.origin, kafka);
    assert_eq!(big.tenant_id.as_deref(), Some("t2"));
    assert_eq!(id.reason_code, "invalid_id");
    assert_eq!(id.reason_field, "ce-id");
    assert!(id.reason.contains("UUIDv7"), "{}", id.reason);
    assert_eq!(id.headers.get("ce-id").map(String::as_str), Some("9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a"));
    assert!(!id.headers.contains_key("authorization"), "non-CloudEvents headers are never stored");

    let by = |f: QuarantineFilter| {
        let store = Arc::clone(&db.store);
        async move { store.list_quarantine(&QuarantineFilter { limit: 10, ..f }).await.expect("list").len() }
    };
    assert_eq!(by(QuarantineFilter { tenant: Some("t1".into()), ..Default::default() }).await, 1);
    assert_eq!(by(QuarantineFilter { tenant: Some("t3".into()), ..Default::default() }).await, 0);
    assert_eq!(by(QuarantineFilter { source: Some("lender".into()), ..Default::default() }).await, 2);
    assert_eq!(by(QuarantineFilter { reason_code: Some("invalid_id".into()), ..Default::default() }).await, 1);
    assert_eq!(by(QuarantineFilter { origin: Some("kafka".into()), ..Default::default() }).await, 1);
    let hour = Duration::hours(1);
    assert_eq!(by(QuarantineFilter { since: Some(Utc::now() - hour), ..Default::default() }).await, 2);
    assert_eq!(by(QuarantineFilter { since: Some(Utc::now() + hour), ..Default::default() }).await, 0);
    assert_eq!(by(QuarantineFilter { until: Some(Utc::now() - hour), ..Default::default() }).await, 0);
}

pub async fn quarantine_pagination_is_complete_and_disjoint(db: &TestDb) {
    let batch: Vec<_> = (0..7).map(|_| quarantined(vec![("ce-id".into(), "x".into())], b"{}", Origin::Http)).collect();
    db.store.write_batch(&batch).await.expect("write");
    let mut seen = BTreeSet::new();
    let mut before = None;
    loop {
        let page = db
            .store
            .list_quarantine(&QuarantineFilter { before_id: before, limit: 3, ..Default::default() })
            .await
            .expect("list");
        for e in &page {
            assert!(seen.insert(e.id), "id {} returned twice", e.id);
        }
        if page.len() < 3 {
            break;
        }
        before = page.last().map(|e| e.id);
    }
    assert_eq!(seen.len(), 7);
}

pub async fn api_keys_are_stored_hashed_listed_and_revoked(db: &TestDb) {
    let new = |tenant: &str, hash: u8| NewApiKey {
        id: Uuid::now_v7(),
        tenant_id: Some(tenant.into()),
        name: "ci".into(),
        key_hash: vec![hash; 32],
        key_prefix: "shk_abcd".into(),
        created_at: Utc::now(),
        expires_at: None,
        role: "admin".into(),
    };
    let a = db.store.create_api_key(&new("t1", 1)).await.expect("create");
    assert_eq!(a.role, "admin");
    let b = db.store.create_api_key(&new("t2", 2)).await.expect("create");
    assert_eq!(a.tenant_id.as_deref(), Some("t1"));
    assert!(a.revoked_at.is_none());

    let found = db.store.api_key_by_hash(&[1; 32]).await.expect("find").expect("live key");
    assert_eq!(found.id, a.id);
    assert!(db.store.api_key_by_hash(&[9; 32]).await.expect("find").is_none());

    let listed = db.store.list_api_keys(None, 10).await.expect("list");
    assert_eq!(listed.iter().map(|k| k.id).collect::<Vec<_>>(), vec![b.id, a.id], "newest first");
    let page2 = db.store.list_api_keys(Some(b.id), 10).await.expect("list");
    assert_eq!(page2.iter().map(|k| k.id).collect::<Vec<_>>(), vec![a.id]);

    assert!(db.store.revoke_api_key(a.id).await.expect("revoke"));
    assert!(!db.store.revoke_api_key(a.id).await.expect("revoke twice"), "a revoked key stays revoked");
    assert!(!db.store.revoke_api_key(Uuid::now_v7()).await.expect("revoke unknown"));
    assert!(db.store.api_key_by_hash(&[1; 32]).await.expect("find").is_none(), "a revoked key no longer authenticates");
    let listed = db.store.list_api_keys(None, 10).await.expect("list");
    assert!(listed.iter().any(|k| k.id == a.id && k.revoked_at.is_some()));

    // A key keeps its role.
    let viewer = db.store.create_api_key(&NewApiKey { role: "viewer".into(), ..new("t1", 77) }).await.expect("create");
    let found = db.store.api_key_by_hash(&[77; 32]).await.expect("read").expect("found");
    assert_eq!((found.id, found.role.as_str()), (viewer.id, "viewer"));

    // The same hash cannot be stored twice.
    assert!(db.store.create_api_key(&new("t3", 2)).await.is_err());

    // An operator's admin key belongs to no tenant, and is counted apart.
    assert_eq!(db.store.count_admin_keys().await.expect("count"), 0);
    let admin = db.store.create_api_key(&NewApiKey { tenant_id: None, ..new("ignored", 3) }).await.expect("create");
    assert_eq!(admin.tenant_id, None);
    assert_eq!(db.store.api_key_by_hash(&[3; 32]).await.expect("find").expect("live").tenant_id, None);
    assert_eq!(db.store.count_admin_keys().await.expect("count"), 1);
    let tenants = db.store.tenants().await.expect("tenants");
    assert!(tenants.iter().all(|t| !t.tenant_id.is_empty()), "an admin key is no tenant: {tenants:?}");
    assert!(db.store.revoke_api_key(admin.id).await.expect("revoke"));
    assert_eq!(db.store.count_admin_keys().await.expect("count"), 0);

    // Expiry is stored and listed; an expired admin key no longer counts.
    let at = Utc::now() + chrono::Duration::days(90);
    let expiring = db.store.create_api_key(&NewApiKey { expires_at: Some(at), ..new("t4", 4) }).await.expect("create");
    let found = db.store.api_key_by_hash(&[4; 32]).await.expect("find").expect("live");
    assert_eq!(found.expires_at.map(|t| t.timestamp_micros()), Some(at.timestamp_micros()));
    assert!(!found.expired(Utc::now()) && found.expired(at));
    assert!(
        db.store
            .list_api_keys(None, 10)
            .await
            .expect("list")
            .iter()
            .any(|k| k.id == expiring.id && k.expires_at.is_some())
    );
    let past = Utc::now() - chrono::Duration::seconds(1);
    db.store
        .create_api_key(&NewApiKey { tenant_id: None, expires_at: Some(past), ..new("ignored", 5) })
        .await
        .expect("create");
    assert_eq!(db.store.count_admin_keys().await.expect("count"), 0, "an expired admin key is not counted");
}

pub async fn a_nul_in_a_quarantined_header_is_stored_safely(db: &TestDb) {
    let record = quarantined(vec![("ce-subject".into(), "a\0b".into())], b"\0", Origin::Http);
    db.store.write_batch(&[record]).await.expect("a NUL must never make a write fail");
    let all = db.store.list_quarantine(&QuarantineFilter { limit: 10, ..Default::default() }).await.expect("list");
    assert_eq!(all[0].headers.get("ce-subject").map(String::as_str), Some("a\u{fffd}b"));
    assert_eq!(all[0].body, b"\0");
}

pub async fn the_inbox_size_is_known(db: &TestDb) {
    assert_eq!(db.store.inbox_size().await.expect("size"), 0);
    db.store.write_batch(&[accepted("t1", Uuid::now_v7()), accepted("t2", Uuid::now_v7())]).await.expect("write");
    // Exact on SQLite; PostgreSQL's estimate may lag until the table is analyzed.
    let n = db.store.inbox_size().await.expect("size");
    assert!((0..=2).contains(&n), "{n}");
}

/// A large batch of several tenants' events, interleaved, some already stored and some repeated
/// within the batch, written with part of its jobs leased: each record is told its event's seq
/// (the tenant's next ones, in batch order, or the one stored), and each new event gets exactly
/// one job and one pull entry, at its own seq.
pub async fn a_large_mixed_batch_gives_each_event_its_seq_and_work(db: &TestDb) {
    use hub_core::SinkKind;
    let tenants = ["ta", "tb", "tc"];
    let mut push = Vec::new();
    let mut pull = Vec::new();
    for t in tenants {
        let p = crate::support::subscription(t, SinkKind::named("webhook"), &["*.*"], None);
        db.store.create_subscription(&p).await.expect("create");
        push.push(p.id);
        let q = crate::support::subscription(t, SinkKind::PULL, &["*.*"], None);
        db.store.create_subscription(&q).await.expect("create");
        pull.push(q.id);
    }
    let stored: Vec<Vec<Uuid>> = tenants.iter().map(|_| vec![Uuid::now_v7(), Uuid::now_v7()]).collect();
    for (t, ids) in tenants.iter().zip(&stored) {
        let out =
            db.store.write_batch(&ids.iter().map(|id| accepted(t, *id)).collect::<Vec<_>>()).await.expect("write");
        assert_eq!(out, vec![WriteOutcome::Inserted { seq: 1 }, WriteOutcome::Inserted { seq: 2 }]);
    }

    // 600 records, the tenants in turn; every 10th an id stored before, every 25th one earlier
    // in this batch.
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    let mut next = [3_i64; 3];
    let mut sent: Vec<(usize, Uuid, i64)> = Vec::new();
    for i in 0..600_usize {
        let t = i % 3;
        let (id, outcome) = if i % 10 == 9 {
            (stored[t][i % 2], WriteOutcome::Duplicate { seq: (i % 2) as i64 + 1 })
        } else if i % 25 == 24 {
            let (_, id, seq) = *sent.iter().rev().find(|(of, _, _)| *of == t).expect("an earlier one");
            (id, WriteOutcome::Duplicate { seq })
        } else {
            let id = Uuid::now_v7();
            let seq = next[t];
            next[t] += 1;
            sent.push((t, id, seq));
            (id, WriteOutcome::Inserted { seq })
        };
        batch.push(accepted(tenants[t], id));
        expected.push(outcome);
    }
    let lease = hub_store::IngestLease {
        token: Uuid::now_v7(),
        until: Utc::now() + Duration::seconds(60),
        limit: 100,
        exclude_subscriptions: Vec::new(),
        owned: Default::default(),
    };
    let (out, leased) = db.store.write_batch_leased(&batch, &lease).await.expect("write");
    assert_eq!(out, expected);
    // Room planned for an id that proves to be stored already goes unused.
    assert!((90..=100).contains(&leased.jobs.len()), "the lease's room is used: {}", leased.jobs.len());

    for (t, tenant) in tenants.iter().enumerate() {
        // The two events written first have theirs too.
        let all: BTreeSet<i64> = (1..next[t]).collect();
        let events: BTreeSet<i64> =
            db.store.events_after(tenant, 0, 1000).await.expect("read").iter().map(|e| e.seq).collect();
        assert_eq!(events, all, "{tenant}: every seq once, no gap");
        let jobs = db.store.list_jobs(tenant, push[t], None, None, 1000).await.expect("jobs");
        let job_seqs: Vec<i64> = jobs.iter().map(|j| j.event_seq).collect();
        assert_eq!(job_seqs.len(), all.len(), "{tenant}: one job per event");
        assert_eq!(job_seqs.iter().copied().collect::<BTreeSet<_>>(), all, "{tenant}: each job at its event's seq");
        let pulled = db.store.pull_events(tenant, pull[t], 0, 1000).await.expect("pull");
        let positions: Vec<i64> = pulled.iter().map(|p| p.position).collect();
        assert_eq!(positions, all.iter().copied().collect::<Vec<_>>(), "{tenant}: one pull entry per event");
        assert!(pulled.iter().all(|p| p.event.seq == p.position && p.event.tenant_id == *tenant));
    }
    for job in &leased.jobs {
        let t = tenants.iter().position(|t| *t == job.tenant_id).expect("a batch tenant");
        assert!((3..next[t]).contains(&job.event_seq), "a leased job names a new event's seq");
    }
}
