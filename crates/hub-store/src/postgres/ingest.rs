//! Ingest in one round trip: a batch of accepted events is matched here against the
//! subscriptions this process remembers for its tenants, then written by one call of the
//! `hub_ingest` function (migration 0010), which is one statement and so one transaction.
//!
//! The remembered subscriptions carry their tenant's subscription version, which every
//! subscription change moves (a trigger); the function compares the versions under the tenants'
//! sequence locks and writes nothing when one moved, and the batch is matched again against
//! subscriptions read afresh. So a batch is never matched against subscriptions that changed
//! before it was written, in this replica or any other, exactly as when they were read inside
//! the write's transaction.
//!
//! Batches holding quarantine records take the multi-statement transaction (`PgStore::write`).

use super::{
    AcceptedEvent, ClaimedJob, DateTime, EventColumns, HashMap, IngestLease, IngestRecord, JobState, JobToWrite,
    LeasedAtIngest, MatchRow, MatchTarget, PgStore, SUBSCRIPTION_COLUMNS, StoreError, StoreResult, SubscriptionRecord,
    Targets, Utc, Uuid, WriteOutcome, accepted_by_tenant, lease_new_jobs, match_events, ordered, subscription_from_row,
};
use sqlx::Connection;
use sqlx::Row;
use std::sync::{Arc, Mutex};

use crate::model::NewJob;

/// Tenants whose subscriptions are remembered at most; past it the memory starts again.
const REMEMBERED_TENANTS: usize = 4096;
/// Writes tried against moving subscriptions before the batch takes the transaction path.
const TRIES: usize = 3;
/// Payload bytes past which a write lets its connection's grown buffers go.
const LARGE_STATEMENT: usize = 64 * 1024;

/// One tenant's subscriptions that may take new events, as of `version`.
#[derive(Debug)]
pub(super) struct TenantSubscriptions {
    version: i64,
    targets: Targets,
    records: HashMap<Uuid, SubscriptionRecord>,
}

/// What this process remembers of its tenants' subscriptions, by tenant.
#[derive(Debug, Default)]
pub(super) struct SubscriptionMemory(Mutex<HashMap<String, Arc<TenantSubscriptions>>>);

impl SubscriptionMemory {
    fn get(&self, tenant: &str) -> Option<Arc<TenantSubscriptions>> {
        self.lock().get(tenant).cloned()
    }

    fn put(&self, tenant: &str, subs: Arc<TenantSubscriptions>) {
        let mut memory = self.lock();
        if memory.len() >= REMEMBERED_TENANTS && !memory.contains_key(tenant) {
            memory.clear();
        }
        memory.insert(tenant.to_owned(), subs);
    }

    fn forget(&self, tenant: &str) {
        self.lock().remove(tenant);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TenantSubscriptions>>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One distinct `(tenant, ce-id)` of the batch, numbered as the function's `e_ord`.
struct Candidate<'a> {
    tenant: &'a str,
    event: &'a AcceptedEvent,
}

impl PgStore {
    /// Writes a batch of accepted events (no quarantine records) in one statement; see the module
    /// documentation. Falls back to the transaction path when subscriptions keep moving.
    pub(super) async fn write_one_statement(
        &self,
        batch: &[IngestRecord],
        lease: Option<&IngestLease>,
    ) -> StoreResult<(Vec<WriteOutcome>, LeasedAtIngest)> {
        let groups = accepted_by_tenant(batch);
        // Distinct ids per tenant; a later copy in the batch is a duplicate of the first. Each
        // tenant's candidates, numbered in batch order, stand for the seqs the store will give.
        let mut candidates: Vec<Candidate<'_>> = Vec::new();
        let mut of_tenant: Vec<Vec<(i64, &AcceptedEvent)>> = Vec::with_capacity(groups.len());
        let mut of_record: Vec<(usize, usize)> = Vec::with_capacity(batch.len());
        for (tenant, events) in &groups {
            let mut first: HashMap<Uuid, usize> = HashMap::new();
            let mut mine = Vec::new();
            for (index, event) in events {
                let n = *first.entry(event.envelope.id().as_uuid()).or_insert_with(|| {
                    candidates.push(Candidate { tenant, event });
                    mine.push((candidates.len() as i64 - 1, *event));
                    candidates.len() - 1
                });
                of_record.push((*index, n));
            }
            of_tenant.push(mine);
        }
        let tenants: Vec<&str> = groups.keys().copied().collect();
        for _ in 0..TRIES {
            let subs = self.tenant_subscriptions(&tenants).await?;
            let planned = plan(&tenants, &of_tenant, &subs, lease);
            let rows: Vec<(Option<i32>, i64, bool)> = self.call_ingest(&candidates, &tenants, &subs, &planned).await?;
            if rows.iter().any(|(ord, _, _)| ord.is_none()) {
                for (_, index, _) in rows.iter().filter(|(ord, _, _)| ord.is_none()) {
                    if let Some(tenant) = usize::try_from(*index - 1).ok().and_then(|i| tenants.get(i)) {
                        self.subs.forget(tenant);
                    }
                }
                continue;
            }
            let mut written: Vec<Option<(i64, bool)>> = vec![None; candidates.len()];
            for (ord, seq, inserted) in rows {
                if let Some(slot) = ord.and_then(|o| usize::try_from(o).ok()).and_then(|o| written.get_mut(o)) {
                    *slot = Some((seq, inserted));
                }
            }
            let mut outcomes = Vec::with_capacity(of_record.len());
            let mut reported = vec![false; candidates.len()];
            for (index, n) in &of_record {
                let (seq, inserted) =
                    written[*n].ok_or_else(|| StoreError::Corrupt("an ingested event got no seq back".to_owned()))?;
                let first = !std::mem::replace(&mut reported[*n], true);
                let outcome =
                    if inserted && first { WriteOutcome::Inserted { seq } } else { WriteOutcome::Duplicate { seq } };
                outcomes.push((*index, outcome));
            }
            let leased = planned.leased(&written, &subs);
            return Ok((ordered(batch.len(), outcomes)?, leased));
        }
        // Subscriptions kept moving: the transaction reads them under the lock.
        self.write_in_transaction(batch, lease).await
    }

    /// The remembered subscriptions of `tenants`, reading those not remembered in one statement
    /// (so each tenant's version and subscriptions are of one snapshot).
    async fn tenant_subscriptions(&self, tenants: &[&str]) -> StoreResult<Vec<Arc<TenantSubscriptions>>> {
        let mut known: Vec<Option<Arc<TenantSubscriptions>>> = tenants.iter().map(|t| self.subs.get(t)).collect();
        let missing: Vec<&str> = tenants.iter().zip(&known).filter(|(_, k)| k.is_none()).map(|(t, _)| *t).collect();
        if !missing.is_empty() {
            let sql = format!(
                "SELECT t.tenant_id AS of_tenant, COALESCE(v.subs_version, 0) AS subs_version, s.*
                 FROM UNNEST($1::text[]) AS t(tenant_id)
                 LEFT JOIN tenant_sequences v ON v.tenant_id = t.tenant_id
                 LEFT JOIN LATERAL (
                     SELECT {SUBSCRIPTION_COLUMNS}, verified_at IS NOT NULL AS verified_before
                     FROM subscriptions
                     WHERE tenant_id = t.tenant_id AND enabled AND verification_state IN ('active', 'pending')
                 ) s ON true"
            );
            let rows = sqlx::query(&sql).bind(&missing).fetch_all(&self.pool).await?;
            // Per tenant: its version, its targets and its records.
            type Read = (i64, Vec<MatchTarget>, HashMap<Uuid, SubscriptionRecord>);
            let mut read: HashMap<String, Read> = HashMap::new();
            for row in &rows {
                let tenant: String = row.try_get("of_tenant")?;
                let version: i64 = row.try_get("subs_version")?;
                let entry = read.entry(tenant).or_insert_with(|| (version, Vec::new(), HashMap::new()));
                if row.try_get::<Option<Uuid>, _>("id")?.is_none() {
                    continue;
                }
                let record = subscription_from_row(row)?;
                entry.1.push(MatchTarget::new(MatchRow {
                    id: record.id,
                    sink: record.sink.as_str().to_owned(),
                    event_types: row.try_get("event_types")?,
                    origin: record.origin.clone(),
                    filters: row.try_get("filters")?,
                    ordering: record.ordering.as_str().to_owned(),
                    enabled: record.enabled,
                    verification: record.verification.as_str().to_owned(),
                    verified_before: row.try_get("verified_before")?,
                    pace_bucket: record.pace_bucket,
                })?);
                entry.2.insert(record.id, record);
            }
            for (tenant, (version, targets, records)) in read {
                let subs = Arc::new(TenantSubscriptions { version, targets: Targets::new(targets), records });
                self.subs.put(&tenant, Arc::clone(&subs));
                if let Some(i) = tenants.iter().position(|t| *t == tenant) {
                    known[i] = Some(subs);
                }
            }
        }
        known
            .into_iter()
            .zip(tenants)
            .map(|(k, t)| k.ok_or_else(|| StoreError::Corrupt(format!("no subscriptions were read for tenant {t}"))))
            .collect()
    }

    async fn call_ingest(
        &self,
        candidates: &[Candidate<'_>],
        tenants: &[&str],
        subs: &[Arc<TenantSubscriptions>],
        planned: &Planned,
    ) -> StoreResult<Vec<(Option<i32>, i64, bool)>> {
        let mut cols = EventColumns::default();
        let mut ords: Vec<i32> = Vec::with_capacity(candidates.len());
        for (n, c) in candidates.iter().enumerate() {
            ords.push(i32::try_from(n).map_err(|_| StoreError::Corrupt("an ingest batch is too large".into()))?);
            // The seq is the function's to assign.
            cols.push(c.tenant, 0, c.event);
        }
        let versions: Vec<i64> = subs.iter().map(|s| s.version).collect();
        let j = &planned.jobs;
        let mut taken = self.kept.take(&self.pool).await?;
        let rows = sqlx::query_as(
            "SELECT * FROM hub_ingest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36)",
        )
        .bind(tenants)
        .bind(&versions)
        .bind(&ords)
        .bind(&cols.tenant_id)
        .bind(&cols.ce_id)
        .bind(&cols.source)
        .bind(&cols.ce_type)
        .bind(&cols.resource_type)
        .bind(&cols.event_type)
        .bind(&cols.event_time)
        .bind(&cols.schema_version)
        .bind(&cols.subject)
        .bind(&cols.data_content_type)
        .bind(&cols.data_schema)
        .bind(&cols.traceparent)
        .bind(&cols.tracestate)
        .bind(&cols.extensions)
        .bind(&cols.payload)
        .bind(&cols.origin)
        .bind(&cols.kafka_topic)
        .bind(&cols.kafka_partition)
        .bind(&cols.kafka_offset)
        .bind(&cols.received_at)
        .bind(&cols.hub_traceparent)
        .bind(&j.ord)
        .bind(&j.id)
        .bind(&j.sub)
        .bind(&j.state)
        .bind(&j.received)
        .bind(&j.token)
        .bind(&j.until)
        .bind(&j.key)
        .bind(&planned.pull_ord)
        .bind(&planned.pull_sub)
        .bind(planned.wake)
        .bind(&self.channel)
        .fetch_all(&mut *taken.conn)
        .await?;
        // A large batch grew the connection's buffers to its size: they go before it is kept.
        if cols.payload.iter().map(Vec::len).sum::<usize>() > LARGE_STATEMENT {
            taken.conn.shrink_buffers();
        }
        self.kept.give_back(taken);
        Ok(rows)
    }
}

/// The work matching planned for a batch's candidates, before the store says which are new.
#[derive(Default)]
struct Planned {
    jobs: PlannedJobs,
    pull_ord: Vec<i32>,
    pull_sub: Vec<Uuid>,
    /// A deliverable job is left `pending`: other replicas' claimers are woken.
    wake: bool,
    /// The leased jobs, each with the number of its candidate.
    leased: Vec<(usize, ClaimedJob)>,
    /// Deliverable jobs left `pending` for want of room, by candidate (see
    /// `LeasedAtIngest::pending`).
    pending: Vec<usize>,
}

#[derive(Default)]
struct PlannedJobs {
    ord: Vec<i32>,
    id: Vec<Uuid>,
    sub: Vec<Uuid>,
    state: Vec<&'static str>,
    received: Vec<DateTime<Utc>>,
    token: Vec<Option<Uuid>>,
    until: Vec<Option<DateTime<Utc>>>,
    key: Vec<Option<String>>,
}

/// Matches every candidate against its tenant's subscriptions (the core's rule, as the
/// transaction path does) and leases deliverable jobs while the lease has room. `of_tenant`
/// holds each tenant's candidates (in `tenants` order) with their numbers, which stand in for
/// the seqs the store will give them; `subs` is each tenant's subscriptions, in the same order.
fn plan(
    tenants: &[&str],
    of_tenant: &[Vec<(i64, &AcceptedEvent)>],
    subs: &[Arc<TenantSubscriptions>],
    lease: Option<&IngestLease>,
) -> Planned {
    let mut planned = Planned::default();
    let mut room = lease.map_or(0, |l| l.limit);
    for ((tenant, events), subs) in tenants.iter().zip(of_tenant).zip(subs) {
        let work = match_events(tenant, &subs.targets, events);
        for (sub, n) in work.pulls {
            planned.pull_ord.push(n as i32);
            planned.pull_sub.push(sub);
        }
        let mut leased = LeasedAtIngest::default();
        for job in lease_new_jobs(tenant, work.jobs, lease, &mut room, &mut leased) {
            let n = job.job.seq as usize;
            let JobToWrite {
                id,
                job: NewJob { subscription, received_at, ordering_key, .. },
                leased: lease_of,
                waits_for_room,
            } = &job;
            planned.jobs.ord.push(n as i32);
            planned.jobs.id.push(*id);
            planned.jobs.sub.push(*subscription);
            planned.jobs.state.push(job.state().as_str());
            planned.jobs.received.push(*received_at);
            planned.jobs.token.push(lease_of.map(|(token, _)| token));
            planned.jobs.until.push(lease_of.map(|(_, until)| until));
            planned.jobs.key.push(ordering_key.clone());
            planned.wake |= job.state() == JobState::Pending;
            if *waits_for_room {
                planned.pending.push(n);
            }
        }
        planned.leased.extend(leased.jobs.into_iter().map(|j| (j.event_seq as usize, j)));
    }
    planned
}

impl Planned {
    /// What was leased once the store said which candidates were new (`written`: seq, inserted).
    fn leased(self, written: &[Option<(i64, bool)>], subs: &[Arc<TenantSubscriptions>]) -> LeasedAtIngest {
        let fresh = |n: usize| written.get(n).copied().flatten().filter(|(_, inserted)| *inserted);
        let mut out = LeasedAtIngest {
            pending: self.pending.iter().filter(|n| fresh(**n).is_some()).count(),
            ..LeasedAtIngest::default()
        };
        for (n, mut job) in self.leased {
            let Some((seq, _)) = fresh(n) else { continue };
            job.event_seq = seq;
            out.jobs.push(job);
        }
        let mut ids: Vec<Uuid> = out.jobs.iter().map(|j| j.subscription_id).collect();
        ids.sort_unstable();
        ids.dedup();
        out.subscriptions = ids.iter().filter_map(|id| subs.iter().find_map(|s| s.records.get(id)).cloned()).collect();
        out
    }
}
