//! Which subscriptions an event is for: targets as matching reads them, and the jobs it makes.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use chrono::{DateTime, Utc};
use hub_core::routing::{EventView, Filters};
use uuid::Uuid;

use super::*;

/// A subscription as matching sees it: its filter and its state, as stored.
#[derive(Debug, Clone)]
pub(crate) struct MatchTarget {
    pub id: Uuid,
    pub sink: hub_core::SinkKind,
    pub patterns: Vec<hub_core::EventPattern>,
    pub origin: Option<String>,
    /// Its content filters, compiled (shared by every target with the same text).
    pub filters: Arc<Filters>,
    pub ordering: hub_core::Ordering,
    pub enabled: bool,
    pub verification: hub_core::VerificationState,
    pub verified_before: bool,
}

/// The columns matching reads of a subscription, as both backends return them.
pub(crate) struct MatchRow {
    pub id: Uuid,
    pub sink: String,
    pub event_types: String,
    pub origin: Option<String>,
    /// The filters as stored JSON text.
    pub filters: String,
    pub ordering: String,
    pub enabled: bool,
    pub verification: String,
    pub verified_before: bool,
}

impl MatchTarget {
    pub(crate) fn new(row: MatchRow) -> Result<Self, crate::StoreError> {
        let id = row.id;
        let corrupt = |what: &str| crate::StoreError::Corrupt(format!("subscription {id}: {what}"));
        let sink = hub_core::SinkKind::parse(&row.sink).ok_or_else(|| corrupt("unknown sink type"))?;
        let types: Vec<String> = serde_json::from_str(&row.event_types).map_err(|_| corrupt("event_types"))?;
        let patterns = types
            .iter()
            .map(|t| hub_core::EventPattern::parse(t))
            .collect::<Result<_, _>>()
            .map_err(|_| corrupt("event_types"))?;
        let verification =
            hub_core::VerificationState::parse(&row.verification).ok_or_else(|| corrupt("verification_state"))?;
        let filters = compiled_filters(&row.filters).map_err(|e| corrupt(&format!("filters: {e}")))?;
        let ordering = hub_core::Ordering::parse(&row.ordering).ok_or_else(|| corrupt("ordering"))?;
        Ok(Self {
            id,
            sink,
            patterns,
            origin: row.origin,
            filters,
            ordering,
            enabled: row.enabled,
            verification,
            verified_before: row.verified_before,
        })
    }
}

/// The filters compiled from their stored text, from a bounded cache keyed by the text: matching
/// reads subscriptions per batch (or once per change, when remembered), and a filter is compiled
/// once per distinct text, never per event.
pub(crate) fn compiled_filters(text: &str) -> Result<Arc<Filters>, String> {
    static EMPTY: LazyLock<Arc<Filters>> = LazyLock::new(|| Arc::new(Filters::default()));
    static CACHE: LazyLock<Mutex<HashMap<String, Arc<Filters>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
    const MAX_CACHED: usize = 4096;
    if text == "[]" {
        return Ok(Arc::clone(&EMPTY));
    }
    if let Some(f) = CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(text) {
        return Ok(Arc::clone(f));
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let filters = Arc::new(Filters::compile(&value).map_err(|e| e.to_string())?);
    let mut cache = CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if cache.len() >= MAX_CACHED {
        cache.clear();
    }
    cache.insert(text.to_owned(), Arc::clone(&filters));
    Ok(filters)
}

/// A push job matching creates: for this subscription and seq, received then, in this state.
#[derive(Debug)]
pub(crate) struct NewJob {
    pub subscription: Uuid,
    pub seq: i64,
    pub received_at: DateTime<Utc>,
    pub state: JobState,
    /// The event's ordering key when the subscription orders by key (and the event has one).
    pub ordering_key: Option<String>,
}

/// The work matching creates for one tenant's newly inserted events: pull entries
/// `(subscription, seq)` and push jobs.
#[derive(Debug, Default)]
pub(crate) struct MatchedWork {
    pub pulls: Vec<(Uuid, i64)>,
    pub jobs: Vec<NewJob>,
}

/// Splits expired leases `(job, recoveries so far)` into all of them and those that this expiry
/// makes poison, by the core's rule.
pub(crate) fn split_poison<Id: Clone>(expired: &[(Id, i32)], threshold: u32) -> (Vec<Id>, Vec<Id>) {
    let all = expired.iter().map(|(id, _)| id.clone()).collect();
    let poison = expired
        .iter()
        .filter(|(_, recoveries)| {
            hub_core::delivery::is_poison(u32::try_from(*recoveries).unwrap_or(0).saturating_add(1), threshold)
        })
        .map(|(id, _)| id.clone())
        .collect();
    (all, poison)
}

/// Matches one tenant's new events against its subscriptions by the core's rule
/// (`hub_core::admission`; an operational event saying a subscription fails never goes to that
/// subscription, `hub_core::operational::excluded`): a pull subscription gets stream entries, a push one jobs, `pending`
/// to deliver or `held` while its destination is verified again.
pub(crate) fn match_events(tenant: &str, targets: &[MatchTarget], inserts: &[(i64, &AcceptedEvent)]) -> MatchedWork {
    let mut work = MatchedWork::default();
    // Each event is viewed once for every target; a body is parsed only if a filter reads it.
    let views: Vec<EventView<'_, hub_core::Envelope>> =
        inserts.iter().map(|(_, e)| EventView::new(&e.envelope, &e.payload)).collect();
    for target in targets {
        let rule = hub_core::MatchRule {
            tenant,
            patterns: &target.patterns,
            origin: target.origin.as_deref(),
            enabled: target.enabled,
            verification: target.verification,
            verified_before: target.verified_before,
        };
        for ((seq, event), view) in inserts.iter().zip(&views) {
            let env = &event.envelope;
            if hub_core::operational::excluded(env.key(), env.extensions(), target.id) {
                continue;
            }
            let state = match hub_core::operational::addressed_to(env.key(), env.extensions()) {
                // A test event: its one subscription, whatever its patterns and filters, while
                // it is enabled and verified.
                Some(to)
                    if to == target.id
                        && target.enabled
                        && target.verification == hub_core::VerificationState::Active =>
                {
                    JobState::Pending
                }
                Some(_) => continue,
                None => match hub_core::admission(&rule, tenant, env.key(), env.source().as_str()) {
                    hub_core::Admission::No => continue,
                    hub_core::Admission::Deliver if target.filters.is_empty() || target.filters.matches(view) => {
                        JobState::Pending
                    }
                    hub_core::Admission::Hold if target.filters.is_empty() || target.filters.matches(view) => {
                        JobState::Held
                    }
                    _ => continue,
                },
            };
            if target.sink.is_push() {
                let ordering_key = match target.ordering {
                    hub_core::Ordering::Key => hub_core::routing::ordering_key(env),
                    hub_core::Ordering::None => None,
                };
                work.jobs.push(NewJob {
                    subscription: target.id,
                    seq: *seq,
                    received_at: event.received_at,
                    state,
                    ordering_key,
                });
            } else if state == JobState::Pending {
                work.pulls.push((target.id, *seq));
            }
        }
    }
    work
}
