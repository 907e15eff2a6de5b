//! Operational events (`hub_core::operational`): built where something happens — a subscription
//! disabled, a verification, a dead letter, a breaker, a replay's end — and written into the
//! tenant's inbox by one background writer, so the paths that notice them never wait for it.
//! From the inbox they are matched and delivered like any event.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use hub_core::operational::{Kind, RESOURCE, SOURCE, SUBJECT_EXTENSION};
use hub_core::{IngestPolicy, Verdict};
use hub_store::{AcceptedEvent, IngestRecord, Origin, Store};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::telemetry::metric;

/// Operational events waiting for the writer, at most; beyond it one is dropped with a warning
/// (never the caller's work).
const QUEUE: usize = 10_000;
/// Events written in one transaction, at most.
const BATCH: usize = 256;

/// One thing the hub tells a tenant about one of its subscriptions.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub tenant: String,
    pub subscription: Uuid,
    pub kind: Kind,
    /// The kind's own fields (see docs/OPERATIONS.md); `subscription_id` and `occurred_at` are
    /// added to every one.
    pub data: Value,
}

impl Notice {
    pub fn new(tenant: &str, subscription: Uuid, kind: Kind, data: Value) -> Self {
        Self { tenant: tenant.to_owned(), subscription, kind, data }
    }

    /// `replay_finished`, about the replay's subscription.
    pub fn replay_finished(r: &hub_store::ReplayRecord) -> Self {
        let data = json!({
            "replay_id": r.id,
            "state": r.state.as_str(),
            "from_seq": r.from_seq,
            "to_seq": r.to_seq,
            "matched": r.progress.matched,
            "created": r.progress.created,
            "skipped": r.progress.skipped,
        });
        Self::new(&r.tenant_id, r.subscription_id, Kind::ReplayFinished, data)
    }

    /// The event as the inbox keeps it.
    pub fn event(&self, now: DateTime<Utc>) -> Option<AcceptedEvent> {
        let id = Uuid::now_v7();
        let mut body = match &self.data {
            Value::Object(fields) => fields.clone(),
            _ => serde_json::Map::new(),
        };
        body.insert("subscription_id".to_owned(), json!(self.subscription));
        body.insert("occurred_at".to_owned(), json!(now.to_rfc3339_opts(SecondsFormat::Micros, true)));
        let payload = serde_json::to_vec(&Value::Object(body)).ok()?;
        let kind = self.kind.as_str();
        let headers = [
            ("ce-specversion", "1.0".to_owned()),
            ("ce-id", id.to_string()),
            ("ce-source", SOURCE.to_owned()),
            ("ce-type", format!("studio.lerian.{SOURCE}.{RESOURCE}.{kind}")),
            ("ce-time", now.to_rfc3339_opts(SecondsFormat::Micros, true)),
            ("ce-schemaversion", "1.0.0".to_owned()),
            ("ce-resourcetype", RESOURCE.to_owned()),
            ("ce-eventtype", kind.to_owned()),
            ("ce-tenantid", self.tenant.clone()),
            ("ce-subject", self.subscription.to_string()),
            (&format!("ce-{SUBJECT_EXTENSION}"), self.subscription.to_string()),
            ("content-type", "application/json".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v));
        match hub_core::envelope::judge_operational(
            headers.iter().map(|(k, v)| (k, v)),
            &payload,
            &IngestPolicy::default(),
        ) {
            Verdict::Accept(envelope) => Some(AcceptedEvent {
                envelope: *envelope,
                payload,
                origin: Origin::Http,
                received_at: now,
                trace: None,
            }),
            other => {
                tracing::error!(kind, tenant = %self.tenant, verdict = ?other, "an operational event was refused by the envelope rules");
                None
            }
        }
    }
}

/// Where operational events are handed in; cheap to clone.
#[derive(Debug, Clone)]
pub struct Notices {
    tx: mpsc::Sender<Notice>,
}

impl Notices {
    /// The handle and the receiving end for [`run`].
    pub fn channel() -> (Self, mpsc::Receiver<Notice>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Self { tx }, rx)
    }

    /// Hands a notice to the writer without waiting.
    pub fn emit(&self, notice: Notice) {
        let kind = notice.kind.as_str();
        match self.tx.try_send(notice) {
            Ok(()) => metrics::counter!(metric::OPERATIONAL_EVENTS, "kind" => kind, "outcome" => "queued").increment(1),
            Err(e) => {
                metrics::counter!(metric::OPERATIONAL_EVENTS, "kind" => kind, "outcome" => "dropped").increment(1);
                tracing::warn!(kind, error = %e, "an operational event was dropped");
            }
        }
    }
}

/// Writes queued notices into their tenants' inboxes, a batch per transaction, until `shutdown`
/// and the queue is empty. A failed write is retried (the store may be restarting); new jobs
/// for the events wake the dispatcher.
pub async fn run(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    mut rx: mpsc::Receiver<Notice>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut batch: Vec<Notice> = Vec::with_capacity(BATCH);
    loop {
        let received = tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => n,
            () = shutdown.cancelled() => {
                rx.close();
                rx.recv_many(&mut batch, QUEUE).await
            }
        };
        if received == 0 {
            return;
        }
        let now = clock.now();
        let records: Vec<IngestRecord> =
            batch.drain(..).filter_map(|n| n.event(now)).map(IngestRecord::Accepted).collect();
        let mut delay = Duration::from_millis(100);
        for attempt in 1..=5 {
            match store.write_batch(&records).await {
                Ok(_) => {
                    wake.notify_one();
                    break;
                }
                Err(e) if attempt < 5 => {
                    tracing::warn!(error = %e, events = records.len(), "writing operational events failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => {
                    metrics::counter!(metric::OPERATIONAL_EVENTS, "kind" => "any", "outcome" => "lost")
                        .increment(records.len() as u64);
                    tracing::error!(error = %e, events = records.len(), "operational events could not be written");
                }
            }
        }
    }
}
