//! The manifest refresh: every `STREAMING_HUB_MANIFEST_REFRESH_INTERVAL`, one replica (whichever
//! takes the store's refresh row) fetches each configured source and the payload schemas its
//! manifest points to, and stores what it found. A source that fails keeps its last good
//! manifest, with the error beside it. Every replica reads the stored catalog again when it
//! changes (at most [`RELOAD_EVERY`] later).

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
        let next = now + chrono::Duration::from_std(settings.interval).unwrap_or(chrono::Duration::MAX);
        match store.claim_manifest_refresh(now, next, &signature).await {
            Ok(true) => refresh(store.as_ref(), &fetcher, clock.as_ref(), &settings.sources, &catalog.payloads).await,
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

/// Fetches every source, stores what each gave, and forgets sources no longer configured.
pub async fn refresh(
    store: &dyn Store,
    fetcher: &Fetcher,
    clock: &dyn Clock,
    sources: &[String],
    payloads: &super::payloads::Payloads,
) {
    let fetches =
        sources.iter().map(|location| async move { (location, fetch_one(fetcher, location, payloads).await) });
    for (location, fetch) in futures_util::future::join_all(fetches).await {
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
    let mut schemas = serde_json::Map::new();
    let mut problems = Vec::new();
    for (i, event) in manifest.events.iter().enumerate() {
        let field = format!("events[{i}].dataSchema");
        let schema = match &event.data_schema {
            Some(hub_core::catalog::DataSchema::Inline(v)) => v.clone(),
            Some(d) => match d.fetchable() {
                Some(l) if schemas.contains_key(l) => continue,
                Some(l) => match fetcher.get(l).await.and_then(|b| {
                    serde_json::from_slice::<serde_json::Value>(&b).map_err(|e| format!("is not JSON ({e})"))
                }) {
                    Ok(v) => {
                        schemas.insert(l.to_owned(), v.clone());
                        v
                    }
                    Err(e) => {
                        problems.push(json!({"field": field, "message": format!("{l} {e}")}));
                        continue;
                    }
                },
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
