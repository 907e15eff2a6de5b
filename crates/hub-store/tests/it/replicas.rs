//! Replicas: heartbeats and the live set, the buckets a replica claims and leases at ingest, the
//! jobs of a replica that died, and subscriptions given their bucket later.

use chrono::{Duration, Utc};
use hub_core::SinkKind;
use hub_store::{IngestLease, JobState, Owned, ReplicaRecord, SubscriptionRecord, lease_token};
use uuid::Uuid;

use crate::jobs::claim;
use crate::support::{TestDb, accepted, subscription};

/// The live window the tests use: short, so a replica's silence is waited for in real time
/// (heartbeats are stamped with the database's clock).
const LIVE: std::time::Duration = std::time::Duration::from_millis(1500);

/// Until a replica that stopped beating is past the live window.
async fn silence() {
    tokio::time::sleep(LIVE + std::time::Duration::from_millis(300)).await;
}

fn replica(id: Uuid, at: chrono::DateTime<Utc>) -> ReplicaRecord {
    ReplicaRecord {
        id,
        name: format!("replica-{}", &id.to_string()[..8]),
        delivers: true,
        started_at: at,
        heartbeat_at: at,
        pacing: serde_json::json!([]),
    }
}

async fn in_bucket(db: &TestDb, tenant: &str, bucket: Option<i32>) -> SubscriptionRecord {
    let mut sub = subscription(tenant, SinkKind::named("webhook"), &["*.*"], None);
    sub.pace_bucket = bucket;
    db.store.create_subscription(&sub).await.expect("create");
    sub
}

/// A heartbeat returns every replica seen within the live window, itself included; one that
/// stopped beating drops out of it, one that left is gone at once.
pub async fn replicas_see_each_other_while_they_beat(db: &TestDb) {
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let t0 = Utc::now();
    assert_eq!(db.store.beat(&replica(a, t0), LIVE).await.expect("beat").len(), 1, "alone");
    db.store.beat(&replica(b, t0), LIVE).await.expect("beat");
    db.store.beat(&replica(c, t0), LIVE).await.expect("beat");
    let seen: Vec<Uuid> = db.store.beat(&replica(a, t0), LIVE).await.expect("beat").iter().map(|r| r.id).collect();
    let mut all = vec![a, b, c];
    all.sort_unstable();
    assert_eq!(seen, all);
    // b keeps beating, c does not: past the window, c is out of the live set.
    silence().await;
    db.store.beat(&replica(b, t0), LIVE).await.expect("beat");
    let mut me = replica(a, t0);
    me.pacing = serde_json::json!([{"destination": "webhook https://x.example/"}]);
    let seen = db.store.beat(&me, LIVE).await.expect("beat");
    let ids: Vec<Uuid> = seen.iter().map(|r| r.id).collect();
    assert!(ids.contains(&a) && ids.contains(&b) && !ids.contains(&c), "{ids:?}");
    assert_eq!(seen.iter().find(|r| r.id == a).expect("me").pacing, me.pacing);
    let b_seen = db.store.beat(&replica(b, t0), LIVE).await.expect("beat");
    assert_eq!(b_seen.iter().find(|r| r.id == a).expect("a").pacing, me.pacing, "what a paces, as b reads it");
    // b leaves: gone at once.
    db.store.leave(b).await.expect("leave");
    let seen = db.store.beat(&replica(a, t0), LIVE).await.expect("beat");
    assert_eq!(seen.iter().map(|r| r.id).collect::<Vec<_>>(), vec![a]);
}

/// A claim and an ingest lease take only jobs of the buckets the replica owns (bucket 0 for a
/// subscription not yet given one); without buckets, all of them.
pub async fn a_replica_claims_and_leases_only_the_buckets_it_owns(db: &TestDb) {
    let mine = in_bucket(db, "t1", Some(7)).await;
    let theirs = in_bucket(db, "t1", Some(8)).await;
    let unset = in_bucket(db, "t1", None).await;
    let owned = Owned { buckets: Some(vec![0, 7]), shared: Vec::new() };
    let now = Utc::now();
    let lease = IngestLease {
        token: lease_token(Uuid::new_v4()),
        until: now + Duration::seconds(30),
        limit: 100,
        exclude_subscriptions: Vec::new(),
        owned: owned.clone(),
    };
    let (_, leased) = db.store.write_batch_leased(&[accepted("t1", Uuid::now_v7())], &lease).await.expect("write");
    let mut subs: Vec<Uuid> = leased.jobs.iter().map(|j| j.subscription_id).collect();
    subs.sort_unstable();
    let mut want = vec![mine.id, unset.id];
    want.sort_unstable();
    assert_eq!(subs, want, "leased at ingest: its own buckets only");
    assert_eq!(leased.pending, 0, "the other bucket's job is not this replica's to wait for");

    db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
    let mut request = claim(10, None);
    request.owned = owned;
    let claimed = db.store.claim_jobs(&request).await.expect("claim").jobs;
    let mut subs: Vec<Uuid> = claimed.iter().map(|j| j.subscription_id).collect();
    subs.sort_unstable();
    assert_eq!(subs, want, "claimed: its own buckets only");
    let rest = db.store.claim_jobs(&claim(10, None)).await.expect("claim").jobs;
    assert_eq!(rest.len(), 2, "the owner of bucket 8 (or the only replica) takes the rest: {rest:?}");
    assert!(rest.iter().all(|j| j.subscription_id == theirs.id));

    // Another replica shares a hot destination's subscription with this one: its jobs too.
    db.store.write_batch(&[accepted("t1", Uuid::now_v7())]).await.expect("write");
    let mut request = claim(10, None);
    request.owned = Owned { buckets: Some(Vec::new()), shared: vec![theirs.id] };
    let shared = db.store.claim_jobs(&request).await.expect("claim").jobs;
    assert_eq!(shared.iter().map(|j| j.subscription_id).collect::<Vec<_>>(), vec![theirs.id]);
    let lease = IngestLease { owned: request.owned.clone(), ..lease };
    let (_, leased) = db.store.write_batch_leased(&[accepted("t1", Uuid::now_v7())], &lease).await.expect("write");
    assert_eq!(leased.jobs.iter().map(|j| j.subscription_id).collect::<Vec<_>>(), vec![theirs.id]);
}

/// The jobs a replica that stopped beating held are given back at once, long before their
/// leases expire; a live replica's are left alone; the dead replica is forgotten.
pub async fn a_departed_replicas_jobs_are_given_back_at_once(db: &TestDb) {
    in_bucket(db, "t1", Some(1)).await;
    let (dead, alive) = (Uuid::new_v4(), Uuid::new_v4());
    let t0 = Utc::now();
    db.store.beat(&replica(dead, t0), LIVE).await.expect("beat");
    db.store.beat(&replica(alive, t0), LIVE).await.expect("beat");
    db.store.write_batch(&[accepted("t1", Uuid::now_v7()), accepted("t1", Uuid::now_v7())]).await.expect("write");
    let mut first = claim(1, None);
    first.token = lease_token(dead);
    first.lease_until = t0 + Duration::seconds(90);
    let held_by_dead = db.store.claim_jobs(&first).await.expect("claim").jobs;
    let mut second = claim(1, None);
    second.token = lease_token(alive);
    second.lease_until = t0 + Duration::seconds(90);
    let held_by_alive = db.store.claim_jobs(&second).await.expect("claim").jobs;
    assert_eq!((held_by_dead.len(), held_by_alive.len()), (1, 1));

    // Within the live window nothing moves.
    let early = db.store.take_back_departed(Utc::now(), LIVE, 3).await.expect("take back");
    assert_eq!(early.recovered, 0);
    // The live one beats on; the dead one has been silent past the window.
    silence().await;
    db.store.beat(&replica(alive, t0), LIVE).await.expect("beat");
    let now = Utc::now();
    let taken = db.store.take_back_departed(now, LIVE, 3).await.expect("take back");
    assert_eq!((taken.recovered, taken.poisoned), (1, 0));
    let jobs = db.store.list_jobs("t1", held_by_dead[0].subscription_id, None, None, 10).await.expect("jobs");
    let dead_job = jobs.iter().find(|j| j.id == held_by_dead[0].id).expect("job");
    assert_eq!(dead_job.state, JobState::Pending);
    assert_eq!(dead_job.recoveries, 1, "counts toward poison like an expired lease");
    let alive_job = jobs.iter().find(|j| j.id == held_by_alive[0].id).expect("job");
    assert_eq!(alive_job.state, JobState::Leased, "a live replica's lease stands");
    let seen = db.store.beat(&replica(alive, t0), LIVE).await.expect("beat");
    assert_eq!(seen.len(), 1, "the dead replica is forgotten");
    // Its job is claimable again at once.
    let mut request = claim(10, None);
    request.now = now + Duration::seconds(1);
    let again = db.store.claim_jobs(&request).await.expect("claim").jobs;
    assert_eq!(again.iter().map(|j| j.id).collect::<Vec<_>>(), vec![held_by_dead[0].id]);
}

/// Subscriptions without a bucket are listed, and take one only while their destination is the
/// one read.
pub async fn subscriptions_are_given_their_bucket_once_computed(db: &TestDb) {
    let a = in_bucket(db, "t1", None).await;
    let b = in_bucket(db, "t1", None).await;
    let c = in_bucket(db, "t1", Some(3)).await;
    let mut unset: Vec<Uuid> =
        db.store.unbucketed_subscriptions(10).await.expect("list").iter().map(|s| s.id).collect();
    unset.sort_unstable();
    assert_eq!(unset, vec![a.id, b.id]);
    let moved = serde_json::json!({"type": "webhook", "url": "https://elsewhere.example/"});
    db.store.set_pace_buckets(&[(a.id, a.sink_config.clone(), 11), (b.id, moved, 12)]).await.expect("set");
    let read = |id| async move { db.store.subscription("t1", id).await.expect("read").expect("exists").pace_bucket };
    assert_eq!(read(a.id).await, Some(11));
    assert_eq!(read(b.id).await, None, "its destination is not the one the bucket was computed for");
    assert_eq!(read(c.id).await, Some(3));
}
