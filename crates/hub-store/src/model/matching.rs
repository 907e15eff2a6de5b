//! Which subscriptions an event is for: targets as matching reads them, and the jobs it makes.

use super::{AcceptedEvent, JobState};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use chrono::{DateTime, Utc};
use hub_core::routing::{EventView, Filters};
use uuid::Uuid;

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
    /// Its destination's bucket (see `SubscriptionRecord::pace_bucket`): a job is leased at ingest
    /// only by the replica that owns it.
    pub pace_bucket: Option<i32>,
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
    pub pace_bucket: Option<i32>,
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
            pace_bucket: row.pace_bucket,
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
    /// Its subscription's destination bucket.
    pub bucket: Option<i32>,
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

/// One tenant's match targets with what finds an event's candidates among them without
/// looking at every one: the targets by each pattern they hold (as it prints, which is as it is
/// stored) and by id (a test event names its one subscription). An event's candidates are the
/// targets holding one of its key's four patterns (`hub_core::patterns_matching`); no other
/// target's rule can admit it, so a tenant with 10 000 subscriptions matches an event against
/// the few that name its type.
#[derive(Debug, Default)]
pub(crate) struct Targets {
    list: Vec<MatchTarget>,
    by_pattern: HashMap<String, Vec<u32>>,
    by_id: HashMap<Uuid, u32>,
}

impl Targets {
    pub(crate) fn new(list: Vec<MatchTarget>) -> Self {
        let mut by_pattern: HashMap<String, Vec<u32>> = HashMap::new();
        let mut by_id = HashMap::with_capacity(list.len());
        for (i, target) in list.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            by_id.insert(target.id, i);
            for pattern in &target.patterns {
                let holders = by_pattern.entry(pattern.to_string()).or_default();
                // A target holding one pattern twice is one candidate.
                if holders.last() != Some(&i) {
                    holders.push(i);
                }
            }
        }
        Self { list, by_pattern, by_id }
    }

    /// The targets that may take an event with this key (and, for a test event, this addressee),
    /// in list order.
    fn candidates(&self, key: &hub_core::EventKey, addressed: Option<Uuid>) -> Vec<u32> {
        if let Some(to) = addressed {
            return self.by_id.get(&to).copied().into_iter().collect();
        }
        let mut out: Vec<u32> =
            hub_core::patterns_matching(key).iter().filter_map(|p| self.by_pattern.get(p)).flatten().copied().collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The steps one subscription's filters may spend on one event (`hub_core::routing::meter`):
/// set once at start from `STREAMING_HUB_FILTER_BUDGET` ([`set_filter_budget`]); 1 ms until then.
static FILTER_STEPS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(hub_core::routing::meter::STEPS_PER_MS);

/// The name of the counter of evaluations that ran out of their budget, by tenant.
pub const FILTER_BUDGET_EXCEEDED: &str = "streaming_hub_filter_budget_exceeded_total";

/// Sets the budget of every later evaluation of a subscription's filters against an event.
pub fn set_filter_budget(steps: u64) {
    FILTER_STEPS.store(steps, std::sync::atomic::Ordering::Relaxed);
}

/// The budget every evaluation of a subscription's filters gets.
pub fn filter_budget() -> u64 {
    FILTER_STEPS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Matches one tenant's new events against its subscriptions by the core's rule
/// (`hub_core::admission`; an operational event saying a subscription fails never goes to that
/// subscription, `hub_core::operational::excluded`): a pull subscription gets stream entries, a push one jobs, `pending`
/// to deliver or `held` while its destination is verified again.
pub(crate) fn match_events(tenant: &str, targets: &Targets, inserts: &[(i64, &AcceptedEvent)]) -> MatchedWork {
    // Filters are tenant-supplied work: off the runtime's worker thread, so the thread that
    // serves HTTP or reads Kafka is free meanwhile (each evaluation is bounded by its budget).
    if targets.list.iter().any(|t| !t.filters.is_empty())
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    {
        return tokio::task::block_in_place(|| match_events_here(tenant, targets, inserts));
    }
    match_events_here(tenant, targets, inserts)
}

fn match_events_here(tenant: &str, targets: &Targets, inserts: &[(i64, &AcceptedEvent)]) -> MatchedWork {
    let steps = filter_budget();
    // Each event's candidates, then (target, event) pairs in target order and, within a target,
    // in event order: the work comes out as a walk over every target would give it.
    let mut pairs: Vec<(u32, usize)> = Vec::new();
    for (n, (_, event)) in inserts.iter().enumerate() {
        let env = &event.envelope;
        let addressed = hub_core::operational::addressed_to(env.key(), env.extensions());
        pairs.extend(targets.candidates(env.key(), addressed).into_iter().map(|t| (t, n)));
    }
    pairs.sort_unstable();
    let mut work = MatchedWork::default();
    // Each event is viewed once for every target; a body is parsed only if a filter reads it.
    let views: Vec<EventView<'_, hub_core::Envelope>> =
        inserts.iter().map(|(_, e)| EventView::new(&e.envelope, &e.payload)).collect();
    for (t, n) in pairs {
        let target = &targets.list[t as usize];
        let ((seq, event), view) = (&inserts[n], &views[n]);
        let rule = hub_core::MatchRule {
            tenant,
            patterns: &target.patterns,
            origin: target.origin.as_deref(),
            enabled: target.enabled,
            verification: target.verification,
            verified_before: target.verified_before,
        };
        let env = &event.envelope;
        if hub_core::operational::excluded(env.key(), env.extensions(), target.id) {
            continue;
        }
        let state = match hub_core::operational::addressed_to(env.key(), env.extensions()) {
            // A test event: its one subscription, whatever its patterns and filters, while
            // it is enabled and verified.
            Some(to)
                if to == target.id && target.enabled && target.verification == hub_core::VerificationState::Active =>
            {
                JobState::Pending
            }
            Some(_) => continue,
            None => {
                let admitted = hub_core::admission(&rule, tenant, env.key(), env.source().as_str());
                if admitted == hub_core::Admission::No {
                    continue;
                }
                if !target.filters.is_empty() {
                    let judged = target.filters.matches_within(view, steps);
                    if judged.exhausted {
                        metrics::counter!(FILTER_BUDGET_EXCEEDED, "tenant" => tenant.to_owned()).increment(1);
                    }
                    if !judged.matches {
                        continue;
                    }
                }
                match admitted {
                    hub_core::Admission::Hold => JobState::Held,
                    _ => JobState::Pending,
                }
            }
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
                bucket: target.pace_bucket,
            });
        } else if state == JobState::Pending {
            work.pulls.push((target.id, *seq));
        }
    }
    work
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::Origin;

    /// A subscription of the generated kind: patterns over a small alphabet, so that they often
    /// want the generated events.
    fn target(
        id: Uuid,
        patterns: &[String],
        origin: Option<&str>,
        push: bool,
        enabled: bool,
        state: u8,
    ) -> MatchTarget {
        let verification = ["active", "pending", "failed"][usize::from(state % 3)];
        MatchTarget::new(MatchRow {
            id,
            sink: if push { "webhook" } else { "pull" }.to_owned(),
            event_types: serde_json::to_string(patterns).expect("JSON"),
            origin: origin.map(str::to_owned),
            filters: "[]".to_owned(),
            ordering: "none".to_owned(),
            enabled,
            verification: verification.to_owned(),
            verified_before: state >= 3,
            pace_bucket: None,
        })
        .expect("target")
    }

    fn event(resource: &str, kind: &str, source: &str, addressee: Option<Uuid>) -> AcceptedEvent {
        let mut headers: Vec<(String, String)> = [
            ("ce-specversion", "1.0".to_owned()),
            ("ce-id", Uuid::now_v7().to_string()),
            ("ce-source", source.to_owned()),
            ("ce-type", format!("studio.lerian.{source}.{resource}.{kind}")),
            ("ce-time", "2026-12-01T00:00:00Z".to_owned()),
            ("ce-schemaversion", "1.0.0".to_owned()),
            ("ce-resourcetype", resource.to_owned()),
            ("ce-eventtype", kind.to_owned()),
            ("ce-tenantid", "t1".to_owned()),
            ("content-type", "application/json".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v))
        .to_vec();
        if let Some(to) = addressee {
            headers.push((format!("ce-{}", hub_core::operational::SUBJECT_EXTENSION), to.to_string()));
        }
        let policy = hub_core::IngestPolicy::default();
        let verdict = if resource == hub_core::operational::RESOURCE {
            hub_core::envelope::judge_operational(headers, b"{}", &policy)
        } else {
            hub_core::judge(headers, b"{}", None, &policy)
        };
        match verdict {
            hub_core::Verdict::Accept(envelope) => AcceptedEvent {
                envelope: *envelope,
                payload: b"{}".to_vec(),
                origin: Origin::Http,
                received_at: Utc::now(),
                trace: None,
            },
            other => panic!("not accepted: {other:?}"),
        }
    }

    /// The work as a walk over every target gives it: each target in order, each event in order.
    fn walking_every_target(tenant: &str, targets: &Targets, inserts: &[(i64, &AcceptedEvent)]) -> MatchedWork {
        let mut work = MatchedWork::default();
        for t in 0..targets.list.len() {
            let mut one = Targets { list: targets.list.clone(), ..Targets::default() };
            one.by_pattern = hub_core::EventPattern::parse("*.*")
                .map(|p| HashMap::from([(p.to_string(), vec![t as u32])]))
                .unwrap_or_default();
            // Every key's patterns include `*.*`: the one target is every event's candidate.
            for (seq, event) in inserts {
                let addressed = hub_core::operational::addressed_to(event.envelope.key(), event.envelope.extensions());
                if addressed.is_some() {
                    one.by_id = HashMap::from([(targets.list[t].id, t as u32)]);
                } else {
                    one.by_id.clear();
                }
                let got = match_events(tenant, &one, &[(*seq, *event)]);
                work.pulls.extend(got.pulls);
                work.jobs.extend(got.jobs);
            }
        }
        work
    }

    fn summary(work: &MatchedWork) -> (Vec<(Uuid, i64)>, Vec<(Uuid, i64, JobState)>) {
        (work.pulls.clone(), work.jobs.iter().map(|j| (j.subscription, j.seq, j.state)).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Finding candidates by pattern and addressee gives exactly the work of matching each
        /// event against every target, in the same order.
        #[test]
        fn candidates_by_index_give_what_every_target_gives(
            subs in proptest::collection::vec(
                (proptest::collection::vec(("[ab*]", "[xy*]"), 0..3), proptest::option::of("s[12]"),
                 any::<bool>(), any::<bool>(), 0u8..6),
                0..12),
            events in proptest::collection::vec((0u8..4, "[xy]", "s[12]", 0usize..14), 1..10),
        ) {
            let ids: Vec<Uuid> = subs.iter().map(|_| Uuid::now_v7()).collect();
            let list: Vec<MatchTarget> = subs.iter().zip(&ids).map(|((patterns, origin, push, enabled, state), id)| {
                let patterns: Vec<String> = patterns.iter().map(|(r, e)| format!("{r}.{e}")).collect();
                target(*id, &patterns, origin.as_deref(), *push, *enabled, *state)
            }).collect();
            let targets = Targets::new(list);
            let accepted: Vec<AcceptedEvent> = events.iter().map(|(r, e, source, to)| match r {
                0 => event("a", e, source, None),
                1 => event("b", e, source, None),
                // The hub's notices: a test event addressed to one target (or none), and a notice
                // about one target.
                2 => event(hub_core::operational::RESOURCE, "test", hub_core::operational::SOURCE, Some(ids.get(*to).copied().unwrap_or(Uuid::nil()))),
                _ => event(hub_core::operational::RESOURCE, "subscription_disabled", hub_core::operational::SOURCE, ids.get(*to).copied()),
            }).collect();
            let inserts: Vec<(i64, &AcceptedEvent)> = accepted.iter().enumerate().map(|(i, e)| (i as i64 + 1, e)).collect();
            let by_index = match_events("t1", &targets, &inserts);
            let walked = walking_every_target("t1", &targets, &inserts);
            prop_assert_eq!(summary(&by_index), summary(&walked));
        }
    }
}
