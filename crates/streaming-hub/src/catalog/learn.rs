//! Learned types: every accepted event's source, `<resourcetype>.<eventtype>` and schema version,
//! counted per tenant in memory as ingest writes them and added to the store in one statement
//! a second ([`FLUSH_EVERY`]). Nothing is written per event, and a duplicate is not counted.
//!
//! A process that dies loses at most its last second of counts, never a type its tenants'
//! traffic keeps sending; a flush that fails is kept and tried again with the next.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use hub_store::{IngestRecord, SeenType, Store, WriteOutcome};
use tokio_util::sync::CancellationToken;

/// How often the roll-up is added to the store.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Distinct types held between flushes, at most; more (a flood of new names while the store is
/// down) are dropped and counted again when they next arrive.
const MAX_HELD: usize = 100_000;

type Key = (String, String, String, String);

#[derive(Debug, Clone, Copy)]
struct Tally {
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    events: i64,
}

/// Adds a tally to what is held (a new type only while there is room).
fn add(held: &mut HashMap<Key, Tally>, key: Key, t: Tally) {
    use std::collections::hash_map::Entry;
    let full = held.len() >= MAX_HELD;
    match held.entry(key) {
        Entry::Occupied(mut o) => {
            let h = o.get_mut();
            h.first = h.first.min(t.first);
            h.last = h.last.max(t.last);
            h.events += t.events;
        }
        Entry::Vacant(v) if !full => {
            v.insert(t);
        }
        Entry::Vacant(_) => {}
    }
}

/// The types accepted since the last flush.
#[derive(Debug, Default)]
pub struct Learner {
    held: Mutex<HashMap<Key, Tally>>,
}

impl Learner {
    /// Notes the events a write inserted (`outcomes` in the order of `records`).
    pub fn note(&self, records: &[IngestRecord], outcomes: &[WriteOutcome]) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (record, outcome) in records.iter().zip(outcomes) {
            let (IngestRecord::Accepted(e), WriteOutcome::Inserted { .. }) = (record, outcome) else { continue };
            let env = &e.envelope;
            let key = (
                env.tenant().as_str().to_owned(),
                env.source().as_str().to_owned(),
                env.key().to_string(),
                env.schema_version().to_owned(),
            );
            let at = e.received_at;
            add(&mut held, key, Tally { first: at, last: at, events: 1 });
        }
    }

    fn take(&self) -> HashMap<Key, Tally> {
        std::mem::take(&mut *self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Puts back a roll-up whose flush failed, merged with what arrived meanwhile.
    fn restore(&self, taken: HashMap<Key, Tally>) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (key, t) in taken {
            add(&mut held, key, t);
        }
    }

    /// Adds what is held to the store; kept for the next flush when the store fails.
    pub async fn flush(&self, store: &dyn Store) {
        let taken = self.take();
        if taken.is_empty() {
            return;
        }
        let rows: Vec<SeenType> = taken
            .iter()
            .map(|((tenant, source, key, version), t)| SeenType {
                tenant_id: tenant.clone(),
                source: source.clone(),
                event_key: key.clone(),
                schema_version: version.clone(),
                first_seen: t.first,
                last_seen: t.last,
                events: t.events,
            })
            .collect();
        if let Err(e) = store.record_seen_types(&rows).await {
            tracing::warn!(error = %e, types = rows.len(), "could not record the event types seen; keeping them for the next try");
            self.restore(taken);
        }
    }
}

/// Flushes every [`FLUSH_EVERY`] until `stop`, then once more.
pub async fn run(learner: Arc<Learner>, store: Arc<dyn Store>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(FLUSH_EVERY) => learner.flush(store.as_ref()).await,
            () = stop.cancelled() => {
                learner.flush(store.as_ref()).await;
                return;
            }
        }
    }
}
