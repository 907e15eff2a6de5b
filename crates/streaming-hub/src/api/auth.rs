//! Bearer authentication.
//!
//! A tenant API key (`shk_…`) is looked up by its SHA-256 hash and sees only its own tenant; the
//! admin token opens `/admin`; a portal session's token (`shps_…`, see `portal.rs`) sees its
//! tenant through the console's routes only; a person's JWT from a configured identity provider
//! (`sso`), or a console session it signed in (`sign_in.rs`: a cookie and its CSRF header), sees
//! the tenants its roles name, each route as far as the role allows (`sso::roles`). Tokens are
//! compared in constant time and never logged.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use hub_core::TenantId;
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;

/// What every portal session token begins with (`api/portal.rs` issues them; this module reads
/// them).
pub const SESSION_PREFIX: &str = "shps_";
use crate::keys;
use crate::sso::{Person, Role, roles};
use hub_core::ledger::entry::Actor;

/// Who is calling.
#[derive(Debug, Clone)]
pub enum Principal {
    /// The admin token (`key: None`) or an admin key.
    Admin { key: Option<uuid::Uuid> },
    Tenant {
        tenant: TenantId,
        key_id: uuid::Uuid,
        /// The key's role in its tenant.
        role: Role,
    },
    /// A portal session: its tenant, `read` (changes nothing) or not.
    Portal { tenant: TenantId, session: uuid::Uuid, read_only: bool },
    /// A person signed in with an identity provider, with the roles their token grants.
    Person(std::sync::Arc<Person>),
}

fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("an Authorization: Bearer header is required"))?;
    let value = value.to_str().map_err(|_| ApiError::unauthorized("the Authorization header is malformed"))?;
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(ApiError::unauthorized("the Authorization header must be: Bearer <token>"));
    }
    Ok(token.trim())
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if parts.headers.get(AUTHORIZATION).is_none()
            && let Some(person) = console_person(parts, state).await?
        {
            return Ok(Principal::Person(person));
        }
        let token = bearer(parts)?;
        if state
            .access
            .admin_token
            .as_ref()
            .is_some_and(|admin| bool::from(token.as_bytes().ct_eq(admin.expose().as_bytes())))
        {
            return Ok(Principal::Admin { key: None });
        }
        if let Some(sso) = state.access.sso.as_ref().filter(|_| crate::sso::Sso::is_jwt(token)) {
            return sso.verify(token).await.map(Principal::Person).map_err(|refusal| {
                metrics::counter!(crate::telemetry::metric::SSO_REFUSALS, "reason" => refusal.reason()).increment(1);
                ApiError::unauthorized(refusal.to_string())
            });
        }
        if token.starts_with(SESSION_PREFIX) {
            // Looked up on every request: a revoked or expired session ends at once, everywhere.
            if let Some(session) = state.store.portal_session(&keys::hash(token), state.clock.now()).await? {
                return Ok(Principal::Portal {
                    tenant: TenantId::stored(&session.tenant_id).map_err(ApiError::internal)?,
                    session: session.id,
                    read_only: session.scope != "manage",
                });
            }
            return Err(ApiError::unauthorized("the portal session has expired or was revoked"));
        }
        if token.starts_with(keys::API_KEY_PREFIX) {
            let hash = keys::hash(token);
            let now = state.clock.now();
            if let Some(known) = state.access.key_cache.get(&hash, now) {
                return Ok(known);
            }
            // An expired key is refused like a revoked one, with the same answer.
            if let Some(key) = state.store.api_key_by_hash(&hash).await?.filter(|k| !k.expired(now)) {
                let principal = match &key.tenant_id {
                    Some(tenant) => Principal::Tenant {
                        tenant: TenantId::stored(tenant).map_err(ApiError::internal)?,
                        key_id: key.id,
                        // An unknown stored role grants the least.
                        role: Role::parse(&key.role).unwrap_or(Role::Viewer),
                    },
                    None => Principal::Admin { key: Some(key.id) },
                };
                state.access.key_cache.put(hash, principal.clone(), key.expires_at);
                return Ok(principal);
            }
        }
        Err(ApiError::unauthorized("the bearer token is not valid"))
    }
}

/// The person a console session's cookie names, when the request carries one (and, whatever its
/// method, the session's CSRF token: a page of another origin can make the browser send the
/// cookie, never the header). Looked up on every request: a session signed out ends at once.
async fn console_person(parts: &Parts, state: &AppState) -> Result<Option<std::sync::Arc<Person>>, ApiError> {
    use super::sign_in;
    if sign_in::cookie(&parts.headers, sign_in::SESSION_COOKIE).is_none() {
        return Ok(None);
    }
    let Some((token, session)) = sign_in::current(state, &parts.headers).await? else {
        return Err(ApiError::unauthorized("the console session has ended: sign in again"));
    };
    if !sign_in::csrf_ok(&parts.headers, &token) {
        return Err(sign_in::csrf_refused());
    }
    Ok(Some(std::sync::Arc::new(sign_in::person_of(session))))
}

/// Live API keys seen lately, by hash, so a busy producer's requests do not each cost a query.
/// Only keys found live are kept, each for at most [`KeyCache::TTL`]: a key revoked through this
/// process stops working at once (the cache is cleared), through another replica within the TTL.
#[derive(Debug, Default)]
pub struct KeyCache {
    entries: std::sync::Mutex<std::collections::HashMap<Vec<u8>, CachedKey>>,
}

impl KeyCache {
    pub const TTL: std::time::Duration = std::time::Duration::from_secs(2);
    /// Entries kept at most; a full cache starts over.
    const CAPACITY: usize = 10_000;

    fn entries(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Vec<u8>, CachedKey>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key's principal while it is cached and not expired at `now`.
    fn get(&self, hash: &[u8], now: chrono::DateTime<chrono::Utc>) -> Option<Principal> {
        let entries = self.entries();
        let cached = entries.get(hash)?;
        let live = cached.at.elapsed() < Self::TTL && cached.expires_at.is_none_or(|at| at > now);
        live.then(|| cached.principal.clone())
    }

    fn put(&self, hash: Vec<u8>, principal: Principal, expires_at: Option<chrono::DateTime<chrono::Utc>>) {
        let mut entries = self.entries();
        if entries.len() >= Self::CAPACITY {
            entries.clear();
        }
        entries.insert(hash, CachedKey { principal, at: std::time::Instant::now(), expires_at });
    }

    /// Forgets every key (after a revocation).
    pub fn clear(&self) {
        self.entries().clear();
    }
}

/// A key found live: who it is, when it was looked up, and when it expires.
#[derive(Debug)]
struct CachedKey {
    principal: Principal,
    at: std::time::Instant,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// A caller holding the admin token or an admin key, or a person with a platform role the
/// route allows.
#[derive(Debug)]
pub struct Admin {
    /// The admin key; `None` for the admin token or a person.
    pub key: Option<uuid::Uuid>,
    /// The person, when one signed in.
    pub person: Option<std::sync::Arc<Person>>,
}

impl Admin {
    /// Who this is, as the ledger records a change they make.
    pub fn actor(&self) -> Actor {
        match &self.person {
            Some(p) => p.actor(),
            None => Actor::Admin { id: self.key.map(|k| k.to_string()) },
        }
    }

    /// Who this is, as an audit record names them (never the secret).
    pub fn who(&self) -> String {
        match (&self.person, self.key) {
            (Some(p), _) => format!("{} ({})", p.subject, p.issuer),
            (None, Some(id)) => format!("admin key {id}"),
            (None, None) => "admin token".to_owned(),
        }
    }
}

/// A 403 naming the role a route needs.
fn needs(role: &str, what: &str) -> ApiError {
    ApiError::new(axum::http::StatusCode::FORBIDDEN, "role_refused", format!("this route needs the {role} role{what}"))
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match Principal::from_request_parts(parts, state).await? {
            Principal::Admin { key } => Ok(Admin { key, person: None }),
            Principal::Person(person) => {
                let wanted = roles::platform_route_needs(&parts.method);
                match person.grants.platform {
                    Some(held) if held >= wanted => Ok(Admin { key: None, person: Some(person) }),
                    _ => Err(needs(wanted.as_str(), "")),
                }
            }
            Principal::Tenant { .. } | Principal::Portal { .. } => {
                Err(ApiError::forbidden("this route requires the admin token"))
            }
        }
    }
}

/// The header with which the admin token acts for one tenant on the `/v1` tenant routes.
pub const ACT_FOR: axum::http::HeaderName = axum::http::HeaderName::from_static("x-streaming-hub-tenant");

/// The tenant an [`ACT_FOR`] value names: the id itself, or `utf-8''` and the id's bytes
/// percent-encoded (RFC 8187's form, what the console always sends). The id must follow the
/// tenant grammar (`TenantId::parse`), like every tenant id that enters the hub.
pub fn act_for_tenant(value: &axum::http::HeaderValue) -> Option<TenantId> {
    let raw = value.to_str().ok()?;
    let id = match raw.get(..7) {
        Some(prefix) if prefix.eq_ignore_ascii_case("utf-8''") => {
            percent_encoding::percent_decode_str(&raw[7..]).decode_utf8().ok()?.into_owned()
        }
        _ => raw.to_owned(),
    };
    TenantId::parse(&id).ok()
}

/// What a portal session may do on a `/v1` route: everything its tenant's console does, but
/// publish events and read a pull stream (reading moves the consumer's cursor), both of which
/// need an API key; in `read` scope, nothing that changes anything (`POST /v1/filters/test`, a
/// computation, is allowed).
pub fn portal_may(method: &axum::http::Method, path: &str, read_only: bool) -> Result<(), ApiError> {
    use axum::http::Method;
    let refused =
        |why: &str| Err(ApiError::new(axum::http::StatusCode::FORBIDDEN, "portal_session_refused", why.to_owned()));
    if path == "/v1/events" && method == Method::POST {
        return refused("a portal session cannot publish events; producers use an API key");
    }
    let pull = path.strip_prefix("/v1/subscriptions/").is_some_and(|rest| rest.ends_with("/events"));
    if pull && method == Method::GET {
        return refused(
            "a portal session cannot read a pull stream (reading moves its cursor); consumers use an API key",
        );
    }
    let reads =
        method == Method::GET || method == Method::HEAD || (method == Method::POST && path == "/v1/filters/test");
    if read_only && !reads {
        return refused("this portal session is read-only");
    }
    Ok(())
}

/// A caller holding a tenant API key, a portal session, or the admin token acting for a tenant:
/// the `/v1` tenant routes.
#[derive(Debug)]
pub struct TenantCaller {
    pub tenant: TenantId,
    /// Who is calling, as the ledger records a change they make.
    pub actor: hub_core::ledger::entry::Actor,
    /// What the caller may do in the tenant (a key, the admin token and a managing portal
    /// session: everything; a person: what their token grants).
    pub role: Role,
}

impl TenantCaller {
    /// Refuses (403, naming the role) a caller whose role is below `wanted`.
    pub fn must_be(&self, wanted: Role, what: &str) -> Result<(), ApiError> {
        if self.role >= wanted { Ok(()) } else { Err(needs(wanted.as_str(), what)) }
    }
}

/// The tenant a person acts in: the one [`ACT_FOR`] names, or their only one.
fn person_tenant(parts: &Parts, person: &Person) -> Result<(TenantId, Role), ApiError> {
    let tenant = match parts.headers.get(ACT_FOR) {
        Some(value) => act_for_tenant(value).ok_or_else(|| {
            ApiError::validation(
                ACT_FOR.as_str(),
                format!("must be a tenant id ({}), or utf-8'' and the id percent-encoded", TenantId::PATTERN),
            )
        })?,
        None => match (person.grants.tenants.len(), person.grants.platform) {
            (1, None) => person.grants.tenants.keys().next().cloned().ok_or_else(|| ApiError::internal("no tenant"))?,
            (0, None) => return Err(ApiError::forbidden("the token grants no role in any tenant")),
            (_, Some(_)) => {
                return Err(ApiError::forbidden(
                    "a platform role acts in a tenant it names: add an X-Streaming-Hub-Tenant header",
                ));
            }
            _ => {
                return Err(ApiError::forbidden(
                    "the token grants roles in several tenants: name one with an X-Streaming-Hub-Tenant header",
                ));
            }
        },
    };
    match person.grants.role_in(&tenant) {
        Some(role) => Ok((tenant, role)),
        None => Err(ApiError::forbidden(format!("the token grants no role in tenant {tenant}"))),
    }
}

impl FromRequestParts<AppState> for TenantCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match Principal::from_request_parts(parts, state).await? {
            Principal::Tenant { tenant, key_id, role } => {
                let wanted = roles::tenant_route_needs(&parts.method, parts.uri.path());
                if role < wanted {
                    return Err(needs(wanted.as_str(), " (this API key's role is lower)"));
                }
                Ok(TenantCaller { tenant, actor: Actor::ApiKey { id: key_id.to_string() }, role })
            }
            Principal::Portal { tenant, read_only, session } => {
                portal_may(&parts.method, parts.uri.path(), read_only)?;
                let role = if read_only { Role::Viewer } else { Role::Admin };
                Ok(TenantCaller { tenant, actor: Actor::Portal { session: session.to_string() }, role })
            }
            Principal::Person(person) => {
                let (tenant, role) = person_tenant(parts, &person)?;
                let wanted = roles::tenant_route_needs(&parts.method, parts.uri.path());
                if role < wanted {
                    return Err(needs(wanted.as_str(), &format!(" in tenant {tenant}")));
                }
                Ok(TenantCaller { tenant, actor: person.actor(), role })
            }
            // The operator acts for one tenant by naming it: the admin token can already mint
            // that tenant a key, so this adds no power, and it is logged.
            Principal::Admin { key } => match parts.headers.get(ACT_FOR) {
                Some(value) => {
                    let tenant = act_for_tenant(value).ok_or_else(|| {
                        ApiError::validation(
                            ACT_FOR.as_str(),
                            format!(
                                "must be a tenant id ({}), or utf-8'' and the id percent-encoded",
                                TenantId::PATTERN
                            ),
                        )
                    })?;
                    tracing::info!(tenant = %tenant, method = %parts.method, path = %parts.uri.path(), "admin acting for a tenant");
                    Ok(TenantCaller {
                        tenant,
                        actor: Actor::Admin { id: key.map(|k| k.to_string()) },
                        role: Role::Admin,
                    })
                }
                None => Err(ApiError::forbidden(
                    "this route requires a tenant API key, or the admin token with an X-Streaming-Hub-Tenant header",
                )),
            },
        }
    }
}
