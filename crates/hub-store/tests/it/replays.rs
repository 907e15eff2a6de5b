//! Replays on both backends: windows resolved to seqs, steps that pace push subscriptions,
//! skip what a subscription has, append to pull streams, and stop with their subscription.

use chrono::{Duration, Utc};
use hub_core::SinkKind;
use hub_store::{NewReplay, ReplayLimits, ReplayRecord, ReplayStart, ReplayState, ReplayStep, TimeWindow};
use uuid::Uuid;

use crate::support::{TestDb, accepted, subscription};

async fn write(db: &TestDb, tenant: &str, n: usize) {
    let batch: Vec<_> = (0..n).map(|_| accepted(tenant, Uuid::now_v7())).collect();
    db.store.write_batch(&batch).await.expect("write");
}

fn ask(sub: Uuid, from_seq: Option<i64>, window: TimeWindow) -> NewReplay {
    NewReplay {
        id: Uuid::now_v7(),
        tenant_id: "t1".to_owned(),
        subscription_id: sub,
        window,
        from_seq,
        to_seq: None,
        include_delivered: false,
        only_undelivered: false,
        filters: None,
        rate: hub_core::replay::MAX_RATE,
        now: Utc::now(),
    }
}

async fn start(db: &TestDb, replay: &NewReplay) -> ReplayRecord {
    match db.store.start_replay(replay).await.expect("start") {
        ReplayStart::Started(r) => r,
        other => panic!("not started: {other:?}"),
    }
}

/// Each step a second later than the one before (and than the replay's start), so a replay at
/// the highest rate is never held by it.
fn limits(batch: u32, pace: u64) -> ReplayLimits {
    static LATER: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    let later = LATER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ReplayLimits { batch, pace, now: Utc::now() + Duration::seconds(later) }
}

async fn step(db: &TestDb, id: Uuid, batch: u32, pace: u64) -> ReplayStep {
    db.store.step_replay(id, &limits(batch, pace)).await.expect("step")
}

async fn run_to_end(db: &TestDb, id: Uuid) -> ReplayRecord {
    for _ in 0..100 {
        if let ReplayStep::Walked(r) = step(db, id, 7, 1_000_000).await {
            if r.state != ReplayState::Running {
                return r;
            }
        }
    }
    panic!("the replay never finished");
}

pub async fn replays_walk_in_batches_pace_push_and_skip_what_a_subscription_has(db: &TestDb) {
    write(db, "t1", 30).await;
    write(db, "t2", 5).await;
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("create");

    let first = start(db, &ask(sub.id, Some(1), TimeWindow::default())).await;
    assert_eq!((first.from_seq, first.to_seq, first.walked_to, first.state), (1, 30, 0, ReplayState::Running));
    let busy = db.store.start_replay(&ask(sub.id, Some(1), TimeWindow::default())).await.expect("start");
    assert!(matches!(busy, ReplayStart::Busy(ref r) if r.id == first.id), "one at a time: {busy:?}");

    let ReplayStep::Walked(r) = step(db, first.id, 10, 5).await else { panic!("no step") };
    assert_eq!((r.walked_to, r.progress.created), (10, 10));
    assert_eq!(step(db, first.id, 10, 5).await, ReplayStep::Paced, "ten jobs wait, the pace is five");
    let done = run_to_end(db, first.id).await;
    assert_eq!(
        (done.state, done.progress.matched, done.progress.created, done.progress.skipped),
        (ReplayState::Done, 30, 30, 0)
    );
    assert!(done.finished_at.is_some());
    let jobs = db.store.list_jobs("t1", sub.id, None, None, 1000).await.expect("jobs");
    let mut seqs: Vec<i64> = jobs.iter().map(|j| j.event_seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=30).collect::<Vec<_>>(), "one job per event, only the tenant's");
    assert_eq!(step(db, first.id, 10, 1000).await, ReplayStep::Idle, "a finished replay does nothing");

    // The same window again, even asking for delivered ones: everything is still waiting.
    let mut again = ask(sub.id, Some(1), TimeWindow::default());
    again.include_delivered = true;
    let again = run_to_end(db, start(db, &again).await.id).await;
    assert_eq!((again.progress.created, again.progress.skipped), (0, 30));
    assert_eq!(db.store.list_jobs("t1", sub.id, None, None, 1000).await.expect("jobs").len(), 30);

    // A window in the future is empty and done at once.
    let later = TimeWindow { since: Some(Utc::now() + Duration::hours(1)), until: None };
    let empty = start(db, &ask(sub.id, None, later)).await;
    assert_eq!(empty.state, ReplayState::Done, "{empty:?}");
    assert_eq!(db.store.replay("t1", sub.id, empty.id).await.expect("read"), Some(empty.clone()));
    assert_eq!(db.store.replay("t2", sub.id, empty.id).await.expect("read"), None, "another tenant's");
}

pub async fn pull_replays_append_after_the_cursor(db: &TestDb) {
    write(db, "t1", 12).await;
    let sub = subscription("t1", SinkKind::PULL, &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("create");
    write(db, "t1", 1).await;
    // The reader took the live event: its cursor is past every seq of the window.
    assert_eq!(db.store.advance_pull_cursor("t1", sub.id, 13).await.expect("advance"), 13);
    let done = run_to_end(db, start(db, &ask(sub.id, Some(1), TimeWindow::default())).await.id).await;
    assert_eq!((done.progress.matched, done.progress.created, done.progress.skipped), (13, 12, 1));
    let read = db.store.pull_events("t1", sub.id, 13, 100).await.expect("pull");
    assert_eq!(read.iter().map(|p| p.event.seq).collect::<Vec<_>>(), (1..=12).collect::<Vec<_>>());
    assert!(read.windows(2).all(|w| w[0].position < w[1].position));
    assert!(read.iter().all(|p| p.position > 13), "appended after every position a reader saw");
    // The entries are the event's: the event log finds them.
    let entries = db.store.stream_entries_for_event("t1", 5).await.expect("entries");
    assert_eq!(entries.len(), 1);
    assert!(!entries[0].read);
    // A new event still lands after the replayed entries.
    write(db, "t1", 1).await;
    let tail = db.store.pull_events("t1", sub.id, read.last().expect("last").position, 10).await.expect("pull");
    assert_eq!(tail.len(), 1);
    assert!(tail[0].event.seq > 13);
}

pub async fn a_replay_keeps_to_its_rate(db: &TestDb) {
    write(db, "t1", 40).await;
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("create");
    let mut ask = ask(sub.id, Some(1), TimeWindow::default());
    ask.rate = 20;
    let r = start(db, &ask).await;
    assert_eq!(r.rate, 20);
    let at = |ms: i64| ReplayLimits { batch: 100, pace: 1000, now: r.updated_at + Duration::milliseconds(ms) };
    assert_eq!(db.store.step_replay(r.id, &at(50)).await.expect("step"), ReplayStep::Paced, "one event earned");
    let ReplayStep::Walked(w) = db.store.step_replay(r.id, &at(500)).await.expect("step") else { panic!("no step") };
    assert_eq!((w.progress.created, w.walked_to), (10, 10), "half a second at 20/s: ten events, the walk stops there");
    assert_eq!(db.store.step_replay(r.id, &at(520)).await.expect("step"), ReplayStep::Paced, "counted from the step");
    // Idle for a minute: one batch, no burst of 1 200.
    let ReplayStep::Walked(w) = db.store.step_replay(r.id, &at(60_500)).await.expect("step") else { panic!("no step") };
    assert_eq!((w.progress.created, w.state), (40, ReplayState::Done));
    assert_eq!(db.store.replay("t1", sub.id, r.id).await.expect("read").expect("kept").rate, 20);
}

pub async fn a_replay_stops_when_its_subscription_is_deleted(db: &TestDb) {
    write(db, "t1", 3).await;
    let sub = subscription("t1", SinkKind::named("webhook"), &["*.*"], None);
    db.store.create_subscription(&sub).await.expect("create");
    let r = start(db, &ask(sub.id, Some(1), TimeWindow::default())).await;
    assert!(db.store.delete_subscription("t1", sub.id).await.expect("delete"));
    let ReplayStep::Walked(r) = step(db, r.id, 10, 100).await else { panic!("no step") };
    assert_eq!(r.state, ReplayState::Cancelled);
    assert!(db.store.running_replays(10).await.expect("running").is_empty());
    let gone = db.store.start_replay(&ask(sub.id, Some(1), TimeWindow::default())).await.expect("start");
    assert_eq!(gone, ReplayStart::NoSubscription);
}
