//! People signed in with their company's identity provider (SPEC §11, "Single sign-on and
//! roles"; docs/OPERATIONS.md, "Single sign-on"): JWT bearer tokens from the configured OIDC
//! issuers (`STREAMING_HUB_SSO_ISSUERS`), each verified against its issuer's published keys
//! (`keys.rs`) with `iss`, `aud`, `exp` and `nbf` checked, and the roles its claim grants
//! (`roles.rs`).
//!
//! A token is refused before any handler runs, with the reason in the answer: an algorithm
//! other than RS256, ES256 or EdDSA (`none` and HMACs included), an issuer not configured, a key
//! the issuer does not publish, a bad signature, an expired or not yet valid token, another
//! audience. A token verified once is kept (by its hash) until it expires, for at most
//! [`VERIFIED_FOR`]: a person's next requests cost a hash, not a signature check.

pub mod console;
pub mod keys;
pub mod roles;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Validation;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use roles::{Grants, Role};

use crate::catalog::fetch::Fetcher;

/// The clock skew allowed on `exp` and `nbf`.
pub const LEEWAY: Duration = Duration::from_secs(30);
/// How long a verified token is trusted without checking its signature again (never past its
/// `exp`). A key removed by the provider stops verifying new tokens at the next fetch; tokens
/// already verified with it live on for this long at most.
pub const VERIFIED_FOR: Duration = Duration::from_secs(60);
/// Verified tokens kept at most; a full cache starts over.
const CACHED: usize = 10_000;
/// The longest token read.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// How people's tokens are checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Issuer URLs, without a trailing `/`.
    pub issuers: Vec<String>,
    /// The `aud` every token must carry.
    pub audience: String,
    /// Where the roles are, dot-separated (`roles`, `realm_access.roles`, `groups`).
    pub roles_claim: String,
    /// How often each issuer's keys are fetched again.
    pub refresh: Duration,
    /// Whether the providers may be on private addresses (`STREAMING_HUB_ALLOW_PRIVATE_SINKS`).
    pub allow_private: bool,
    /// The console's sign-in, when people sign in to it through the first issuer.
    pub console: Option<console::Client>,
}

/// A person, as a verified token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    pub issuer: String,
    pub subject: String,
    pub grants: Grants,
}

impl Person {
    /// Who this is, as the ledger records a change they make.
    pub fn actor(&self) -> hub_core::ledger::entry::Actor {
        hub_core::ledger::entry::Actor::Person { issuer: self.issuer.clone(), subject: self.subject.clone() }
    }
}

/// Why a token is refused (answered with 401 and this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the token is not a JWT")]
    Malformed,
    #[error("the token's algorithm {0:?} is refused (RS256, ES256 or EdDSA only)")]
    Algorithm(String),
    #[error("the token's issuer is not one this hub trusts")]
    Issuer,
    #[error("the token names a key its issuer does not publish ({0})")]
    UnknownKey(String),
    #[error("the issuer's keys could not be fetched: {0}")]
    KeysUnavailable(String),
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token is for another audience")]
    Audience,
    #[error("the token lacks a required claim ({0})")]
    Claim(&'static str),
}

type Verified = (Arc<Person>, Instant);

impl Refusal {
    /// The refusal's kind, as the metric `streaming_hub_sso_refusals_total` labels it.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Algorithm(_) => "algorithm",
            Refusal::Issuer => "issuer",
            Refusal::UnknownKey(_) => "unknown_key",
            Refusal::KeysUnavailable(_) => "keys_unavailable",
            Refusal::Signature => "signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::Audience => "audience",
            Refusal::Claim(_) => "claim",
        }
    }
}

/// The identity providers people sign in with.
#[derive(Debug)]
pub struct Sso {
    issuers: Vec<Arc<keys::Issuer>>,
    audience: String,
    roles_claim: Vec<String>,
    /// Tokens verified lately, by hash: who, and until when.
    verified: Mutex<HashMap<[u8; 32], Verified>>,
    /// The console's sign-in at the first issuer, when configured.
    console: Option<console::Console>,
}

impl Sso {
    pub fn new(settings: &Settings) -> Result<Self, String> {
        let fetcher = Fetcher::bounded(settings.allow_private, keys::MAX_DOCUMENT_BYTES, keys::FETCH_TIMEOUT)?;
        Ok(Self {
            issuers: settings
                .issuers
                .iter()
                .map(|url| Arc::new(keys::Issuer::new(url.clone(), fetcher.clone(), settings.refresh)))
                .collect(),
            audience: settings.audience.clone(),
            roles_claim: settings.roles_claim.split('.').map(str::to_owned).collect(),
            verified: Mutex::default(),
            console: settings.console.clone().map(|client| console::Console::new(client, fetcher)),
        })
    }

    /// Whether a bearer token is a JWT (three base64url parts, a JSON header first) rather than
    /// one of the hub's own tokens.
    pub fn is_jwt(token: &str) -> bool {
        token.starts_with("eyJ") && token.split('.').count() == 3
    }

    /// The person a token names, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Arc<Person>, Refusal> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(person) = self.cached(&hash) {
            return Ok(person);
        }
        let (issuer, claims) = self.check(token, &self.audience).await?;
        let person = Arc::new(self.person(&issuer.url, &claims)?);
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        self.keep(hash, &person, exp);
        Ok(person)
    }

    /// A token's issuer and claims once its signature, `iss`, `aud` (`audience`), `exp` and
    /// `nbf` are checked.
    async fn check(&self, token: &str, audience: &str) -> Result<(Arc<keys::Issuer>, Value), Refusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(head), Some(body)) = (parts.next(), parts.next()) else { return Err(Refusal::Malformed) };
        let header: Value = decode_part(head)?;
        let alg_name = header.get("alg").and_then(Value::as_str).ok_or(Refusal::Malformed)?;
        let alg = keys::ALLOWED
            .into_iter()
            .find(|a| format!("{a:?}") == alg_name)
            .ok_or_else(|| Refusal::Algorithm(alg_name.chars().take(16).collect()))?;
        // The issuer picks the keys; the signature and `iss` are checked with them below.
        let claimed: Value = decode_part(body)?;
        let iss = claimed.get("iss").and_then(Value::as_str).ok_or(Refusal::Claim("iss"))?;
        let issuer = self.issuers.iter().find(|i| i.url == iss.trim_end_matches('/')).ok_or(Refusal::Issuer)?;
        let kid = header.get("kid").and_then(Value::as_str);
        let key = issuer.key(kid, alg).await?;
        let mut validation = Validation::new(alg);
        validation.leeway = LEEWAY.as_secs();
        validation.validate_nbf = true;
        validation.set_audience(&[audience]);
        validation.set_issuer(&[iss]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(refusal)?;
        Ok((Arc::clone(issuer), data.claims))
    }

    /// The person verified claims of `issuer` name, with the roles their claim grants.
    fn person(&self, issuer: &str, claims: &Value) -> Result<Person, Refusal> {
        let subject = claims.get("sub").and_then(Value::as_str).ok_or(Refusal::Claim("sub"))?;
        Ok(Person {
            issuer: issuer.to_owned(),
            subject: subject.chars().take(255).collect(),
            grants: Grants::from_claims(claims, &self.roles_claim),
        })
    }

    fn cached(&self, hash: &[u8; 32]) -> Option<Arc<Person>> {
        let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        let (person, until) = verified.get(hash)?;
        (Instant::now() < *until).then(|| Arc::clone(person))
    }

    fn keep(&self, hash: [u8; 32], person: &Arc<Person>, exp: u64) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        let left = Duration::from_secs(exp.saturating_sub(now)).min(VERIFIED_FOR);
        if left.is_zero() {
            return;
        }
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified.len() >= CACHED {
            verified.clear();
        }
        verified.insert(hash, (Arc::clone(person), Instant::now() + left));
    }
}

fn decode_part(part: &str) -> Result<Value, Refusal> {
    let bytes = URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).map_err(|_| Refusal::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed)
}

fn refusal(e: jsonwebtoken::errors::Error) -> Refusal {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => Refusal::Expired,
        ErrorKind::ImmatureSignature => Refusal::NotYetValid,
        ErrorKind::InvalidAudience => Refusal::Audience,
        ErrorKind::InvalidIssuer => Refusal::Issuer,
        ErrorKind::MissingRequiredClaim(c) => Refusal::Claim(match c.as_str() {
            "exp" => "exp",
            "aud" => "aud",
            "iss" => "iss",
            _ => "sub",
        }),
        ErrorKind::InvalidAlgorithm => Refusal::Algorithm("another than its key's".into()),
        ErrorKind::InvalidSignature => Refusal::Signature,
        _ => Refusal::Malformed,
    }
}

/// Sign-in as the configuration asks: `None` without identity providers or an audience.
pub(crate) fn from_config(config: &crate::config::Config) -> anyhow::Result<Option<Arc<Sso>>> {
    let (false, Some(audience)) = (config.sso_issuers.is_empty(), &config.sso_audience) else { return Ok(None) };
    let sso = Sso::new(&Settings {
        issuers: config.sso_issuers.clone(),
        audience: audience.clone(),
        roles_claim: config.sso_roles_claim.clone(),
        refresh: config.sso_keys_refresh,
        allow_private: config.allow_private_sinks,
        console: config.sso_console_client_id.clone().map(|client_id| console::Client {
            client_id,
            client_secret: config.sso_console_client_secret.clone(),
            session_ttl: config.sso_session_ttl,
        }),
    })
    .map_err(anyhow::Error::msg)?;
    Ok(Some(Arc::new(sso)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sso() -> Sso {
        Sso::new(&Settings {
            issuers: vec!["https://idp.example.com".into()],
            audience: "hub".into(),
            roles_claim: "roles".into(),
            refresh: Duration::from_secs(300),
            allow_private: false,
            console: None,
        })
        .expect("sso")
    }

    fn part(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(v.to_string())
    }

    #[test]
    fn what_is_refused_before_any_key_is_fetched() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let sso = sso();
        let claims =
            serde_json::json!({"iss": "https://idp.example.com", "sub": "a", "aud": "hub", "exp": 4_000_000_000u64});
        let cases = [
            (
                format!("{}.{}.", part(&serde_json::json!({"alg": "none"})), part(&claims)),
                Refusal::Algorithm("none".into()),
            ),
            (
                format!("{}.{}.c2ln", part(&serde_json::json!({"alg": "HS256"})), part(&claims)),
                Refusal::Algorithm("HS256".into()),
            ),
            (
                format!("{}.{}.c2ln", part(&serde_json::json!({"alg": "RS512"})), part(&claims)),
                Refusal::Algorithm("RS512".into()),
            ),
            (
                format!(
                    "{}.{}.c2ln",
                    part(&serde_json::json!({"alg": "ES256"})),
                    part(&serde_json::json!({"iss": "https://evil.example"}))
                ),
                Refusal::Issuer,
            ),
            (
                format!(
                    "{}.{}.c2ln",
                    part(&serde_json::json!({"alg": "ES256"})),
                    part(&serde_json::json!({"sub": "a"}))
                ),
                Refusal::Claim("iss"),
            ),
            ("eyJ.not.json".to_owned(), Refusal::Malformed),
        ];
        for (token, refusal) in cases {
            assert_eq!(runtime.block_on(sso.verify(&token)).expect_err(&token), refusal, "{token}");
        }
        assert!(Sso::is_jwt(&format!("{}.{}.x", part(&serde_json::json!({"alg": "ES256"})), part(&claims))));
        assert!(!Sso::is_jwt("shk_abcdef"));
    }

    proptest! {
        /// Whatever a bearer token holds, it is refused with a reason (never a panic), and never
        /// with a fetch of keys unless it names a configured issuer.
        #[test]
        fn any_token_gets_a_refusal(header in any::<Vec<u8>>(), body in any::<Vec<u8>>(), sig in "[A-Za-z0-9_-]{0,40}") {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let token = format!("{}.{}.{sig}", URL_SAFE_NO_PAD.encode(&header), URL_SAFE_NO_PAD.encode(&body));
            prop_assert!(runtime.block_on(sso().verify(&token)).is_err());
        }
    }
}
