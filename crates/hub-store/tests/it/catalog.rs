//! The event catalog's rows: the refresh claim, manifests kept through failures, seen types.

use chrono::{Duration, TimeZone, Utc};
use hub_store::{ManifestFetch, PruneKind, SeenType};
use serde_json::json;

use crate::support::TestDb;

pub async fn one_refresh_is_claimed_per_interval_and_at_once_when_the_sources_change(db: &TestDb) {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let s = &db.store;
    let claim = |at, sources: &'static str| async move {
        s.claim_manifest_refresh(at, at + Duration::minutes(5), sources).await.expect("claim")
    };
    assert!(claim(t0, "a,b").await, "the first refresh is due at once");
    assert!(!claim(t0, "a,b").await, "taken: another replica waits");
    assert!(!claim(t0 + Duration::minutes(4), "a,b").await, "not yet due");
    assert!(claim(t0 + Duration::minutes(1), "a,b,c").await, "changed sources are refreshed at once");
    assert!(!claim(t0 + Duration::minutes(5), "a,b,c").await, "due at +6 min now");
    assert!(claim(t0 + Duration::minutes(6), "a,b,c").await, "due");
}

pub async fn a_failed_fetch_keeps_the_last_good_manifest(db: &TestDb) {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let s = &db.store;
    let mut schemas = serde_json::Map::new();
    schemas.insert("https://x.example/a.json".into(), json!({"type": "object"}));
    let good = ManifestFetch::Fetched {
        document: r#"{"publisher":{"source":"ledger"},"events":[]}"#.into(),
        schemas: schemas.clone(),
        problems: vec![json!({"field": "events[0].dataSchema", "message": "not found"})],
    };
    s.save_manifest("https://ledger.example/streaming", &good, t0).await.expect("save");
    let failed = ManifestFetch::Failed { error: "connection refused".into() };
    s.save_manifest("https://ledger.example/streaming", &failed, t0 + Duration::minutes(5)).await.expect("fail");
    // A source that never answered has no document, only its error.
    s.save_manifest("file:/etc/missing.json", &failed, t0).await.expect("fail");
    let all = s.manifests().await.expect("manifests");
    assert_eq!(all.len(), 2);
    let missing = &all[0];
    assert_eq!((missing.location.as_str(), missing.document.as_deref()), ("file:/etc/missing.json", None));
    let ledger = &all[1];
    assert_eq!(ledger.document.as_deref(), Some(r#"{"publisher":{"source":"ledger"},"events":[]}"#));
    assert_eq!(ledger.schemas, schemas);
    assert_eq!(ledger.fetched_at, Some(t0));
    assert_eq!(ledger.checked_at, t0 + Duration::minutes(5));
    assert_eq!(ledger.error.as_deref(), Some("connection refused"));
    assert_eq!(ledger.problems.len(), 1);
    // Fetched again: the error is cleared.
    s.save_manifest("https://ledger.example/streaming", &good, t0 + Duration::minutes(10)).await.expect("save");
    let ledger = s.manifests().await.expect("manifests").into_iter().nth(1).expect("ledger");
    assert_eq!((ledger.error, ledger.fetched_at), (None, Some(t0 + Duration::minutes(10))));
    // A source no longer configured is forgotten.
    assert_eq!(s.forget_manifests_except(&["https://ledger.example/streaming".into()]).await.expect("forget"), 1);
    assert_eq!(s.manifests().await.expect("manifests").len(), 1);
}

pub async fn seen_types_add_up_per_tenant_and_age_out(db: &TestDb) {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let seen = |tenant: &str, key: &str, first: i64, last: i64, events: i64| SeenType {
        tenant_id: tenant.into(),
        source: "ledger".into(),
        event_key: key.into(),
        schema_version: "1.0.0".into(),
        first_seen: t0 + Duration::minutes(first),
        last_seen: t0 + Duration::minutes(last),
        events,
    };
    let s = &db.store;
    s.record_seen_types(&[seen("t1", "account.created", 10, 20, 3), seen("t2", "loan.approved", 0, 1, 1)])
        .await
        .expect("record");
    // A second roll-up (another replica, a later flush) widens the times and adds the counts.
    s.record_seen_types(&[seen("t1", "account.created", 5, 15, 2)]).await.expect("record");
    let t1 = s.seen_types(Some("t1")).await.expect("t1");
    assert_eq!(t1, vec![seen("t1", "account.created", 5, 20, 5)]);
    assert_eq!(s.seen_types(None).await.expect("all").len(), 2);
    assert!(s.seen_types(Some("t3")).await.expect("t3").is_empty());
    // Types not seen since the cutoff age out.
    assert_eq!(s.prune(PruneKind::SeenTypes, t0 + Duration::minutes(10), 100).await.expect("prune"), Some(1));
    assert_eq!(s.seen_types(None).await.expect("all"), vec![seen("t1", "account.created", 5, 20, 5)]);
}
