//! The ledger's signer (SPEC §11, "Proof of delivery"): its Ed25519 keys, sealed in the store
//! like the other signing keys; the sealer that folds each log's new entries into its Merkle tree
//! and signs a checkpoint every interval while entries arrive; and the changes the API records.
//!
//! Entries are appended by whoever makes them (the recorder with each attempt, the API with each
//! change), numbered by the store. Any replica may seal a log; the store's lock on the log's tree
//! lets one at a time do it, so replicas simply all try. Keys are read again each minute, so a
//! rotation made by one replica is used by all; no key is ever dropped (old checkpoints stay
//! verifiable), and every key is published at `/.well-known/ledger-keys.json`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use hub_core::ledger::checkpoint::LedgerKey;
use hub_core::ledger::entry::{Actor, Change};
use hub_store::{IssuerKeyRecord, NewLedgerEntry, Store};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::secrets::{Purpose, Sealer};
use crate::telemetry::metric;

/// How many entries of one log one integration takes at most.
const BATCH: u64 = 20_000;

/// How often a replica reads the keys again.
const KEYS_REFRESH: Duration = Duration::from_secs(60);

/// The ledger of this hub.
#[derive(Debug)]
pub struct Ledger {
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    clock: Arc<dyn Clock>,
    keys: RwLock<Keyring>,
}

#[derive(Debug, Default)]
struct Keyring {
    signing: Option<Arc<LedgerKey>>,
    published: Vec<Value>,
}

/// A ledger key as the admin API shows it (never its private half).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct LedgerKeyView {
    pub kid: Uuid,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When a newer key replaced it; absent while it signs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Ledger {
    /// The ledger with its keys read (one made when there is none). Without a key-encryption key
    /// no key can be kept: entries are still appended, and sealed once one is configured.
    pub async fn start(store: Arc<dyn Store>, sealer: Arc<Sealer>, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<Self>> {
        let ledger = Arc::new(Self { store, sealer, clock, keys: RwLock::default() });
        if !ledger.sealer.available() {
            tracing::warn!(
                "no key-encryption key configured: ledger entries are kept but no checkpoint is signed until one is"
            );
            return Ok(ledger);
        }
        ledger.refresh().await?;
        if ledger.signing().is_none() {
            ledger.add_key(false).await?;
        }
        Ok(ledger)
    }

    fn signing(&self) -> Option<Arc<LedgerKey>> {
        self.keys.read().ok().and_then(|k| k.signing.clone())
    }

    /// Reads the keys again.
    pub async fn refresh(&self) -> anyhow::Result<Vec<LedgerKeyView>> {
        let records = self.store.ledger_keys().await?;
        let mut ring = Keyring::default();
        for r in &records {
            let key = Arc::new(self.open(r)?);
            ring.published.push(key.jwk());
            if r.retired_at.is_none() {
                ring.signing = Some(key);
            }
        }
        if let Ok(mut keys) = self.keys.write() {
            *keys = ring;
        }
        Ok(records
            .iter()
            .map(|r| LedgerKeyView { kid: r.kid, created_at: r.created_at, retired_at: r.retired_at })
            .collect())
    }

    fn open(&self, r: &IssuerKeyRecord) -> anyhow::Result<LedgerKey> {
        let pkcs8 = self
            .sealer
            .open(r.kid, Purpose::LedgerKey, &r.sealed_key)
            .map_err(|e| anyhow::anyhow!("ledger key {} cannot be opened: {e}", r.kid))?;
        Ok(LedgerKey::from_pkcs8(&r.kid.to_string(), &pkcs8)?)
    }

    /// Makes a key; with `rotate`, the one signing until now is retired (still published, and
    /// its checkpoints still verify).
    pub async fn add_key(&self, rotate: bool) -> anyhow::Result<Vec<LedgerKeyView>> {
        let kid = Uuid::now_v7();
        let now = self.clock.now();
        let pkcs8 = LedgerKey::generate()?;
        let sealed_key = self.sealer.seal(kid, Purpose::LedgerKey, &pkcs8)?;
        let record = IssuerKeyRecord { kid, sealed_key, created_at: now, retired_at: None };
        self.store.add_ledger_key(&record, rotate.then_some(now)).await?;
        self.refresh().await
    }

    /// `/.well-known/ledger-keys.json`: every key that signed or signs checkpoints.
    pub fn keys_document(&self) -> Value {
        json!({ "keys": self.keys.read().map(|k| k.published.clone()).unwrap_or_default() })
    }

    /// The published keys as JWKs.
    pub fn published(&self) -> Vec<Value> {
        self.keys.read().map(|k| k.published.clone()).unwrap_or_default()
    }

    /// Seals every log with new entries: their trees grown and a checkpoint signed each. How
    /// many checkpoints this replica signed.
    pub async fn seal(&self) -> anyhow::Result<u64> {
        let Some(key) = self.signing() else {
            return Ok(0);
        };
        let mut signed = 0;
        for log in self.store.ledger_backlog().await? {
            let now = self.clock.now();
            match self.store.integrate_ledger(&log, BATCH, &|i| i.seal(&key, now)).await {
                Ok(Some(_)) => signed += 1,
                Ok(None) => {}
                // An entry changed or removed in the store before it was sealed: said loudly,
                // never sealed; the other logs go on.
                Err(hub_store::StoreError::Corrupt(why)) => {
                    metrics::counter!(metric::LEDGER_REFUSED).increment(1);
                    tracing::error!(reason = %why, "a ledger entry does not match what was appended; the log is not sealed until it is restored");
                }
                Err(e) => return Err(e.into()),
            }
        }
        metrics::counter!(metric::LEDGER_CHECKPOINTS).increment(signed);
        Ok(signed)
    }

    /// Appends a change to `tenant`'s log (`None`: the platform's). A change the ledger could
    /// not take is logged and counted; the change itself stands.
    pub async fn change(
        &self,
        tenant: Option<&str>,
        actor: &Actor,
        action: &str,
        target: Value,
        before: Option<Value>,
        after: Option<Value>,
    ) {
        let record = change_entry(self.clock.now(), tenant, actor, action, target, before, after);
        if let Err(e) = self.store.append_ledger(std::slice::from_ref(&record)).await {
            metrics::counter!(metric::LEDGER_UNRECORDED).increment(1);
            tracing::error!(error = %e, action, "a change could not be appended to the ledger");
        }
    }
}

/// A change as its log's entry: in `tenant`'s log (`None`: the platform's), secrets redacted.
pub fn change_entry(
    at: chrono::DateTime<chrono::Utc>,
    tenant: Option<&str>,
    actor: &Actor,
    action: &str,
    target: Value,
    before: Option<Value>,
    after: Option<Value>,
) -> NewLedgerEntry {
    let entry = Change::new(at, actor.clone(), action, target, before.map(redacted), after.map(redacted));
    NewLedgerEntry {
        log: tenant.unwrap_or_default().to_owned(),
        at,
        kind: "change",
        data: entry.text(),
        event_id: None,
        digest_key: None,
    }
}

/// Appends a change the hub itself made, off the caller's path (the recorder's loop): a failure
/// is logged and counted like any change the ledger could not take.
pub fn append_soon(store: Arc<dyn Store>, entry: NewLedgerEntry) {
    tokio::spawn(async move {
        if let Err(e) = store.append_ledger(std::slice::from_ref(&entry)).await {
            metrics::counter!(metric::LEDGER_UNRECORDED).increment(1);
            tracing::error!(error = %e, "a change the hub made could not be appended to the ledger");
        }
    });
}

/// Names of fields whose values never enter the ledger, wherever they appear.
const SECRET_FIELDS: [&str; 12] = [
    "secret",
    "signing_secret",
    "previous_secret",
    "credentials",
    "password",
    "client_secret",
    "secret_access_key",
    "session_token",
    "token",
    "key",
    "private_key",
    "authorization",
];

/// `value` with every secret-named field's value replaced by `"[redacted]"`, at any depth.
pub fn redacted(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let secret = SECRET_FIELDS.iter().any(|s| k.eq_ignore_ascii_case(s))
                        || k.to_ascii_lowercase().ends_with("_secret")
                        || k.to_ascii_lowercase().ends_with("password");
                    if secret && !v.is_null() { (k, Value::String("[redacted]".into())) } else { (k, redacted(v)) }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(redacted).collect()),
        other => other,
    }
}

/// Seals the logs every `interval` and reads the keys again every minute, until `stop`.
pub async fn run(ledger: Arc<Ledger>, interval: Duration, stop: CancellationToken) {
    let mut keys_read = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(interval) => {}
        }
        if keys_read.elapsed() >= KEYS_REFRESH && ledger.sealer.available() {
            keys_read = tokio::time::Instant::now();
            if let Err(e) = ledger.refresh().await {
                tracing::warn!(error = %e, "the ledger's keys could not be read again; the ones read before stay");
            }
        }
        if let Err(e) = ledger.seal().await {
            tracing::warn!(error = %e, "sealing the ledger failed; tried again next interval");
        }
    }
    // What was appended before the stop is sealed before leaving.
    if let Err(e) = ledger.seal().await {
        tracing::warn!(error = %e, "sealing the ledger on the way out failed; the next replica seals it");
    }
}

/// Starts the ledger: its signing keys read or made, and checkpoints sealed in the background.
pub(crate) async fn start(
    config: &crate::config::Config,
    common: &crate::Common,
    launch: &mut crate::supervisor::Launch,
) -> anyhow::Result<Arc<Ledger>> {
    use anyhow::Context as _;
    let ledger = Ledger::start(Arc::clone(&common.store), Arc::clone(&common.sealer), Arc::clone(&common.clock))
        .await
        .context("the ledger's signing keys cannot be read or made")?;
    launch.spawn("ledger sealer", run(Arc::clone(&ledger), config.ledger_checkpoint_interval, launch.stop.clone()));
    Ok(ledger)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_at_any_depth() {
        let v = json!({
            "name": "n",
            "sink": {"url": "https://x", "auth": {"client_secret": "s3", "client_id": "c"}, "headers": [{"password": "p"}]},
            "signing_secret": "whsec_1",
            "credentials": null,
        });
        let r = redacted(v);
        let text = r.to_string();
        for secret in ["s3", "\"p\"", "whsec_1"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert_eq!(r["sink"]["auth"]["client_id"], "c");
        assert_eq!(r["credentials"], Value::Null);
    }
}
