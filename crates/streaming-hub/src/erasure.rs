//! Erasure (SPEC §10, LGPD/GDPR): a data subject's payloads replaced by tombstones wherever the
//! hub keeps them, by a background runner that survives a restart.
//!
//! `POST /admin/erasures` stores the request with its match sealed; a runner (any replica, one at
//! a time per erasure through a lease) walks the tenant's inbox by seq a page at a time, judges
//! each page off the async threads, and applies each page's matches in one transaction with the
//! erasure's progress: killed at any point, the next runner goes on from the last page written.
//! Then the tenant's DLQ-plane and quarantined records; then the erasure is done and its match is
//! dropped, so the audit record keeps who, when, why and counts, never the values.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hub_core::routing::data::ContentPattern;
use hub_store::{DlqFilter, ErasureRecord, ErasureStep, EventQuery, KeptRecords, QuarantineFilter, Store, StoredEvent};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::secrets::{Purpose, Sealer};

/// How long a runner holds an erasure without writing progress before another may take it (a
/// page is written well within it; a runner killed mid-way is replaced after it).
pub const LEASE: Duration = Duration::from_secs(10);

/// What an erasure matches: the events (and kept records) of one data subject.
#[derive(Debug, Clone)]
pub enum Match {
    /// The CloudEvents `subject`.
    Subject(String),
    /// The `partitionkey` extension.
    PartitionKey(String),
    /// A content pattern over the JSON body (the `data` filter dialect).
    Data(Box<ContentPattern>),
}

/// The longest subject or partition key an erasure names.
pub const MAX_VALUE: usize = 4096;

impl Match {
    /// `{"subject": "…"}`, `{"partitionkey": "…"}` or `{"data": <content pattern>}`; the error
    /// names the field below `match`.
    pub fn parse(value: &Value) -> Result<Self, (String, String)> {
        let map = value.as_object().ok_or_else(|| ("match".to_owned(), "must be an object".to_owned()))?;
        let [(kind, v)] = map.iter().collect::<Vec<_>>()[..] else {
            return Err(("match".to_owned(), "must name exactly one of subject, partitionkey or data".to_owned()));
        };
        let text = |v: &Value| match v.as_str() {
            Some(s) if !s.is_empty() && s.len() <= MAX_VALUE => Ok(s.to_owned()),
            _ => Err((format!("match.{kind}"), format!("must be a string of 1 to {MAX_VALUE} bytes"))),
        };
        match kind.as_str() {
            "subject" => Ok(Self::Subject(text(v)?)),
            "partitionkey" => Ok(Self::PartitionKey(text(v)?)),
            "data" => ContentPattern::compile(v)
                .map(|p| Self::Data(Box::new(p)))
                .map_err(|e| (format!("match.data{}", e.path), e.message)),
            other => Err((format!("match.{other}"), "is not a match: use subject, partitionkey or data".to_owned())),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Subject(_) => "subject",
            Self::PartitionKey(_) => "partitionkey",
            Self::Data(_) => "data",
        }
    }

    /// Whether an inbox event is the subject's.
    pub fn event(&self, e: &StoredEvent) -> bool {
        match self {
            Self::Subject(s) => e.subject.as_deref() == Some(s.as_str()),
            Self::PartitionKey(k) => e.extensions.get("partitionkey").map(String::as_str) == Some(k.as_str()),
            Self::Data(p) => body_matches(p, &e.payload),
        }
    }

    /// Whether a kept record (its headers as received, its body) is the subject's.
    pub fn record(&self, headers: &BTreeMap<String, String>, body: &[u8]) -> bool {
        let header = |name: &str| {
            headers.iter().find_map(|(k, v)| {
                let k = k.to_ascii_lowercase();
                let bare = k.strip_prefix("ce-").or_else(|| k.strip_prefix("ce_")).unwrap_or(&k);
                (bare == name).then_some(v.as_str())
            })
        };
        match self {
            Self::Subject(s) => header("subject") == Some(s.as_str()),
            Self::PartitionKey(k) => header("partitionkey") == Some(k.as_str()),
            Self::Data(p) => body_matches(p, body),
        }
    }
}

fn body_matches(pattern: &ContentPattern, body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|json| pattern.matches(&json))
}

/// What an erased payload (or kept record's body) becomes.
pub fn tombstone(erasure: Uuid) -> Vec<u8> {
    json!({"erased": {"erasure_id": erasure}}).to_string().into_bytes()
}

/// How the runner walks the inbox.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Events read and judged a page, each page's matches written in one transaction.
    pub page: u32,
    /// How long the runner waits for work when there is none and nobody wakes it.
    pub idle: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self { page: 2_000, idle: Duration::from_secs(5) }
    }
}

/// Runs erasures until `stop`: whichever is running and held by no other runner, oldest first.
pub async fn run(
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    loop {
        let now = clock.now();
        let lease = chrono::Duration::from_std(LEASE).unwrap_or_default();
        match store.claim_erasure(now, now + lease).await {
            Ok(Some(erasure)) => {
                let id = erasure.id;
                match erase(&*store, &sealer, &*clock, settings, erasure, &stop).await {
                    Ok(true) => tracing::info!(erasure = %id, "erasure done"),
                    Ok(false) => return,
                    Err(e) => {
                        tracing::warn!(erasure = %id, error = %e, "erasure interrupted; it goes on after its lease");
                    }
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "could not look for erasures to run"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = wake.notified() => {}
            () = tokio::time::sleep(settings.idle) => {}
        }
    }
}

/// What a match selects now: of the tenant's inbox events not yet erased, how many it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    pub matched: u64,
    pub events: u64,
}

impl Selection {
    /// Whether an erasure of this selection runs only with its count confirmed: it takes every
    /// event the tenant has, or more than `max_unconfirmed`.
    pub fn needs_confirmation(self, max_unconfirmed: u64) -> bool {
        self.matched > 0 && (self.matched == self.events || self.matched > max_unconfirmed)
    }
}

/// Counts what `matcher` selects in a tenant's inbox now, a page at a time as the runner reads
/// it (judged off the async threads), erasing nothing.
pub async fn select(store: &dyn Store, tenant: &str, matcher: Arc<Match>, page: u32) -> anyhow::Result<Selection> {
    let mut after = 0;
    let mut selection = Selection { matched: 0, events: 0 };
    while let Some(judged) = judge_page(store, tenant, &matcher, after, page).await? {
        selection.matched += judged.matched.len() as u64;
        selection.events += judged.live;
        after = judged.last;
    }
    Ok(selection)
}

/// One page of a tenant's inbox after `after`, judged off the async threads.
struct Judged {
    /// The page's last seq, and how many events it read.
    last: i64,
    read: usize,
    /// Its events not yet erased, and those of them the match takes (`(seq, ce_id)`).
    live: u64,
    matched: Vec<(i64, Uuid)>,
}

/// Reads and judges the page after `after` (a subject or partition key without the bodies);
/// `None` past the inbox's end.
async fn judge_page(
    store: &dyn Store,
    tenant: &str,
    matcher: &Arc<Match>,
    after: i64,
    page: u32,
) -> anyhow::Result<Option<Judged>> {
    let without_payload = !matches!(**matcher, Match::Data(_));
    let query = EventQuery { after, limit: page, without_payload, ..EventQuery::default() };
    let events = store.list_events(tenant, &query).await?;
    let Some(last) = events.last().map(|e| e.seq) else { return Ok(None) };
    let judge = Arc::clone(matcher);
    Ok(Some(
        tokio::task::spawn_blocking(move || {
            let live: Vec<&StoredEvent> = events.iter().filter(|e| e.erasure_id.is_none()).collect();
            let matched = live.iter().filter(|e| judge.event(e)).map(|e| (e.seq, e.ce_id)).collect();
            Judged { last, read: events.len(), live: live.len() as u64, matched }
        })
        .await?,
    ))
}

/// Opens an erasure's sealed match.
pub fn open_match(sealer: &Sealer, e: &ErasureRecord) -> anyhow::Result<Match> {
    let sealed = e.sealed_match.as_deref().ok_or_else(|| anyhow::anyhow!("the erasure's match was dropped"))?;
    let bytes = sealer.open(e.id, Purpose::ErasureMatch, sealed)?;
    let value: Value = serde_json::from_slice(&bytes)?;
    Match::parse(&value).map_err(|(field, problem)| anyhow::anyhow!("{field}: {problem}"))
}

/// Takes one erasure from where it stands to done; `false` when `stop` came first (the lease
/// lets another runner go on).
async fn erase(
    store: &dyn Store,
    sealer: &Sealer,
    clock: &dyn Clock,
    settings: Settings,
    erasure: ErasureRecord,
    stop: &CancellationToken,
) -> anyhow::Result<bool> {
    let matcher = Arc::new(open_match(sealer, &erasure)?);
    let tombstone = tombstone(erasure.id);
    let lease = chrono::Duration::from_std(LEASE)?;
    let mut after = erasure.scanned_to;
    loop {
        if stop.is_cancelled() {
            return Ok(false);
        }
        let Some(Judged { last, read, matched, .. }) =
            judge_page(store, &erasure.tenant_id, &matcher, after, settings.page).await?
        else {
            break;
        };
        let scanned = read as i64;
        // This page's events are erased with its step; earlier pages' already are, as the store
        // says.
        let erased: HashSet<Uuid> = matched.iter().map(|(_, ce_id)| *ce_id).collect();
        let mut seqs: Vec<i64> = matched.iter().map(|(seq, _)| *seq).collect();
        // The hub's own notices about those events (a dead letter names the event, its ordering
        // key and the last error, which may quote it) go with them.
        seqs.extend(notices_of_erased(store, &erasure.tenant_id, after, last, &erased).await?);
        seqs.sort_unstable();
        seqs.dedup();
        let now = clock.now();
        let step = ErasureStep {
            erasure: erasure.id,
            tenant_id: &erasure.tenant_id,
            seqs: &seqs,
            tombstone: &tombstone,
            scanned_to: last,
            scanned,
            now,
            lease_until: now + lease,
        };
        // The ledger's digests of what was sent about these events can no longer be linked to
        // anything once their keys are gone (SPEC §11); the entries stay. First, so a runner
        // killed between the two does it again with the page.
        store.forget_digest_keys(&erasure.tenant_id, &erased.iter().copied().collect::<Vec<_>>()).await?;
        store.erase_events(&step).await?;
        after = last;
    }
    for kind in [KeptRecords::Dlq, KeptRecords::Quarantine] {
        let ids = kept_matches(store, &erasure.tenant_id, kind, &matcher).await?;
        for chunk in ids.chunks(settings.page as usize) {
            store.erase_kept(erasure.id, &erasure.tenant_id, kind, chunk, &tombstone).await?;
            // An empty step renews the lease.
            let now = clock.now();
            let renew = ErasureStep {
                erasure: erasure.id,
                tenant_id: &erasure.tenant_id,
                seqs: &[],
                tombstone: &tombstone,
                scanned_to: after,
                scanned: 0,
                now,
                lease_until: now + lease,
            };
            store.erase_events(&renew).await?;
        }
    }
    store.finish_erasure(erasure.id, clock.now()).await?;
    // What the erasure did goes to the tenant's ledger beside its request (counts, never values).
    if let Some(done) = store.erasure(erasure.id).await? {
        let c = &done.counts;
        let entry = crate::ledger::change_entry(
            clock.now(),
            Some(&erasure.tenant_id),
            &hub_core::ledger::entry::Actor::Hub,
            "erasure.completed",
            json!({ "erasure": erasure.id }),
            None,
            Some(json!({
                "scanned": c.scanned, "events": c.events, "jobs_cancelled": c.jobs_cancelled,
                "responses": c.responses, "dlq_records": c.dlq_records, "quarantined": c.quarantined,
            })),
        );
        if let Err(e) = store.append_ledger(std::slice::from_ref(&entry)).await {
            metrics::counter!(crate::telemetry::metric::LEDGER_UNRECORDED).increment(1);
            tracing::error!(error = %e, erasure = %erasure.id, "the erasure's completion could not be appended to the ledger");
        }
    }
    Ok(true)
}

/// The seqs, in `(after, last]`, of the tenant's dead-letter notices (`streaming_hub.
/// job_dead_lettered`, not yet erased) about an erased event: one of `erased` (this page's, erased
/// with it), or one the store shows erased (by an earlier page or erasure).
async fn notices_of_erased(
    store: &dyn Store,
    tenant: &str,
    after: i64,
    last: i64,
    erased: &HashSet<Uuid>,
) -> anyhow::Result<Vec<i64>> {
    let query = EventQuery {
        after,
        before: Some(last.saturating_add(1)),
        limit: u32::MAX,
        resource_type: Some(hub_core::operational::RESOURCE.to_owned()),
        event_type: Some(hub_core::operational::Kind::JobDeadLettered.as_str().to_owned()),
        ..EventQuery::default()
    };
    let mut seqs = Vec::new();
    for notice in store.list_events(tenant, &query).await? {
        if notice.erasure_id.is_some() {
            continue;
        }
        let about = serde_json::from_slice::<Value>(&notice.payload)
            .ok()
            .and_then(|v| v["event_id"].as_str().and_then(|id| Uuid::parse_str(id).ok()));
        let Some(about) = about else { continue };
        let gone = erased.contains(&about)
            || store.event_by_ce_id(tenant, about).await?.is_some_and(|e| e.erasure_id.is_some());
        if gone {
            seqs.push(notice.seq);
        }
    }
    Ok(seqs)
}

/// The ids of a tenant's DLQ-plane or quarantined records the match takes, newest first.
async fn kept_matches(store: &dyn Store, tenant: &str, kind: KeptRecords, m: &Match) -> anyhow::Result<Vec<i64>> {
    const PAGE: u32 = 500;
    let mut ids = Vec::new();
    let mut before = None;
    loop {
        let page: Vec<(i64, bool)> = match kind {
            KeptRecords::Dlq => {
                let filter = DlqFilter {
                    tenant: Some(tenant.to_owned()),
                    before_id: before,
                    limit: PAGE,
                    ..DlqFilter::default()
                };
                store
                    .list_dlq(&filter)
                    .await?
                    .iter()
                    .map(|d| (d.id, m.record(&d.record.headers, &d.record.body)))
                    .collect()
            }
            KeptRecords::Quarantine => {
                let filter = QuarantineFilter {
                    tenant: Some(tenant.to_owned()),
                    before_id: before,
                    limit: PAGE,
                    ..QuarantineFilter::default()
                };
                store.list_quarantine(&filter).await?.iter().map(|q| (q.id, m.record(&q.headers, &q.body))).collect()
            }
        };
        let Some(&(last, _)) = page.last() else { break };
        ids.extend(page.iter().filter(|(_, hit)| *hit).map(|(id, _)| *id));
        before = Some(last);
        if page.len() < PAGE as usize {
            break;
        }
    }
    Ok(ids)
}

/// Starts the erasure runner; the answer wakes it (an erasure was requested).
pub(crate) fn start(
    config: &crate::config::Config,
    common: &crate::Common,
    launch: &mut crate::supervisor::Launch,
) -> Arc<Notify> {
    let wake = Arc::new(Notify::new());
    launch.spawn(
        "erasure runner",
        run(
            Arc::clone(&common.store),
            Arc::clone(&common.sealer),
            Arc::clone(&common.clock),
            Settings { page: config.erasure.page, ..Settings::default() },
            Arc::clone(&wake),
            launch.stop.clone(),
        ),
    );
    wake
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_names_one_field_and_says_which_is_wrong() {
        assert_eq!(Match::parse(&json!({"subject": "cpf:123"})).map(|m| m.kind()), Ok("subject"));
        assert_eq!(Match::parse(&json!({"partitionkey": "k"})).map(|m| m.kind()), Ok("partitionkey"));
        assert_eq!(Match::parse(&json!({"data": {"customer": {"cpf": ["123"]}}})).map(|m| m.kind()), Ok("data"));
        let field = |v: Value| Match::parse(&v).expect_err("invalid").0;
        assert_eq!(field(json!("cpf")), "match");
        assert_eq!(field(json!({})), "match");
        assert_eq!(field(json!({"subject": "a", "partitionkey": "b"})), "match");
        assert_eq!(field(json!({"subject": ""})), "match.subject");
        assert_eq!(field(json!({"subject": "x".repeat(MAX_VALUE + 1)})), "match.subject");
        assert_eq!(field(json!({"partitionkey": 7})), "match.partitionkey");
        assert_eq!(field(json!({"email": "a@b"})), "match.email");
        assert!(field(json!({"data": {"a": [{"numeric": ["~", 1]}]}})).starts_with("match.data"), "a bad operator");
    }

    #[test]
    fn kept_records_match_by_header_in_either_binding_or_by_body() {
        let headers = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        let subject = Match::Subject("cpf:1".into());
        assert!(subject.record(&headers("ce-subject", "cpf:1"), b""));
        assert!(subject.record(&headers("ce_subject", "cpf:1"), b""));
        assert!(subject.record(&headers("CE-Subject", "cpf:1"), b""));
        assert!(!subject.record(&headers("ce-subject", "cpf:2"), b""));
        assert!(!subject.record(&headers("x-subject", "cpf:1"), b""));
        let key = Match::PartitionKey("k".into());
        assert!(key.record(&headers("ce_partitionkey", "k"), b""));
        let data = Match::parse(&json!({"data": {"cpf": ["1"]}})).expect("pattern");
        assert!(data.record(&BTreeMap::new(), br#"{"cpf": "1", "name": "Ana"}"#));
        assert!(!data.record(&BTreeMap::new(), br#"{"cpf": "2"}"#));
        assert!(!data.record(&BTreeMap::new(), b"not json"));
    }
}
