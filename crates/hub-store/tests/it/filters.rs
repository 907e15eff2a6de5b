//! Content filters on both backends: ingest creates work only for the events a subscription's
//! filters let through (push and pull, attributes and body), a changed filter applies to events
//! written after the change (also when another replica remembers the old one), and a replay
//! gives again only what the filters let through.

use chrono::Utc;
use hub_core::SinkKind;
use hub_store::{NewReplay, ReplayStart, ReplayState, ReplayStep, SubscriptionPatch, TimeWindow};
use serde_json::json;
use uuid::Uuid;

use crate::support::{TestDb, accepted_with, headers, subscription};

/// An event of `t1` with a subject, a `region` extension and this body.
fn event(subject: &str, region: &str, body: serde_json::Value) -> hub_store::IngestRecord {
    let mut h = headers("t1", Uuid::now_v7(), "loan_application", "approved");
    h.push(("ce-subject".to_owned(), subject.to_owned()));
    h.push(("ce-region".to_owned(), region.to_owned()));
    accepted_with(h, body.to_string().as_bytes())
}

fn filtered(sink: SinkKind, filters: serde_json::Value) -> hub_store::SubscriptionRecord {
    hub_store::SubscriptionRecord { filters, ..subscription("t1", sink, &["loan_application.*"], None) }
}

async fn job_seqs(db: &TestDb, sub: Uuid) -> Vec<i64> {
    db.store.list_jobs("t1", sub, None, None, 100).await.expect("jobs").iter().map(|j| j.event_seq).collect()
}

async fn pulled(db: &TestDb, sub: Uuid) -> Vec<i64> {
    db.store.pull_events("t1", sub, 0, 100).await.expect("pull").iter().map(|e| e.position).collect()
}

pub async fn filters_choose_what_ingest_matches(db: &TestDb) {
    let by_sql = filtered(SinkKind::named("webhook"), json!([{"sql": "region = 'br' AND subject LIKE 'loan-%'"}]));
    let by_data = filtered(SinkKind::PULL, json!([{"data": {"amount": [{"numeric": [">=", 1000]}]}}]));
    let by_both = filtered(
        SinkKind::named("webhook"),
        json!([{"any": [{"exact": {"region": "mx"}}, {"prefix": {"subject": "loan-9"}}]},
               {"data": {"currency": [{"anything-but": "USD"}]}}]),
    );
    let unfiltered = subscription("t1", SinkKind::PULL, &["*.*"], None);
    for s in [&by_sql, &by_data, &by_both, &unfiltered] {
        db.store.create_subscription(s).await.expect("create");
    }
    let batch = [
        event("loan-1", "br", json!({"amount": 5, "currency": "BRL"})),
        event("loan-2", "br", json!({"amount": 5000, "currency": "USD"})),
        event("card-3", "mx", json!({"amount": 1000, "currency": "MXN"})),
        event("loan-9", "us", json!({"amount": 10, "currency": "BRL"})),
    ];
    db.store.write_batch(&batch).await.expect("write");
    assert_eq!(job_seqs(db, by_sql.id).await, vec![1, 2], "sql over attributes");
    assert_eq!(pulled(db, by_data.id).await, vec![2, 3], "a content pattern over the body");
    assert_eq!(job_seqs(db, by_both.id).await, vec![3, 4], "every filter of the list");
    assert_eq!(pulled(db, unfiltered.id).await, vec![1, 2, 3, 4]);
    let stored = db.store.subscription("t1", by_both.id).await.expect("read").expect("exists");
    assert_eq!(stored.filters, by_both.filters, "filters are stored as written");
}

pub async fn changed_filters_apply_to_later_events(db: &TestDb) {
    let other = db.replica().await;
    let sub = filtered(SinkKind::named("webhook"), json!([{"exact": {"region": "br"}}]));
    db.store.create_subscription(&sub).await.expect("create");
    db.store.write_batch(&[event("loan-1", "br", json!({})), event("loan-2", "mx", json!({}))]).await.expect("write");
    assert_eq!(job_seqs(db, sub.id).await, vec![1]);
    // Changed by another replica: this one must not match against what it remembers.
    let patch = SubscriptionPatch {
        filters: Some(json!([{"exact": {"region": "mx"}}])),
        now: Utc::now(),
        ..Default::default()
    };
    other.patch_subscription("t1", sub.id, &patch).await.expect("patch").expect("exists");
    db.store.write_batch(&[event("loan-3", "br", json!({})), event("loan-4", "mx", json!({}))]).await.expect("write");
    assert_eq!(job_seqs(db, sub.id).await, vec![1, 4], "earlier events keep their jobs; later ones follow the change");
    let cleared = SubscriptionPatch { filters: Some(json!([])), now: Utc::now(), ..Default::default() };
    let after = other.patch_subscription("t1", sub.id, &cleared).await.expect("patch").expect("exists");
    assert_eq!(after.filters, json!([]));
    db.store.write_batch(&[event("loan-5", "us", json!({}))]).await.expect("write");
    assert_eq!(job_seqs(db, sub.id).await, vec![1, 4, 5]);
}

pub async fn replays_honour_filters(db: &TestDb) {
    db.store
        .write_batch(&[
            event("loan-1", "br", json!({"amount": 1})),
            event("loan-2", "mx", json!({"amount": 2})),
            event("loan-3", "br", json!({"amount": 3})),
        ])
        .await
        .expect("write");
    let sub =
        filtered(SinkKind::PULL, json!([{"exact": {"region": "br"}}, {"data": {"amount": [{"numeric": [">", 1]}]}}]));
    db.store.create_subscription(&sub).await.expect("create");
    let replay = NewReplay {
        id: Uuid::now_v7(),
        tenant_id: "t1".to_owned(),
        subscription_id: sub.id,
        window: TimeWindow::default(),
        from_seq: Some(1),
        to_seq: None,
        include_delivered: false,
        only_undelivered: false,
        filters: None,
        rate: hub_core::replay::MAX_RATE,
        now: Utc::now(),
    };
    assert!(matches!(db.store.start_replay(&replay).await.expect("start"), ReplayStart::Started(_)));
    let mut finished = false;
    for i in 0..20 {
        let limits =
            hub_store::ReplayLimits { batch: 2, pace: 1_000, now: Utc::now() + chrono::Duration::seconds(i + 1) };
        if let ReplayStep::Walked(r) = db.store.step_replay(replay.id, &limits).await.expect("step")
            && r.state != ReplayState::Running
        {
            finished = true;
            break;
        }
    }
    assert!(finished, "the replay finished");
    let subjects: Vec<String> = db
        .store
        .pull_events("t1", sub.id, 0, 100)
        .await
        .expect("pull")
        .iter()
        .filter_map(|e| e.event.subject.clone())
        .collect();
    assert_eq!(subjects, vec!["loan-3".to_owned()], "only the event both filters let through");
}
