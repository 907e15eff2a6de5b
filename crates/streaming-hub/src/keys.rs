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
