//! The event catalog (SPEC §9): the event types producers declare in their manifests, the types
//! each tenant's inbox has actually received, and payload checks against declared schemas.
//!
//! Manifests are fetched by one replica at a time ([`refresh`]) and kept in the store with the
//! schemas they point to, so every replica reads the same catalog and a source that fails keeps
//! its last good manifest. Each replica holds the parsed catalog in memory ([`Snapshot`]) and
//! reads it again when the stored one changes.

pub mod fetch;
pub mod learn;
pub mod payloads;
pub mod refresh;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use hub_core::catalog::{DataSchema, DeclaredEvent, Manifest};
use hub_core::{EventKey, EventPattern};
use hub_store::{ManifestRecord, SeenType, Store, StoreResult};

/// One declared event type, with the manifest that declares it.
#[derive(Debug, Clone)]
pub struct Declared {
    pub location: String,
    /// The producer's `ce-source`.
    pub source: String,
    pub service_name: Option<String>,
    pub event: DeclaredEvent,
}

/// A manifest source as the admin view shows it.
#[derive(Debug, Clone)]
pub struct SourceState {
    pub record: ManifestRecord,
    /// The producer it describes, once a document parsed.
    pub source: Option<String>,
    pub service_name: Option<String>,
    pub events: usize,
}

/// The catalog as read from the store.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub declared: Vec<Declared>,
    pub sources: Vec<SourceState>,
    /// What the snapshot was built from: `(location, fetched_at, checked_at)` of each record.
    version: Vec<(String, Option<DateTime<Utc>>, DateTime<Utc>)>,
}

impl Snapshot {
    /// Builds the catalog from the stored sources, and the payload checks' table.
    fn build(records: Vec<ManifestRecord>, payloads: &payloads::Payloads) -> (Self, payloads::Table) {
        let mut snapshot = Self {
            version: records.iter().map(|r| (r.location.clone(), r.fetched_at, r.checked_at)).collect(),
            ..Self::default()
        };
        let mut table = payloads::Table::new();
        for record in records {
            let manifest = record.document.as_deref().and_then(|d| Manifest::parse(d.as_bytes()).ok());
            let state = SourceState {
                source: manifest.as_ref().map(|m| m.publisher.source.as_str().to_owned()),
                service_name: manifest.as_ref().and_then(|m| m.publisher.service_name.clone()),
                events: manifest.as_ref().map_or(0, |m| m.events.len()),
                record,
            };
            if let Some(m) = manifest {
                let source = m.publisher.source.as_str().to_owned();
                for event in m.events {
                    let schema = match &event.data_schema {
                        Some(DataSchema::Inline(v)) => Some(v.clone()),
                        Some(d) => d.fetchable().and_then(|l| state.record.schemas.get(l).cloned()),
                        None => None,
                    };
                    if payloads.mode() != payloads::Mode::Off
                        && let Some(Ok(validator)) = schema.map(|s| payloads.compile(&s))
                    {
                        table
                            .entry((source.clone(), event.key.to_string()))
                            .or_default()
                            .push(payloads::Rule { schema_version: event.schema_version.clone(), validator });
                    }
                    snapshot.declared.push(Declared {
                        location: state.record.location.clone(),
                        source: source.clone(),
                        service_name: m.publisher.service_name.clone(),
                        event,
                    });
                }
            }
            snapshot.sources.push(state);
        }
        (snapshot, table)
    }
}

/// The catalog of one process.
#[derive(Debug)]
pub struct EventCatalog {
    store: Arc<dyn Store>,
    current: RwLock<Arc<Snapshot>>,
    pub learner: Arc<learn::Learner>,
    pub payloads: payloads::Payloads,
}

impl EventCatalog {
    pub fn new(store: Arc<dyn Store>, mode: payloads::Mode) -> Self {
        Self { store, current: RwLock::default(), learner: Arc::default(), payloads: payloads::Payloads::new(mode) }
    }

    /// The catalog now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Reads the stored catalog again when it changed since the last read.
    pub async fn reload(&self) -> StoreResult<()> {
        let records = self.store.manifests().await?;
        let version: Vec<_> = records.iter().map(|r| (r.location.clone(), r.fetched_at, r.checked_at)).collect();
        if self.snapshot().version == version && !version.is_empty() {
            return Ok(());
        }
        let (snapshot, table) = Snapshot::build(records, &self.payloads);
        let failing = snapshot.sources.iter().filter(|s| s.record.error.is_some()).count();
        metrics::gauge!(crate::telemetry::metric::MANIFEST_SOURCES_FAILING).set(failing as f64);
        self.payloads.install(table);
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(snapshot);
        Ok(())
    }

    /// The types a tenant may subscribe to: declared ones and those in its own inbox.
    pub async fn types_for(&self, tenant: Option<&str>) -> StoreResult<Vec<EventType>> {
        let seen = self.store.seen_types(tenant).await?;
        Ok(merge(&self.snapshot().declared, &seen))
    }

    /// The indexes of `patterns` that match no type the tenant could receive: none declared, none
    /// in its inbox, and none of the hub's own operational events.
    pub async fn unknown_patterns(
        &self,
        tenant: &str,
        patterns: &[String],
        origin: Option<&str>,
    ) -> StoreResult<Vec<usize>> {
        let known = self.types_for(Some(tenant)).await?;
        let mut keys: Vec<(EventKey, BTreeSet<String>)> =
            known.iter().filter_map(|t| EventKey::parse(&t.key).ok().map(|k| (k, t.sources.clone()))).collect();
        for kind in hub_core::operational::Kind::ALL {
            if let Ok(key) = EventKey::new(hub_core::operational::RESOURCE, kind.as_str()) {
                keys.push((key, BTreeSet::from([hub_core::operational::SOURCE.to_owned()])));
            }
        }
        Ok(patterns
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                let Ok(pattern) = EventPattern::parse(p) else { return false };
                !keys.iter().any(|(key, sources)| {
                    hub_core::wants(std::slice::from_ref(&pattern), None, key, "")
                        && origin.is_none_or(|o| sources.contains(o))
                })
            })
            .map(|(i, _)| i)
            .collect())
    }
}

/// One event type in the catalog: what its producers declare and what was seen of it.
#[derive(Debug, Clone, Default)]
pub struct EventType {
    /// `<resourcetype>.<eventtype>`.
    pub key: String,
    pub sources: BTreeSet<String>,
    pub declared: Vec<Declared>,
    pub seen: Vec<SeenType>,
}

/// Declared and seen types by key, each key once, in key order.
pub fn merge(declared: &[Declared], seen: &[SeenType]) -> Vec<EventType> {
    let mut types: BTreeMap<String, EventType> = BTreeMap::new();
    for d in declared {
        let key = d.event.key.to_string();
        let t = types.entry(key.clone()).or_insert_with(|| EventType { key, ..EventType::default() });
        t.sources.insert(d.source.clone());
        t.declared.push(d.clone());
    }
    for s in seen {
        let t = types
            .entry(s.event_key.clone())
            .or_insert_with(|| EventType { key: s.event_key.clone(), ..EventType::default() });
        t.sources.insert(s.source.clone());
        t.seen.push(s.clone());
    }
    types.into_values().collect()
}

/// Starts the event catalog: read as stored (before the first record is judged), its manifests
/// refreshed and the types seen learnt in the background.
pub(crate) async fn start(
    config: &crate::config::Config,
    common: &crate::Common,
    launch: &mut crate::supervisor::Launch,
) -> anyhow::Result<Arc<EventCatalog>> {
    let catalog = Arc::new(EventCatalog::new(Arc::clone(&common.store), config.validate_payloads));
    if let Err(e) = catalog.reload().await {
        tracing::warn!(error = %e, "could not read the event catalog; starting without it");
    }
    let fetcher = fetch::Fetcher::new(config.allow_private_sinks).map_err(anyhow::Error::msg)?;
    launch.spawn(
        "manifest refresh",
        refresh::run(
            Arc::clone(&catalog),
            Arc::clone(&common.store),
            fetcher,
            Arc::clone(&common.clock),
            refresh::Settings { sources: config.manifest_sources.clone(), interval: config.manifest_refresh_interval },
            launch.stop.clone(),
        ),
    );
    launch.spawn(
        "event type learner",
        learn::run(Arc::clone(&catalog.learner), Arc::clone(&common.store), launch.stop.clone()),
    );
    Ok(catalog)
}
