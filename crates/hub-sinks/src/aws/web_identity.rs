//! Keyless AWS (SPEC §10): a destination's credentials come from a role the hub assumes with a
//! token it signs itself as an OIDC issuer (`AssumeRoleWithWebIdentity`), so no AWS key is
//! stored. The SDK's identity cache keeps the role's credentials and asks again five minutes
//! before they expire. Exchanges of one role at one endpoint run one at a time, whichever client
//! asks, and a refused one is remembered for ten seconds: a wrong role costs STS one call per
//! destination in that time, whatever the number of attempts.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{self, ProvideCredentials, future};

use crate::sink::Failure;
pub use crate::sink::TokenIssuer;

/// How long a refused exchange stands before STS is asked again.
const REMEMBER_FAILURE: Duration = Duration::from_secs(10);

/// What a destination's role is assumed as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AssumedRole {
    pub role_arn: String,
    pub session_name: String,
    /// The token's `sub`: the subscription, by tenant; `None` when it cannot be named safely
    /// (`hub_core::oidc::subject`).
    pub subject: Option<String>,
}

/// The reason a role could not be assumed, as the attempt's error says it.
#[derive(Debug)]
pub(crate) struct NotAssumed(pub String);

impl std::fmt::Display for NotAssumed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the role could not be assumed: {}", self.0)
    }
}

impl std::error::Error for NotAssumed {}

/// The reason in an SDK error's chain when it failed for want of the role's credentials.
pub(crate) fn not_assumed(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(n) = e.downcast_ref::<NotAssumed>() {
            return Some(n.to_string());
        }
        next = e.source();
    }
    None
}

/// The last refusal of one exchange (a role at an endpoint); its lock is held while STS is asked.
type Refusal = Arc<tokio::sync::Mutex<Option<(Instant, String)>>>;

/// Every exchange of a process, by role and endpoint: what makes them one at a time and their
/// refusals remembered across the clients that ask (a probe and the dispatcher may build one each).
#[derive(Debug, Default)]
pub(crate) struct Exchanges {
    by_key: Mutex<crate::cache::BoundedCache<u64, Refusal>>,
}

impl Exchanges {
    fn of(&self, key: u64) -> Refusal {
        let now = Instant::now();
        let Ok(mut by_key) = self.by_key.lock() else { return Refusal::default() };
        by_key.get(&key, now).unwrap_or_else(|| {
            let refusal = Refusal::default();
            by_key.insert(key, Arc::clone(&refusal), now);
            refusal
        })
    }
}

/// Credentials of one destination's role, fetched from STS with the hub's token.
#[derive(Debug)]
pub(crate) struct WebIdentityProvider {
    pub issuer: Arc<dyn TokenIssuer>,
    pub sts: aws_sdk_sts::Client,
    pub role: AssumedRole,
    pub timeout: Duration,
    refusal: Refusal,
}

impl WebIdentityProvider {
    /// `key`: the role at its endpoint (what [`Exchanges`] keeps apart).
    pub(crate) fn new(
        issuer: Arc<dyn TokenIssuer>,
        sts: aws_sdk_sts::Client,
        role: AssumedRole,
        timeout: Duration,
        exchanges: &Exchanges,
        key: u64,
    ) -> Self {
        Self { issuer, sts, role, timeout, refusal: exchanges.of(key) }
    }

    async fn assume(&self) -> provider::Result {
        let failed = |reason: String| CredentialsError::provider_error(NotAssumed(reason));
        let mut refusal = self.refusal.lock().await;
        if let Some((at, reason)) = refusal.as_ref()
            && at.elapsed() < REMEMBER_FAILURE
        {
            return Err(failed(reason.clone()));
        }
        let result = self.exchange().await;
        *refusal = result.as_ref().err().map(|reason| (Instant::now(), reason.clone()));
        result.map_err(failed)
    }

    async fn exchange(&self) -> Result<Credentials, String> {
        let subject = self
            .role
            .subject
            .as_deref()
            .ok_or("no token subject names this subscription (a tenant id with ':' cannot assume a role)")?;
        let token = self.issuer.token(subject, hub_core::oidc::AWS_AUDIENCE)?;
        let answer = self
            .sts
            .assume_role_with_web_identity()
            .role_arn(&self.role.role_arn)
            .role_session_name(&self.role.session_name)
            .web_identity_token(token)
            .send()
            .await
            .map_err(|e| {
                let Failure { reason, .. } = super::classify(&e, self.timeout, "STS", &[]);
                reason
            })?;
        let c = answer.credentials.ok_or("STS answered without credentials")?;
        let expiry = std::time::SystemTime::try_from(c.expiration).ok();
        Ok(Credentials::new(c.access_key_id, c.secret_access_key, Some(c.session_token), expiry, "web-identity"))
    }
}

impl ProvideCredentials for WebIdentityProvider {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.assume())
    }
}
