//! A webhook's authentication at delivery (SPEC §10, "Destination authentication").
//!
//! - `basic`: an `Authorization: Basic` header made once per target.
//! - `oauth2_client_credentials`: a bearer token from the tenant's token endpoint (RFC 6749
//!   §4.4, the client authenticated with HTTP Basic), shared by every attempt with the same
//!   credentials and kept until 60 s before it expires. One fetch at a time per credentials; a
//!   failed fetch is remembered for [`FAILED_PAUSE`], so a wrong secret costs the token endpoint
//!   one request per pause however many attempts wait. A `401` from the receiver drops a token
//!   fetched at least [`MIN_REFRESH`] ago and the attempt is made once more with a new one.
//! - `mtls` and `tls.ca_pem`: a client of its own per TLS material (the certificate and key, the
//!   private CA), kept in a bounded cache by a digest of it.
//!
//! The token endpoint goes through the same address guard as the receiver. Secrets and tokens
//! never appear in a failure's reason: a token endpoint's refusal is told by its status and its
//! OAuth `error` code alone.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::header::HeaderValue;
use sha2::{Digest, Sha256};
use url::Url;

use crate::cache::BoundedCache;
use super::http1::{self, Client};
use crate::guard::check_host;
use crate::sink::{Failure, FailureKind, lock};

/// A token is used until this long before it expires.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(60);
/// How long a token without `expires_in` is used.
const UNDATED_TOKEN: Duration = Duration::from_secs(300);
/// How long a failed token fetch is remembered (attempts meanwhile fail without asking again).
pub const FAILED_PAUSE: Duration = Duration::from_secs(10);
/// A token younger than this is not fetched again on a receiver's `401`.
pub const MIN_REFRESH: Duration = Duration::from_secs(10);
/// How long a token endpoint has to answer.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a token endpoint's answer is read.
const TOKEN_READ_CAP: usize = 64 * 1024;

fn fail(kind: FailureKind, reason: String, status: Option<u16>) -> Failure {
    Failure { retryable: true, kind, reason, status, response: None, retry_after: None }
}

/// A webhook's HTTP client (no redirects, no proxy, the address guard), with a private CA
/// trusted beside the system's roots and a client identity `(certificate, key)` in PEM when given.
/// Its TLS configuration (`http1::tls`) is what checks that a CA can be trusted and a key is usable
/// with its certificate; validation calls that alone.
pub(crate) fn client(
    allow_private: bool,
    ca_pem: Option<&str>,
    identity: Option<(&str, &str)>,
) -> Result<Arc<Client>, String> {
    Ok(Arc::new(Client::new(super::http1::tls(ca_pem, identity)?, allow_private)))
}

/// Clients of webhooks with TLS material of their own, by a digest of that material.
#[derive(Debug, Default)]
pub(crate) struct Clients {
    cache: Mutex<BoundedCache<[u8; 32], Arc<Client>>>,
}

impl Clients {
    /// The client for this CA and identity (`(certificate, key)`), made once.
    pub(crate) fn get(
        &self,
        allow_private: bool,
        ca_pem: Option<&str>,
        identity: Option<(&str, &str)>,
    ) -> Result<Arc<Client>, Failure> {
        let mut digest = Sha256::new();
        for part in [ca_pem, identity.map(|i| i.0), identity.map(|i| i.1)] {
            let part = part.unwrap_or_default().as_bytes();
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
        let key: [u8; 32] = digest.finalize().into();
        let now = Instant::now();
        if let Some(client) = lock(&self.cache).get(&key, now) {
            return Ok(client);
        }
        let client = client(allow_private, ca_pem, identity).map_err(|e| crate::sink::misconfigured(&e))?;
        lock(&self.cache).insert(key, client.clone(), now);
        Ok(client)
    }
}

/// A token endpoint's credentials and the shared state of their token.
#[derive(Clone)]
pub(crate) struct OAuth2 {
    pub(crate) token_url: Url,
    pub(crate) client_id: String,
    pub(crate) client_secret: String,
    pub(crate) scope: Option<String>,
    pub(crate) audience: Option<String>,
    state: Arc<tokio::sync::Mutex<TokenState>>,
}

impl std::fmt::Debug for OAuth2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth2").field("token_url", &self.token_url.as_str()).finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct TokenState {
    token: Option<Token>,
    /// The last fetch's failure, and until when it stands.
    failed: Option<(Failure, Instant)>,
}

#[derive(Debug, Clone)]
struct Token {
    value: String,
    fetched: Instant,
    use_until: Instant,
}

/// Token states by credentials (a digest of the endpoint, client, secret, scope and audience).
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    cache: Mutex<BoundedCache<[u8; 32], Arc<tokio::sync::Mutex<TokenState>>>>,
}

impl Tokens {
    pub(crate) fn oauth2(
        &self,
        token_url: Url,
        client_id: &str,
        client_secret: &str,
        scope: Option<&str>,
        audience: Option<&str>,
    ) -> OAuth2 {
        let mut digest = Sha256::new();
        for part in [Some(token_url.as_str()), Some(client_id), Some(client_secret), scope, audience] {
            let part = part.map(str::as_bytes);
            digest.update([u8::from(part.is_some())]);
            let part = part.unwrap_or_default();
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
        let key: [u8; 32] = digest.finalize().into();
        let now = Instant::now();
        let mut cache = lock(&self.cache);
        let state = match cache.get(&key, now) {
            Some(state) => state,
            None => {
                let state = Arc::default();
                cache.insert(key, Arc::clone(&state), now);
                state
            }
        };
        OAuth2 {
            token_url,
            client_id: client_id.to_owned(),
            client_secret: client_secret.to_owned(),
            scope: scope.map(str::to_owned),
            audience: audience.map(str::to_owned),
            state,
        }
    }
}

impl OAuth2 {
    /// A token to send: the one kept, or a new one from the endpoint (one fetch at a time; a
    /// failure stands for [`FAILED_PAUSE`]).
    pub(crate) async fn token(&self, client: &Client, allow_private: bool) -> Result<String, Failure> {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if let Some(token) = state.token.as_ref().filter(|t| t.use_until > now) {
            return Ok(token.value.clone());
        }
        if let Some((failure, until)) = state.failed.as_ref().filter(|(_, until)| *until > now) {
            let mut failure = failure.clone();
            let left = until.saturating_duration_since(now).as_secs().max(1);
            failure.reason = format!("{} (the token endpoint is asked again in {left} s)", failure.reason);
            return Err(failure);
        }
        match self.fetch(client, allow_private).await {
            Ok(token) => {
                let value = token.value.clone();
                state.token = Some(token);
                state.failed = None;
                Ok(value)
            }
            Err(failure) => {
                state.token = None;
                // The guard's refusal asked nothing of the network: it is not remembered.
                if failure.kind != FailureKind::Forbidden {
                    state.failed = Some((failure.clone(), Instant::now() + FAILED_PAUSE));
                }
                Err(failure)
            }
        }
    }

    /// After a receiver's `401` to `used`: drops it when it is still the kept token and was
    /// fetched at least [`MIN_REFRESH`] ago; true when the attempt may be made again with a new
    /// token.
    pub(crate) async fn refused(&self, used: &str) -> bool {
        let mut state = self.state.lock().await;
        match &state.token {
            Some(t) if t.value == used && t.fetched.elapsed() >= MIN_REFRESH => {
                state.token = None;
                true
            }
            // Another attempt already fetched a new one: try with it.
            Some(t) => t.value != used,
            None => true,
        }
    }

    async fn fetch(&self, client: &Client, allow_private: bool) -> Result<Token, Failure> {
        if let Err(refused) = check_host(&self.token_url, allow_private) {
            tracing::warn!(detail = %refused, "token endpoint refused by the address guard");
            return Err(Failure {
                retryable: false,
                kind: FailureKind::Forbidden,
                reason: format!("token endpoint: {}", crate::guard::NOT_ALLOWED),
                status: None,
                response: None,
                retry_after: None,
            });
        }
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if let Some(scope) = &self.scope {
                form.append_pair("scope", scope);
            }
            if let Some(audience) = &self.audience {
                form.append_pair("audience", audience);
            }
            form.finish()
        };
        // RFC 6749 §2.3.1: the client id and secret are form-encoded before Basic encoding.
        let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let started = Instant::now();
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"));
        headers.insert(reqwest::header::ACCEPT, HeaderValue::from_static("application/json"));
        let basic = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", encode(&self.client_id), encode(&self.client_secret)));
        let mut authorization = HeaderValue::from_str(&format!("Basic {basic}"))
            .map_err(|_| fail(FailureKind::Refused, "the client credentials cannot be sent".to_owned(), None))?;
        authorization.set_sensitive(true);
        let failed = |e| {
            let mut f = super::classify(e, TOKEN_TIMEOUT);
            f.reason = format!("token endpoint: {}", f.reason);
            f
        };
        let request = http1::Request::post(
            &self.token_url,
            &headers,
            Some(&authorization),
            form.as_bytes(),
            TOKEN_TIMEOUT,
            TOKEN_READ_CAP,
        )
        .map_err(failed)?;
        let answer = client.post(request).await.map_err(failed)?;
        let (status, body) = (answer.status, answer.body);
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if !(200..300).contains(&status) {
            let kind = if matches!(status, 400 | 401 | 403) { FailureKind::Unauthorized } else { FailureKind::Refused };
            let code = answer["error"].as_str().map(oauth_error_code).unwrap_or_default();
            let code = if code.is_empty() { String::new() } else { format!(" ({code})") };
            return Err(fail(kind, format!("the token endpoint answered HTTP {status}{code}"), Some(status)));
        }
        let Some(value) = answer["access_token"].as_str().filter(|t| !t.is_empty()) else {
            return Err(fail(
                FailureKind::Refused,
                "the token endpoint's answer has no access_token".to_owned(),
                Some(status),
            ));
        };
        if HeaderValue::from_str(&format!("Bearer {value}")).is_err() {
            return Err(fail(
                FailureKind::Refused,
                "the token endpoint's access_token cannot be sent in a header".to_owned(),
                Some(status),
            ));
        }
        if let Some(kind) = answer["token_type"].as_str()
            && !kind.eq_ignore_ascii_case("bearer")
        {
            return Err(fail(
                FailureKind::Refused,
                format!("the token endpoint gave a {} token; only bearer tokens are used", oauth_error_code(kind)),
                Some(status),
            ));
        }
        let lifetime = token_lifetime(&answer["expires_in"]);
        Ok(Token {
            value: value.to_owned(),
            fetched: started,
            // Bounded above, so no answer can overflow the clock.
            use_until: started.checked_add(lifetime.saturating_sub(EXPIRY_MARGIN)).unwrap_or(started),
        })
    }
}

/// The longest a token is used, whatever its endpoint says (a token endpoint is a third party:
/// `expires_in` may be any number, or none); a token refused before then is fetched again.
pub(crate) const LONGEST_TOKEN: Duration = Duration::from_secs(24 * 3600);

/// How long a token is used from its `expires_in` (seconds, as a number or a string of digits):
/// at most [`LONGEST_TOKEN`], [`UNDATED_TOKEN`] when it is absent or not a whole number.
pub(crate) fn token_lifetime(expires_in: &serde_json::Value) -> Duration {
    expires_in
        .as_u64()
        .or_else(|| expires_in.as_str().and_then(|s| s.trim().parse().ok()))
        .map_or(UNDATED_TOKEN, |secs| Duration::from_secs(secs).min(LONGEST_TOKEN))
}

/// An OAuth `error` code as it may be shown: RFC 6749 limits it to printable ASCII without `"`
/// and `\`; anything else, or anything long, is cut.
fn oauth_error_code(raw: &str) -> String {
    raw.chars().filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\').take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oauth_error_code_is_shown_printable_and_short() {
        assert_eq!(oauth_error_code("invalid_client"), "invalid_client");
        assert_eq!(oauth_error_code("bad\"code\\\n<script>"), "badcode<script>");
        assert_eq!(oauth_error_code(&"x".repeat(500)).len(), 64);
    }

    /// Whatever a token endpoint says its token lasts (numbers up to `u64::MAX`, signed, floats,
    /// strings of digits or not), the lifetime is bounded and adding it to now never overflows.
    #[test]
    fn any_expires_in_gives_a_bounded_lifetime() {
        use proptest::prelude::*;
        let values = prop_oneof![
            any::<u64>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(|f| serde_json::json!(f)),
            any::<u64>().prop_map(|n| serde_json::Value::from(n.to_string())),
            ".{0,40}".prop_map(serde_json::Value::from),
            Just(serde_json::Value::from(u64::MAX)),
            Just(serde_json::Value::from("18446744073709551615")),
            Just(serde_json::Value::Null),
        ];
        proptest!(|(value in values)| {
            let lifetime = token_lifetime(&value);
            prop_assert!(lifetime <= LONGEST_TOKEN);
            let now = Instant::now();
            prop_assert!(now.checked_add(lifetime).is_some());
        });
        assert_eq!(token_lifetime(&serde_json::json!(u64::MAX)), LONGEST_TOKEN);
        assert_eq!(token_lifetime(&serde_json::json!("3600")), Duration::from_secs(3600));
        assert_eq!(token_lifetime(&serde_json::json!(-5)), UNDATED_TOKEN);
    }

    fn token(value: &str, age: Duration) -> Token {
        let fetched = Instant::now() - age;
        Token { value: value.to_owned(), fetched, use_until: fetched + Duration::from_secs(3600) }
    }

    #[tokio::test]
    async fn a_receivers_401_drops_only_a_token_old_enough_and_still_kept() {
        let tokens = Tokens::default();
        let oauth = tokens.oauth2("https://auth.example/token".parse().unwrap(), "c", "s", None, None);
        let set = |t: Option<Token>| async { oauth.state.lock().await.token = t };
        // Fresh: kept, and the attempt is not made again (a receiver refusing every token would
        // otherwise cost a token request per attempt).
        set(Some(token("a", Duration::from_secs(1)))).await;
        assert!(!oauth.refused("a").await);
        assert!(oauth.state.lock().await.token.is_some());
        // Old enough: dropped, and the attempt is made again with a new one.
        set(Some(token("a", MIN_REFRESH + Duration::from_secs(1)))).await;
        assert!(oauth.refused("a").await);
        assert!(oauth.state.lock().await.token.is_none());
        // Another attempt already replaced it: try again with the new one, which stays.
        set(Some(token("b", Duration::from_secs(1)))).await;
        assert!(oauth.refused("a").await);
        assert_eq!(oauth.state.lock().await.token.as_ref().map(|t| t.value.clone()), Some("b".to_owned()));
    }

    #[test]
    fn the_same_credentials_share_one_token_state_and_others_do_not() {
        let tokens = Tokens::default();
        let url: Url = "https://auth.example/token".parse().unwrap();
        let a = tokens.oauth2(url.clone(), "c", "s", None, None);
        let b = tokens.oauth2(url.clone(), "c", "s", None, None);
        let c = tokens.oauth2(url.clone(), "c", "other", None, None);
        let d = tokens.oauth2(url, "c", "s", Some(""), None);
        assert!(Arc::ptr_eq(&a.state, &b.state));
        assert!(!Arc::ptr_eq(&a.state, &c.state));
        assert!(!Arc::ptr_eq(&a.state, &d.state), "an empty scope is not no scope");
    }
}
