//! The hub as an OpenID Connect issuer (SPEC §10, keyless AWS): its signing keys, sealed in the
//! store like other secrets; the discovery document and JWKS it serves; and the short-lived
//! tokens AWS destinations exchange for a role's credentials.
//!
//! Every replica reads the keys from the store (again each minute, so a rotation anywhere is
//! seen everywhere): the newest unretired key signs, and every key is published until its
//! overlap after retirement ends (`STREAMING_HUB_OIDC_KEY_OVERLAP`), then deleted by that same
//! minute's pass. The first
//! replica to start with no key makes one.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use hub_core::oidc::SigningKey;
use hub_store::{IssuerKeyRecord, Store};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::clock::Clock;
use crate::secrets::{Purpose, Sealer};

/// How long a token the hub signs is valid: long enough for one exchange at STS.
pub const TOKEN_LIFETIME_SECS: i64 = 300;

/// How often a replica reads the keys again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// The hub's issuer: its URL and keys.
#[derive(Debug)]
pub struct Issuer {
    url: String,
    overlap: chrono::Duration,
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    clock: Arc<dyn Clock>,
    keys: RwLock<Keyring>,
}

#[derive(Debug, Default)]
struct Keyring {
    signing: Option<Arc<SigningKey>>,
    /// Every published key, as JWKs.
    published: Vec<Value>,
}

/// A key as the admin API shows it (never its private half).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct KeyView {
    pub kid: Uuid,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When a newer key replaced it; absent while it signs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Until when the JWKS still lists it; absent while it signs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_until: Option<chrono::DateTime<chrono::Utc>>,
}

impl Issuer {
    /// The issuer at `url`, its keys read (one made when there is none).
    pub async fn start(
        url: String,
        overlap: Duration,
        store: Arc<dyn Store>,
        sealer: Arc<Sealer>,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Arc<Self>> {
        let overlap = chrono::Duration::from_std(overlap)?;
        let issuer = Arc::new(Self { url, overlap, store, sealer, clock, keys: RwLock::default() });
        issuer.refresh().await?;
        if issuer.keys.read().map(|k| k.signing.is_none()).unwrap_or(true) {
            issuer.add_key(false).await?;
        }
        Ok(issuer)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Reads the keys again and opens those still published (a key whose overlap is over is
    /// neither published nor listed; [`Issuer::prune`] deletes it).
    pub async fn refresh(&self) -> anyhow::Result<Vec<KeyView>> {
        let over = self.clock.now() - self.overlap;
        let records = self.store.issuer_keys().await?;
        let mut ring = Keyring::default();
        let mut views = Vec::with_capacity(records.len());
        for r in records.iter().filter(|r| r.retired_at.is_none_or(|at| at >= over)) {
            let key = Arc::new(self.open(r)?);
            ring.published.push(key.jwk());
            // Oldest first: the last unretired key is the newest.
            if r.retired_at.is_none() {
                ring.signing = Some(key);
            }
            views.push(KeyView {
                kid: r.kid,
                created_at: r.created_at,
                retired_at: r.retired_at,
                published_until: r.retired_at.map(|at| at + self.overlap),
            });
        }
        if let Ok(mut keys) = self.keys.write() {
            *keys = ring;
        }
        Ok(views)
    }

    /// Deletes the keys whose overlap is over.
    pub async fn prune(&self) -> anyhow::Result<()> {
        self.store.drop_issuer_keys(self.clock.now() - self.overlap).await?;
        Ok(())
    }

    fn open(&self, r: &IssuerKeyRecord) -> anyhow::Result<SigningKey> {
        let pkcs8 = self
            .sealer
            .open(r.kid, Purpose::IssuerKey, &r.sealed_key)
            .map_err(|e| anyhow::anyhow!("issuer key {} cannot be opened: {e}", r.kid))?;
        Ok(SigningKey::from_pkcs8(&r.kid.to_string(), &pkcs8)?)
    }

    /// Makes a key; with `rotate`, the keys signing until now are retired (still published for
    /// the overlap). Answers every key kept afterwards.
    pub async fn add_key(&self, rotate: bool) -> anyhow::Result<Vec<KeyView>> {
        let kid = Uuid::now_v7();
        let now = self.clock.now();
        let pkcs8 = SigningKey::generate()?;
        let sealed_key = self.sealer.seal(kid, Purpose::IssuerKey, &pkcs8)?;
        let record = IssuerKeyRecord { kid, sealed_key, created_at: now, retired_at: None };
        self.store.add_issuer_key(&record, rotate.then_some(now)).await?;
        self.refresh().await
    }

    /// `/.well-known/openid-configuration`.
    pub fn discovery(&self) -> Value {
        json!({
            "issuer": self.url,
            "jwks_uri": format!("{}/.well-known/jwks.json", self.url),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [hub_core::oidc::ALGORITHM],
            "claims_supported": ["iss", "sub", "aud", "iat", "nbf", "exp", "jti"],
        })
    }

    /// `/.well-known/jwks.json`.
    pub fn jwks(&self) -> Value {
        let keys = self.keys.read().map(|k| k.published.clone()).unwrap_or_default();
        json!({ "keys": keys })
    }
}

impl hub_sinks::TokenIssuer for Issuer {
    fn token(&self, subject: &str, audience: &str) -> Result<String, String> {
        let key = self.keys.read().ok().and_then(|k| k.signing.clone()).ok_or("the hub has no signing key")?;
        let claims = hub_core::oidc::claims(
            &self.url,
            subject,
            audience,
            self.clock.now().timestamp(),
            TOKEN_LIFETIME_SECS,
            &Uuid::now_v7().to_string(),
        );
        key.sign(&claims).map_err(|e| e.to_string())
    }
}

/// Deletes the expired keys and reads the rest again every [`REFRESH_INTERVAL`] until `stop`.
pub async fn refresh_loop(issuer: Arc<Issuer>, stop: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(REFRESH_INTERVAL) => {}
        }
        if let Err(e) = issuer.prune().await {
            tracing::warn!(error = %e, "the OIDC issuer's expired keys could not be deleted; they are not published");
        }
        if let Err(e) = issuer.refresh().await {
            tracing::warn!(error = %e, "the OIDC issuer's keys could not be read again; the ones read before stay");
        }
    }
}
/// Starts the hub as an OIDC issuer when `STREAMING_HUB_OIDC_ISSUER` says so: its signing keys
/// read or made, and refreshed in the background.
pub(crate) async fn start(
    config: &crate::config::Config,
    common: &crate::Common,
    launch: &mut crate::supervisor::Launch,
) -> anyhow::Result<Option<Arc<Issuer>>> {
    use anyhow::Context as _;
    let Some(url) = &config.oidc_issuer else { return Ok(None) };
    let issuer = Issuer::start(
        url.clone(),
        config.oidc_key_overlap,
        Arc::clone(&common.store),
        Arc::clone(&common.sealer),
        Arc::clone(&common.clock),
    )
    .await
    .context("STREAMING_HUB_OIDC_ISSUER: the issuer's signing keys cannot be read or made")?;
    tracing::info!(issuer = %url, "OIDC issuer: AWS destinations may assume roles with this hub's tokens");
    launch.spawn("issuer keys refresh", refresh_loop(Arc::clone(&issuer), launch.stop.clone()));
    Ok(Some(issuer))
}
