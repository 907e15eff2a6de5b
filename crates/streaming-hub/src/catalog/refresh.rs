//! The manifest refresh: every `STREAMING_HUB_MANIFEST_REFRESH_INTERVAL`, one replica (whichever
//! takes the store's refresh row) fetches each configured source and the payload schemas its
//! manifest points to, and stores what it found. A source that fails keeps its last good
//! manifest, with the error beside it. Every replica reads the stored catalog again when it
//! changes (at most [`RELOAD_EVERY`] later).
//!
//! **Invariants:** a slow producer costs the refresh a bounded time and holds up no other
//! source: sources are fetched at once and each is stored as soon as it completes; a manifest's
//! schemas are at most [`MAX_SCHEMAS`] distinct locations, fetched [`SCHEMA_FETCHES`] at a time
//! under one deadline ([`SCHEMAS_DEADLINE`]), each location once per refresh (a failed one is
//! not tried again for the next event naming it). A manifest read over HTTP never makes the hub
//! read a local file: only a `file:` source the operator configured may name `file:` schemas. A
//! problem names the field and the location, never a schema's content. Shutdown stops a refresh
//! at once.

use std::sync::Arc;
use std::time::Duration;

use hub_core::catalog::Manifest;
use hub_store::{ManifestFetch, Store};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::EventCatalog;
use super::fetch::Fetcher;
use crate::clock::Clock;
use crate::telemetry::metric;

/// How often a replica looks for a changed catalog, at most.
pub const RELOAD_EVERY: Duration = Duration::from_secs(10);
/// Distinct schema locations one manifest may name; past them, its events' schemas are not fetched.
pub const MAX_SCHEMAS: usize = 256;
/// Schemas of one manifest fetched at once.
pub const SCHEMA_FETCHES: usize = 8;
/// How long one manifest's schemas may take, all together; those not fetched by then are problems.
pub const SCHEMAS_DEADLINE: Duration = Duration::from_secs(30);

/// What the refresh needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub sources: Vec<String>,
    pub interval: Duration,
}

/// Refreshes (when this replica takes the turn) and reloads until `stop`.
pub async fn run(
    catalog: Arc<EventCatalog>,
    store: Arc<dyn Store>,
    fetcher: Fetcher,
    clock: Arc<dyn Clock>,
    settings: Settings,
    stop: CancellationToken,
) {
    let signature = settings.sources.join("\n");
    let tick = settings.interval.min(RELOAD_EVERY);
    loop {
        let now = clock.now();
        let next = crate::clock::after(now, settings.interval);
        match store.claim_manifest_refresh(now, next, &signature).await {
            Ok(true) => {
                let refreshing = refresh(store.as_ref(), &fetcher, clock.as_ref(), &settings.sources, &catalog);
                tokio::select! {
                    () = refreshing => {}
                    // Sources already stored stay; the rest are fetched at the next turn.
                    () = stop.cancelled() => return,
                }
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "could not take the manifest refresh"),
        }
        if let Err(e) = catalog.reload().await {
            tracing::warn!(error = %e, "could not read the event catalog");
        }
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Fetches every source, stores what each gave (and reads the catalog again, so this replica
/// serves it at once), and forgets sources no longer configured.
pub async fn refresh(
    store: &dyn Store,
    fetcher: &Fetcher,
    clock: &dyn Clock,
    sources: &[String],
    catalog: &EventCatalog,
) {
    let payloads = &catalog.payloads;
    use futures_util::StreamExt as _;
    let mut fetches = futures_util::stream::FuturesUnordered::new();
    for location in sources {
        fetches.push(async move { (location, fetch_one(fetcher, location, payloads).await) });
    }
    // Each source is stored as soon as it completes: a slow one holds up no other.
    while let Some((location, fetch)) = fetches.next().await {
        match &fetch {
            ManifestFetch::Fetched { problems, .. } => {
                metrics::counter!(metric::MANIFEST_FETCHES, "result" => "ok").increment(1);
                if !problems.is_empty() {
                    tracing::warn!(source = %location, problems = %json!(problems), "manifest read; some declared schemas cannot be used");
                }
            }
            ManifestFetch::Failed { error } => {
                metrics::counter!(metric::MANIFEST_FETCHES, "result" => "failed").increment(1);
                tracing::warn!(source = %location, error = %error, "manifest source failed; its last good manifest stays");
            }
        }
        if let Err(e) = store.save_manifest(location, &fetch, clock.now()).await {
            tracing::warn!(source = %location, error = %e, "could not store the manifest");
        } else if let Err(e) = catalog.reload().await {
            tracing::warn!(error = %e, "could not read the event catalog");
        }
    }
    if let Err(e) = store.forget_manifests_except(sources).await {
        tracing::warn!(error = %e, "could not forget the manifest sources no longer configured");
    }
}

/// One source: its manifest, and each payload schema it points to that can be fetched.
async fn fetch_one(fetcher: &Fetcher, location: &str, payloads: &super::payloads::Payloads) -> ManifestFetch {
    let document = match fetcher.get(location).await {
        Ok(d) => d,
        Err(error) => return ManifestFetch::Failed { error },
    };
    let manifest = match Manifest::parse(&document) {
        Ok(m) => m,
        Err(e) => return ManifestFetch::Failed { error: format!("the manifest is refused: {e}") },
    };
    let Ok(document) = String::from_utf8(document) else {
        return ManifestFetch::Failed { error: "the manifest is not UTF-8".to_owned() };
    };
    let is_file = |l: &str| l.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("file:"));
    let local_source = is_file(location);
    let mut problems = Vec::new();
    // Every distinct location once, in the order events name them, up to the bound.
    let mut wanted: Vec<&str> = Vec::new();
    for (i, event) in manifest.events.iter().enumerate() {
        let field = format!("events[{i}].dataSchema");
        let Some(l) = event.data_schema.as_ref().and_then(hub_core::catalog::DataSchema::fetchable) else { continue };
        if is_file(l) && !local_source {
            problems.push(json!({"field": field, "message": format!(
                "{} names a local file; only a manifest read from a file: source may",
                shown(l)
            )}));
        } else if !wanted.contains(&l) {
            if wanted.len() == MAX_SCHEMAS {
                problems.push(json!({"field": field, "message": format!(
                    "{} is not fetched: a manifest may name at most {MAX_SCHEMAS} schema locations",
                    shown(l)
                )}));
                continue;
            }
            wanted.push(l);
        }
    }
    let fetched = fetch_schemas(fetcher, &wanted).await;
    let mut schemas = serde_json::Map::new();
    let mut reported = std::collections::HashSet::new();
    for (i, event) in manifest.events.iter().enumerate() {
        let field = format!("events[{i}].dataSchema");
        let schema = match &event.data_schema {
            Some(hub_core::catalog::DataSchema::Inline(v)) => v.clone(),
            Some(d) => match d.fetchable().and_then(|l| fetched.get(l).map(|got| (l, got))) {
                Some((l, Ok(v))) => {
                    schemas.insert(l.to_owned(), v.clone());
                    v.clone()
                }
                Some((l, Err(e))) => {
                    // Once per location, however many events name it.
                    if reported.insert(l) {
                        problems.push(json!({"field": field, "message": format!("{} {e}", shown(l))}));
                    }
                    continue;
                }
                None => continue,
            },
            None => continue,
        };
        if let Err(e) = payloads.compile(&schema) {
            problems.push(json!({"field": field, "message": e}));
        }
    }
    ManifestFetch::Fetched { document, schemas, problems }
}

/// Fetches `locations`, [`SCHEMA_FETCHES`] at a time, all within [`SCHEMAS_DEADLINE`]: each
/// location's schema, or why not (those still out at the deadline included).
async fn fetch_schemas(
    fetcher: &Fetcher,
    locations: &[&str],
) -> std::collections::HashMap<String, Result<serde_json::Value, String>> {
    use futures_util::StreamExt as _;
    let mut got = std::collections::HashMap::new();
    let mut each = Vec::with_capacity(locations.len());
    for l in locations {
        let l: String = (*l).to_owned();
        each.push(async move {
            let result = fetcher.get(&l).await.and_then(|b| {
                serde_json::from_slice::<serde_json::Value>(&b)
                    .map_err(|e| format!("is not JSON (line {}, column {})", e.line(), e.column()))
            });
            (l, result)
        });
    }
    let mut fetches = futures_util::stream::iter(each).buffer_unordered(SCHEMA_FETCHES);
    let deadline = tokio::time::Instant::now() + SCHEMAS_DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, fetches.next()).await {
            Ok(Some((l, result))) => {
                got.insert(l, result);
            }
            Ok(None) => break,
            Err(_) => break,
        }
    }
    for l in locations {
        got.entry((*l).to_owned()).or_insert_with(|| {
            Err(format!(
                "was not fetched within {} s (the manifest's schemas share one deadline)",
                SCHEMAS_DEADLINE.as_secs()
            ))
        });
    }
    got
}

/// A location as a problem shows it: at most 200 characters.
fn shown(location: &str) -> String {
    let cut: String = location.chars().take(200).collect();
    if cut.len() < location.len() { format!("{cut}…") } else { cut }
}
