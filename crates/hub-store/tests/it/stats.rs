//! Per-minute delivery statistics: roll-ups add up, backlogs are set, reads are per tenant.

use chrono::{Duration, TimeZone, Utc};
use hub_core::delivery::stats::{BUCKETS, bucket_of};
use hub_store::{MinuteStats, PruneKind};
use uuid::Uuid;

use crate::support::TestDb;

fn minute(tenant: &str, sub: Uuid, at: i64, delivered: i64, latency_ms: &[i64], backlog: Option<i64>) -> MinuteStats {
    let mut latency = [0; BUCKETS];
    for &l in latency_ms {
        latency[bucket_of(l)] += 1;
    }
    MinuteStats {
        tenant_id: tenant.into(),
        subscription_id: sub,
        minute: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::minutes(at),
        delivered,
        failed: 1,
        dead: 0,
        skipped: delivered % 2,
        latency,
        backlog,
    }
}

pub async fn minutes_add_up_and_backlogs_are_set(db: &TestDb) {
    let s = &db.store;
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    s.record_minutes(&[minute("t1", a, 0, 3, &[4, 8, 700, 3], None), minute("t1", a, 1, 1, &[2], Some(7))])
        .await
        .expect("record");
    // Another replica's roll-up of the same minute, and a backlog sample.
    s.record_minutes(&[minute("t1", a, 0, 2, &[9, 9], Some(4)), minute("t2", b, 0, 5, &[1], None)])
        .await
        .expect("record");
    // A roll-up without a backlog keeps the sampled one.
    s.record_minutes(&[minute("t1", a, 1, 1, &[2], None)]).await.expect("record");
    let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let got = s.minutes("t1", a, start).await.expect("read");
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].delivered, got[0].failed, got[0].backlog), (5, 2, Some(4)));
    assert_eq!((got[0].skipped, got[1].skipped), (1, 2), "skipped deliveries add up too");
    assert_eq!(got[0].latency.iter().sum::<i64>(), 6);
    assert_eq!(got[0].latency[bucket_of(9)], 3, "8 and 9 ms share a bucket");
    assert_eq!((got[1].delivered, got[1].failed, got[1].backlog), (2, 2, Some(7)));
    assert_eq!(got[1].minute, start + Duration::minutes(1));
    // From a later minute on; and never another tenant's.
    assert_eq!(s.minutes("t1", a, start + Duration::minutes(1)).await.expect("read").len(), 1);
    assert!(s.minutes("t2", a, start).await.expect("read").is_empty());
    assert_eq!(s.minutes("t2", b, start).await.expect("read").len(), 1);
    // Old minutes age out.
    assert_eq!(s.prune(PruneKind::Minutes, start + Duration::minutes(1), 100).await.expect("prune"), Some(2));
    assert_eq!(s.minutes("t1", a, start).await.expect("read").len(), 1);
}

pub async fn backlogs_count_pending_and_held_jobs(db: &TestDb) {
    // No jobs: nothing to sample.
    assert!(db.store.backlogs().await.expect("backlogs").is_empty());
    let push = crate::support::subscription("t1", hub_core::SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&push).await.expect("push");
    let pull = crate::support::subscription("t1", hub_core::SinkKind::PULL, &["*.*"], None);
    db.store.create_subscription(&pull).await.expect("pull");
    let events: Vec<_> = (0..3).map(|_| crate::support::accepted("t1", Uuid::now_v7())).collect();
    db.store.write_batch(&events).await.expect("write");
    let backlogs = db.store.backlogs().await.expect("backlogs");
    assert_eq!(backlogs.len(), 1, "the pull subscription has no jobs: {backlogs:?}");
    assert_eq!((backlogs[0].subscription_id, backlogs[0].jobs, backlogs[0].tenant_id.as_str()), (push.id, 3, "t1"));
}
