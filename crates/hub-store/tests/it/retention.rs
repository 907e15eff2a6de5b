//! Retention on both backends: bounded batches, and nothing still needed is deleted.

use chrono::{Duration, Utc};
use hub_core::SinkKind;
use hub_store::{
    AttemptRecord, AttemptResult, ClaimRequest, HealthChange, IngestRecord, JobTransition, Origin, PruneKind,
    QuarantineFilter,
};
use uuid::Uuid;

use crate::support::{TestDb, accepted, quarantined, subscription};

fn aged(mut record: IngestRecord, hours: i64) -> IngestRecord {
    let at = Utc::now() - Duration::hours(hours);
    match &mut record {
        IngestRecord::Accepted(e) => e.received_at = at,
        IngestRecord::Quarantined(q) => q.received_at = at,
    }
    record
}

pub async fn retention_prunes_in_bounded_batches_and_keeps_what_is_needed(db: &TestDb) {
    let cutoff = Utc::now() - Duration::hours(1);
    // Quarantine: two old records, one new; a batch of one deletes one.
    let q = || quarantined(vec![("ce-id".into(), "x".into())], b"{}", Origin::Http);
    db.store.write_batch(&[aged(q(), 200), aged(q(), 200), q()]).await.expect("write");
    assert_eq!(db.store.prune(PruneKind::Quarantine, cutoff, 1).await.expect("prune"), Some(1));
    assert_eq!(db.store.prune(PruneKind::Quarantine, cutoff, 100).await.expect("prune"), Some(1));
    let left = db.store.list_quarantine(&QuarantineFilter { limit: 10, ..Default::default() }).await.expect("list");
    assert_eq!(left.len(), 1, "the recent record stays");

    // Events: an old one a push job still needs, an old one in a pull stream, a recent one.
    let push = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&push).await.expect("push");
    db.store.write_batch(&[aged(accepted("t1", Uuid::now_v7()), 200)]).await.expect("write");
    db.store.delete_subscription("t1", push.id).await.expect("delete");
    let pull = subscription("t1", SinkKind::PULL, &["*.*"], None);
    db.store.create_subscription(&pull).await.expect("pull");
    db.store
        .write_batch(&[aged(accepted("t1", Uuid::now_v7()), 200), accepted("t1", Uuid::now_v7())])
        .await
        .expect("write");
    assert_eq!(
        db.store.prune(PruneKind::Events, cutoff, 100).await.expect("prune"),
        Some(1),
        "only the unneeded old event"
    );
    let seqs: Vec<i64> = db.store.events_after("t1", 0, 10).await.expect("read").iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 3], "the event a job refers to, and the recent one, stay");
    let pulled: Vec<i64> =
        db.store.pull_events("t1", pull.id, 0, 10).await.expect("pull").iter().map(|e| e.position).collect();
    assert_eq!(pulled, vec![3], "the pruned event left its pull stream too");

    // Finished jobs (and their attempts) go after their retention; then their events can go.
    let live = subscription("t2", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&live).await.expect("live");
    db.store.write_batch(&[aged(accepted("t2", Uuid::now_v7()), 200)]).await.expect("write");
    let now = Utc::now();
    let job = db
        .store
        .claim_jobs(&ClaimRequest {
            now,
            lease_until: now + Duration::seconds(60),
            token: Uuid::now_v7(),
            limit: 1,
            after_tenant: None,
            exclude_subscriptions: vec![],
            owned: Default::default(),
        })
        .await
        .expect("claim")
        .jobs
        .remove(0);
    let record = AttemptRecord {
        id: Uuid::now_v7(),
        job_id: job.id,
        tenant_id: "t2".into(),
        subscription_id: live.id,
        attempt: 1,
        started_at: now,
        latency_ms: 1,
        outcome: "delivered".into(),
        status_code: Some(204),
        error: None,
        response_body: None,
        ledger_index: None,
    };
    let done = AttemptResult {
        token: job.token,
        record,
        transition: JobTransition::Succeeded,
        health: HealthChange::Success,
        now,
        ledger: None,
    };
    db.store.complete_attempt(&done).await.expect("complete");
    assert_eq!(
        db.store.prune(PruneKind::Events, cutoff, 100).await.expect("prune"),
        Some(0),
        "its job still refers to it"
    );
    assert_eq!(
        db.store.prune(PruneKind::FinishedJobs, cutoff, 100).await.expect("prune"),
        Some(0),
        "finished too recently"
    );
    let later = Utc::now() + Duration::hours(1);
    // The cancelled job of the deleted subscription and the succeeded one.
    assert_eq!(db.store.prune(PruneKind::FinishedJobs, later, 100).await.expect("prune"), Some(2));
    assert!(
        db.store.attempts_for_jobs("t2", &[job.id]).await.expect("attempts").is_empty(),
        "attempts go with their job"
    );
    assert_eq!(db.store.prune(PruneKind::Events, cutoff, 100).await.expect("prune"), Some(2));
    assert!(db.store.events_after("t2", 0, 10).await.expect("read").is_empty());
}
