//! An identity provider's published keys: its discovery document, then its JWKS, fetched
//! through the address guard and bounded in time and size like every outbound call; kept, and
//! fetched again when a token names a key not seen (at most once per [`REFETCH_AFTER`]) or when
//! they are older than the refresh interval (a key the provider removed then stops verifying).
//! A provider that cannot be reached keeps the keys last fetched.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use super::Refusal;
use crate::catalog::fetch::Fetcher;

/// A key not seen makes the keys be fetched again, but never sooner than this after the last
/// try: a flood of tokens naming made-up keys costs one fetch per interval.
pub const REFETCH_AFTER: Duration = Duration::from_secs(5);
/// How long one fetch (discovery or keys) may take: a request that needs it waits that long at
/// most; requests whose key is known never wait for it.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest discovery or key-set document read.
pub const MAX_DOCUMENT_BYTES: usize = 512 * 1024;

/// The algorithms a token may be signed with: never `none`, never an HMAC (a public key is not a
/// secret).
pub const ALLOWED: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

/// One usable key: the algorithm it verifies and the key.
struct Key {
    alg: Algorithm,
    decoding: DecodingKey,
}

#[derive(Default)]
struct Held {
    /// By `kid` (keys without one under the empty string).
    keys: HashMap<String, Vec<Key>>,
    fetched_at: Option<Instant>,
    tried_at: Option<Instant>,
    /// Why the last fetch failed, while it is the latest word.
    failure: Option<String>,
    /// Where people sign in, as its discovery document last said.
    endpoints: Option<Endpoints>,
}

/// Where a provider signs people in (the console's authorization code flow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub authorization: String,
    pub token: String,
}

/// One configured issuer and the keys it publishes.
pub struct Issuer {
    /// As configured and as its tokens' `iss` must read (without a trailing `/`).
    pub url: String,
    fetcher: Fetcher,
    refresh: Duration,
    held: RwLock<Held>,
    fetching: tokio::sync::Mutex<()>,
    /// Whether a refresh beside the requests is under way: one at a time, however many requests
    /// find the keys due at once.
    refreshing: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer").field("url", &self.url).finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
}

impl Issuer {
    pub fn new(url: String, fetcher: Fetcher, refresh: Duration) -> Self {
        Self {
            url,
            fetcher,
            refresh,
            held: RwLock::default(),
            fetching: tokio::sync::Mutex::new(()),
            refreshing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        held.keys.get(kid.unwrap_or_default())?.iter().find(|k| k.alg == alg).map(|k| k.decoding.clone())
    }

    fn stale(&self) -> bool {
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        held.fetched_at.is_none_or(|at| at.elapsed() >= self.refresh)
    }

    fn may_try(&self) -> bool {
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        held.tried_at.is_none_or(|at| at.elapsed() >= REFETCH_AFTER)
    }

    /// The key that verifies a token naming `kid` signed with `alg`. A known key answers at once
    /// (keys due for a refresh are fetched again beside the request, never in front of it); an
    /// unknown one waits for one fetch, unless one was tried within [`REFETCH_AFTER`].
    pub async fn key(self: &std::sync::Arc<Self>, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, Refusal> {
        if let Some(key) = self.find(kid, alg) {
            use std::sync::atomic::Ordering;
            if self.stale()
                && self.may_try()
                && self.refreshing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                let issuer = std::sync::Arc::clone(self);
                tokio::spawn(async move {
                    // Cleared however the fetch ends, a panic included.
                    let _done = Refreshed(&issuer);
                    issuer.fetch_once().await;
                });
            }
            return Ok(key);
        }
        // Waits for a fetch already under way (another request's), or makes one unless one was
        // tried within REFETCH_AFTER.
        self.fetch_once().await;
        if let Some(key) = self.find(kid, alg) {
            return Ok(key);
        }
        let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
        Err(match (&held.failure, held.fetched_at) {
            (Some(why), None) => Refusal::KeysUnavailable(why.clone()),
            _ => Refusal::UnknownKey(kid.unwrap_or("(none)").chars().take(64).collect()),
        })
    }

    /// Fetches the keys unless another caller just did (one fetch at a time per issuer).
    async fn fetch_once(&self) {
        let _one = self.fetching.lock().await;
        if !self.may_try() {
            return;
        }
        self.held.write().unwrap_or_else(PoisonError::into_inner).tried_at = Some(Instant::now());
        let fetched = tokio::time::timeout(FETCH_TIMEOUT * 2, self.fetch()).await;
        let mut held = self.held.write().unwrap_or_else(PoisonError::into_inner);
        match fetched {
            Ok(Ok((keys, endpoints))) => {
                held.keys = keys;
                held.endpoints = endpoints;
                held.fetched_at = Some(Instant::now());
                held.failure = None;
            }
            Ok(Err(why)) => {
                tracing::warn!(issuer = %self.url, error = %why, "the identity provider's keys could not be fetched");
                metrics::counter!(crate::telemetry::metric::SSO_KEY_FETCH_FAILURES, "issuer" => self.url.clone())
                    .increment(1);
                held.failure = Some(why);
            }
            Err(_) => {
                let why = format!("did not answer within {} s", (FETCH_TIMEOUT * 2).as_secs());
                tracing::warn!(issuer = %self.url, error = %why, "the identity provider's keys could not be fetched");
                metrics::counter!(crate::telemetry::metric::SSO_KEY_FETCH_FAILURES, "issuer" => self.url.clone())
                    .increment(1);
                held.failure = Some(why);
            }
        }
    }

    /// Where people sign in: known from the last discovery, or fetched now (at most once per
    /// [`REFETCH_AFTER`]).
    pub async fn endpoints(&self) -> Result<Endpoints, String> {
        let known = || self.held.read().unwrap_or_else(PoisonError::into_inner).endpoints.clone();
        if let Some(endpoints) = known() {
            return Ok(endpoints);
        }
        self.fetch_once().await;
        known().ok_or_else(|| {
            let held = self.held.read().unwrap_or_else(PoisonError::into_inner);
            match &held.failure {
                Some(why) => format!("the identity provider could not be reached: {why}"),
                None => {
                    "the identity provider's discovery names no authorization_endpoint or token_endpoint".to_owned()
                }
            }
        })
    }

    async fn fetch(&self) -> Result<(HashMap<String, Vec<Key>>, Option<Endpoints>), String> {
        let discovery_url = format!("{}/.well-known/openid-configuration", self.url);
        let body = self.fetcher.get_url(&discovery_url).await.map_err(|e| format!("discovery {e}"))?;
        let discovery: Discovery =
            serde_json::from_slice(&body).map_err(|e| format!("discovery is not an OpenID configuration: {e}"))?;
        if discovery.issuer.trim_end_matches('/') != self.url {
            return Err(format!("discovery names another issuer ({:?})", cap(&discovery.issuer)));
        }
        // Keys fetched in the clear could be anyone's: an https issuer's keys come over https.
        if self.url.starts_with("https://") && !discovery.jwks_uri.starts_with("https://") {
            return Err("discovery's jwks_uri is not https".to_owned());
        }
        let https = |url: &str| !self.url.starts_with("https://") || url.starts_with("https://");
        let endpoints = match (discovery.authorization_endpoint, discovery.token_endpoint) {
            (Some(authorization), Some(token)) if https(&authorization) && https(&token) => {
                Some(Endpoints { authorization, token })
            }
            _ => None,
        };
        let body = self.fetcher.get_url(&discovery.jwks_uri).await.map_err(|e| format!("jwks_uri {e}"))?;
        let set: JwkSet = serde_json::from_slice(&body).map_err(|e| format!("jwks_uri is not a JWK set: {e}"))?;
        let mut keys: HashMap<String, Vec<Key>> = HashMap::new();
        for jwk in &set.keys {
            if let Some(key) = usable(jwk) {
                keys.entry(jwk.common.key_id.clone().unwrap_or_default()).or_default().push(key);
            }
        }
        Ok((keys, endpoints))
    }
}

/// Marks an issuer's refresh beside the requests over when dropped.
struct Refreshed<'a>(&'a Issuer);

impl Drop for Refreshed<'_> {
    fn drop(&mut self) {
        self.0.refreshing.store(false, std::sync::atomic::Ordering::Release);
    }
}

fn cap(text: &str) -> String {
    text.chars().take(80).collect()
}

/// A published key the hub verifies with, and its one algorithm: RSA for RS256, P-256 for ES256,
/// Ed25519 for EdDSA. A key for encryption, of another kind, or whose `alg` says otherwise is
/// left out; symmetric (`oct`) keys are never used.
fn usable(jwk: &Jwk) -> Option<Key> {
    if jwk.common.public_key_use.as_ref().is_some_and(|u| *u != PublicKeyUse::Signature) {
        return None;
    }
    let alg = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => Algorithm::EdDSA,
        _ => return None,
    };
    if jwk.common.key_algorithm.is_some_and(|stated| format!("{stated:?}") != format!("{alg:?}")) {
        return None;
    }
    Some(Key { alg, decoding: DecodingKey::from_jwk(jwk).ok()? })
}
