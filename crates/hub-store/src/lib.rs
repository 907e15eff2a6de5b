//! Streaming Hub storage.
//!
//! [`Store`] is the one interface the service uses for durable state; [`PgStore`] (production,
//! many replicas) and [`SqliteStore`] (the embedded default, one node) implement it with their
//! own SQL and migrations. Only this crate contains SQL.
//!
//! **Invariants** both backends keep, checked by the contract suite in `tests/it`:
//! - a batch is written in one transaction: all of it or none of it;
//! - `(tenant, ce-id)` is unique: a duplicate writes nothing and is reported with the seq of the
//!   stored event;
//! - `seq` is strictly increasing per tenant in commit order, even with concurrent writers, so a
//!   reader that has seen seq N never later finds a new event below N.
#![forbid(unsafe_code)]

mod model;
mod postgres;
mod sql;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use model::*;
pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// A storage failure. Messages carry the cause for logs; the HTTP edge answers them as an opaque
/// internal error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // The cause is in the message, not also a `source`: an error chain printed whole
    // (`{:#}`) says it once.
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    /// No database answers where the DSN points (refused, unresolvable, silent): waiting may
    /// help, unlike a database that answers and refuses (credentials, a missing database).
    #[error("the database is unreachable: {0}")]
    Unreachable(String),
}

impl StoreError {
    /// The statement failed for want of a live connection: the server ended it (an operator, a
    /// restart, a failover) or the network dropped it. Nothing of the statement was done unless it
    /// was lost on its way back.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            Self::Database(sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_)) => true,
            // Class 08, connection exception; 57P01 to 57P03, the server shutting down or
            // starting; 25006, a write on a server that only reads (after a failover: the
            // connection is not used again, see `postgres/failover.rs`).
            Self::Database(sqlx::Error::Database(e)) => e
                .code()
                .is_some_and(|c| c.starts_with("08") || matches!(c.as_ref(), "57P01" | "57P02" | "57P03" | "25006")),
            _ => false,
        }
    }

    /// The database is briefly out of reach (a lost connection, none free in time, nothing
    /// answering): the same statement may well succeed a moment later, unlike a refusal.
    pub fn is_transient(&self) -> bool {
        self.is_connection_lost()
            || self.is_inbox_migrating()
            || matches!(self, Self::Unreachable(_) | Self::Database(sqlx::Error::PoolTimedOut))
    }

    /// An id past the cutover day refused while the inbox becomes partitioned (migrations
    /// 0021–0023 on PostgreSQL): the last step takes it a moment later.
    fn is_inbox_migrating(&self) -> bool {
        matches!(self, Self::Database(sqlx::Error::Database(e))
            if e.code().as_deref() == Some("23514") && e.constraint() == Some("events_before_cutover"))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if postgres::failover::is_read_only(&e) {
            postgres::failover::note_read_only();
        }
        Self::Database(e)
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        Self::Migrate(e)
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The counts of [`Operations::tenants`], one query each, joined by tenant.
fn tenant_summaries(
    events: Vec<(String, i64)>,
    subscriptions: Vec<(String, i64)>,
    keys: Vec<(String, i64)>,
    jobs: Vec<(String, String, i64)>,
) -> StoreResult<Vec<TenantSummary>> {
    fn at(by: &mut std::collections::BTreeMap<String, TenantSummary>, t: String) -> &mut TenantSummary {
        by.entry(t.clone()).or_insert_with(|| TenantSummary { tenant_id: t, ..TenantSummary::default() })
    }
    let mut by = std::collections::BTreeMap::new();
    for (t, n) in events {
        at(&mut by, t).events = n;
    }
    for (t, n) in subscriptions {
        at(&mut by, t).subscriptions = n;
    }
    for (t, n) in keys {
        at(&mut by, t).api_keys = n;
    }
    for (t, state, n) in jobs {
        let state =
            JobState::parse(&state).ok_or_else(|| StoreError::Corrupt(format!("unknown job state {state:?}")))?;
        at(&mut by, t).jobs.push((state, n));
    }
    Ok(by.into_values().collect())
}

/// Tables every schema of this hub holds once migrated.
const OWN_TABLES: [&str; 4] = ["_sqlx_migrations", "events", "delivery_jobs", "tenant_sequences"];

/// Of a schema's tables, those that make it another application's: all of them unless the
/// hub's own are there.
fn foreign(tables: Vec<String>) -> Vec<String> {
    if OWN_TABLES.iter().all(|own| tables.iter().any(|t| t == own)) { Vec::new() } else { tables }
}

/// The migrations of `migrator` missing from the versions a database reports as applied.
fn pending(migrator: &sqlx::migrate::Migrator, applied: StoreResult<Vec<i64>>) -> StoreResult<Vec<i64>> {
    // No migrations table yet means nothing was applied.
    let applied = applied.unwrap_or_default();
    Ok(migrator.iter().map(|m| m.version).filter(|v| !applied.contains(v)).collect())
}

/// Durable state of the hub: every role the service needs, in one object.
///
/// The roles are separate traits so that each backend keeps one file per aggregate
/// (`inbox.rs`, `subscriptions.rs`, `jobs.rs`, `operations.rs`) with the mirrored SQL side by
/// side, and so that code can ask for the one role it uses. Bring them into scope with
/// `use hub_store::prelude::*`.
pub trait Store:
    Inbox
    + Subscriptions
    + JobQueue
    + Replays
    + Operations
    + Catalog
    + Stats
    + Sessions
    + IssuerKeys
    + Erasures
    + Replicas
    + Ledger
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> Store for T where
    T: Inbox
        + Subscriptions
        + JobQueue
        + Replays
        + Operations
        + Catalog
        + Stats
        + Sessions
        + IssuerKeys
        + Erasures
        + Replicas
        + Ledger
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The role traits, for `use hub_store::prelude::*`.
pub mod prelude {
    pub use crate::{
        Catalog, Erasures, Inbox, IssuerKeys, JobQueue, Operations, Replays, Replicas, Sessions, Stats, Store,
        Subscriptions,
    };
}

/// The per-tenant inbox: accepted events, their seqs, and the pull streams over them.
#[async_trait]
pub trait Inbox: Send + Sync {
    /// Writes one batch of ingest results in one transaction and reports, per record and in the
    /// same order, what was written.
    async fn write_batch(&self, batch: &[IngestRecord]) -> StoreResult<Vec<WriteOutcome>>;

    /// [`Inbox::write_batch`], with the jobs it creates for deliverable subscriptions inserted
    /// already leased under `lease` (up to its limit), in the same transaction; returns them too.
    async fn write_batch_leased(
        &self,
        batch: &[IngestRecord],
        lease: &IngestLease,
    ) -> StoreResult<(Vec<WriteOutcome>, LeasedAtIngest)>;

    /// One stored event of a tenant, by its CloudEvents id.
    async fn event_by_ce_id(&self, tenant: &str, ce_id: Uuid) -> StoreResult<Option<StoredEvent>>;

    /// A page of a tenant's inbox (the event log): events with `seq > query.after`, ascending,
    /// matching every filter of the query.
    async fn list_events(&self, tenant: &str, query: &EventQuery) -> StoreResult<Vec<StoredEvent>>;

    /// The pull stream entries of one event of a tenant, in any subscription.
    async fn stream_entries_for_event(&self, tenant: &str, seq: i64) -> StoreResult<Vec<StreamEntry>>;

    /// A tenant's events with `seq > after`, ascending, at most `limit`.
    async fn events_after(&self, tenant: &str, after: i64, limit: u32) -> StoreResult<Vec<StoredEvent>>;

    /// One event of a tenant's inbox, by seq.
    async fn event_by_seq(&self, tenant: &str, seq: i64) -> StoreResult<Option<StoredEvent>>;

    /// Events by `(tenant, seq)`, in any order; keys with no stored event are left out.
    async fn events_by_seqs(&self, keys: &[(String, i64)]) -> StoreResult<Vec<StoredEvent>>;

    /// The events in a pull subscription's stream at positions above `after`, ascending. Positions
    /// are drawn from the tenant's sequence in commit order, so an entry written later (at ingest
    /// or by a replay) always lands after every position a reader has seen.
    async fn pull_events(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<PulledEvent>>;

    /// One pull read, serialized per subscription across replicas: the page after `after` (else
    /// after the cursor) and the cursor's move past it (SPEC §4, `hub_core::pull`), in one
    /// transaction that holds the subscription's row, so two readers never get the same event.
    /// An `after` beyond the tenant's newest seq reads and moves nothing.
    async fn read_pull_page(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<PullRead>;

    /// The tenant's newest seq (0 when its inbox was never written to).
    async fn newest_seq(&self, tenant: &str) -> StoreResult<i64>;

    /// Moves a pull cursor forward to `to` (never backwards) and returns the cursor after the move.
    async fn advance_pull_cursor(&self, tenant: &str, subscription: Uuid, to: i64) -> StoreResult<i64>;

    /// How many events the inbox holds; an estimate on PostgreSQL (the planner's, kept current by
    /// autovacuum), so asking is cheap however large the table.
    async fn inbox_size(&self) -> StoreResult<i64>;
}

/// Subscriptions. Every change is an intent that writes only its own columns, so a PATCH, a
/// secret rotation, a verification result and the recorder's health updates never overwrite
/// each other, whatever order they commit in.
#[async_trait]
pub trait Subscriptions: Send + Sync {
    /// Stores a new subscription.
    async fn create_subscription(&self, sub: &SubscriptionRecord) -> StoreResult<()>;

    /// Stores a new subscription unless its tenant already has `max` of them; false when it
    /// has. The count and the insert are atomic: concurrent creates for one tenant take turns,
    /// so no number of them can pass the quota.
    async fn create_subscription_within(&self, sub: &SubscriptionRecord, max: u32) -> StoreResult<bool>;

    /// One of a tenant's subscriptions; `None` for an unknown id or another tenant's.
    async fn subscription(&self, tenant: &str, id: Uuid) -> StoreResult<Option<SubscriptionRecord>>;

    /// How many subscriptions a tenant has.
    async fn count_subscriptions(&self, tenant: &str) -> StoreResult<i64>;

    /// A tenant's subscriptions in creation order, after the cursor `after` (an id).
    async fn list_subscriptions(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>>;

    /// The tenant's subscriptions whose `event_types` hold one of `patterns` (compared as written),
    /// or whose id is in `ids`, in id order: one event's candidates, found by index (the caller
    /// passes [`hub_core::patterns_matching`] and the subscriptions that have its jobs or stream
    /// entries, then applies the full matching rule).
    async fn subscriptions_for_event(
        &self,
        tenant: &str,
        patterns: &[String],
        ids: &[Uuid],
    ) -> StoreResult<Vec<SubscriptionRecord>>;

    /// Every tenant's subscriptions (or one tenant's) in id order, after the cursor `after`: the
    /// operator's cross-tenant listing.
    async fn list_all_subscriptions(
        &self,
        tenant: Option<&str>,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>>;

    /// Applies a PATCH: writes only the fields it names. Returns the subscription as stored after
    /// it; `None` when the tenant has no such subscription.
    async fn patch_subscription(
        &self,
        tenant: &str,
        id: Uuid,
        patch: &SubscriptionPatch,
    ) -> StoreResult<Option<SubscriptionRecord>>;

    /// Replaces the signing secret, if the stored one is still `rotation.replaces` (so two
    /// rotations cannot both keep the same previous secret). Returns the subscription after it;
    /// `None` when there is no such subscription or its secret changed meanwhile.
    async fn rotate_secret(
        &self,
        tenant: &str,
        id: Uuid,
        rotation: &SecretRotation,
    ) -> StoreResult<Option<SubscriptionRecord>>;

    /// Records a probe's result, if the destination is still the one probed. Returns the
    /// subscription after it; `None` when there is no such subscription or its destination
    /// changed meanwhile (the result says nothing about the new one).
    async fn set_verification(
        &self,
        tenant: &str,
        id: Uuid,
        result: &VerificationResult,
    ) -> StoreResult<Option<SubscriptionRecord>>;

    /// Deletes a subscription, cancels its pending jobs and drops its pull stream, in one
    /// transaction; false when the tenant has no such subscription.
    async fn delete_subscription(&self, tenant: &str, id: Uuid) -> StoreResult<bool>;

    /// Subscriptions by id, whatever their tenant, in any order (for the dispatcher, which checks
    /// each against its job's tenant); unknown ids are left out.
    async fn subscriptions_by_ids(&self, ids: &[Uuid]) -> StoreResult<Vec<SubscriptionRecord>>;
}

/// The delivery job queue: leased claims, attempts and their outcomes, recovery, redrive.
#[async_trait]
pub trait JobQueue: Send + Sync {
    /// A subscription's delivery jobs in creation order, optionally of one state.
    async fn list_jobs(
        &self,
        tenant: &str,
        subscription: Uuid,
        state: Option<JobState>,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryJob>>;

    /// Leases due `pending` jobs, interleaving tenants: the tenants with due work in order after
    /// `request.after_tenant`, wrapping around, each given its fair share (see
    /// `hub_core::delivery::fair_shares`). Reports the last tenant visited, so that the next claim
    /// starts after it even when the visited tenants had nothing to give.
    async fn claim_jobs(&self, request: &ClaimRequest) -> StoreResult<Claim>;

    /// Gives a leased job back without an attempt, due again at `due_at`.
    async fn release_job(&self, job: Uuid, token: Uuid, due_at: DateTime<Utc>) -> StoreResult<bool>;

    /// Of these leases (`(job, token)`), the ones no longer held: their job was cancelled (an
    /// erasure, a deletion), settled, or leased anew meanwhile, or is gone.
    async fn lost_leases(&self, held: &[(Uuid, Uuid)]) -> StoreResult<Vec<Uuid>>;

    /// Records attempts and applies their outcomes to their jobs and subscriptions, in order and
    /// in one transaction; reports per result, in the same order, what changed. A job changes only
    /// while its lease is still held (`token`).
    async fn complete_attempts(&self, results: &[AttemptResult]) -> StoreResult<Vec<Completed>>;

    /// [`JobQueue::complete_attempts`] for one attempt.
    async fn complete_attempt(&self, result: &AttemptResult) -> StoreResult<Completed> {
        let done = self.complete_attempts(std::slice::from_ref(result)).await?;
        done.into_iter().next().ok_or_else(|| StoreError::Corrupt("no outcome for a recorded attempt".to_owned()))
    }

    /// Takes back jobs whose lease expired without an outcome: pending again, or dead as poison
    /// once `hub_core::delivery::is_poison` says so for their recovery count.
    async fn recover_expired_leases(&self, now: DateTime<Utc>, poison_threshold: u32) -> StoreResult<Recovery>;

    /// Every job of one event of a tenant, in creation order.
    async fn jobs_for_event(&self, tenant: &str, seq: i64) -> StoreResult<Vec<DeliveryJob>>;

    /// The recorded attempts of these jobs of a tenant, oldest first.
    async fn attempts_for_jobs(&self, tenant: &str, jobs: &[Uuid]) -> StoreResult<Vec<AttemptRecord>>;

    /// Puts a subscription's dead jobs (dead-lettered at or after `since`) back to pending with a
    /// fresh retry window; returns how many.
    async fn redrive(
        &self,
        tenant: &str,
        subscription: Uuid,
        since: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;

    /// Puts every waiting job in the state its subscription's deliverability asks for: `held`
    /// while it is paused, disabled, failed or pending verification, `pending` when it is
    /// deliverable. Subscription changes do this for their own jobs in their transaction; this
    /// pass catches jobs that raced with such a change (a retry recorded, a job written by a batch
    /// that read the subscription before the change). Returns how many jobs moved.
    async fn reconcile_waiting_jobs(&self) -> StoreResult<u64>;

    /// Wakes `notify` whenever another process creates delivery jobs (PostgreSQL `LISTEN`);
    /// nothing to do for a single-node store.
    async fn listen_for_jobs(&self, notify: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<()>;

    /// How many delivery jobs are in each state: the open states (pending, held, leased, dead)
    /// exactly; the finished ones as the backend can tell them without reading them all (on
    /// PostgreSQL, its statistics' estimate).
    async fn job_counts(&self) -> StoreResult<Vec<(JobState, i64)>>;

    /// Of these subscriptions, how many jobs each has in each unfinished state (pending,
    /// leased, held) and dead.
    async fn open_jobs(&self, subscriptions: &[Uuid]) -> StoreResult<Vec<(Uuid, JobState, i64)>>;

    /// When the oldest `pending` job that is due at `now` became due; `None` when none is.
    async fn oldest_due_pending(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>>;

    /// A subscription's blocked ordering keys (`hub_core::Ordering::Key`): keys with jobs waiting
    /// behind an earlier unsettled one, the key whose head is oldest first.
    async fn blocked_keys(&self, tenant: &str, subscription: Uuid, limit: u32) -> StoreResult<Vec<BlockedKey>>;

    /// How many ordering keys are blocked, over every subscription.
    async fn count_blocked_keys(&self) -> StoreResult<i64>;
}

/// Replays: a subscription given a window of its tenant's inbox again (see `hub_core::replay`).
#[async_trait]
pub trait Replays: Send + Sync {
    /// Resolves the window to seqs (up to the newest event now: what arrives later reaches the
    /// subscription live) and stores a running replay, unless the subscription has one running.
    async fn start_replay(&self, replay: &NewReplay) -> StoreResult<ReplayStart>;

    /// Events the subscription had and never got (SPEC §10, `…/undelivered`): each with a dead or
    /// cancelled job of it and none delivered or waiting, received within `window`, after seq
    /// `after`, oldest first, at most `limit`.
    async fn undelivered(
        &self,
        tenant: &str,
        subscription: Uuid,
        window: TimeWindow,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<UndeliveredEvent>>;

    /// One replay of a tenant's subscription.
    async fn replay(&self, tenant: &str, subscription: Uuid, id: Uuid) -> StoreResult<Option<ReplayRecord>>;

    /// Running replays, oldest first.
    async fn running_replays(&self, limit: u32) -> StoreResult<Vec<Uuid>>;

    /// Walks a running replay on by at most `limits.batch` events in one transaction: jobs
    /// (`pending`, or `held` while the subscription is not deliverable) or stream entries for
    /// what it gives again, its counters and its position, all or nothing. Steps of one replay
    /// from several processes take turns on its row, so none is walked twice. A replay whose
    /// subscription is gone is cancelled.
    async fn step_replay(&self, id: Uuid, limits: &ReplayLimits) -> StoreResult<ReplayStep>;
}

/// Everything else an operator needs: schema, health, quarantine, the DLQ plane, retention and
/// API keys.
#[async_trait]
pub trait Operations: Send + Sync {
    /// Applies the backend's pending migrations.
    async fn migrate(&self) -> StoreResult<()>;

    /// Versions of this build's migrations not yet applied to the database.
    async fn pending_migrations(&self) -> StoreResult<Vec<i64>>;

    /// Every tenant the hub knows (by events, subscriptions or API keys) with its counts.
    async fn tenants(&self) -> StoreResult<Vec<TenantSummary>>;

    /// The tables of the hub's schema when they are not the hub's own (empty for an empty
    /// schema or one holding this hub's tables): a database that `local` must not migrate.
    async fn foreign_tables(&self) -> StoreResult<Vec<String>>;

    /// Checks that the database answers.
    async fn ping(&self) -> StoreResult<()>;

    /// The store's connections now: open, idle among them, and the most it may open.
    fn connections(&self) -> Connections;

    /// Closes the store's connections once the statements in progress end (the hub stopping):
    /// PostgreSQL sees each session end cleanly instead of a dropped socket, and SQLite's last
    /// connection checkpoints its write-ahead log. Statements started later fail.
    async fn close(&self);

    /// Stores DLQ-plane records; one already stored (same topic, partition, offset) is skipped.
    /// Returns how many were new.
    async fn write_dlq_records(&self, records: &[NewDlqRecord]) -> StoreResult<u64>;

    /// DLQ-plane records, newest first, matching the filter.
    async fn list_dlq(&self, filter: &DlqFilter) -> StoreResult<Vec<DlqEntry>>;

    /// Deletes at most `limit` records of `kind` older than `older_than`, in one transaction.
    /// `None` when another replica is pruning the same kind (PostgreSQL advisory lock).
    async fn prune(&self, kind: PruneKind, older_than: DateTime<Utc>, limit: u32) -> StoreResult<Option<u64>>;

    /// Quarantined records, newest first, matching the filter.
    async fn list_quarantine(&self, filter: &QuarantineFilter) -> StoreResult<Vec<QuarantineEntry>>;

    /// Stores a new API key (its hash only).
    async fn create_api_key(&self, key: &NewApiKey) -> StoreResult<ApiKeyRecord>;

    /// All API keys, newest first, revoked ones included; `before` is a cursor (an id).
    async fn list_api_keys(&self, before: Option<Uuid>, limit: u32) -> StoreResult<Vec<ApiKeyRecord>>;

    /// Revokes a key; false when no live key has that id.
    async fn revoke_api_key(&self, id: Uuid) -> StoreResult<bool>;

    /// Admin keys not revoked.
    async fn count_admin_keys(&self) -> StoreResult<i64>;

    /// The live (not revoked) key with this hash.
    async fn api_key_by_hash(&self, hash: &[u8]) -> StoreResult<Option<ApiKeyRecord>>;
}

/// The event catalog: manifest sources and the types seen in each inbox.
#[async_trait]
pub trait Catalog: Send + Sync {
    /// Takes the next manifest refresh: true (and the next one moved to `next`) when a refresh
    /// is due at `now`, or when the configured `sources` differ from those of the last refresh;
    /// false when another replica took it. One replica at a time refreshes.
    async fn claim_manifest_refresh(&self, now: DateTime<Utc>, next: DateTime<Utc>, sources: &str)
    -> StoreResult<bool>;

    /// Records what a refresh of `location` found; a failure keeps the stored document.
    async fn save_manifest(&self, location: &str, fetch: &ManifestFetch, at: DateTime<Utc>) -> StoreResult<()>;

    /// Forgets the sources no longer configured.
    async fn forget_manifests_except(&self, locations: &[String]) -> StoreResult<u64>;

    /// Every stored manifest source, by location.
    async fn manifests(&self) -> StoreResult<Vec<ManifestRecord>>;

    /// Adds roll-ups of accepted events to the types seen: counts add up, first and last seen
    /// widen.
    async fn record_seen_types(&self, seen: &[SeenType]) -> StoreResult<()>;

    /// The types seen in one tenant's inbox, or in every inbox.
    async fn seen_types(&self, tenant: Option<&str>) -> StoreResult<Vec<SeenType>>;
}

/// Per-minute delivery statistics of subscriptions.
#[async_trait]
pub trait Stats: Send + Sync {
    /// Adds roll-ups to their minutes: counts and latency buckets add up; a roll-up with a
    /// backlog sets that minute's backlog.
    async fn record_minutes(&self, minutes: &[MinuteStats]) -> StoreResult<()>;

    /// A subscription's minutes from `since` on, oldest first.
    async fn minutes(&self, tenant: &str, subscription: Uuid, since: DateTime<Utc>) -> StoreResult<Vec<MinuteStats>>;

    /// Every subscription with open jobs (pending or held), and how many.
    async fn backlogs(&self) -> StoreResult<Vec<Backlog>>;
}

/// Portal sessions (a tenant's portal granted by an operator, as a one-time grant exchanged for
/// a session token) and people's console sessions (signed in through an identity provider).
#[async_trait]
pub trait Sessions: Send + Sync {
    /// Stores a new session with its grant's hash.
    async fn create_portal_session(&self, new: &NewPortalSession) -> StoreResult<()>;

    /// Exchanges a grant, once: the session it grants, now bound to `session_hash`, when the
    /// grant is not used, revoked or expired at `now`; `None` otherwise.
    async fn exchange_portal_grant(
        &self,
        grant_hash: &[u8],
        session_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<PortalSession>>;

    /// The live session (exchanged, not revoked, not expired at `now`) of a session token's hash.
    async fn portal_session(&self, session_hash: &[u8], now: DateTime<Utc>) -> StoreResult<Option<PortalSession>>;

    /// Revokes a live session (its grant too); false when no session has that id, or it is
    /// already revoked or expired (SPEC §9: no live session is a 404).
    async fn revoke_portal_session(&self, id: Uuid, now: DateTime<Utc>) -> StoreResult<bool>;

    /// Stores a person's console session under the hash of its cookie.
    async fn create_person_session(&self, session: &PersonSession, session_hash: &[u8]) -> StoreResult<()>;

    /// The person's session of a cookie's hash, unless it expired at `now`.
    async fn person_session(&self, session_hash: &[u8], now: DateTime<Utc>) -> StoreResult<Option<PersonSession>>;

    /// Ends a person's session (sign-out): false when there was none.
    async fn end_person_session(&self, session_hash: &[u8]) -> StoreResult<bool>;
}

/// The hub's OIDC signing keys (keyless AWS destinations).
#[async_trait]
pub trait IssuerKeys: Send + Sync {
    /// Every kept key, oldest first.
    async fn issuer_keys(&self) -> StoreResult<Vec<IssuerKeyRecord>>;

    /// Adds a key; when `retire_others` is set, every other key still signing is retired then
    /// (a rotation), in the same transaction.
    async fn add_issuer_key(&self, key: &IssuerKeyRecord, retire_others: Option<DateTime<Utc>>) -> StoreResult<()>;

    /// Drops the keys retired before `before` (their overlap is over); how many.
    async fn drop_issuer_keys(&self, before: DateTime<Utc>) -> StoreResult<u64>;
}

/// The ledger (SPEC §11, "Proof of delivery"): append-only entries numbered per log, the complete
/// nodes of each log's Merkle tree, its signed checkpoints and signing keys.
#[async_trait]
pub trait Ledger: Send + Sync {
    /// Appends entries, each to its log, numbered in the order given under the log's head (in
    /// one transaction). Answers their indexes. Delivery outcomes are appended by
    /// [`JobQueue::complete_attempts`] with their attempts instead.
    async fn append_ledger(&self, entries: &[NewLedgerEntry]) -> StoreResult<Vec<u64>>;

    /// The logs with entries not yet in their tree.
    async fn ledger_backlog(&self) -> StoreResult<Vec<String>>;

    /// Integrates up to `limit` new entries of `log`: under the log's tree lock, `seal` is handed
    /// the tree so far and the entries after it, and what it answers (nodes, peaks, checkpoint)
    /// is written in the same transaction. `Ok(None)` when there was nothing to integrate or
    /// another replica holds the lock; an `Err` from `seal` is answered as
    /// [`StoreError::Corrupt`] and nothing is written.
    async fn integrate_ledger(
        &self,
        log: &str,
        limit: u64,
        seal: &(dyn Fn(Integration) -> Result<Sealed, String> + Send + Sync),
    ) -> StoreResult<Option<u64>>;

    /// Entries `from..` of `log`, at most `limit`, in order.
    async fn ledger_entries(&self, log: &str, from: u64, limit: u64) -> StoreResult<Vec<LedgerEntryRecord>>;

    /// `log`'s entries of `kind`, newest first, those before index `before` when given.
    async fn ledger_entries_of_kind(
        &self,
        log: &str,
        kind: &str,
        before: Option<u64>,
        limit: u64,
    ) -> StoreResult<Vec<LedgerEntryRecord>>;

    /// Where `log`'s kept entries begin (size 0 and no peaks until retention first drops some).
    async fn ledger_start(&self, log: &str) -> StoreResult<LedgerStart>;

    /// The hashes of complete nodes of `log`'s tree (level 0 from its entries, those below its
    /// start from the start's peaks), those it holds.
    async fn ledger_nodes(
        &self,
        log: &str,
        nodes: &[hub_core::ledger::Node],
    ) -> StoreResult<Vec<(hub_core::ledger::Node, hub_core::ledger::Hash)>>;

    /// Checkpoints of `log` with sizes in `from..=to`, by size, at most `limit`.
    async fn ledger_checkpoints(
        &self,
        log: &str,
        from: u64,
        to: u64,
        limit: u64,
    ) -> StoreResult<Vec<hub_core::ledger::checkpoint::Checkpoint>>;

    /// The latest checkpoint of `log`.
    async fn latest_ledger_checkpoint(
        &self,
        log: &str,
    ) -> StoreResult<Option<hub_core::ledger::checkpoint::Checkpoint>>;

    /// Every ledger signing key, oldest first (none is ever dropped: old checkpoints stay
    /// verifiable).
    async fn ledger_keys(&self) -> StoreResult<Vec<IssuerKeyRecord>>;

    /// Adds a ledger key; `retire_others` retires the one signing until now (a rotation).
    async fn add_ledger_key(&self, key: &IssuerKeyRecord, retire_others: Option<DateTime<Utc>>) -> StoreResult<()>;

    /// Destroys the digest keys of `tenant`'s entries about `events` (erasure): the entries
    /// stay, their digests can no longer be linked to anything. How many.
    async fn forget_digest_keys(&self, tenant: &str, events: &[Uuid]) -> StoreResult<u64>;

    /// The digest key of one entry, while it is kept.
    async fn digest_key(&self, log: &str, index: u64) -> StoreResult<Option<Vec<u8>>>;
}

/// The replicas of one hub and who paces which destination (docs/SCALING.md): heartbeats, the
/// live set, and the jobs of replicas that died.
#[async_trait]
pub trait Replicas: Send + Sync {
    /// Notes `me` alive now (with what it paces now) and returns every replica seen alive
    /// within `live`, `me` included, by id. The time is the database's (PostgreSQL's
    /// `clock_timestamp()`), so replicas' clocks may differ; `me.heartbeat_at` is not read.
    async fn beat(&self, me: &ReplicaRecord, live: std::time::Duration) -> StoreResult<Vec<ReplicaRecord>>;

    /// Takes a stopping replica out of the live set at once.
    async fn leave(&self, id: Uuid) -> StoreResult<()>;

    /// Gives back the jobs leased by replicas not seen within `live` (by the database's time; their
    /// tokens, see [`lease_token`]): pending again (due at `now`), or dead as poison, as an
    /// expired lease would be; then forgets those replicas.
    async fn take_back_departed(
        &self,
        now: DateTime<Utc>,
        live: std::time::Duration,
        poison_threshold: u32,
    ) -> StoreResult<Recovery>;

    /// Up to `limit` subscriptions whose destination bucket is not stored yet.
    async fn unbucketed_subscriptions(&self, limit: u32) -> StoreResult<Vec<SubscriptionRecord>>;

    /// Stores subscriptions' destination buckets `(id, bucket)`, each only while its destination
    /// is still `sink_config` as read (a change meanwhile stored its own).
    async fn set_pace_buckets(&self, buckets: &[(Uuid, serde_json::Value, i32)]) -> StoreResult<()>;
}

/// Erasures of a data subject's payloads (SPEC §10).
#[async_trait]
pub trait Erasures: Send + Sync {
    async fn create_erasure(&self, new: &NewErasure) -> StoreResult<()>;

    /// One erasure; `None` when none has this id.
    async fn erasure(&self, id: Uuid) -> StoreResult<Option<ErasureRecord>>;

    /// Erasures newest first (one tenant's when `tenant` is given); `before` is a cursor (an id).
    async fn list_erasures(
        &self,
        tenant: Option<&str>,
        before: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<ErasureRecord>>;

    /// A tenant's erasures still running, oldest first.
    async fn running_erasures(&self, tenant: &str) -> StoreResult<Vec<ErasureRecord>>;

    /// The oldest running erasure no runner holds at `now` (or whose runner's lease ran out),
    /// leased until `lease_until`.
    async fn claim_erasure(&self, now: DateTime<Utc>, lease_until: DateTime<Utc>)
    -> StoreResult<Option<ErasureRecord>>;

    /// Applies one step over the inbox in one transaction: the matched events become tombstones
    /// (payload, subject and extensions replaced, `erased_by` set; events already erased are left
    /// as they are), their pending and held jobs are cancelled, their jobs' ordering keys and
    /// their attempts' response bodies removed, and the erasure's progress and counts move on.
    /// Answers what this step changed.
    async fn erase_events(&self, step: &ErasureStep<'_>) -> StoreResult<ErasureCounts>;

    /// Turns these DLQ-plane or quarantined records of the erasure's tenant into tombstones
    /// (body replaced, headers reduced to `ce-id`, `ce-type` and `ce-time`) and counts them.
    async fn erase_kept(
        &self,
        erasure: Uuid,
        tenant: &str,
        kind: KeptRecords,
        ids: &[i64],
        tombstone: &[u8],
    ) -> StoreResult<i64>;

    /// Marks an erasure done and drops its sealed match (SQLite: and checkpoints its write-ahead
    /// log, so the pages as they were before leave it).
    async fn finish_erasure(&self, id: Uuid, now: DateTime<Utc>) -> StoreResult<()>;
}

/// Where the hub keeps its state.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// The embedded default: one SQLite file, created when missing.
    Sqlite { path: std::path::PathBuf },
    /// PostgreSQL, optionally inside a schema (`search_path`).
    Postgres { dsn: String, schema: Option<String>, pool: PoolSettings },
}

/// The shape of a PostgreSQL connection pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    pub max_connections: u32,
    /// Connections kept open even when idle.
    pub min_connections: u32,
    /// A connection is replaced after this long (`None`: never).
    pub max_lifetime: Option<std::time::Duration>,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self { max_connections: 16, min_connections: 0, max_lifetime: Some(std::time::Duration::from_secs(30 * 60)) }
    }
}

/// Opens the configured store (without migrating it).
pub async fn connect(config: &StoreConfig) -> StoreResult<Arc<dyn Store>> {
    Ok(match config {
        StoreConfig::Sqlite { path } => Arc::new(SqliteStore::open(path).await?),
        StoreConfig::Postgres { dsn, schema, pool } => {
            Arc::new(PgStore::connect_with(dsn, schema.as_deref(), pool).await?)
        }
    })
}

#[cfg(test)]
mod foreign_tests {
    #[test]
    fn a_schema_is_foreign_unless_it_holds_the_hubs_tables() {
        let t = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert!(super::foreign(t(&[])).is_empty(), "empty");
        let ours = t(&["_sqlx_migrations", "delivery_jobs", "events", "replays", "tenant_sequences"]);
        assert!(super::foreign(ours).is_empty(), "this hub's");
        assert_eq!(super::foreign(t(&["invoices"])), t(&["invoices"]));
        // Another sqlx application's tables are not this hub's.
        assert_eq!(super::foreign(t(&["_sqlx_migrations", "users"])), t(&["_sqlx_migrations", "users"]));
    }
}
