//! `POST /v1/subscriptions/{id}/simulate` (SPEC §10, "History tools"): what a draft selection
//! (event types and/or content filters) would have matched of the inbox in a window, beside
//! what the subscription's own matched, with samples of the difference. Nothing changes.
//!
//! The window is read a page at a time, oldest first; each page is judged off the threads that
//! serve HTTP (filters run within the filter budget, as at ingest) while the next page is read.
//! At most [`MAX_SCANNED`] events are read: past that the answer says it is not `complete`.

use axum::Json as AxumJson;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use hub_core::{EventKey, EventPattern, wants};
use hub_store::{EventQuery, StoredEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::auth::TenantCaller;
use super::error::{ApiError, ErrorBody, RFC3339_EXPECTED, RawBody, optional_json, rfc3339};
use super::subscriptions::{load, valid_event_types};

/// Events one simulation reads at most.
pub const MAX_SCANNED: u64 = 1_000_000;
/// Simulations one replica runs at once: each may judge up to a million events against two
/// selections of tenant filters, each within the filter budget, so their number, not only
/// their size, is what keeps them from taking the CPU other tenants' ingest needs. A tenant runs
/// one at a time, so no tenant holds them all.
pub const AT_ONCE: usize = 2;

/// How much lower than the hub's own threads a simulation reads and judges (`nice`): ingest and
/// delivery come first when the CPU is short.
const NICENESS: i32 = 10;

/// The simulations running on this replica: at most [`AT_ONCE`], one per tenant.
#[derive(Debug, Default)]
pub struct Simulations {
    running: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Where simulations read their pages (the queries and the decoding of their rows) and judge
    /// them (on its blocking threads): threads of their own at a lower priority, made at the
    /// first simulation and kept for the hub's life (connections they open stay the store's),
    /// so that a simulation of a million events never takes the CPU from ingest and delivery
    /// when it is short.
    reader: std::sync::OnceLock<Option<tokio::runtime::Runtime>>,
}

impl Drop for Simulations {
    fn drop(&mut self) {
        // Dropped on the hub's runtime: its reading threads are left to end by themselves.
        if let Some(Some(reader)) = self.reader.take() {
            reader.shutdown_background();
        }
    }
}

/// Why a simulation cannot start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// The tenant already runs one here.
    Tenant,
    /// [`AT_ONCE`] run here.
    Replica,
}

/// A running simulation's place, given back when dropped (a panic or a client gone included).
#[derive(Debug)]
pub struct Running {
    simulations: std::sync::Arc<Simulations>,
    tenant: String,
}

impl Simulations {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a place for `tenant`'s simulation, or says why there is none.
    pub fn start(self: &std::sync::Arc<Self>, tenant: &str) -> Result<Running, Busy> {
        let mut running = self.lock();
        if running.contains(tenant) {
            return Err(Busy::Tenant);
        }
        if running.len() >= AT_ONCE {
            return Err(Busy::Replica);
        }
        running.insert(tenant.to_owned());
        Ok(Running { simulations: std::sync::Arc::clone(self), tenant: tenant.to_owned() })
    }

    /// The runtime simulations read and judge on (`None` when its threads could not be made:
    /// they then run on the hub's own).
    fn reader(&self) -> Option<tokio::runtime::Handle> {
        let reader = self.reader.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("simulate-read")
                // Every thread it starts, its blocking ones included (Linux: the calling thread only).
                .on_thread_start(|| {
                    let _ = rustix::process::nice(NICENESS);
                })
                .enable_all()
                .build()
                .inspect_err(|e| tracing::warn!(error = %e, "simulations run on the hub's own threads"))
                .ok()
        });
        reader.as_ref().map(|r| r.handle().clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.simulations.lock().remove(&self.tenant);
    }
}

/// Events read a page (the next is read while one is judged).
const PAGE: u32 = 5_000;

/// A draft selection and the window to try it on.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SimulateRequest {
    /// Draft content filters (omitted: the subscription's own; `[]`: none).
    #[schema(value_type = Option<Vec<super::filters::schema::Filter>>)]
    #[serde(default)]
    pub filters: Option<Value>,
    /// Draft event-type patterns (omitted: the subscription's own).
    pub event_types: Option<Vec<String>>,
    /// Events received at or after this time (RFC 3339). Required.
    #[schema(format = DateTime, example = "2026-12-01T00:00:00Z", required = true)]
    pub since: Option<String>,
    /// Events received before this time (RFC 3339; default now).
    #[schema(format = DateTime)]
    pub until: Option<String>,
    /// Samples at most, 1 to 100 (default 20): differences first.
    #[schema(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
}

/// One sampled event, and which selection matched it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Sample {
    pub ce_id: Uuid,
    pub seq: i64,
    /// `draft`, `current` or `both`.
    #[serde(rename = "in")]
    pub within: &'static str,
}

/// How the draft and the current selection differ over the window.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Simulation {
    /// Events the subscription's own selection matched.
    pub current: u64,
    /// Events the draft matched.
    pub draft: u64,
    pub only_current: u64,
    pub only_draft: u64,
    /// Events of the window read.
    pub scanned: u64,
    /// False when the window held more than the events one simulation reads.
    pub complete: bool,
    pub samples: Vec<Sample>,
}

/// One selection: patterns, an origin, content filters.
struct Selection {
    patterns: Vec<EventPattern>,
    origin: Option<String>,
    filters: hub_core::routing::Filters,
}

impl Selection {
    fn of(types: &[String], origin: Option<String>, filters: &Value) -> Result<Self, ApiError> {
        let patterns = types
            .iter()
            .map(|t| EventPattern::parse(t).map_err(|e| ApiError::internal(format!("a stored pattern: {e}"))))
            .collect::<Result<_, _>>()?;
        let filters =
            hub_core::routing::Filters::compile(filters).map_err(|e| ApiError::validation(&e.path, e.message))?;
        Ok(Self { patterns, origin, filters })
    }

    fn matches(&self, e: &StoredEvent) -> bool {
        EventKey::new(&e.resource_type, &e.event_type)
            .is_ok_and(|key| wants(&self.patterns, self.origin.as_deref(), &key, &e.source))
            && e.passes(&self.filters)
    }
}

#[utoipa::path(
    post, path = "/v1/subscriptions/{id}/simulate", tag = "subscriptions", operation_id = "simulateSelection",
    params(("id" = Uuid, Path, description = "Subscription id")),
    request_body = SimulateRequest,
    responses(
        (status = 200, description = "What the draft and the current selection matched in the window; nothing changes", body = Simulation),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such subscription for this tenant", body = ErrorBody),
        (status = 422, description = "A field is invalid (named in the message)", body = ErrorBody),
        (status = 429, description = "This tenant already runs a simulation on this replica (one at a time per tenant), or as many as the replica runs at once (2) are running; `Retry-After` says when to try again", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn simulate(
    State(state): State<AppState>,
    caller: TenantCaller,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> Result<AxumJson<Simulation>, ApiError> {
    // Another tenant's subscription is not found whatever the body says.
    let sub = load(&state, &caller, &id).await?;
    let req: SimulateRequest = optional_json(&body)?;
    let since = req.since.as_deref().ok_or_else(|| ApiError::validation("since", "is required"))?;
    let since = rfc3339(since).ok_or_else(|| ApiError::validation("since", RFC3339_EXPECTED))?;
    let until = match &req.until {
        Some(raw) => rfc3339(raw).ok_or_else(|| ApiError::validation("until", RFC3339_EXPECTED))?,
        None => state.clock.now(),
    };
    if until <= since {
        return Err(ApiError::validation("until", "must be after since"));
    }
    let limit = match req.limit {
        None => 20,
        Some(n) if (1..=100).contains(&n) => n as usize,
        Some(_) => return Err(ApiError::validation("limit", "must be from 1 to 100")),
    };
    if let Some(types) = &req.event_types {
        valid_event_types(types, state.settings.quotas.patterns_per_subscription)?;
    }
    let draft_filters = match &req.filters {
        None | Some(Value::Null) => None,
        Some(f) => Some(super::filters::valid_filters(Some(f.clone()))?),
    };
    let current = Selection::of(&sub.event_types, sub.origin.clone(), &sub.filters)?;
    let draft = Selection::of(
        req.event_types.as_deref().unwrap_or(&sub.event_types),
        sub.origin.clone(),
        draft_filters.as_ref().unwrap_or(&sub.filters),
    )?;
    let _running = state.simulations.start(caller.tenant.as_str()).map_err(|busy| {
        let message = match busy {
            Busy::Tenant => "a simulation of this tenant is running on this replica (one at a time per tenant); \
                             try again when it is done"
                .to_owned(),
            Busy::Replica => format!("{AT_ONCE} simulations are running on this replica; try again shortly"),
        };
        let mut busy = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "simulations_busy", message);
        busy.retry_after = Some(1);
        busy
    })?;
    // Bodies are read only when a filter looks at them.
    let without_payload = !current.filters.reads_data() && !draft.filters.reads_data();
    let walk = Walk {
        store: std::sync::Arc::clone(&state.store),
        tenant: caller.tenant.to_string(),
        since,
        until,
        without_payload,
        selections: std::sync::Arc::new((current, draft)),
        limit,
        scanned: std::sync::Arc::default(),
        reader: state.simulations.reader(),
    };
    // The window is read as two halves of its seqs at once (a PostgreSQL backend reads one page
    // at a time; two keep both of its and the hub's cores busy): the half below the middle seq
    // first, so samples stay in seq order.
    let first = walk.store.list_events(&walk.tenant, &walk.query(0, None, 1)).await?;
    let Some(lo) = first.first().map(|e| e.seq) else {
        return Ok(AxumJson(Simulation { complete: true, ..Simulation::default() }));
    };
    let hi = walk.store.newest_seq(&walk.tenant).await?;
    let mid = lo + (hi - lo) / 2;
    let (low, high) = tokio::try_join!(walk.run(lo - 1, Some(mid + 1)), walk.run(mid, None))?;
    let mut out = low.out;
    let high_out = high.out;
    out.current += high_out.current;
    out.draft += high_out.draft;
    out.only_current += high_out.only_current;
    out.only_draft += high_out.only_draft;
    out.scanned += high_out.scanned;
    out.complete = low.complete && high.complete;
    let mut differ = low.differ;
    differ.extend(high.differ);
    differ.truncate(limit);
    let mut both = low.both;
    both.extend(high.both);
    let room = limit.saturating_sub(differ.len());
    differ.extend(both.into_iter().take(room));
    out.samples = differ;
    tracing::debug!(
        scanned = out.scanned,
        waited_ms = (low.waited + high.waited).as_millis() as u64,
        judging_ms = (low.judging + high.judging).as_millis() as u64,
        without_payload,
        "simulated"
    );
    Ok(AxumJson(out))
}

/// What one judged event is: its id, its seq, and whether the current and draft selections match.
type Judged = Vec<(Uuid, i64, bool, bool)>;

/// One simulation's reading: the window, the selections judged, the samples kept.
struct Walk {
    store: std::sync::Arc<dyn hub_store::Store>,
    tenant: String,
    since: chrono::DateTime<chrono::Utc>,
    until: chrono::DateTime<chrono::Utc>,
    without_payload: bool,
    selections: std::sync::Arc<(Selection, Selection)>,
    limit: usize,
    /// Events read so far by every part of the walk.
    scanned: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Where its pages are read and judged.
    reader: Option<tokio::runtime::Handle>,
}

/// What one part of a walk found.
struct Tally {
    out: Simulation,
    /// Samples of differences, in seq order, at most `limit`.
    differ: Vec<Sample>,
    /// Samples both matched, in seq order, at most `limit`.
    both: Vec<Sample>,
    complete: bool,
    waited: std::time::Duration,
    judging: std::time::Duration,
}

impl Walk {
    fn query(&self, after: i64, before: Option<i64>, limit: u32) -> EventQuery {
        EventQuery {
            after,
            before,
            limit,
            since: Some(self.since),
            until: Some(self.until),
            without_payload: self.without_payload,
            ..EventQuery::default()
        }
    }

    /// Reads the window's seqs in `(after, before)` a page at a time, the next page read while
    /// one is judged off the threads that serve HTTP.
    async fn run(&self, after: i64, before: Option<i64>) -> Result<Tally, ApiError> {
        use std::sync::atomic::Ordering;
        let read = |after: i64| {
            let (store, tenant, query) =
                (std::sync::Arc::clone(&self.store), self.tenant.clone(), self.query(after, before, PAGE));
            let read = async move { store.list_events(&tenant, &query).await };
            match &self.reader {
                Some(reader) => reader.spawn(read),
                None => tokio::spawn(read),
            }
        };
        let mut t = Tally {
            out: Simulation::default(),
            differ: Vec::new(),
            both: Vec::new(),
            complete: true,
            waited: std::time::Duration::ZERO,
            judging: std::time::Duration::ZERO,
        };
        let mut next = read(after);
        loop {
            let began = std::time::Instant::now();
            let page = next.await.map_err(|_| ApiError::internal("a simulation's read failed"))??;
            t.waited += began.elapsed();
            let Some(last) = page.last() else { break };
            if self.scanned.fetch_add(page.len() as u64, Ordering::Relaxed) >= MAX_SCANNED {
                // Complete only when nothing is left.
                t.complete = false;
                break;
            }
            next = read(last.seq);
            let began = std::time::Instant::now();
            let selections = std::sync::Arc::clone(&self.selections);
            let judge = move || -> Judged {
                page.into_iter().map(|e| (e.ce_id, e.seq, selections.0.matches(&e), selections.1.matches(&e))).collect()
            };
            let judged = match &self.reader {
                Some(reader) => reader.spawn_blocking(judge),
                None => tokio::task::spawn_blocking(judge),
            }
            .await
            .map_err(|_| ApiError::internal("a simulation's page could not be judged"))?;
            t.judging += began.elapsed();
            let out = &mut t.out;
            for (ce_id, seq, current, draft) in judged {
                out.scanned += 1;
                out.current += u64::from(current);
                out.draft += u64::from(draft);
                match (current, draft) {
                    (true, false) => {
                        out.only_current += 1;
                        if t.differ.len() < self.limit {
                            t.differ.push(Sample { ce_id, seq, within: "current" });
                        }
                    }
                    (false, true) => {
                        out.only_draft += 1;
                        if t.differ.len() < self.limit {
                            t.differ.push(Sample { ce_id, seq, within: "draft" });
                        }
                    }
                    (true, true) if t.both.len() < self.limit => t.both.push(Sample { ce_id, seq, within: "both" }),
                    _ => {}
                }
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{AT_ONCE, Busy, Simulations};

    /// A tenant runs one simulation at a time, so it never holds every place: another tenant
    /// gets one while it runs; a place comes back when its simulation ends.
    #[test]
    fn a_tenant_holds_one_place_and_others_get_the_rest() {
        let simulations = Arc::new(Simulations::default());
        let first = simulations.start("a").expect("a place");
        assert_eq!(simulations.start("a").map(|_| ()), Err(Busy::Tenant));
        let other = simulations.start("b").expect("another tenant's place");
        assert_eq!(AT_ONCE, 2);
        assert_eq!(simulations.start("c").map(|_| ()), Err(Busy::Replica));
        drop(first);
        let again = simulations.start("a").expect("its place came back");
        drop((again, other));
        assert!(simulations.lock().is_empty());
    }
}
