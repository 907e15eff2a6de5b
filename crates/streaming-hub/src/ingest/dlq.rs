//! The DLQ plane (SPEC §6.3): records from `.dlq` topics are stored for operators with their
//! CloudEvents and forensic headers, and never become deliveries. Pruned after the retention.

use std::sync::Arc;

use hub_core::capture;
use hub_store::{NewDlqRecord, Store};
use rdkafka::Message;
use rdkafka::message::OwnedMessage;

use super::kafka::{self, BatchWriter};
use crate::clock::Clock;
use crate::telemetry::metric;

/// Prefix of the forensic headers producers and consumers attach to dead letters.
const FORENSIC_PREFIX: &str = "x-lerian-dlq-";

/// The DLQ plane's writer.
#[derive(Debug, Clone)]
pub struct DlqRecords {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// In a cell, another cell's tenants' dead letters are that cell's to keep.
    pub policy: Arc<hub_core::IngestPolicy>,
}

/// Builds the stored form of one DLQ record.
pub fn record(message: &OwnedMessage, now: chrono::DateTime<chrono::Utc>) -> NewDlqRecord {
    // A dead letter whose headers cannot be read is still observed, without them.
    let headers = capture::headers(kafka::headers(message).unwrap_or_default(), |key| {
        key.starts_with("ce-") || key.starts_with(FORENSIC_PREFIX) || key == "traceparent"
    });
    let get = |k: &str| headers.get(k).filter(|v| !v.is_empty()).cloned();
    let payload = message.payload().unwrap_or_default();
    let omitted = get("x-lerian-dlq-payload-omitted").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let body_bytes = if omitted {
        get("x-lerian-dlq-payload-bytes").and_then(|v| v.parse().ok()).unwrap_or(0)
    } else {
        payload.len() as i64
    };
    let source =
        message.topic().strip_suffix(".dlq").and_then(hub_core::topic_source).unwrap_or(message.topic()).to_owned();
    NewDlqRecord {
        topic: message.topic().to_owned(),
        partition: message.partition(),
        offset: message.offset(),
        source,
        tenant_id: get("ce-tenantid").filter(|t| t.len() <= 256),
        ce_id: get("ce-id").filter(|t| t.len() <= 64),
        ce_type: get("ce-type"),
        error_class: get("x-lerian-dlq-error-class"),
        error_message: get("x-lerian-dlq-error-message"),
        body: if omitted { Vec::new() } else { capture::body(payload).to_vec() },
        body_bytes,
        payload_omitted: omitted,
        record_timestamp: message.timestamp().to_millis().and_then(chrono::DateTime::from_timestamp_millis),
        received_at: now,
        headers,
    }
}

impl BatchWriter for DlqRecords {
    async fn write(&self, records: &[OwnedMessage]) -> Result<(), String> {
        let now = self.clock.now();
        let served = |row: &NewDlqRecord| {
            let tenant = row.tenant_id.as_deref().and_then(|t| hub_core::TenantId::parse(t).ok());
            tenant.is_none_or(|t| self.policy.serves(&t))
        };
        let rows: Vec<NewDlqRecord> = records.iter().map(|m| record(m, now)).filter(served).collect();
        let new = self.store.write_dlq_records(&rows).await.map_err(|e| e.to_string())?;
        metrics::counter!(metric::DLQ_RECORDS).increment(new);
        Ok(())
    }
}
