//! Subscriptions, matching at ingest, pull streams and jobs: the contract of both backends.

use std::sync::Arc;

use chrono::{Duration, Utc};
use hub_core::{SinkKind, VerificationState};
use hub_store::{SecretRotation, SubscriptionPatch};
use uuid::Uuid;

use crate::support::{TestDb, accepted, accepted_with, headers, subscription};

pub async fn subscriptions_round_trip_and_stay_within_their_tenant(db: &TestDb) {
    let mut sub = subscription("t1", SinkKind::named("webhook"), &["loan_application.*"], Some("lender"));
    sub.sink_config = serde_json::json!({"type": "webhook", "url": "https://example.com/h", "timeout_ms": 5000});
    sub.signing_secret = Some(vec![1, 2, 3]);
    sub.credentials = Some(vec![4, 5]);
    sub.verification = VerificationState::Pending;
    let transform = serde_json::json!({"language": "javascript", "code": "function handler(e) { return e; }"});
    sub.transform = Some(transform.clone());
    db.store.create_subscription(&sub).await.expect("create");

    let read = db.store.subscription("t1", sub.id).await.expect("read").expect("exists");
    assert_eq!(read.name, sub.name);
    assert_eq!(read.event_types, sub.event_types);
    assert_eq!(read.origin, sub.origin);
    assert_eq!(read.sink, SinkKind::named("webhook"));
    assert_eq!(read.sink_config, sub.sink_config);
    assert_eq!(read.signing_secret, sub.signing_secret);
    assert_eq!(read.credentials, sub.credentials);
    assert_eq!(read.verification, VerificationState::Pending);
    assert_eq!(read.transform, Some(transform.clone()));
    assert!(read.enabled);
    assert!(db.store.subscription("t2", sub.id).await.expect("read").is_none(), "invisible to another tenant");

    let patch = SubscriptionPatch {
        name: Some("renamed".into()),
        enabled: Some(false),
        disabled_reason: Some("operator".into()),
        now: Utc::now(),
        ..SubscriptionPatch::default()
    };
    assert!(
        db.store.patch_subscription("t2", sub.id, &patch).await.expect("patch").is_none(),
        "another tenant cannot patch it"
    );
    let patched = db.store.patch_subscription("t1", sub.id, &patch).await.expect("patch").expect("exists");
    assert_eq!(patched.name, "renamed");
    assert!(!patched.enabled);
    assert_eq!(patched.disabled_reason.as_deref(), Some("operator"));
    assert_eq!(patched.event_types, sub.event_types, "fields the patch does not name are kept");
    assert_eq!(patched.signing_secret, sub.signing_secret);
    assert_eq!(patched.transform, Some(transform.clone()), "a patch that does not name the transform keeps it");
    let other = serde_json::json!({"language": "javascript", "code": "function handler(e) { return null; }"});
    let set =
        SubscriptionPatch { transform: Some(Some(other.clone())), now: Utc::now(), ..SubscriptionPatch::default() };
    let patched = db.store.patch_subscription("t1", sub.id, &set).await.expect("patch").expect("exists");
    assert_eq!((patched.transform, patched.name.as_str()), (Some(other), "renamed"));
    let removed = SubscriptionPatch { transform: Some(None), now: Utc::now(), ..SubscriptionPatch::default() };
    let patched = db.store.patch_subscription("t1", sub.id, &removed).await.expect("patch").expect("exists");
    assert_eq!(patched.transform, None);

    let rotation = SecretRotation {
        replaces: sub.signing_secret.clone().expect("secret"),
        signing_secret: vec![7, 7],
        previous_secret: vec![9],
        previous_expires_at: Utc::now() + Duration::hours(24),
        now: Utc::now(),
    };
    assert!(
        db.store.rotate_secret("t2", sub.id, &rotation).await.expect("rotate").is_none(),
        "another tenant cannot rotate"
    );
    let rotated = db.store.rotate_secret("t1", sub.id, &rotation).await.expect("rotate").expect("rotated");
    assert_eq!(rotated.signing_secret, Some(vec![7, 7]));
    assert_eq!(rotated.previous_secret, Some(vec![9]));
    assert!(rotated.previous_secret_expires_at.is_some());
    assert!(!rotated.enabled, "a rotation leaves the rest as it was");
    assert!(
        db.store.rotate_secret("t1", sub.id, &rotation).await.expect("rotate").is_none(),
        "a rotation from a secret that is no longer stored changes nothing"
    );
    let read = db.store.subscription("t1", sub.id).await.expect("read").expect("exists");
    assert_eq!(read.signing_secret, Some(vec![7, 7]));

    assert!(!db.store.delete_subscription("t2", sub.id).await.expect("delete"), "another tenant cannot delete it");
    assert!(db.store.delete_subscription("t1", sub.id).await.expect("delete"));
    assert!(db.store.subscription("t1", sub.id).await.expect("read").is_none());
}

pub async fn subscriptions_list_in_creation_order_with_a_cursor(db: &TestDb) {
    let mut ids = Vec::new();
    for _ in 0..5 {
        let sub = subscription("t1", SinkKind::PULL, &["*.*"], None);
        db.store.create_subscription(&sub).await.expect("create");
        ids.push(sub.id);
    }
    db.store.create_subscription(&subscription("t2", SinkKind::PULL, &["*.*"], None)).await.expect("create");
    let first = db.store.list_subscriptions("t1", None, 3).await.expect("list");
    assert_eq!(first.iter().map(|s| s.id).collect::<Vec<_>>(), ids[..3]);
    let rest = db.store.list_subscriptions("t1", Some(ids[2]), 3).await.expect("list");
    assert_eq!(rest.iter().map(|s| s.id).collect::<Vec<_>>(), ids[3..]);
}

pub async fn accepted_events_create_work_only_for_admitting_subscriptions(db: &TestDb) {
    let pull = subscription("t1", SinkKind::PULL, &["loan_application.*"], None);
    let push = subscription("t1", SinkKind::named("webhook"), &["*.approved"], Some("lender"));
    let other_origin = subscription("t1", SinkKind::named("webhook"), &["*.*"], Some("crm"));
    let disabled = subscription("t1", SinkKind::PULL, &["*.*"], None);
    let pending = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    let other_tenant = subscription("t2", SinkKind::PULL, &["*.*"], None);
    let disabled = hub_store::SubscriptionRecord { enabled: false, ..disabled };
    let pending = hub_store::SubscriptionRecord { verification: VerificationState::Pending, ..pending };
    for s in [&pull, &push, &other_origin, &disabled, &pending, &other_tenant] {
        db.store.create_subscription(s).await.expect("create");
    }
    let approved = accepted("t1", Uuid::now_v7());
    let created = accepted_with(headers("t1", Uuid::now_v7(), "account", "created"), b"{}");
    let rejected = accepted_with(headers("t1", Uuid::now_v7(), "loan_application", "rejected"), b"{}");
    db.store.write_batch(&[approved.clone(), created, rejected]).await.expect("write");
    // A duplicate creates no work.
    db.store.write_batch(&[approved]).await.expect("write");

    let pulled: Vec<i64> =
        db.store.pull_events("t1", pull.id, 0, 100).await.expect("pull").iter().map(|e| e.position).collect();
    assert_eq!(pulled, vec![1, 3], "loan_application.* matched approved and rejected");
    let jobs = db.store.list_jobs("t1", push.id, None, None, 100).await.expect("jobs");
    assert_eq!(jobs.iter().map(|j| j.event_seq).collect::<Vec<_>>(), vec![1], "*.approved from lender");
    assert!(jobs.iter().all(|j| j.state == hub_store::JobState::Pending && j.attempts == 0 && j.due_at <= Utc::now()));
    for s in [&other_origin, &pending] {
        assert!(db.store.list_jobs("t1", s.id, None, None, 100).await.expect("jobs").is_empty());
    }
    assert!(db.store.pull_events("t1", disabled.id, 0, 100).await.expect("pull").is_empty());
    assert!(db.store.pull_events("t2", other_tenant.id, 0, 100).await.expect("pull").is_empty());
}

/// Ingest matches every batch against the subscriptions as they are when it is written, even
/// when another replica changed them since this one last wrote for the tenant: created, paused,
/// resumed, re-pointed at a new pattern, deleted.
pub async fn a_write_sees_subscription_changes_made_by_another_replica(db: &TestDb) {
    let other = db.replica().await;
    let write = |seq: i64| async move {
        let written = db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
        assert_eq!(written, vec![hub_store::WriteOutcome::Inserted { seq }]);
    };
    let job_states = |sub: Uuid| async move {
        db.store
            .list_jobs("t1", sub, None, None, 100)
            .await
            .expect("jobs")
            .into_iter()
            .map(|j| j.state)
            .collect::<Vec<_>>()
    };
    write(1).await;
    let push = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    other.create_subscription(&push).await.expect("create");
    write(2).await;
    assert_eq!(job_states(push.id).await, vec![hub_store::JobState::Pending], "created elsewhere, matched here");

    let pause = hub_store::SubscriptionPatch {
        enabled: Some(false),
        disabled_reason: Some("paused".to_owned()),
        now: Utc::now(),
        ..Default::default()
    };
    other.patch_subscription("t1", push.id, &pause).await.expect("pause").expect("exists");
    write(3).await;
    assert_eq!(job_states(push.id).await, vec![hub_store::JobState::Held], "paused: no new job, the waiting one held");

    let narrow = hub_store::SubscriptionPatch {
        enabled: Some(true),
        event_types: Some(vec!["account.*".to_owned()]),
        now: Utc::now(),
        ..Default::default()
    };
    other.patch_subscription("t1", push.id, &narrow).await.expect("narrow").expect("exists");
    write(4).await;
    assert_eq!(
        job_states(push.id).await,
        vec![hub_store::JobState::Pending],
        "resumed; the new pattern does not match"
    );

    let pull = subscription("t1", SinkKind::PULL, &["*.*"], None);
    other.create_subscription(&pull).await.expect("create pull");
    other.delete_subscription("t1", push.id).await.expect("delete");
    write(5).await;
    let pulled: Vec<i64> =
        db.store.pull_events("t1", pull.id, 0, 100).await.expect("pull").iter().map(|e| e.position).collect();
    assert_eq!(pulled, vec![5]);
    assert!(
        db.store.list_jobs("t1", push.id, None, None, 100).await.expect("jobs").iter().all(|j| j.event_seq != 5),
        "a deleted subscription takes nothing"
    );
}

pub async fn only_events_after_creation_match(db: &TestDb) {
    db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
    let pull = subscription("t1", SinkKind::PULL, &["loan_application.*"], None);
    db.store.create_subscription(&pull).await.expect("create");
    db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
    let pulled: Vec<i64> =
        db.store.pull_events("t1", pull.id, 0, 100).await.expect("pull").iter().map(|e| e.position).collect();
    assert_eq!(pulled, vec![2]);
}

pub async fn deleting_a_subscription_cancels_its_work(db: &TestDb) {
    let push = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    let pull = subscription("t1", SinkKind::PULL, &["*.*"], None);
    let keep = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    for s in [&push, &pull, &keep] {
        db.store.create_subscription(s).await.expect("create");
    }
    db.store.write_batch(&[accepted("t1", Uuid::now_v7()), accepted("t1", Uuid::now_v7())]).await.expect("write");
    assert!(db.store.delete_subscription("t1", push.id).await.expect("delete"));
    assert!(db.store.delete_subscription("t1", pull.id).await.expect("delete"));
    let jobs = db.store.list_jobs("t1", push.id, None, None, 100).await.expect("jobs");
    assert_eq!(jobs.len(), 2);
    assert!(jobs.iter().all(|j| j.state == hub_store::JobState::Cancelled), "{jobs:?}");
    assert!(
        db.store
            .list_jobs("t1", push.id, Some(hub_store::JobState::Pending), None, 100)
            .await
            .expect("jobs")
            .is_empty()
    );
    assert!(db.store.pull_events("t1", pull.id, 0, 100).await.expect("pull").is_empty());
    assert_eq!(
        db.store.list_jobs("t1", keep.id, Some(hub_store::JobState::Pending), None, 100).await.expect("jobs").len(),
        2
    );
}

pub async fn pull_cursors_only_move_forward_even_under_concurrency(db: &TestDb) {
    let pull = subscription("t1", SinkKind::PULL, &["*.*"], None);
    db.store.create_subscription(&pull).await.expect("create");
    assert_eq!(db.store.advance_pull_cursor("t1", pull.id, 5).await.expect("advance"), 5);
    assert_eq!(db.store.advance_pull_cursor("t1", pull.id, 3).await.expect("advance"), 5, "never backwards");
    let mut tasks = Vec::new();
    for to in (6..=40).rev() {
        let store = Arc::clone(&db.store);
        let id = pull.id;
        tasks.push(tokio::spawn(async move { store.advance_pull_cursor("t1", id, to).await.expect("advance") }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let read = db.store.subscription("t1", pull.id).await.expect("read").expect("exists");
    assert_eq!(read.pull_cursor, 40);
    // Another tenant's read does not touch it.
    db.store.advance_pull_cursor("t2", pull.id, 99).await.expect("advance");
    assert_eq!(db.store.subscription("t1", pull.id).await.expect("read").expect("exists").pull_cursor, 40);
}

/// A PATCH, secret rotations, verification results and recorded outcomes racing on one
/// subscription: each writes only its own columns, so the last write of each survives.
pub async fn concurrent_intents_lose_no_column_update(db: &TestDb) {
    let mut sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    sub.sink_config = serde_json::json!({"type": "webhook", "url": "https://example.com/a"});
    sub.signing_secret = Some(vec![0]);
    db.store.create_subscription(&sub).await.expect("create");
    let rounds: u8 = 25;
    let id = sub.id;
    // Leased jobs whose failed attempts the recorder writes while the other intents race.
    let batch: Vec<_> = (0..rounds).map(|_| accepted("t1", Uuid::now_v7())).collect();
    db.store.write_batch(&batch).await.expect("events");
    // Microseconds, as both stores keep time.
    let now = chrono::DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).expect("now");
    let claim = hub_store::ClaimRequest {
        now,
        lease_until: now + Duration::seconds(60),
        token: Uuid::now_v7(),
        limit: u32::from(rounds),
        after_tenant: None,
        exclude_subscriptions: Vec::new(),
        owned: Default::default(),
    };
    let jobs = db.store.claim_jobs(&claim).await.expect("claim").jobs;
    assert_eq!(jobs.len(), usize::from(rounds));
    let failed_at: Vec<_> = (0..rounds).map(|i| now + Duration::seconds(i64::from(i) + 1)).collect();
    let store = Arc::clone(&db.store);
    let last_failure = *failed_at.last().expect("rounds");
    let outcomes = tokio::spawn(async move {
        for (job, at) in jobs.iter().zip(failed_at) {
            let result = hub_store::AttemptResult {
                token: job.token,
                record: hub_store::AttemptRecord {
                    id: Uuid::now_v7(),
                    job_id: job.id,
                    tenant_id: job.tenant_id.clone(),
                    subscription_id: job.subscription_id,
                    attempt: 1,
                    started_at: at,
                    latency_ms: 1,
                    outcome: "failed".into(),
                    status_code: Some(503),
                    error: Some("HTTP 503".into()),
                    response_body: None,
                    ledger_index: None,
                },
                transition: hub_store::JobTransition::Retry { due_at: at },
                health: hub_store::HealthChange::Failure { at, disable: None },
                now: at,
                ledger: None,
            };
            store.complete_attempt(&result).await.expect("record");
        }
    });

    let store = Arc::clone(&db.store);
    let patches = tokio::spawn(async move {
        for i in 0..rounds {
            let patch = SubscriptionPatch {
                name: Some(format!("name-{i}")),
                event_types: Some(vec![format!("r{i}.*")]),
                now: Utc::now(),
                ..SubscriptionPatch::default()
            };
            store.patch_subscription("t1", id, &patch).await.expect("patch").expect("exists");
        }
    });
    let store = Arc::clone(&db.store);
    let rotations = tokio::spawn(async move {
        for i in 1..=rounds {
            loop {
                let current = store.subscription("t1", id).await.expect("read").expect("exists");
                let replaces = current.signing_secret.expect("secret");
                let rotation = SecretRotation {
                    previous_secret: replaces.clone(),
                    replaces,
                    signing_secret: vec![i],
                    previous_expires_at: Utc::now() + Duration::hours(24),
                    now: Utc::now(),
                };
                if store.rotate_secret("t1", id, &rotation).await.expect("rotate").is_some() {
                    break;
                }
            }
        }
    });
    let store = Arc::clone(&db.store);
    let config = sub.sink_config.clone();
    let verifications = tokio::spawn(async move {
        for i in 0..rounds {
            let result = hub_store::VerificationResult {
                probed_config: config.clone(),
                probed_credentials: None,
                allowed_rate: None,
                error: (i + 1 < rounds).then(|| format!("probe {i} failed")),
                reenable: false,
                now: Utc::now(),
            };
            store.set_verification("t1", id, &result).await.expect("verify").expect("same destination");
        }
    });
    let store = Arc::clone(&db.store);
    let disables = tokio::spawn(async move {
        for i in 0..rounds {
            let patch = SubscriptionPatch {
                enabled: Some(i % 2 == 1),
                disabled_reason: Some("operator".into()),
                now: Utc::now(),
                ..SubscriptionPatch::default()
            };
            store.patch_subscription("t1", id, &patch).await.expect("patch").expect("exists");
        }
    });
    for task in [patches, rotations, verifications, disables, outcomes] {
        task.await.expect("task");
    }
    let last = rounds - 1;
    let read = db.store.subscription("t1", id).await.expect("read").expect("exists");
    assert_eq!(read.name, format!("name-{last}"));
    assert_eq!(read.event_types, vec![format!("r{last}.*")]);
    assert_eq!(read.signing_secret, Some(vec![rounds]), "the last rotation's secret");
    assert_eq!(read.previous_secret, Some(vec![rounds - 1]), "the secret it replaced");
    assert_eq!(read.verification, VerificationState::Active, "the last verification succeeded");
    assert_eq!(read.verification_error, None);
    assert_eq!(read.enabled, last % 2 == 1);
    assert_eq!(read.sink_config, sub.sink_config);
    assert_eq!(read.last_failure_at, Some(last_failure), "the recorder's last failure");
    assert!(read.failing_since.is_some(), "the failure period the recorder opened");

    // A verification of a destination that changed meanwhile is not recorded.
    let moved = SubscriptionPatch {
        destination: Some(hub_store::DestinationChange {
            sink_config: serde_json::json!({"type": "webhook", "url": "https://example.com/b"}),
            credentials: None,
            reverify: true,
            pace_bucket: None,
        }),
        now: Utc::now(),
        ..SubscriptionPatch::default()
    };
    let pending = db.store.patch_subscription("t1", id, &moved).await.expect("patch").expect("exists");
    assert_eq!(pending.verification, VerificationState::Pending);
    let stale = hub_store::VerificationResult {
        allowed_rate: None,
        probed_config: sub.sink_config.clone(),
        probed_credentials: None,
        error: None,
        reenable: true,
        now: Utc::now(),
    };
    assert!(db.store.set_verification("t1", id, &stale).await.expect("verify").is_none());
    let read = db.store.subscription("t1", id).await.expect("read").expect("exists");
    assert_eq!(read.verification, VerificationState::Pending, "the stale probe did not activate the new URL");
}

/// A subscription's delivery limits and its receiver's declared rate are stored, changed by a
/// PATCH and a successful verification only, and handed to the dispatcher by an ingest write
/// that leases its jobs after another replica changed them.
pub async fn delivery_limits_round_trip_and_reach_leased_writes(db: &TestDb) {
    use hub_core::delivery::inflight::Limits;
    let other = db.replica().await;
    let mut sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    sub.limits = Limits { max_in_flight: Some(12), per_second: None };
    db.store.create_subscription(&sub).await.expect("create");
    let read = db.store.subscription("t1", sub.id).await.expect("read").expect("exists");
    assert_eq!(read.limits, sub.limits);
    assert_eq!(read.allowed_rate, None);

    let lease = |limit| hub_store::IngestLease {
        token: Uuid::now_v7(),
        until: Utc::now() + Duration::seconds(60),
        limit,
        exclude_subscriptions: Vec::new(),
        owned: Default::default(),
    };
    let (_, leased) = db.store.write_batch_leased(&[accepted("t1", Uuid::now_v7())], &lease(8)).await.expect("write");
    assert_eq!(leased.subscriptions.iter().find(|s| s.id == sub.id).expect("handed over").limits, sub.limits);

    let new = Limits { max_in_flight: None, per_second: Some(2.5) };
    let patch = SubscriptionPatch { limits: Some(new), now: Utc::now(), ..SubscriptionPatch::default() };
    let patched = other.patch_subscription("t1", sub.id, &patch).await.expect("patch").expect("exists");
    assert_eq!(patched.limits, new);
    let (_, leased) = db.store.write_batch_leased(&[accepted("t1", Uuid::now_v7())], &lease(8)).await.expect("write");
    assert_eq!(
        leased.subscriptions.iter().find(|s| s.id == sub.id).expect("handed over").limits,
        new,
        "a write after another replica's change hands over the new limits"
    );
    // So does a new transform (its code is read by every attempt).
    let code = serde_json::json!({"language": "javascript", "code": "function handler(e) { return null; }"});
    let patch =
        SubscriptionPatch { transform: Some(Some(code.clone())), now: Utc::now(), ..SubscriptionPatch::default() };
    other.patch_subscription("t1", sub.id, &patch).await.expect("patch").expect("exists");
    let (_, leased) = db.store.write_batch_leased(&[accepted("t1", Uuid::now_v7())], &lease(8)).await.expect("write");
    assert_eq!(
        leased.subscriptions.iter().find(|s| s.id == sub.id).expect("handed over").transform,
        Some(code),
        "a write after another replica's change hands over the new transform"
    );

    let verify = |error: Option<&str>, rate| hub_store::VerificationResult {
        probed_config: sub.sink_config.clone(),
        probed_credentials: None,
        error: error.map(str::to_owned),
        reenable: false,
        allowed_rate: rate,
        now: Utc::now(),
    };
    let ok = db.store.set_verification("t1", sub.id, &verify(None, Some(120.0))).await.expect("verify").expect("same");
    assert_eq!(ok.allowed_rate, Some(120.0));
    let failed =
        db.store.set_verification("t1", sub.id, &verify(Some("down"), Some(1.0))).await.expect("verify").expect("same");
    assert_eq!(failed.allowed_rate, Some(120.0), "a failed probe keeps the rate declared before");
    let again = db.store.set_verification("t1", sub.id, &verify(None, None)).await.expect("verify").expect("same");
    assert_eq!(again.allowed_rate, None, "a receiver that no longer declares a rate has none");
    assert_eq!(again.limits, new, "verification writes only its own columns");
}
