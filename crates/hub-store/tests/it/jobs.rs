//! Delivery jobs: claims, attempts, leases, recovery and redrive on both backends.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use hub_core::SinkKind;
use hub_core::delivery::DeadReason;
use hub_store::{
    AttemptRecord, AttemptResult, ClaimRequest, ClaimedJob, DestinationChange, HealthChange, JobState, JobTransition,
    Store, SubscriptionPatch, SubscriptionRecord, VerificationResult,
};
use uuid::Uuid;

use crate::support::{TestDb, accepted, subscription};

pub(crate) async fn push_subscription(db: &TestDb, tenant: &str) -> SubscriptionRecord {
    let sub = subscription(tenant, SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("create");
    sub
}

pub(crate) async fn events(db: &TestDb, tenant: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let batch: Vec<_> = chunk.iter().map(|_| accepted(tenant, Uuid::now_v7())).collect();
        db.store.write_batch(&batch).await.expect("write");
    }
}

pub(crate) fn claim(limit: u32, after: Option<&str>) -> ClaimRequest {
    let now = Utc::now() + Duration::seconds(1);
    ClaimRequest {
        now,
        lease_until: now + Duration::seconds(60),
        token: Uuid::now_v7(),
        limit,
        after_tenant: after.map(str::to_owned),
        exclude_subscriptions: Vec::new(),
        owned: Default::default(),
    }
}

pub(crate) fn result(
    job: &ClaimedJob,
    outcome: &str,
    transition: JobTransition,
    health: HealthChange,
) -> AttemptResult {
    let now = Utc::now();
    AttemptResult {
        token: job.token,
        record: AttemptRecord {
            id: Uuid::now_v7(),
            job_id: job.id,
            tenant_id: job.tenant_id.clone(),
            subscription_id: job.subscription_id,
            attempt: job.attempts + 1,
            started_at: now,
            latency_ms: 12,
            outcome: outcome.to_owned(),
            status_code: Some(if outcome == "delivered" { 204 } else { 503 }),
            error: (outcome != "delivered").then(|| "HTTP 503".to_owned()),
            response_body: Some("body".to_owned()),
            ledger_index: None,
        },
        transition,
        health,
        now,
        ledger: Some(hub_store::NewLedgerEntry {
            log: job.tenant_id.clone(),
            at: now,
            kind: "delivery",
            data: format!(r#"{{"job":"{}","outcome":"{outcome}"}}"#, job.id),
            event_id: Some(job.id),
            digest_key: Some(vec![7; 16]),
        }),
    }
}

async fn job_state(store: &Arc<dyn Store>, job: &ClaimedJob) -> hub_store::DeliveryJob {
    store
        .list_jobs(&job.tenant_id, job.subscription_id, None, None, 10_000)
        .await
        .expect("jobs")
        .into_iter()
        .find(|j| j.id == job.id)
        .expect("job exists")
}

pub async fn claims_interleave_tenants(db: &TestDb) {
    push_subscription(db, "big").await;
    push_subscription(db, "small").await;
    events(db, "big", 300).await;
    events(db, "small", 1).await;
    // The small tenant's single job comes in the first claim despite the big backlog.
    let first = db.store.claim_jobs(&claim(4, None)).await.expect("claim").jobs;
    assert_eq!(first.len(), 4);
    assert!(first.iter().any(|j| j.tenant_id == "small"), "{first:?}");
    assert!(first.iter().all(|j| j.attempts == 0));

    // Rotation: starting after "big" visits "small" first, then wraps to "big".
    events(db, "small", 1).await;
    let next = db.store.claim_jobs(&claim(2, Some("big"))).await.expect("claim").jobs;
    assert_eq!(next.iter().filter(|j| j.tenant_id == "small").count(), 1, "{next:?}");
}

pub async fn claims_skip_undeliverable_and_excluded_subscriptions(db: &TestDb) {
    let deliverable = push_subscription(db, "t1").await;
    let excluded = push_subscription(db, "t1").await;
    let paused = push_subscription(db, "t1").await;
    events(db, "t1", 2).await;
    let off = SubscriptionPatch { enabled: Some(false), now: Utc::now(), ..SubscriptionPatch::default() };
    db.store.patch_subscription("t1", paused.id, &off).await.expect("disable").expect("exists");

    let mut req = claim(100, None);
    req.exclude_subscriptions = vec![excluded.id];
    let claimed = db.store.claim_jobs(&req).await.expect("claim").jobs;
    assert_eq!(claimed.len(), 2);
    assert!(claimed.iter().all(|j| j.subscription_id == deliverable.id), "{claimed:?}");
    // Leased jobs are not claimed again; the excluded ones are available now.
    let again = db.store.claim_jobs(&claim(100, None)).await.expect("claim").jobs;
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|j| j.subscription_id == excluded.id));
    // The disabled subscription's jobs wait, held.
    assert_eq!(db.store.list_jobs("t1", paused.id, Some(JobState::Held), None, 10).await.expect("jobs").len(), 2);
}

pub async fn concurrent_claims_never_lease_a_job_twice(db: &TestDb) {
    push_subscription(db, "t1").await;
    push_subscription(db, "t2").await;
    events(db, "t1", 150).await;
    events(db, "t2", 150).await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let store = Arc::clone(&db.store);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store.claim_jobs(&claim(7, None)).await.expect("claim").jobs;
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|j| j.id));
            }
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for id in t.await.expect("claimer") {
            assert!(seen.insert(id), "job {id} leased twice");
        }
    }
    assert_eq!(seen.len(), 300, "every job was claimed exactly once");
}

/// A subscription's open jobs, counted by state (the listing's health); finished ones are not.
pub async fn open_jobs_are_counted_by_state(db: &TestDb) {
    let sub = push_subscription(db, "t1").await;
    let other = push_subscription(db, "t1").await;
    events(db, "t1", 6).await;
    let mut req = claim(100, None);
    req.exclude_subscriptions = vec![other.id];
    let jobs = db.store.claim_jobs(&req).await.expect("claim").jobs;
    assert_eq!(jobs.len(), 6);
    let failure = HealthChange::Failure { at: Utc::now(), disable: None };
    let later = Utc::now() + Duration::minutes(5);
    let dead = JobTransition::Dead { why: DeadReason::Exhausted, reason: "attempts exhausted".into() };
    for (job, outcome, transition) in [
        (&jobs[0], "delivered", JobTransition::Succeeded),
        (&jobs[1], "failed", JobTransition::Retry { due_at: later }),
        (&jobs[2], "failed", dead.clone()),
        (&jobs[3], "failed", dead),
    ] {
        db.store.complete_attempt(&result(job, outcome, transition, failure.clone())).await.expect("complete");
    }
    // Two still leased, one pending again, two dead, one succeeded; the other subscription's six
    // all pending.
    let mut counts = db.store.open_jobs(&[sub.id, other.id]).await.expect("counts");
    counts.sort_by_key(|(s, state, _)| (*s == other.id, format!("{state:?}")));
    use hub_core::delivery::JobState;
    assert_eq!(
        counts,
        vec![
            (sub.id, JobState::Dead, 2),
            (sub.id, JobState::Leased, 2),
            (sub.id, JobState::Pending, 1),
            (other.id, JobState::Pending, 6),
        ]
    );
}

pub async fn attempts_move_jobs_through_their_states(db: &TestDb) {
    push_subscription(db, "t1").await;
    events(db, "t1", 3).await;
    let jobs = db.store.claim_jobs(&claim(3, None)).await.expect("claim").jobs;
    let due = Utc::now() + Duration::minutes(5);
    let failure = HealthChange::Failure { at: Utc::now(), disable: None };
    let r = result(&jobs[0], "delivered", JobTransition::Succeeded, HealthChange::Success);
    assert!(db.store.complete_attempt(&r).await.expect("complete").job_updated);
    let r = result(&jobs[1], "failed", JobTransition::Retry { due_at: due }, failure.clone());
    db.store.complete_attempt(&r).await.expect("complete");
    let r = result(
        &jobs[2],
        "failed",
        JobTransition::Dead { why: DeadReason::Exhausted, reason: "attempts exhausted".into() },
        failure,
    );
    db.store.complete_attempt(&r).await.expect("complete");

    let done = job_state(&db.store, &jobs[0]).await;
    assert_eq!((done.state.as_str(), done.attempts), ("succeeded", 1));
    assert!(done.finished_at.is_some());
    let retry = job_state(&db.store, &jobs[1]).await;
    assert_eq!((retry.state.as_str(), retry.attempts), ("pending", 1));
    assert!((retry.due_at - due).num_milliseconds().abs() < 2);
    assert_eq!(retry.last_error.as_deref(), Some("HTTP 503"));
    let dead = job_state(&db.store, &jobs[2]).await;
    assert_eq!((dead.state.as_str(), dead.last_error.as_deref()), ("dead", Some("attempts exhausted")));

    // Not due yet: the retry is not claimable before its time.
    assert!(db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs.is_empty());
    let attempts = db.store.attempts_for_jobs("t1", &[jobs[0].id, jobs[1].id]).await.expect("attempts");
    assert_eq!(attempts.len(), 2);
    assert!(attempts.iter().all(|a| a.attempt == 1 && a.latency_ms == 12));
    assert!(db.store.attempts_for_jobs("t2", &[jobs[0].id]).await.expect("attempts").is_empty(), "tenant-scoped");
}

pub async fn a_lost_lease_records_the_attempt_but_leaves_the_job(db: &TestDb) {
    push_subscription(db, "t1").await;
    events(db, "t1", 1).await;
    let job = db.store.claim_jobs(&claim(1, None)).await.expect("claim").jobs.remove(0);
    let mut stale = job.clone();
    stale.token = Uuid::now_v7();
    let done = db
        .store
        .complete_attempt(&result(&stale, "delivered", JobTransition::Succeeded, HealthChange::Success))
        .await
        .expect("complete");
    assert!(!done.job_updated);
    assert_eq!(job_state(&db.store, &job).await.state, hub_store::JobState::Leased);
    assert_eq!(db.store.attempts_for_jobs("t1", &[job.id]).await.expect("attempts").len(), 1);
    // Release without an attempt: pending again, attempts unchanged.
    assert!(!db.store.release_job(job.id, stale.token, Utc::now()).await.expect("release"));
    assert!(db.store.release_job(job.id, job.token, Utc::now()).await.expect("release"));
    let released = job_state(&db.store, &job).await;
    assert_eq!((released.state.as_str(), released.attempts), ("pending", 0));
    // Which leases are no longer held: a released one, a stale token, a job that is not there.
    let again = db.store.claim_jobs(&claim(1, None)).await.expect("claim").jobs.remove(0);
    let nowhere = Uuid::now_v7();
    let lost = db
        .store
        .lost_leases(&[(again.id, again.token), (job.id, job.token), (nowhere, Uuid::now_v7())])
        .await
        .expect("lost leases");
    assert_eq!(lost, vec![job.id, nowhere], "the one held now is not lost; the earlier token and a missing job are");
    assert!(db.store.lost_leases(&[]).await.expect("none").is_empty());
}

pub async fn expired_leases_are_recovered_then_poisoned(db: &TestDb) {
    push_subscription(db, "t1").await;
    events(db, "t1", 1).await;
    let mut now: DateTime<Utc> = Utc::now();
    for round in 1..=3 {
        let mut req = claim(1, None);
        req.now = now + Duration::seconds(1);
        req.lease_until = now + Duration::seconds(2);
        let job = db.store.claim_jobs(&req).await.expect("claim").jobs;
        assert_eq!(job.len(), 1, "round {round}: the recovered job is claimable again");
        assert_eq!(job[0].recoveries, round - 1);
        now += Duration::seconds(10);
        let rec = db.store.recover_expired_leases(now, 3).await.expect("recover");
        if round < 3 {
            assert_eq!(rec, hub_store::Recovery { recovered: 1, poisoned: 0 });
        } else {
            assert_eq!(rec, hub_store::Recovery { recovered: 0, poisoned: 1 });
            let dead = job_state(&db.store, &job[0]).await;
            assert_eq!(dead.state, hub_store::JobState::Dead);
            assert!(dead.last_error.as_deref().unwrap_or_default().starts_with("poison"));
            assert_eq!(dead.attempts, 0, "no attempt was ever recorded");
        }
    }
    // A lease that has not expired is left alone.
    events(db, "t1", 1).await;
    let job = db.store.claim_jobs(&claim(1, None)).await.expect("claim").jobs;
    assert_eq!(job.len(), 1);
    assert_eq!(db.store.recover_expired_leases(Utc::now(), 3).await.expect("recover"), hub_store::Recovery::default());
}

pub async fn failures_open_a_period_that_a_success_clears_and_disable_stops_claims(db: &TestDb) {
    let sub = push_subscription(db, "t1").await;
    events(db, "t1", 4).await;
    let jobs = db.store.claim_jobs(&claim(4, None)).await.expect("claim").jobs;
    let t0 = Utc::now() - Duration::hours(10);
    let fail = |at| HealthChange::Failure { at, disable: None };
    let later = Utc::now() + Duration::hours(1);
    db.store
        .complete_attempt(&result(&jobs[0], "failed", JobTransition::Retry { due_at: later }, fail(t0)))
        .await
        .expect("1");
    let t1 = t0 + Duration::hours(2);
    db.store
        .complete_attempt(&result(&jobs[1], "failed", JobTransition::Retry { due_at: later }, fail(t1)))
        .await
        .expect("2");
    let read = db.store.subscription("t1", sub.id).await.expect("read").expect("exists");
    assert_eq!(
        read.failing_since.map(|t| t.timestamp_millis()),
        Some(t0.timestamp_millis()),
        "the first failure opens it"
    );
    assert_eq!(read.last_failure_at.map(|t| t.timestamp_millis()), Some(t1.timestamp_millis()));

    db.store
        .complete_attempt(&result(&jobs[2], "delivered", JobTransition::Succeeded, HealthChange::Success))
        .await
        .expect("3");
    let read = db.store.subscription("t1", sub.id).await.expect("read").expect("exists");
    assert!(read.failing_since.is_none() && read.last_failure_at.is_none(), "one success clears the period");

    let disable = HealthChange::Failure { at: Utc::now(), disable: Some("auto-disabled: failing".into()) };
    let done = db
        .store
        .complete_attempt(&result(&jobs[3], "failed", JobTransition::Retry { due_at: Utc::now() }, disable))
        .await
        .expect("4");
    assert!(done.disabled);
    let read = db.store.subscription("t1", sub.id).await.expect("read").expect("exists");
    assert!(!read.enabled);
    assert_eq!(read.disabled_reason.as_deref(), Some("auto-disabled: failing"));
    assert_eq!(read.verification, hub_core::VerificationState::Active, "auto-disable never touches verification");
    assert!(
        db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs.is_empty(),
        "a disabled subscription's jobs wait"
    );
}

pub async fn dead_jobs_are_redriven_with_a_fresh_window(db: &TestDb) {
    let sub = push_subscription(db, "t1").await;
    events(db, "t1", 2).await;
    let jobs = db.store.claim_jobs(&claim(2, None)).await.expect("claim").jobs;
    for job in &jobs {
        let r = result(
            job,
            "failed",
            JobTransition::Dead { why: DeadReason::Exhausted, reason: "attempts exhausted".into() },
            HealthChange::Success,
        );
        db.store.complete_attempt(&r).await.expect("complete");
    }
    let future = Utc::now() + Duration::hours(1);
    assert_eq!(
        db.store.redrive("t1", sub.id, Some(future), Utc::now()).await.expect("redrive"),
        0,
        "none dead since then"
    );
    assert_eq!(db.store.redrive("t2", sub.id, None, Utc::now()).await.expect("redrive"), 0, "tenant-scoped");
    let now = Utc::now();
    assert_eq!(db.store.redrive("t1", sub.id, Some(now - Duration::hours(1)), now).await.expect("redrive"), 2);
    let again = db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs;
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|j| j.attempts == 0 && (j.window_start - now).num_milliseconds().abs() < 2));
}

pub async fn a_batch_of_outcomes_is_written_in_order_per_job(db: &TestDb) {
    let sub = push_subscription(db, "t1").await;
    let other = push_subscription(db, "t2").await;
    events(db, "t1", 4).await;
    events(db, "t2", 1).await;
    let jobs = db.store.claim_jobs(&claim(5, None)).await.expect("claim").jobs;
    assert_eq!(jobs.len(), 5);
    let t1: Vec<&ClaimedJob> = jobs.iter().filter(|j| j.tenant_id == "t1").collect();
    let t2 = jobs.iter().find(|j| j.tenant_id == "t2").expect("t2 job");
    let mut stale = t1[3].clone();
    stale.token = Uuid::now_v7();
    let later = Utc::now() + Duration::minutes(5);
    let failed_at = Utc::now() - Duration::minutes(1);
    let batch = vec![
        result(t1[0], "delivered", JobTransition::Succeeded, HealthChange::Success),
        // A failure then a success of the same subscription: the success, later, clears it.
        result(
            t1[1],
            "failed",
            JobTransition::Retry { due_at: later },
            HealthChange::Failure { at: failed_at, disable: None },
        ),
        result(t1[2], "delivered", JobTransition::Succeeded, HealthChange::Success),
        result(&stale, "delivered", JobTransition::Succeeded, HealthChange::Success),
        // Another subscription's failure disables it.
        result(
            t2,
            "failed",
            JobTransition::Dead { why: DeadReason::Exhausted, reason: "attempts exhausted".into() },
            HealthChange::Failure { at: failed_at, disable: Some("auto-disabled: failing".into()) },
        ),
    ];
    let done = db.store.complete_attempts(&batch).await.expect("complete");
    let updated: Vec<bool> = done.iter().map(|d| d.job_updated).collect();
    assert_eq!(updated, [true, true, true, false, true], "the stale lease changes nothing");
    let disabled: Vec<bool> = done.iter().map(|d| d.disabled).collect();
    assert_eq!(disabled, [false, false, false, false, true]);

    assert_eq!(job_state(&db.store, t1[0]).await.state, hub_store::JobState::Succeeded);
    let retry = job_state(&db.store, t1[1]).await;
    assert_eq!((retry.state.as_str(), retry.attempts, retry.last_error.as_deref()), ("pending", 1, Some("HTTP 503")));
    assert_eq!(job_state(&db.store, t1[3]).await.state, hub_store::JobState::Leased);
    assert_eq!(job_state(&db.store, t2).await.state, hub_store::JobState::Dead);
    let read = db.store.subscription("t1", sub.id).await.expect("read").expect("exists");
    assert!(read.failing_since.is_none() && read.enabled, "applied in order: the last success clears");
    let read = db.store.subscription("t2", other.id).await.expect("read").expect("exists");
    assert!(!read.enabled && read.failing_since.is_some());
    let ids: Vec<Uuid> = jobs.iter().map(|j| j.id).collect();
    assert_eq!(db.store.attempts_for_jobs("t1", &ids).await.expect("attempts").len(), 4, "every attempt recorded");
    assert!(db.store.complete_attempts(&[]).await.expect("empty").is_empty());
}

pub async fn claimed_jobs_load_their_events_and_subscriptions_in_one_go(db: &TestDb) {
    let a = push_subscription(db, "t1").await;
    let b = push_subscription(db, "t2").await;
    events(db, "t1", 2).await;
    events(db, "t2", 1).await;
    let keys = vec![("t1".to_owned(), 1), ("t1".to_owned(), 2), ("t2".to_owned(), 1), ("t2".to_owned(), 9)];
    let mut got: Vec<(String, i64)> =
        db.store.events_by_seqs(&keys).await.expect("events").into_iter().map(|e| (e.tenant_id, e.seq)).collect();
    got.sort();
    assert_eq!(got, keys[..3].to_vec(), "an unknown seq is left out");
    assert!(db.store.events_by_seqs(&[]).await.expect("none").is_empty());

    let mut subs: Vec<(Uuid, String)> = db
        .store
        .subscriptions_by_ids(&[a.id, b.id, Uuid::now_v7()])
        .await
        .expect("subs")
        .into_iter()
        .map(|s| (s.id, s.tenant_id))
        .collect();
    subs.sort();
    let mut want = vec![(a.id, "t1".to_owned()), (b.id, "t2".to_owned())];
    want.sort();
    assert_eq!(subs, want);
}

async fn states(db: &TestDb, sub: &SubscriptionRecord) -> Vec<JobState> {
    let jobs = db.store.list_jobs(&sub.tenant_id, sub.id, None, None, 1000).await.expect("jobs");
    jobs.into_iter().map(|j| j.state).collect()
}

fn patch(enabled: Option<bool>) -> SubscriptionPatch {
    SubscriptionPatch {
        enabled,
        disabled_reason: Some("operator".into()),
        now: Utc::now(),
        ..SubscriptionPatch::default()
    }
}

fn verification(sub: &SubscriptionRecord, error: Option<&str>) -> VerificationResult {
    VerificationResult {
        allowed_rate: None,
        probed_config: sub.sink_config.clone(),
        probed_credentials: sub.credentials.clone(),
        error: error.map(str::to_owned),
        reenable: false,
        now: Utc::now(),
    }
}

/// Jobs of a subscription that cannot be delivered to are held, never claimed, and released when
/// it can be again; deleting it cancels them.
pub async fn jobs_of_an_undeliverable_subscription_are_held_and_released(db: &TestDb) {
    let sub = push_subscription(db, "t1").await;
    events(db, "t1", 3).await;
    assert_eq!(states(db, &sub).await, vec![JobState::Pending; 3]);

    db.store.patch_subscription("t1", sub.id, &patch(Some(false))).await.expect("pause").expect("exists");
    assert_eq!(states(db, &sub).await, vec![JobState::Held; 3], "paused");
    assert!(db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs.is_empty());
    db.store.patch_subscription("t1", sub.id, &patch(Some(true))).await.expect("resume").expect("exists");
    assert_eq!(states(db, &sub).await, vec![JobState::Pending; 3], "resumed");

    db.store.set_verification("t1", sub.id, &verification(&sub, Some("refused"))).await.expect("verify").expect("same");
    assert_eq!(states(db, &sub).await, vec![JobState::Held; 3], "failed verification");
    db.store.set_verification("t1", sub.id, &verification(&sub, None)).await.expect("verify").expect("same");
    assert_eq!(states(db, &sub).await, vec![JobState::Pending; 3], "verified again");
    assert_eq!(db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs.len(), 3);

    // Auto-disable holds what is still waiting.
    let other = push_subscription(db, "t2").await;
    events(db, "t2", 2).await;
    let jobs = db.store.claim_jobs(&claim(1, Some("t1"))).await.expect("claim").jobs;
    assert_eq!(jobs.len(), 1);
    let disable = HealthChange::Failure { at: Utc::now(), disable: Some("auto-disabled: failing".into()) };
    let retry = JobTransition::Retry { due_at: Utc::now() };
    let done = db.store.complete_attempt(&result(&jobs[0], "failed", retry, disable)).await.expect("record");
    assert!(done.disabled);
    assert_eq!(states(db, &other).await, vec![JobState::Held; 2], "auto-disabled");

    assert!(db.store.delete_subscription("t2", other.id).await.expect("delete"));
    assert_eq!(states(db, &other).await, vec![JobState::Cancelled; 2], "deleted");
}

/// A subscription verified before and pending verification again (its destination changed)
/// keeps the events that arrive meanwhile, held; one never verified gets none.
pub async fn a_destination_being_verified_again_holds_new_events(db: &TestDb) {
    let mut sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    sub.verification = hub_core::VerificationState::Pending;
    sub.sink_config = serde_json::json!({"type": "webhook", "url": "https://example.com/a"});
    db.store.create_subscription(&sub).await.expect("create");
    events(db, "t1", 2).await;
    assert!(states(db, &sub).await.is_empty(), "never verified: nothing");

    db.store.set_verification("t1", sub.id, &verification(&sub, None)).await.expect("verify").expect("same");
    events(db, "t1", 1).await;
    assert_eq!(states(db, &sub).await, vec![JobState::Pending]);

    let moved = serde_json::json!({"type": "webhook", "url": "https://example.com/b"});
    let change = SubscriptionPatch {
        destination: Some(DestinationChange {
            sink_config: moved.clone(),
            credentials: None,
            reverify: true,
            pace_bucket: None,
        }),
        now: Utc::now(),
        ..SubscriptionPatch::default()
    };
    let pending = db.store.patch_subscription("t1", sub.id, &change).await.expect("patch").expect("exists");
    events(db, "t1", 2).await;
    assert_eq!(states(db, &sub).await, vec![JobState::Held; 3], "the waiting job and the new ones are held");
    assert!(db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs.is_empty());

    db.store.set_verification("t1", sub.id, &verification(&pending, None)).await.expect("verify").expect("same");
    assert_eq!(states(db, &sub).await, vec![JobState::Pending; 3], "released once verified");
}

/// A retry recorded after its subscription was paused leaves a pending job behind; the
/// reconciliation pass holds it (and releases held jobs of a deliverable subscription).
pub async fn stranded_waiting_jobs_are_reconciled(db: &TestDb) {
    let sub = push_subscription(db, "t1").await;
    events(db, "t1", 1).await;
    let jobs = db.store.claim_jobs(&claim(1, None)).await.expect("claim").jobs;
    db.store.patch_subscription("t1", sub.id, &patch(Some(false))).await.expect("pause").expect("exists");
    let retry = JobTransition::Retry { due_at: Utc::now() };
    let failure = HealthChange::Failure { at: Utc::now(), disable: None };
    db.store.complete_attempt(&result(&jobs[0], "failed", retry, failure)).await.expect("record");
    assert_eq!(states(db, &sub).await, vec![JobState::Pending], "stranded by the race");
    assert_eq!(db.store.reconcile_waiting_jobs().await.expect("reconcile"), 1);
    assert_eq!(states(db, &sub).await, vec![JobState::Held]);
    assert_eq!(db.store.reconcile_waiting_jobs().await.expect("reconcile"), 0, "nothing left to move");
}

/// Random tenants, subscription states, due times and saturated destinations: a claimer that
/// moves its rotation to where each claim stopped gets every claimable job within a bounded
/// number of claims, and never a job that is not claimable.
pub async fn no_set_of_states_pins_the_claim_rotation(db: &TestDb) {
    let mut seed: u64 = 0x5eed_cafe;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut claimable = HashSet::new();
    let mut excluded = Vec::new();
    // First in the rotation, more tenants than one claim visits whose only work goes to saturated
    // destinations: a rotation that moved only on claimed jobs would never get past them.
    for t in 0..20 {
        let tenant = format!("a{t:02}");
        excluded.push(push_subscription(db, &tenant).await.id);
        events(db, &tenant, 1).await;
    }
    let tenants = 40;
    for t in 0..tenants {
        let tenant = format!("t{t:02}");
        let mut subs = Vec::new();
        for _ in 0..=next(2) {
            subs.push((push_subscription(db, &tenant).await, next(6)));
        }
        events(db, &tenant, 1 + next(3) as usize).await;
        for (sub, kind) in subs {
            let jobs: Vec<Uuid> = db
                .store
                .list_jobs(&tenant, sub.id, Some(JobState::Pending), None, 100)
                .await
                .expect("jobs")
                .into_iter()
                .map(|j| j.id)
                .collect();
            match kind {
                0 => {
                    db.store.patch_subscription(&tenant, sub.id, &patch(Some(false))).await.expect("pause");
                }
                1 => {
                    let failed = verification(&sub, Some("refused"));
                    db.store.set_verification(&tenant, sub.id, &failed).await.expect("fail");
                }
                2 => excluded.push(sub.id),
                _ => claimable.extend(jobs),
            }
        }
    }
    let limit = 16;
    let bound = (tenants as usize + 20).div_ceil(limit as usize) + claimable.len().div_ceil(limit as usize) + 2;
    let mut after: Option<String> = None;
    let mut got = HashSet::new();
    for _ in 0..bound {
        let mut req = claim(limit, after.as_deref());
        req.exclude_subscriptions = excluded.clone();
        let claimed = db.store.claim_jobs(&req).await.expect("claim");
        for job in &claimed.jobs {
            assert!(claimable.contains(&job.id), "claimed a job that is not claimable: {job:?}");
            assert!(got.insert(job.id), "claimed twice: {job:?}");
        }
        if claimed.visited.is_some() {
            after = claimed.visited;
        }
    }
    assert_eq!(got.len(), claimable.len(), "every claimable job within {bound} claims");
}

/// The oldest due job, for the gauge operators alert on; none once every job is claimed.
pub async fn the_oldest_due_job_is_known(db: &TestDb) {
    assert_eq!(db.store.oldest_due_pending(Utc::now()).await.expect("oldest"), None);
    push_subscription(db, "t1").await;
    let before = Utc::now() - Duration::milliseconds(1);
    events(db, "t1", 3).await;
    let oldest = db.store.oldest_due_pending(Utc::now() + Duration::seconds(1)).await.expect("oldest");
    assert!(oldest.is_some_and(|t| t >= before && t <= Utc::now()), "{oldest:?}");
    assert_eq!(db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs.len(), 3);
    assert_eq!(db.store.oldest_due_pending(Utc::now() + Duration::seconds(1)).await.expect("oldest"), None);
}

/// The fast path: a write under an ingest lease inserts up to its limit of the deliverable jobs
/// already leased (not those of excluded subscriptions, not held ones) and returns them as a
/// claim would; the rest stay for claims; a leased job takes its outcome under the lease's token,
/// and one whose holder died is recovered like a claimed one.
pub async fn jobs_leased_at_ingest_are_written_leased_and_the_rest_are_claimed(db: &TestDb) {
    let a = push_subscription(db, "t1").await;
    let b = push_subscription(db, "t1").await;
    let now = Utc::now();
    let lease = hub_store::IngestLease {
        token: Uuid::now_v7(),
        until: now + Duration::seconds(30),
        limit: 2,
        exclude_subscriptions: vec![b.id],
        owned: Default::default(),
    };
    let batch: Vec<_> = (0..3).map(|_| accepted("t1", Uuid::now_v7())).collect();
    let (outcomes, leased) = db.store.write_batch_leased(&batch, &lease).await.expect("write");
    assert_eq!(outcomes.len(), 3);
    assert_eq!(leased.jobs.len(), 2, "up to the limit");
    assert!(leased.jobs.iter().all(|j| j.subscription_id == a.id && j.token == lease.token && j.attempts == 0));
    assert_eq!(leased.pending, 1, "a's third job is left for claims (b's three too, but b is excluded here)");
    let stored = db.store.subscription("t1", a.id).await.expect("read").expect("exists");
    assert_eq!(leased.subscriptions, vec![stored], "the leased jobs' subscription, as the write read it");
    let seqs: Vec<i64> = outcomes
        .iter()
        .map(|o| match o {
            hub_store::WriteOutcome::Inserted { seq } => *seq,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(leased.jobs.iter().all(|j| seqs.contains(&j.event_seq)));
    for job in &leased.jobs {
        assert_eq!(job_state(&db.store, job).await.state, JobState::Leased);
    }

    // Claims see only what the fast path left.
    let claimed = db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs;
    assert_eq!(claimed.len(), 4);
    assert!(claimed.iter().all(|c| leased.jobs.iter().all(|l| l.id != c.id)));

    // The lease's holder records the outcome with its token.
    let done = db
        .store
        .complete_attempt(&result(&leased.jobs[0], "delivered", JobTransition::Succeeded, HealthChange::Success))
        .await
        .expect("complete");
    assert!(done.job_updated);
    assert_eq!(job_state(&db.store, &leased.jobs[0]).await.state, JobState::Succeeded);

    // A holder that died: its lease expires and the job is recovered for claims.
    let recovered = db.store.recover_expired_leases(now + Duration::seconds(60), 3).await.expect("recover");
    assert!(recovered.recovered >= 1, "{recovered:?}");
    assert_eq!(job_state(&db.store, &leased.jobs[1]).await.state, JobState::Pending);

    // Without room nothing is leased.
    let none = hub_store::IngestLease { limit: 0, ..lease.clone() };
    let (_, leased) = db.store.write_batch_leased(&[accepted("t1", Uuid::now_v7())], &none).await.expect("write");
    assert!(leased.jobs.is_empty());
    assert_eq!(leased.pending, 1, "a's job; b's is excluded");
}

/// A claim for a tenant with many subscriptions locks only the jobs it leases (PostgreSQL: a
/// row lock leaves the locker's id in the row's `xmax`), and a job another transaction holds is
/// passed over for the next oldest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_locks_only_what_it_leases_and_passes_over_held_rows() {
    let db = TestDb::postgres().await;
    let pool = db.postgres_store().expect("postgres").pool().clone();
    for _ in 0..20 {
        push_subscription(&db, "t1").await;
    }
    events(&db, "t1", 10).await;
    let locked_pending = || {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM delivery_jobs WHERE state = 'pending' AND xmax::text::bigint <> 0",
        )
        .fetch_one(&pool)
    };
    assert_eq!(locked_pending().await.expect("count"), 0, "no row locked before the claim");
    let first = db.store.claim_jobs(&claim(8, None)).await.expect("claim").jobs;
    assert_eq!(first.len(), 8);
    assert_eq!(locked_pending().await.expect("count"), 0, "the 192 jobs not leased were not locked");

    // Another transaction holds the three oldest pending jobs: the claim leases the next four.
    let mut tx = pool.begin().await.expect("begin");
    let held: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM delivery_jobs WHERE state = 'pending' ORDER BY due_at, id LIMIT 3 FOR UPDATE",
    )
    .fetch_all(&mut *tx)
    .await
    .expect("lock");
    let next = db.store.claim_jobs(&claim(4, None)).await.expect("claim").jobs;
    assert_eq!(next.len(), 4, "the held rows are passed over, not counted against the claim");
    assert!(next.iter().all(|j| !held.contains(&j.id)), "a held job was leased");
    tx.rollback().await.expect("rollback");
    let rest = db.store.claim_jobs(&claim(200, None)).await.expect("claim").jobs;
    assert_eq!(rest.len(), 200 - 12);
    assert!(held.iter().all(|id| rest.iter().any(|j| j.id == *id)), "the held jobs are claimed once free");
}

/// Index entries read since the schema's statistics were last flushed, by index, once the
/// server counts `updates` row updates of `delivery_jobs` (a backend flushes its table and index
/// counts together, so the index counts are then whole too).
async fn index_reads(store: &hub_store::PgStore, updates: i64) -> Vec<(String, String, i64)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (counted,): (i64,) = sqlx::query_as(
            "SELECT COALESCE(sum(n_tup_upd), 0)::bigint FROM pg_stat_user_tables
             WHERE schemaname = current_schema() AND relname LIKE 'delivery\\_jobs\\_%'",
        )
        .fetch_one(store.pool())
        .await
        .expect("table statistics");
        if counted >= updates {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{counted} of {updates} job updates counted after 30 s");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    sqlx::query_as(
        // Jobs are partitioned by day: each partition's reads count as the table's, by index.
        "SELECT regexp_replace(relname, '^delivery_jobs_.*$', 'delivery_jobs'),
                regexp_replace(indexrelname, '^delivery_jobs_(legacy_|default_|[0-9]{8}_)', 'delivery_jobs_'),
                idx_tup_read
         FROM pg_stat_user_indexes
         WHERE schemaname = current_schema() AND (relname LIKE 'delivery\\_jobs\\_%' OR relname = 'subscriptions')",
    )
    .fetch_all(store.pool())
    .await
    .expect("index statistics")
}

/// Claims and outcome records read what they take, whatever the statistics say: with its plan
/// made while the job table was nearly empty (analyzed then), recording an outcome read the
/// whole index of leased jobs to lock one job (650 000 entries for 4 000 outcomes here). Claims
/// passing over most of a tenant's subscriptions are held to a few subscription reads each:
/// the fan-out benchmark met a cached plan that joined each job of a claim's window to every
/// subscription of the tenant (docs/BENCHMARKS.md, runs Q and R). Held twice: with the
/// statistics of a nearly empty table, then analyzed again with thousands of finished jobs in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_records_read_no_more_than_they_take_whatever_the_statistics_say() {
    const SUBS: usize = 100;
    let db = TestDb::postgres().await;
    let store = db.postgres_store().expect("a PostgreSQL store");
    let mut subs = Vec::new();
    for _ in 0..SUBS {
        subs.push(push_subscription(&db, "t1").await.id);
    }
    // A first event delivered, and the tables analyzed then (as autovacuum does soon after a
    // start), before the backlog comes.
    events(&db, "t1", 1).await;
    let first = db.store.claim_jobs(&claim(256, None)).await.expect("claim").jobs;
    let results: Vec<AttemptResult> =
        first.iter().map(|j| result(j, "delivered", JobTransition::Succeeded, HealthChange::Success)).collect();
    db.store.complete_attempts(&results).await.expect("complete");
    sqlx::query("ANALYZE delivery_jobs, subscriptions").execute(store.pool()).await.expect("analyze");
    let done = claim_and_record_a_backlog(&db, &subs, SUBS, "statistics of a nearly empty table").await;
    // Then with the statistics of a table of thousands of finished jobs.
    sqlx::query("ANALYZE delivery_jobs, subscriptions").execute(store.pool()).await.expect("analyze");
    claim_and_record_a_backlog(&db, &subs, done, "statistics of a large table").await;
}

/// Claims of eight until none comes, each passing over `full`'s jobs (their destinations full):
/// the jobs claimed, and how many claims it took (the empty one included).
async fn claim_passing_over(db: &TestDb, full: &[Uuid]) -> (Vec<ClaimedJob>, i64) {
    let mut claimed = Vec::new();
    let mut claims = 0;
    loop {
        let mut req = claim(8, None);
        req.exclude_subscriptions = full.to_vec();
        let got = db.store.claim_jobs(&req).await.expect("claim").jobs;
        claims += 1;
        if got.is_empty() {
            return (claimed, claims);
        }
        claimed.extend(got);
    }
}

/// A tenant with a few deliverable subscriptions beside others' backlogs (destinations full, or
/// paced by another replica): its claims read each deliverable subscription's oldest jobs, not a
/// window of the tenant's oldest (which would be the others' backlog, eight entries a job read
/// for nothing). Counted on the index of the tenant's due jobs, which only the window and the
/// choice of tenants read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_beside_others_backlogs_goes_to_its_subscriptions_without_the_window() {
    const EVENTS: usize = 40;
    let db = TestDb::postgres().await;
    let store = db.postgres_store().expect("a PostgreSQL store");
    let mut subs = Vec::new();
    for _ in 0..10 {
        subs.push(push_subscription(&db, "t1").await.id);
    }
    events(&db, "t1", EVENTS).await;
    let before = index_reads(store, 0).await;
    let (claimed, claims) = claim_passing_over(&db, &subs[2..]).await;
    assert_eq!(claimed.len(), 2 * EVENTS, "every job of the two deliverable subscriptions, once");
    assert!(claimed.iter().all(|j| subs[..2].contains(&j.subscription_id)));
    for sub in &subs[..2] {
        assert_eq!(claimed.iter().filter(|j| j.subscription_id == *sub).count(), EVENTS);
    }
    let after = index_reads(store, claimed.len() as i64).await;
    let due = |reads: &[(String, String, i64)]| -> i64 {
        reads.iter().filter(|(r, i, _)| r == "delivery_jobs" && i == "delivery_jobs_due").map(|(.., n)| n).sum()
    };
    let read = due(&after) - due(&before);
    // The choice of tenants reads a few entries a claim; a window would read 64 a claim.
    assert!(read <= claims * 8, "{claims} claims read {read} entries of the due jobs' index");
}

/// A backlog of events for every subscription, claimed (all but two subscriptions' passed over
/// first, their destinations full) and recorded, each held to what it takes; `updated` jobs were
/// updated twice before (leased, then succeeded). Answers the jobs updated twice after it.
async fn claim_and_record_a_backlog(db: &TestDb, subs: &[Uuid], updated: usize, stats: &str) -> usize {
    const EVENTS: usize = 40;
    let store = db.postgres_store().expect("a PostgreSQL store");
    let n = subs.len();
    events(db, "t1", EVENTS).await;
    let before = index_reads(store, 2 * updated as i64).await;

    // Every claim passes over the jobs of all but two subscriptions (their destinations are
    // full): a window of the tenant's oldest jobs is mostly theirs.
    let (claimed, mut claims) = claim_passing_over(db, &subs[2..]).await;
    assert_eq!(claimed.len(), 2 * EVENTS, "every job of the two deliverable subscriptions, once ({stats})");
    let mut all = claimed.clone();
    // And the rest leased too, so recording meets a table of leased jobs.
    loop {
        let got = db.store.claim_jobs(&claim(256, None)).await.expect("claim").jobs;
        claims += 1;
        if got.is_empty() {
            break;
        }
        all.extend(got);
    }
    assert_eq!(all.len(), n * EVENTS);
    for batch in all.chunks(64) {
        let results: Vec<AttemptResult> =
            batch.iter().map(|j| result(j, "delivered", JobTransition::Succeeded, HealthChange::Success)).collect();
        let done = db.store.complete_attempts(&results).await.expect("complete");
        assert!(done.iter().all(|d| d.job_updated));
    }

    // Each job updated twice (leased, then succeeded).
    let updated = updated + n * EVENTS;
    let after = index_reads(store, 2 * updated as i64).await;
    let read = |rel: &str, index: Option<&str>| -> i64 {
        let sum = |reads: &[(String, String, i64)]| -> i64 {
            reads.iter().filter(|(r, i, _)| r == rel && index.is_none_or(|x| x == i)).map(|(.., n)| n).sum()
        };
        sum(&after) - sum(&before)
    };
    let jobs = (n * EVENTS) as i64;
    let subscriptions = read("subscriptions", None);
    assert!(
        subscriptions <= claims * (n as i64) * 4,
        "{claims} claims read {subscriptions} subscription index entries (at most {} expected; {stats})",
        claims * (n as i64) * 4
    );
    let leased = read("delivery_jobs", Some("delivery_jobs_leased"));
    assert_eq!(leased, 0, "recording {jobs} outcomes read {leased} entries of the leased-jobs index ({stats})");
    // A claim reads a window of eight due jobs per job it may lease (twice when the window
    // falls short), and a record one entry per job: about 51 entries a job here. The bound is
    // half as much again: PostgreSQL flushes each connection's statistics on its own clock, so
    // on a loaded machine some of the set-up's reads land after `before` (67 a job was seen).
    // What it guards against reads hundreds to thousands of entries a job.
    let all_jobs = read("delivery_jobs", None);
    let by_index: Vec<(&str, i64)> = after
        .iter()
        .filter(|(r, ..)| r == "delivery_jobs")
        .map(|(_, i, _)| (i.as_str(), read("delivery_jobs", Some(i))))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(all_jobs <= jobs * 96, "{jobs} jobs cost {all_jobs} job index entries read ({stats}): {by_index:?}");
    updated
}
