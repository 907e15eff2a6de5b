//! This replica among the others: heartbeats in the store, the live set, and the destination
//! buckets it paces (`hub_core::delivery::owners`).
//!
//! Every [`HEARTBEAT`] a replica writes its row (with what it paces now, for the listing) and
//! reads the others'; a replica not heard from for [`LIVE`] is gone: the buckets it owned move
//! to the live delivery replicas by rendezvous hashing, and the jobs it held leased are given
//! back at once (`Replicas::take_back_departed`), not when their leases expire. A replica that
//! joins a running cluster claims nothing for [`JOIN_HOLD`], so every other replica has seen it
//! and let go of its buckets first; a replica that stops leaves the live set at once.
//!
//! A hot destination (no limits, no declared rate, answering well, using most of a large
//! allowance: `hub_core::delivery::inflight::helper_share`) is shared: its pacer publishes a
//! share with its heartbeat, and every other replica then claims its subscriptions' jobs too,
//! with at most that share of attempts out at once. The pacer withdraws the share at its next
//! heartbeat once the destination shows trouble, and the helpers send their waiting jobs back.
//!
//! **Invariant:** a replica claims or leases at ingest only jobs of the buckets it owns in its
//! latest view, or of subscriptions shared with it; a job of neither goes back to the store before
//! its attempt; a shared subscription's attempts out at a helper never pass its share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hub_core::delivery::owners;
use hub_store::{Owned, ReplicaRecord, Store};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::capacity::FlightBoard;
use super::lock;
use crate::clock::Clock;
use crate::telemetry::metric;

/// How often a replica writes its heartbeat and reads the others'.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(2);
/// A replica not heard from for this long is gone (three heartbeats).
pub(super) const LIVE: Duration = Duration::from_secs(6);
/// How long a replica that joins others waits before claiming: every other replica beats once
/// meanwhile and lets go of the buckets it takes.
pub(super) const JOIN_HOLD: Duration = Duration::from_millis(3_000);
/// Subscriptions given their destination bucket per heartbeat, at most (rows written before
/// buckets existed, or by an older replica).
const BUCKETS_PER_BEAT: u32 = 500;

/// What this replica knows of the cluster.
#[derive(Debug, Clone)]
struct View {
    /// Every live replica, this one included, by id.
    pub live: Vec<ReplicaRecord>,
    /// The buckets this replica claims now, and the subscriptions others share with it.
    pub owned: Owned,
    /// Of the shared subscriptions, how many attempts this replica may have out for each.
    pub shares: HashMap<Uuid, usize>,
}

/// This replica's place in the cluster.
#[derive(Debug)]
pub struct Membership {
    pub id: Uuid,
    pub name: String,
    delivers: bool,
    started_at: DateTime<Utc>,
    view: Mutex<View>,
    /// Moves whenever the owned buckets change.
    changed: watch::Sender<u64>,
    /// When the last beat was written; past [`LIVE`] without one, this replica claims nothing
    /// (the others may have taken its buckets).
    last_beat: Mutex<Option<Instant>>,
}

impl Membership {
    /// A replica alone (no store to meet others in): it owns every bucket.
    pub(super) fn solo() -> Arc<Self> {
        Arc::new(Self::new(Uuid::new_v4(), true, Utc::now(), Owned::default()))
    }

    fn new(id: Uuid, delivers: bool, started_at: DateTime<Utc>, owned: Owned) -> Self {
        Self {
            id,
            name: replica_name(id),
            delivers,
            started_at,
            view: Mutex::new(View { live: Vec::new(), owned, shares: HashMap::new() }),
            changed: watch::channel(0).0,
            last_beat: Mutex::new(None),
        }
    }

    /// Registers this replica and reads the live set once, before anything is claimed. A
    /// delivering replica that finds other delivering replicas live claims nothing until
    /// [`JOIN_HOLD`] has passed (see [`run`]).
    pub async fn join(store: &Arc<dyn Store>, delivers: bool, clock: &Arc<dyn Clock>) -> anyhow::Result<Arc<Self>> {
        let me = Self::new(Uuid::new_v4(), delivers, clock.now(), Owned::nothing());
        let live = store.beat(&me.record(clock.now(), serde_json::json!([])), LIVE).await?;
        *lock(&me.last_beat) = Some(Instant::now());
        let others = live.iter().filter(|r| r.delivers && r.id != me.id).count();
        let owned = if others == 0 { me.owned_among(&live).0 } else { Owned::nothing() };
        tracing::info!(replica = %me.name, id = %me.id, others, "replica registered");
        *lock(&me.view) = View { live, owned, shares: HashMap::new() };
        Ok(Arc::new(me))
    }

    fn record(&self, now: DateTime<Utc>, pacing: serde_json::Value) -> ReplicaRecord {
        ReplicaRecord {
            id: self.id,
            name: self.name.clone(),
            delivers: self.delivers,
            started_at: self.started_at,
            heartbeat_at: now,
            pacing,
        }
    }

    /// The buckets this replica owns among `live` (`None`, all, when it is the only delivering
    /// replica; nothing when it does not deliver), with the subscriptions the others share with
    /// it and the share of each.
    fn owned_among(&self, live: &[ReplicaRecord]) -> (Owned, HashMap<Uuid, usize>) {
        if !self.delivers {
            return (Owned::nothing(), HashMap::new());
        }
        let delivering: Vec<Uuid> = live.iter().filter(|r| r.delivers).map(|r| r.id).collect();
        if delivering.iter().all(|r| *r == self.id) {
            return (Owned::default(), HashMap::new());
        }
        let mut shares = HashMap::new();
        for other in live.iter().filter(|r| r.delivers && r.id != self.id) {
            for entry in other.pacing.as_array().map(Vec::as_slice).unwrap_or_default() {
                let sub = entry["subscription"].as_str().and_then(|s| s.parse::<Uuid>().ok());
                let share = entry["share"].as_u64().and_then(|n| usize::try_from(n).ok()).filter(|n| *n > 0);
                if let (Some(sub), Some(share)) = (sub, share) {
                    shares.insert(sub, share);
                }
            }
        }
        let mut shared: Vec<Uuid> = shares.keys().copied().collect();
        shared.sort_unstable();
        (Owned { buckets: Some(owners::owned(self.id, &delivering)), shared }, shares)
    }

    /// The buckets to claim and lease at ingest now, and the subscriptions shared with it.
    pub fn owned(&self) -> Owned {
        if self.silent() {
            return Owned::nothing();
        }
        lock(&self.view).owned.clone()
    }

    /// Whether a job of `subscription`, whose destination is in `bucket`, is this replica's to
    /// attempt now.
    pub fn owns(&self, bucket: Option<i32>, subscription: Uuid) -> bool {
        if self.silent() {
            return false;
        }
        lock(&self.view).owned.owns(bucket, subscription)
    }

    /// Whether this replica has not written its heartbeat for [`LIVE`]: the others may have
    /// taken its buckets.
    fn silent(&self) -> bool {
        lock(&self.last_beat).is_some_and(|t| t.elapsed() > LIVE)
    }

    /// How many attempts this replica may have out for `subscription`, when another replica
    /// paces its destination and shares it; `None` when this replica paces it.
    pub(super) fn helper_cap(&self, bucket: Option<i32>, subscription: Uuid) -> Option<usize> {
        let view = lock(&self.view);
        let paced_here = view.owned.buckets.as_ref().is_none_or(|b| b.binary_search(&bucket.unwrap_or(0)).is_ok());
        if paced_here { None } else { view.shares.get(&subscription).copied() }
    }

    /// Live delivering replicas in this replica's view (itself included), at least one.
    pub fn delivering(&self) -> usize {
        lock(&self.view).live.iter().filter(|r| r.delivers).count().max(1)
    }

    /// A lease token of this replica's (see [`hub_store::lease_token`]).
    pub fn token(&self) -> Uuid {
        hub_store::lease_token(self.id)
    }

    /// Wakes whenever the owned buckets change.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Who paces `subscription`'s destination, in `bucket`, by this replica's view: its name,
    /// and (when it is another replica) what it published of the subscription with its last
    /// heartbeat (`Value::Null` when nothing). `None` when no delivering replica is live.
    pub fn paced(&self, bucket: Option<i32>, subscription: Uuid) -> Option<Paced> {
        let view = lock(&self.view);
        let delivering: Vec<Uuid> = view.live.iter().filter(|r| r.delivers).map(|r| r.id).collect();
        let owner = owners::owner(bucket.unwrap_or(0), &delivering)?;
        let pacer = view.live.iter().find(|r| r.id == owner)?;
        let published = (owner != self.id).then(|| {
            let id = subscription.to_string();
            pacer
                .pacing
                .as_array()
                .and_then(|all| all.iter().find(|e| e["subscription"].as_str() == Some(id.as_str())).cloned())
                .unwrap_or(serde_json::Value::Null)
        });
        Some(Paced { by: pacer.name.clone(), published })
    }

    fn update(&self, live: Vec<ReplicaRecord>, owned: Owned, shares: HashMap<Uuid, usize>) {
        let mut view = lock(&self.view);
        let moved = view.owned != owned;
        if moved {
            let count = |o: &Owned| o.buckets.as_ref().map_or(owners::BUCKETS as usize, Vec::len);
            tracing::debug!(shared = owned.shared.len(), "subscriptions shared with this replica");
            tracing::info!(
                replicas = live.iter().filter(|r| r.delivers).count(),
                before = count(&view.owned),
                now = count(&owned),
                "destination buckets this replica paces changed"
            );
        }
        let delivering = live.iter().filter(|r| r.delivers).count();
        metrics::gauge!(metric::REPLICAS_LIVE, "role" => "delivery").set(delivering as f64);
        metrics::gauge!(metric::REPLICAS_LIVE, "role" => "other").set((live.len() - delivering) as f64);
        metrics::gauge!(metric::BUCKETS_OWNED)
            .set(owned.buckets.as_ref().map_or(owners::BUCKETS as usize, Vec::len) as f64);
        *view = View { live, owned, shares };
        drop(view);
        if moved {
            self.changed.send_modify(|n| *n += 1);
        }
    }
}

/// Who paces a subscription's destination (see [`Membership::paced`]).
#[derive(Debug, Clone)]
pub struct Paced {
    /// The pacer's name.
    pub by: String,
    /// What the pacer published of the subscription; `None` when this replica paces it.
    pub published: Option<serde_json::Value>,
}

/// `host:pid` (or the id's head without a host name): what operators see in listings.
fn replica_name(id: Uuid) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty());
    match host {
        Some(host) => format!("{host}:{}", std::process::id()),
        None => format!("replica-{}", &id.simple().to_string()[..8]),
    }
}

/// Heartbeats until `stop`, then leaves the live set: every [`HEARTBEAT`], writes this replica's
/// row with what it paces (`flights`), recomputes the buckets it owns, gives back the jobs of
/// replicas that died, and gives subscriptions written without a bucket theirs.
pub async fn run(
    me: Arc<Membership>,
    store: Arc<dyn Store>,
    flights: Option<(FlightBoard, super::BreakerBoard)>,
    clock: Arc<dyn Clock>,
    poison_threshold: u32,
    stop: CancellationToken,
) {
    let joined = Instant::now();
    let mut every = tokio::time::interval(HEARTBEAT);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = stop.cancelled() => break,
        }
        let pacing =
            flights.as_ref().map_or_else(|| serde_json::json!([]), |(f, b)| f.pacing(clock.now(), b, me.delivering()));
        match store.beat(&me.record(clock.now(), pacing), LIVE).await {
            Ok(live) => {
                *lock(&me.last_beat) = Some(Instant::now());
                let held = joined.elapsed() < JOIN_HOLD && me.owned().buckets.as_ref().is_some_and(Vec::is_empty);
                let (owned, shares) = if held { (Owned::nothing(), HashMap::new()) } else { me.owned_among(&live) };
                me.update(live, owned, shares);
            }
            Err(e) => tracing::warn!(error = %e, "writing this replica's heartbeat failed; tried again"),
        }
        match store.take_back_departed(clock.now(), LIVE, poison_threshold).await {
            Ok(r) if r.recovered + r.poisoned > 0 => {
                tracing::warn!(
                    recovered = r.recovered,
                    poisoned = r.poisoned,
                    "jobs leased by a replica that stopped answering were taken back"
                );
                metrics::counter!(metric::LEASES_RECOVERED).increment(r.recovered);
                metrics::counter!(metric::JOBS_POISONED).increment(r.poisoned);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "taking back the jobs of departed replicas failed"),
        }
        give_buckets(&store).await;
    }
    if let Err(e) = store.leave(me.id).await {
        tracing::warn!(error = %e, "leaving the live set failed; the others see this replica gone within 6 s");
    }
}

/// Gives subscriptions stored without a destination bucket theirs.
async fn give_buckets(store: &Arc<dyn Store>) {
    let subs = match store.unbucketed_subscriptions(BUCKETS_PER_BEAT).await {
        Ok(subs) if subs.is_empty() => return,
        Ok(subs) => subs,
        Err(e) => {
            tracing::debug!(error = %e, "reading subscriptions without a bucket failed");
            return;
        }
    };
    let buckets: Vec<(Uuid, serde_json::Value, i32)> =
        subs.iter().map(|s| (s.id, s.sink_config.clone(), super::targets::pace_bucket(s.id, &s.sink_config))).collect();
    if let Err(e) = store.set_pace_buckets(&buckets).await {
        tracing::debug!(error = %e, "storing subscriptions' buckets failed");
    }
}
