//! Erasures as the store keeps them: one runner at a time through a lease, a step applied once
//! (an event erased twice counts once), progress that only moves on, and a match dropped when done.

use chrono::{Duration, TimeZone, Utc};
use hub_store::{ErasureStep, EventQuery, NewErasure};
use uuid::Uuid;

use crate::support::{TestDb, accepted};

pub async fn an_erasure_is_leased_applied_once_and_forgets_its_match(db: &TestDb) {
    let s = &db.store;
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let batch: Vec<_> = (0..4).map(|_| accepted("t1", Uuid::now_v7())).collect();
    s.write_batch(&batch).await.expect("write");
    let id = Uuid::now_v7();
    s.create_erasure(&NewErasure {
        id,
        tenant_id: "t1".into(),
        match_kind: "subject".into(),
        sealed_match: vec![1, 2, 3],
        reason: "request 1".into(),
        requested_by: "admin token".into(),
        requested_at: t0,
    })
    .await
    .expect("create");
    assert_eq!(s.running_erasures("t1").await.expect("running").len(), 1);
    assert!(s.running_erasures("t2").await.expect("running").is_empty(), "another tenant's");

    // One runner at a time: leased until t0+10s, nobody else gets it before then.
    let claimed = s.claim_erasure(t0, t0 + Duration::seconds(10)).await.expect("claim").expect("one");
    assert_eq!(claimed.id, id);
    assert_eq!(s.claim_erasure(t0 + Duration::seconds(5), t0 + Duration::seconds(15)).await.expect("claim"), None);
    let taken_over = s.claim_erasure(t0 + Duration::seconds(11), t0 + Duration::seconds(21)).await.expect("claim");
    assert_eq!(taken_over.map(|e| e.id), Some(id), "an expired lease is taken over");

    let events = s.list_events("t1", &EventQuery { after: 0, limit: 10, ..EventQuery::default() }).await.expect("list");
    let newest = EventQuery { after: 0, limit: 2, newest_first: true, ..EventQuery::default() };
    let newest: Vec<i64> = s.list_events("t1", &newest).await.expect("list").iter().map(|e| e.seq).collect();
    let mut all: Vec<i64> = events.iter().map(|e| e.seq).collect();
    all.reverse();
    assert_eq!(newest, all[..2], "the newest first, when asked");
    // Read without bodies, a page is the same but for them.
    let lean = s
        .list_events("t1", &EventQuery { after: 0, limit: 10, without_payload: true, ..EventQuery::default() })
        .await
        .expect("list");
    assert_eq!(lean.len(), events.len());
    for (lean, whole) in lean.iter().zip(&events) {
        assert!(lean.payload.is_empty() && !whole.payload.is_empty());
        assert_eq!(hub_store::StoredEvent { payload: whole.payload.clone(), ..lean.clone() }, *whole);
    }
    let seqs = [events[0].seq, events[2].seq];
    let last = events[3].seq;
    let step = ErasureStep {
        erasure: id,
        tenant_id: "t1",
        seqs: &seqs,
        tombstone: b"{\"erased\":{}}",
        scanned_to: last,
        scanned: 4,
        now: t0,
        lease_until: t0 + Duration::seconds(30),
    };
    let first = s.erase_events(&step).await.expect("erase");
    assert_eq!((first.events, first.scanned), (2, 4));
    // The same step again (a runner that died before it knew) changes no event.
    let again = s.erase_events(&step).await.expect("erase");
    assert_eq!(again.events, 0);
    let after = s.list_events("t1", &EventQuery { after: 0, limit: 10, ..EventQuery::default() }).await.expect("list");
    for e in &after {
        let erased = seqs.contains(&e.seq);
        assert_eq!(e.erasure_id, erased.then_some(id), "seq {}", e.seq);
        if erased {
            assert_eq!((e.payload.as_slice(), e.subject.as_deref()), (&b"{\"erased\":{}}"[..], None));
            assert!(e.extensions.is_empty());
        } else {
            assert_ne!(e.payload.as_slice(), b"{\"erased\":{}}");
        }
    }
    let record = s.erasure(id).await.expect("read").expect("kept");
    assert_eq!((record.scanned_to, record.counts.events, record.counts.scanned), (last, 2, 8));

    s.finish_erasure(id, t0 + Duration::minutes(1)).await.expect("finish");
    let done = s.erasure(id).await.expect("read").expect("kept");
    assert_eq!(
        (done.state.as_str(), done.sealed_match, done.finished_at),
        ("done", None, Some(t0 + Duration::minutes(1)))
    );
    assert_eq!((done.reason.as_str(), done.requested_by.as_str()), ("request 1", "admin token"));
    assert!(s.running_erasures("t1").await.expect("running").is_empty());
    assert_eq!(s.claim_erasure(t0 + Duration::hours(1), t0 + Duration::hours(2)).await.expect("claim"), None);
}
