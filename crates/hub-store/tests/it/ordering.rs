//! Ordering by key on both backends: a claim leases a job of an ordered subscription only when no
//! earlier job of its key is pending, leased or held; delivered and dead-lettered jobs release
//! their key; a retry holds its key and no other; events without a key, other keys and unordered
//! subscriptions are never held back; ingest leases no ordered job; replays carry the key.

use chrono::{Duration, Utc};
use hub_core::delivery::DeadReason;
use hub_core::{Ordering, SinkKind};
use hub_store::{ClaimedJob, HealthChange, IngestLease, JobState, JobTransition, SubscriptionRecord};
use uuid::Uuid;

use crate::jobs::{claim, result};
use crate::support::{TestDb, accepted_with, headers, subscription};

/// An event of t1 with this partition key and/or subject.
fn keyed(partition: Option<&str>, subject: Option<&str>) -> hub_store::IngestRecord {
    let mut h = headers("t1", Uuid::now_v7(), "loan_application", "approved");
    if let Some(p) = partition {
        h.push(("ce-partitionkey".to_owned(), p.to_owned()));
    }
    if let Some(s) = subject {
        h.push(("ce-subject".to_owned(), s.to_owned()));
    }
    accepted_with(h, b"{}")
}

async fn ordered(db: &TestDb) -> SubscriptionRecord {
    let sub = SubscriptionRecord {
        ordering: Ordering::Key,
        ..subscription("t1", SinkKind::named("webhook"), &["*.*"], None)
    };
    db.store.create_subscription(&sub).await.expect("create");
    sub
}

/// Claims everything claimable now: the seqs leased, in seq order.
async fn claim_all(db: &TestDb) -> Vec<ClaimedJob> {
    let mut jobs = db.store.claim_jobs(&claim(100, None)).await.expect("claim").jobs;
    jobs.sort_by_key(|j| j.event_seq);
    jobs
}

fn seqs(jobs: &[ClaimedJob]) -> Vec<i64> {
    jobs.iter().map(|j| j.event_seq).collect()
}

async fn settle(db: &TestDb, job: &ClaimedJob, transition: JobTransition) {
    let outcome = if transition == JobTransition::Succeeded { "delivered" } else { "failed" };
    let health = if outcome == "delivered" {
        HealthChange::Success
    } else {
        HealthChange::Failure { at: Utc::now(), disable: None }
    };
    let done = db.store.complete_attempt(&result(job, outcome, transition, health)).await.expect("record");
    assert!(done.job_updated);
}

pub async fn ordered_jobs_are_claimed_one_at_a_time_per_key(db: &TestDb) {
    let sub = ordered(db).await;
    let unordered = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&unordered).await.expect("create");
    // seq: 1 A, 2 A, 3 B, 4 (no key), 5 A (by subject), 6 B, 7 (no key)
    let batch = [
        keyed(Some("A"), Some("ignored")),
        keyed(Some("A"), None),
        keyed(Some("B"), None),
        keyed(None, None),
        keyed(None, Some("A")),
        keyed(Some("B"), None),
        keyed(Some(""), None),
    ];
    db.store.write_batch(&batch).await.expect("write");
    let first = claim_all(db).await;
    let (mine, others): (Vec<_>, Vec<_>) = first.into_iter().partition(|j| j.subscription_id == sub.id);
    assert_eq!(seqs(&mine), vec![1, 3, 4, 7], "the head of A and of B, and the events without a key");
    assert_eq!(seqs(&others), (1..=7).collect::<Vec<_>>(), "an unordered subscription is never held back");
    assert!(claim_all(db).await.is_empty(), "nothing else until a head settles");
    let blocked = db.store.blocked_keys("t1", sub.id, 10).await.expect("blocked");
    let shown: Vec<(&str, i64, i64, JobState)> =
        blocked.iter().map(|b| (b.key.as_str(), b.waiting, b.head.event_seq, b.head.state)).collect();
    assert_eq!(shown, vec![("A", 2, 1, JobState::Leased), ("B", 1, 3, JobState::Leased)], "oldest head first");
    assert_eq!(db.store.count_blocked_keys().await.expect("count"), 2);
    assert!(db.store.blocked_keys("t2", sub.id, 10).await.expect("blocked").is_empty(), "scoped to the tenant");

    // A delivered head releases its key; the next A is the one keyed by subject (seq 5) only
    // after seq 2.
    settle(db, &mine[0], JobTransition::Succeeded).await;
    let next = claim_all(db).await;
    assert_eq!(seqs(&next), vec![2]);
    // A retry keeps the key held (and holds no other key).
    let later = Utc::now() + Duration::hours(1);
    settle(db, &next[0], JobTransition::Retry { due_at: later }).await;
    settle(db, &mine[1], JobTransition::Succeeded).await;
    assert_eq!(seqs(&claim_all(db).await), vec![6], "B moves on while A waits for its retry");
    // A dead letter releases its key.
    let mut retried = db
        .store
        .claim_jobs(&hub_store::ClaimRequest { now: later + Duration::seconds(1), ..claim(100, None) })
        .await
        .expect("claim")
        .jobs;
    assert_eq!(seqs(&retried), vec![2], "the retry, when due");
    let dead = JobTransition::Dead { why: DeadReason::Exhausted, reason: "gave up".to_owned() };
    settle(db, &retried.remove(0), dead).await;
    assert_eq!(seqs(&claim_all(db).await), vec![5], "after the dead letter, the next A");
}

pub async fn ingest_leases_no_ordered_job(db: &TestDb) {
    let sub = ordered(db).await;
    let lease = IngestLease {
        token: Uuid::now_v7(),
        until: Utc::now() + Duration::seconds(60),
        limit: 100,
        exclude_subscriptions: vec![],
        owned: Default::default(),
    };
    let (_, leased) = db
        .store
        .write_batch_leased(&[keyed(Some("A"), None), keyed(Some("A"), None), keyed(None, None)], &lease)
        .await
        .expect("write");
    assert_eq!(leased.jobs.iter().map(|j| j.event_seq).collect::<Vec<_>>(), vec![3], "only the job without a key");
    let claimed = claim_all(db).await;
    assert_eq!(seqs(&claimed), vec![1]);
    assert!(claimed.iter().all(|j| j.subscription_id == sub.id));
}

pub async fn replayed_jobs_carry_their_key(db: &TestDb) {
    db.store
        .write_batch(&[keyed(Some("A"), None), keyed(Some("A"), None), keyed(None, Some("C"))])
        .await
        .expect("write");
    let sub = ordered(db).await;
    let replay = hub_store::NewReplay {
        id: Uuid::now_v7(),
        tenant_id: "t1".to_owned(),
        subscription_id: sub.id,
        window: hub_store::TimeWindow::default(),
        from_seq: Some(1),
        to_seq: None,
        include_delivered: false,
        only_undelivered: false,
        filters: None,
        rate: hub_core::replay::MAX_RATE,
        now: Utc::now(),
    };
    db.store.start_replay(&replay).await.expect("start");
    let limits = hub_store::ReplayLimits { batch: 10, pace: 1_000, now: Utc::now() + Duration::seconds(1) };
    db.store.step_replay(replay.id, &limits).await.expect("step");
    assert_eq!(seqs(&claim_all(db).await), vec![1, 3], "the replayed A waits for the first; C is its own key");
}
