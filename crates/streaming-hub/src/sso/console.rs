//! People signing in to the console at the first configured provider: the authorization code
//! flow with PKCE (RFC 7636, `S256`), a `state` and a `nonce` (OpenID Connect Core §3.1). What
//! the browser must bring back (the state, the nonce, the code verifier) travels in a short-lived
//! cookie of its own (`api/sign_in.rs`); the code is exchanged at the provider's token endpoint
//! through the address guard, bounded like every outbound call, and the ID token it returns is
//! verified like any token (signature, `iss`, `exp`, `nbf`) with the console's client as its
//! audience and the nonce sent. The person's roles are read from its roles claim.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Person, Sso};
use crate::catalog::fetch::Fetcher;
use crate::config::Secret;

/// The console's client at the provider (`STREAMING_HUB_SSO_CONSOLE_*`).
#[derive(Debug, Clone)]
pub struct Client {
    pub client_id: String,
    /// A confidential client's secret (sent with HTTP Basic); `None`: a public client, PKCE only.
    pub client_secret: Option<Secret>,
    /// How long a person's console session lasts.
    pub session_ttl: Duration,
}

/// The console's sign-in.
#[derive(Debug)]
pub struct Console {
    pub client: Client,
    fetcher: Fetcher,
}

/// The scopes asked for: the ID token, and the name it may carry.
const SCOPES: &str = "openid profile";

/// A sign-in under way: what the browser keeps until the provider sends it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    state: String,
    nonce: String,
    verifier: String,
}

impl Pending {
    fn new() -> Self {
        let random = || crate::keys::generate("");
        Self { state: random(), nonce: random(), verifier: random() }
    }

    /// As the browser keeps it (three base64url values, dot-separated).
    pub fn to_cookie(&self) -> String {
        format!("{}.{}.{}", self.state, self.nonce, self.verifier)
    }

    /// What a cookie holds, when it is one [`Pending::to_cookie`] made.
    pub fn from_cookie(value: &str) -> Option<Self> {
        let mut parts = value.split('.');
        let (state, nonce, verifier) = (parts.next()?, parts.next()?, parts.next()?);
        let well_formed = |p: &str| p.len() == 43 && URL_SAFE_NO_PAD.decode(p).is_ok();
        (parts.next().is_none() && [state, nonce, verifier].into_iter().all(well_formed)).then(|| Self {
            state: state.to_owned(),
            nonce: nonce.to_owned(),
            verifier: verifier.to_owned(),
        })
    }
}

/// Why a sign-in did not finish (shown to the person; never a secret or a token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignInError {
    #[error("the sign-in was not started here, or took longer than ten minutes: start again")]
    NotStarted,
    #[error("the provider answered for another sign-in (its state does not match): start again")]
    State,
    #[error("the provider refused the sign-in: {0}")]
    Provider(String),
    #[error("the provider could not be reached: {0}")]
    Unreachable(String),
    #[error("the provider's ID token was refused: {0}")]
    Token(String),
}

impl SignInError {
    /// The outcome, as the metric `streaming_hub_console_sign_ins_total` labels it.
    pub fn reason(&self) -> &'static str {
        match self {
            SignInError::NotStarted => "not_started",
            SignInError::State => "state",
            SignInError::Provider(_) => "provider",
            SignInError::Unreachable(_) => "unreachable",
            SignInError::Token(_) => "token",
        }
    }
}

impl Console {
    pub fn new(client: Client, fetcher: Fetcher) -> Self {
        Self { client, fetcher }
    }
}

impl Sso {
    /// The console's sign-in, when configured.
    pub fn console(&self) -> Option<&Console> {
        self.console.as_ref()
    }

    /// Where to send a person to sign in, and what their browser keeps meanwhile.
    pub async fn sign_in_start(&self, redirect_uri: &str) -> Result<(String, Pending), SignInError> {
        let (console, issuer) = self.console_issuer()?;
        let endpoints = issuer.endpoints().await.map_err(SignInError::Unreachable)?;
        let pending = Pending::new();
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(pending.verifier.as_bytes()));
        let mut location = url::Url::parse(&endpoints.authorization)
            .map_err(|_| SignInError::Unreachable("its authorization_endpoint is not a URL".to_owned()))?;
        location
            .query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &console.client.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", SCOPES)
            .append_pair("state", &pending.state)
            .append_pair("nonce", &pending.nonce)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        Ok((location.into(), pending))
    }

    /// The person a provider's answer signs in: `state` must be the pending sign-in's, `code` is
    /// exchanged with its verifier, and the ID token must carry its nonce.
    pub async fn sign_in_finish(
        &self,
        pending: &Pending,
        state: &str,
        code: &str,
        redirect_uri: &str,
    ) -> Result<Person, SignInError> {
        if !bool::from(state.as_bytes().ct_eq(pending.state.as_bytes())) {
            return Err(SignInError::State);
        }
        let (console, issuer) = self.console_issuer()?;
        let endpoints = issuer.endpoints().await.map_err(SignInError::Unreachable)?;
        let client_id = console.client.client_id.as_str();
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", pending.verifier.as_str()),
        ];
        let basic = console.client.client_secret.as_ref().map(|secret| (client_id, secret.expose()));
        if basic.is_none() {
            form.push(("client_id", client_id));
        }
        let (status, body) =
            console.fetcher.post_form(&endpoints.token, &form, basic).await.map_err(SignInError::Unreachable)?;
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !status.is_success() {
            // The OAuth error code and its description, as short text.
            let said = ["error", "error_description"]
                .iter()
                .filter_map(|k| answer.get(k).and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(": ");
            let said: String = said.chars().filter(|c| !c.is_control()).take(200).collect();
            return Err(SignInError::Provider(if said.is_empty() { format!("HTTP {status}") } else { said }));
        }
        let id_token = answer
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or_else(|| SignInError::Token("the token endpoint returned no id_token".to_owned()))?;
        let (from, claims) = self.check(id_token, client_id).await.map_err(|r| SignInError::Token(r.to_string()))?;
        if from.url != issuer.url {
            return Err(SignInError::Token("it is of another issuer than the console's".to_owned()));
        }
        let nonce = claims.get("nonce").and_then(Value::as_str).unwrap_or_default();
        if !bool::from(nonce.as_bytes().ct_eq(pending.nonce.as_bytes())) {
            return Err(SignInError::Token("its nonce is not this sign-in's".to_owned()));
        }
        // Several audiences: the console must be the party it was issued to.
        let audiences = claims.get("aud").and_then(Value::as_array).map_or(1, Vec::len);
        if audiences > 1 && claims.get("azp").and_then(Value::as_str) != Some(client_id) {
            return Err(SignInError::Token("its azp is not the console's client".to_owned()));
        }
        self.person(&issuer.url, &claims).map_err(|r| SignInError::Token(r.to_string()))
    }

    fn console_issuer(&self) -> Result<(&Console, &std::sync::Arc<super::keys::Issuer>), SignInError> {
        match (self.console.as_ref(), self.issuers.first()) {
            (Some(console), Some(issuer)) => Ok((console, issuer)),
            _ => Err(SignInError::NotStarted),
        }
    }
}

/// The CSRF token of a console session: derived from its cookie (SHA-256 of a label and the
/// cookie), so the page can be given it and send it back in a header, while the cookie itself
/// stays out of reach of any script.
pub fn csrf_token(session: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(format!("streaming-hub csrf {session}").as_bytes()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_pending_sign_in_reads_back_from_its_cookie_and_nothing_else_does() {
        let pending = Pending::new();
        assert_eq!(Pending::from_cookie(&pending.to_cookie()), Some(pending.clone()));
        assert_ne!(Pending::new(), pending, "each sign-in is its own");
        assert_eq!(Pending::from_cookie(""), None);
        assert_eq!(Pending::from_cookie(&format!("{}.x", pending.to_cookie())), None);
        assert_ne!(csrf_token("a"), csrf_token("b"));
    }

    proptest! {
        /// Whatever a browser sends as the sign-in cookie, it is read without a panic, and only a
        /// well-formed one is taken.
        #[test]
        fn any_cookie_is_read_safely(value in ".{0,200}") {
            if let Some(p) = Pending::from_cookie(&value) {
                prop_assert_eq!(p.to_cookie(), value);
            }
        }
    }
}
