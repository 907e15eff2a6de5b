//! Reads of a tenant's inbox: event queries, pull streams, replays and summaries.

use super::{JobState, MatchTarget, StoredEvent};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A page of a tenant's inbox: events with `seq > after`, ascending, matching every filter given.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub after: i64,
    /// Only seqs below this one.
    pub before: Option<i64>,
    pub limit: u32,
    /// The event key's resource type, when the pattern names one (not `*`).
    pub resource_type: Option<String>,
    /// The event key's event type, when the pattern names one (not `*`).
    pub event_type: Option<String>,
    pub source: Option<String>,
    /// Received at or after.
    pub since: Option<DateTime<Utc>>,
    /// Received before.
    pub until: Option<DateTime<Utc>>,
    /// Leave the bodies out (each event's `payload` empty): for readers that judge attributes only.
    pub without_payload: bool,
    /// The newest first (seq descending), for "the latest event of a type"; oldest first otherwise.
    pub newest_first: bool,
}

/// One event read from a pull stream, at its position in the stream (the cursor's unit: the
/// event's own seq for an entry written at ingest, a later position for a replayed one).
#[derive(Debug, Clone, PartialEq)]
pub struct PulledEvent {
    pub position: i64,
    pub event: StoredEvent,
}

/// A store's connection pool at a moment ([`crate::Operations::connections`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Connections {
    pub open: u32,
    pub idle: u32,
    pub max: u32,
}

impl Connections {
    /// A pool's counts as sqlx gives them, held to what can be: its count of open connections
    /// wraps below zero for a moment when connections close at once (a reconnect, a close), and
    /// is then read as the pool's maximum, never summed into an overflow.
    pub fn of(open: u32, idle: usize, max: u32) -> Self {
        let open = open.min(max);
        Self { open, idle: u32::try_from(idle).unwrap_or(u32::MAX).min(open), max }
    }

    /// Two pools' counts together (a reader and a writer).
    pub fn and(self, other: Self) -> Self {
        Self {
            open: self.open.saturating_add(other.open),
            idle: self.idle.saturating_add(other.idle),
            max: self.max.saturating_add(other.max),
        }
    }
}

/// What one pull read gave ([`crate::Inbox::read_pull_page`]).
#[derive(Debug, Clone, PartialEq)]
pub enum PullRead {
    /// The tenant has no such subscription.
    NoSubscription,
    /// `after` lies beyond the tenant's newest seq: nothing was read and the cursor did not move.
    AfterBeyondNewest { newest: i64 },
    /// A page, in position order, and the cursor after it.
    Page { events: Vec<PulledEvent>, cursor: i64 },
}

/// A pull stream entry of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamEntry {
    pub subscription_id: Uuid,
    pub position: i64,
    /// The stream's cursor is at or past it.
    pub read: bool,
}

pub use hub_core::replay::{ReplayState, TimeWindow};

/// A replay to start: its window as asked. The store resolves it to seqs.
#[derive(Debug, Clone)]
pub struct NewReplay {
    pub id: Uuid,
    pub tenant_id: String,
    pub subscription_id: Uuid,
    pub window: TimeWindow,
    pub from_seq: Option<i64>,
    pub to_seq: Option<i64>,
    pub include_delivered: bool,
    /// Only events the subscription had and never got (`hub_core::replay::Selection`).
    pub only_undelivered: bool,
    /// Content filters selecting in place of the subscription's (validated); `None`: its own.
    pub filters: Option<serde_json::Value>,
    /// Wanted events given per second at most (`hub_core::replay::next_step`).
    pub rate: u32,
    pub now: DateTime<Utc>,
}

impl ReplayRecord {
    /// Which matched events it gives again (both flags cannot be stored: the API refuses them
    /// together; were they, only the missed ones).
    pub fn selection(&self) -> hub_core::replay::Selection {
        hub_core::replay::Selection::of(self.include_delivered, self.only_undelivered)
            .unwrap_or(hub_core::replay::Selection::OnlyUndelivered)
    }
}

/// An event a subscription had and never got: what `only_undelivered` replays.
#[derive(Debug, Clone, PartialEq)]
pub struct UndeliveredEvent {
    pub seq: i64,
    pub ce_id: Uuid,
    pub resource_type: String,
    pub event_type: String,
    pub received_at: DateTime<Utc>,
    /// Its latest job's end: `dead` or `cancelled`.
    pub state: JobState,
    /// The most attempts one of its jobs made.
    pub attempts: i64,
    /// Its latest job's last error.
    pub last_error: Option<String>,
}

/// A stored replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayRecord {
    pub id: Uuid,
    pub tenant_id: String,
    pub subscription_id: Uuid,
    pub window: TimeWindow,
    /// The seqs the window was resolved to at creation: what arrived later reaches the
    /// subscription live.
    pub from_seq: i64,
    pub to_seq: i64,
    pub include_delivered: bool,
    pub only_undelivered: bool,
    pub filters: Option<serde_json::Value>,
    pub state: ReplayState,
    /// The last seq walked.
    pub walked_to: i64,
    pub progress: hub_core::replay::Progress,
    pub created_at: DateTime<Utc>,
    /// When it last walked (or started): its rate counts from here.
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Wanted events given per second at most.
    pub rate: u32,
}

/// What asking for a replay did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayStart {
    Started(ReplayRecord),
    /// This replay of the subscription is still running (one at a time).
    Busy(ReplayRecord),
    /// The tenant has no such subscription.
    NoSubscription,
}

/// How far one step of a replay may go.
#[derive(Debug, Clone, Copy)]
pub struct ReplayLimits {
    /// Events walked per step (one transaction), and the most a step gives.
    pub batch: u32,
    /// A push subscription with this many jobs waiting (pending or leased) gets no more until
    /// its destination took some (see `hub_core::replay::next_step`).
    pub pace: u64,
    pub now: DateTime<Utc>,
}

/// What one step of a replay did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayStep {
    /// It walked on (and may have finished).
    Walked(ReplayRecord),
    /// Its destination has enough waiting work; nothing done this time.
    Paced,
    /// It is not running (finished, cancelled, or unknown).
    Idle,
}

/// An event as a replay walks it: what its window and the filter look at.
#[derive(Debug, Clone)]
pub(crate) struct WalkedEvent {
    pub seq: i64,
    pub resource_type: String,
    pub event_type: String,
    pub source: String,
    pub received_at: DateTime<Utc>,
    /// Erased (a tombstone): a replay never gives it again.
    pub erased: bool,
    /// The whole event, read only when the subscription has content filters.
    pub event: Option<StoredEvent>,
}

impl WalkedEvent {
    /// A walked event read whole.
    pub(crate) fn whole(event: StoredEvent) -> Self {
        Self {
            seq: event.seq,
            resource_type: event.resource_type.clone(),
            event_type: event.event_type.clone(),
            source: event.source.clone(),
            received_at: event.received_at,
            erased: event.erasure_id.is_some(),
            event: Some(event),
        }
    }
}

/// The seqs of the walked events, not erased, that lie in the replay's time window and that the
/// subscription's filter wants (`hub_core::wants`, then its content filters on the whole event).
pub(crate) fn wanted(target: &MatchTarget, window: &TimeWindow, walked: &[WalkedEvent]) -> Vec<i64> {
    walked
        .iter()
        .filter(|e| window.contains(e.received_at) && !e.erased)
        .filter(|e| {
            hub_core::EventKey::new(&e.resource_type, &e.event_type)
                .is_ok_and(|key| hub_core::wants(&target.patterns, target.origin.as_deref(), &key, &e.source))
        })
        .filter(|e| target.filters.is_empty() || e.event.as_ref().is_some_and(|ev| ev.passes(&target.filters)))
        .map(|e| e.seq)
        .collect()
}

/// Of the wanted seqs, those the replay gives the subscription again, and its counts: by the
/// core's rules (`hub_core::replay::decide`), given what the subscription already has of each.
pub(crate) fn plan_replay(
    wanted: &[i64],
    selection: hub_core::replay::Selection,
    existing: &std::collections::HashMap<i64, Vec<hub_core::replay::Existing>>,
) -> (Vec<i64>, hub_core::replay::Progress) {
    let mut progress = hub_core::replay::Progress::default();
    let mut create = Vec::new();
    for seq in wanted {
        let has = existing.get(seq).map_or(&[][..], Vec::as_slice);
        let decision = hub_core::replay::select(has, selection);
        progress.count(decision);
        if decision == hub_core::replay::Decision::Create {
            create.push(*seq);
        }
    }
    (create, progress)
}

/// One tenant as the operator's listing shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantSummary {
    pub tenant_id: String,
    /// Events in its inbox.
    pub events: i64,
    pub subscriptions: i64,
    /// API keys not revoked.
    pub api_keys: i64,
    /// Jobs by state: only pending, leased, held and dead are counted.
    pub jobs: Vec<(JobState, i64)>,
}

#[cfg(test)]
mod connections_tests {
    use super::Connections;

    /// Whatever sqlx's counters say, even wrapped below zero, the counts never overflow and
    /// never pass what the pools allow.
    #[test]
    fn pool_counts_hold_whatever_the_counters_say() {
        let wrapped = Connections::of(u32::MAX, usize::MAX, 8);
        assert_eq!(wrapped, Connections { open: 8, idle: 8, max: 8 });
        let both = wrapped.and(Connections::of(u32::MAX - 1, 3, u32::MAX));
        assert_eq!(both, Connections { open: u32::MAX, idle: 11, max: u32::MAX });
        assert_eq!(Connections::of(2, 1, 4).and(Connections::of(1, 1, 1)), Connections { open: 3, idle: 2, max: 5 });
    }
}
