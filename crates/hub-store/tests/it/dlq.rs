//! The DLQ plane's storage on both backends.

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use hub_store::{DlqFilter, NewDlqRecord};

use crate::support::TestDb;

fn record(offset: i64, tenant: &str, class: &str, age_hours: i64) -> NewDlqRecord {
    // Both stores keep microseconds.
    let at = chrono::DateTime::from_timestamp_micros((Utc::now() - Duration::hours(age_hours)).timestamp_micros())
        .expect("time");
    NewDlqRecord {
        topic: "lerian.streaming.lender.dlq".into(),
        partition: 0,
        offset,
        source: "lender".into(),
        tenant_id: Some(tenant.into()),
        ce_id: Some("01890a5d-ac96-774b-bcce-b302099a8057".into()),
        ce_type: Some("studio.lerian.lender.loan_application.approved".into()),
        error_class: Some(class.into()),
        error_message: Some("broker unavailable".into()),
        headers: BTreeMap::from([("x-lerian-dlq-error-class".to_owned(), class.to_owned())]),
        body: br#"{"a":1}"#.to_vec(),
        body_bytes: 7,
        payload_omitted: false,
        record_timestamp: Some(at),
        received_at: at,
    }
}

pub async fn dlq_records_are_stored_once_filtered_and_pruned(db: &TestDb) {
    let records =
        vec![record(1, "t1", "timeout", 0), record(2, "t2", "serialization", 0), record(3, "t1", "timeout", 200)];
    assert_eq!(db.store.write_dlq_records(&records).await.expect("write"), 3);
    // Re-reading the same offsets (a crash before the commit) stores nothing new.
    assert_eq!(db.store.write_dlq_records(&records[..2]).await.expect("write"), 0);

    let list = |f: DlqFilter| {
        let store = std::sync::Arc::clone(&db.store);
        async move {
            store.list_dlq(&DlqFilter { limit: if f.limit == 0 { 100 } else { f.limit }, ..f }).await.expect("list")
        }
    };
    let all = list(DlqFilter::default()).await;
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].record.offset, 3, "newest first");
    assert_eq!(all[2].record, records[0]);
    assert_eq!(list(DlqFilter { tenant: Some("t1".into()), ..Default::default() }).await.len(), 2);
    assert_eq!(list(DlqFilter { error_class: Some("serialization".into()), ..Default::default() }).await.len(), 1);
    assert_eq!(list(DlqFilter { source: Some("crm".into()), ..Default::default() }).await.len(), 0);
    assert_eq!(list(DlqFilter { since: Some(Utc::now() - Duration::hours(1)), ..Default::default() }).await.len(), 2);
    assert_eq!(list(DlqFilter { until: Some(Utc::now() - Duration::hours(1)), ..Default::default() }).await.len(), 1);
    let page = list(DlqFilter { before_id: Some(all[0].id), limit: 1, ..Default::default() }).await;
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].id, all[1].id);

    let cutoff = Utc::now() - Duration::hours(168);
    assert_eq!(db.store.prune(hub_store::PruneKind::Dlq, cutoff, 100).await.expect("prune"), Some(1));
    assert_eq!(list(DlqFilter::default()).await.len(), 2);
}
