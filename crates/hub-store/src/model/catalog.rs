//! The event catalog's records: manifest sources with their last good document, and the types
//! seen in each tenant's inbox.

use chrono::{DateTime, Utc};

/// One manifest source as stored: its last good document (kept when a later fetch fails).
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestRecord {
    /// The configured URL or `file:` path.
    pub location: String,
    /// The last document that parsed, as fetched; `None` until one did.
    pub document: Option<String>,
    /// The payload schemas fetched with that document, by their `dataSchema` location.
    pub schemas: serde_json::Map<String, serde_json::Value>,
    /// When `document` was fetched.
    pub fetched_at: Option<DateTime<Utc>>,
    /// When the source was last tried.
    pub checked_at: DateTime<Utc>,
    /// Why the last try failed; `None` when it succeeded.
    pub error: Option<String>,
    /// Declared schemas that could not be fetched or compiled: `{"field", "message"}` each.
    pub problems: Vec<serde_json::Value>,
}

/// What one refresh of a source found.
#[derive(Debug, Clone, PartialEq)]
pub enum ManifestFetch {
    /// A document that parsed, with its schemas and their problems.
    Fetched { document: String, schemas: serde_json::Map<String, serde_json::Value>, problems: Vec<serde_json::Value> },
    /// The source failed: the stored document stays, the error is recorded.
    Failed { error: String },
}

/// An event type as seen in a tenant's inbox (one row per source and schema version), or a
/// roll-up of accepted events to add to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenType {
    pub tenant_id: String,
    pub source: String,
    /// `<resourcetype>.<eventtype>`.
    pub event_key: String,
    pub schema_version: String,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    /// Events accepted (duplicates not counted).
    pub events: i64,
}
