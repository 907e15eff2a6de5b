//! API keys and portal sessions as stored: only hashes and a displayable prefix.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

/// A key to store: only its hash and a short displayable prefix, never the key itself.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub id: Uuid,
    /// The tenant the key belongs to; `None` for an operator's admin key.
    pub tenant_id: Option<String>,
    pub name: String,
    pub key_hash: Vec<u8>,
    pub key_prefix: String,
    pub created_at: DateTime<Utc>,
    /// When the key stops working; `None` never.
    pub expires_at: Option<DateTime<Utc>>,
    /// Its role in its tenant: `admin`, `operator` or `viewer` (`admin` for an admin key).
    pub role: String,
}

/// A stored API key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiKeyRecord {
    pub id: Uuid,
    /// `None` for an operator's admin key.
    pub tenant_id: Option<String>,
    pub name: String,
    pub key_prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// When the key stops working; `None` never.
    pub expires_at: Option<DateTime<Utc>>,
    /// Its role in its tenant: `admin`, `operator` or `viewer` (`admin` for an admin key).
    pub role: String,
}

impl ApiKeyRecord {
    /// Whether the key has expired at `now` (a revoked key is never returned as live at all).
    pub fn expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// A tenant's portal, granted by an operator for a while (`POST /admin/portal-sessions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortalSession {
    pub id: Uuid,
    pub tenant_id: String,
    /// `read` or `manage`.
    pub scope: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub exchanged_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new portal session: the hash of its one-time grant.
#[derive(Debug, Clone)]
pub struct NewPortalSession {
    pub session: PortalSession,
    pub grant_hash: Vec<u8>,
}

/// A person signed in to the console through an identity provider: who, the roles their ID
/// token granted at sign-in (the roles claim's values), until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonSession {
    pub id: Uuid,
    pub issuer: String,
    pub subject: String,
    pub roles: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// One of the hub's OIDC signing keys, its private half sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerKeyRecord {
    pub kid: Uuid,
    pub sealed_key: Vec<u8>,
    pub created_at: DateTime<Utc>,
    /// When a newer key replaced it; `None` while it signs.
    pub retired_at: Option<DateTime<Utc>>,
}
