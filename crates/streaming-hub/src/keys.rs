//! API keys and generated tokens: random, shown once, stored as a SHA-256 hash.
//!
//! Keys carry 256 random bits, so a plain SHA-256 (no slow hash) is enough to make a stolen
//! table useless while keeping authentication a single indexed lookup.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hub_core::TenantId;
use hub_store::{ApiKeyRecord, NewApiKey, Store, StoreResult};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Every tenant API key starts with this.
pub const API_KEY_PREFIX: &str = "shk_";

/// `prefix` + 32 random bytes, base64url.
pub fn generate(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// The stored form of a key.
pub fn hash(key: &str) -> Vec<u8> {
    Sha256::digest(key.as_bytes()).to_vec()
}

/// The part of a key safe to display so an operator can tell keys apart.
pub fn display_prefix(key: &str) -> String {
    key.chars().take(API_KEY_PREFIX.len() + 6).collect()
}

/// Generates a key — a tenant's, or with `None` an operator's admin key — that works until
/// `expires_at` (for ever with `None`), stores its hash, and returns the record with the key
/// (shown once).
pub async fn issue(
    store: &dyn Store,
    tenant: Option<&TenantId>,
    name: &str,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    role: crate::sso::Role,
) -> StoreResult<(ApiKeyRecord, String)> {
    let key = generate(API_KEY_PREFIX);
    let record = store
        .create_api_key(&NewApiKey {
            id: uuid::Uuid::now_v7(),
            tenant_id: tenant.map(ToString::to_string),
            name: name.to_owned(),
            key_hash: hash(&key),
            key_prefix: display_prefix(&key),
            created_at: chrono::Utc::now(),
            expires_at,
            role: role.as_str().to_owned(),
        })
        .await?;
    Ok((record, key))
}

/// What `streaming-hub api-key create` asks for, as its arguments give it.
#[derive(Debug)]
pub struct KeyRequest {
    /// `--tenant`: the tenant the key belongs to.
    pub tenant: Option<String>,
    /// `--admin`: an operator's admin key instead.
    pub admin: bool,
    /// `--name`.
    pub name: String,
    /// `--expires-in`: a duration from now.
    pub expires_in: Option<String>,
    /// `--role`: admin, operator or viewer.
    pub role: String,
}

/// `streaming-hub api-key create`: checks the arguments (an error names the one at fault), issues
/// the key, records its creation in the ledger, and returns the record with the key (shown once).
pub async fn create_from_cli(store: &dyn Store, request: KeyRequest) -> anyhow::Result<(ApiKeyRecord, String)> {
    let KeyRequest { tenant, admin, name, expires_in, role } = request;
    let role = crate::sso::Role::parse(&role)
        .ok_or_else(|| anyhow::anyhow!("--role: must be admin, operator or viewer (got {role:?})"))?;
    let tenant = match (tenant, admin) {
        (Some(t), false) => Some(TenantId::parse(&t).map_err(|e| anyhow::anyhow!("--tenant: {e}"))?),
        (None, true) => None,
        _ => anyhow::bail!("--tenant: give a tenant, or --admin for an operator's admin key"),
    };
    crate::api::admin::valid_name("--name", &name).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let expires_at = match expires_in.as_deref() {
        None => None,
        Some(raw) => Some(expiry(raw).map_err(|e| anyhow::anyhow!("--expires-in: {e}"))?),
    };
    let (record, key) = issue(store, tenant.as_ref(), &name, expires_at, role).await?;
    let change = crate::ledger::change_entry(
        chrono::Utc::now(),
        tenant.as_ref().map(TenantId::as_str),
        &hub_core::ledger::entry::Actor::Cli { user: std::env::var("USER").ok() },
        if tenant.is_some() { "api_key.created" } else { "admin_key.created" },
        serde_json::json!({"api_key": record.id}),
        None,
        Some(serde_json::json!({"name": record.name, "expires_at": record.expires_at})),
    );
    store.append_ledger(&[change]).await?;
    Ok((record, key))
}

/// `--expires-in`: a duration from now, at least a minute and at most ten years.
fn expiry(raw: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let shown = crate::config::quoted(raw);
    let d = crate::config::parse_duration(raw.trim())
        .map_err(|_| format!("must be a duration such as 90d or 12h (got {shown})"))?;
    if d < std::time::Duration::from_secs(60) || d > std::time::Duration::from_secs(10 * 366 * 86_400) {
        return Err(format!("must be from 1 minute to 10 years (got {shown})"));
    }
    chrono::Duration::from_std(d).map(|d| chrono::Utc::now() + d).map_err(|_| format!("is too long (got {shown})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_prefixed_and_hashed() {
        let (a, b) = (generate(API_KEY_PREFIX), generate(API_KEY_PREFIX));
        assert_ne!(a, b);
        assert!(a.starts_with("shk_") && a.len() == 4 + 43);
        assert_eq!(hash(&a), hash(&a));
        assert_ne!(hash(&a), hash(&b));
        assert_eq!(display_prefix(&a).len(), 10);
    }
}
