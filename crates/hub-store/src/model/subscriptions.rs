//! Subscriptions as stored, and the changes a patch, a rotation or a verification makes.

use super::compiled_filters;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use hub_core::routing::Filters;
use uuid::Uuid;

/// A subscription as stored. Secrets and credentials are sealed bytes (see `hub_core::seal`);
/// this crate never sees them in clear.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionRecord {
    pub id: Uuid,
    pub tenant_id: String,
    pub name: String,
    pub event_types: Vec<String>,
    pub origin: Option<String>,
    /// The content filters as written (a JSON array, `[]` for none), compiled by
    /// `hub_core::routing::Filters::compile` when matching reads them.
    pub filters: serde_json::Value,
    /// The transform as written (`{"language", "code"}`, SPEC §10), checked to compile by the
    /// caller; `None`: events go as they are.
    pub transform: Option<serde_json::Value>,
    /// `key`: per ordering key one delivery at a time, in seq order (push sinks only).
    pub ordering: hub_core::Ordering,
    pub sink: hub_core::SinkKind,
    /// The owner's fixed delivery limits (attempts in flight, rate); default none.
    pub limits: hub_core::delivery::inflight::Limits,
    /// The rate the receiver declared at its last successful verification
    /// (`WebHook-Allowed-Rate`, requests per minute).
    pub allowed_rate: Option<f64>,
    /// The destination without secrets, as the API shows it.
    pub sink_config: serde_json::Value,
    pub signing_secret: Option<Vec<u8>>,
    pub previous_secret: Option<Vec<u8>>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub credentials: Option<Vec<u8>>,
    pub enabled: bool,
    pub verification: hub_core::VerificationState,
    pub verification_error: Option<String>,
    pub disabled_reason: Option<String>,
    /// When it was last disabled (by a PATCH or automatically); kept after it is enabled again.
    pub disabled_at: Option<DateTime<Utc>>,
    /// The open failure period: first and last failure since the last success.
    pub failing_since: Option<DateTime<Utc>>,
    pub last_failure_at: Option<DateTime<Utc>>,
    pub pull_cursor: i64,
    /// Its destination key's bucket (`hub_core::delivery::owners::bucket_of`): the replica that
    /// owns the bucket alone claims its jobs. `None` until the hub computed it (a row written
    /// before buckets existed).
    pub pace_bucket: Option<i32>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl SubscriptionRecord {
    /// Its content filters compiled, from the cache matching uses; `None` when the stored text
    /// does not compile.
    pub fn compiled_filters(&self) -> Option<Arc<Filters>> {
        compiled_filters(&self.filters.to_string()).ok()
    }
}

/// A change a `PATCH` asks for: `None` leaves a field as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubscriptionPatch {
    pub name: Option<String>,
    pub event_types: Option<Vec<String>>,
    /// `Some(None)` removes the origin.
    pub origin: Option<Option<String>>,
    /// New content filters (already compiled once by the caller to be known valid).
    pub filters: Option<serde_json::Value>,
    /// `Some(None)` removes the transform; `Some(Some(t))` sets it (already checked to compile).
    pub transform: Option<Option<serde_json::Value>>,
    /// A new ordering, for jobs created after the change.
    pub ordering: Option<hub_core::Ordering>,
    /// New delivery limits.
    pub limits: Option<hub_core::delivery::inflight::Limits>,
    pub destination: Option<DestinationChange>,
    /// `Some(false)` disables with `disabled_reason` (when enabled); `Some(true)` enables and
    /// clears the reason.
    pub enabled: Option<bool>,
    pub disabled_reason: Option<String>,
    pub now: DateTime<Utc>,
}

/// A new destination of the same sink type.
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationChange {
    /// The destination without secrets, as the API shows it.
    pub sink_config: serde_json::Value,
    /// `Some(None)` removes the credentials; `None` keeps them.
    pub credentials: Option<Option<Vec<u8>>>,
    /// Where or how to connect changed: the subscription must be verified again.
    pub reverify: bool,
    /// The new destination key's bucket; `None`: the hub computes it later (bucket 0 until then).
    pub pace_bucket: Option<i32>,
}

/// A new signing secret, the current one kept as the previous until `previous_expires_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretRotation {
    /// The sealed secret being replaced, as read: the rotation applies only if it is still stored.
    pub replaces: Vec<u8>,
    pub signing_secret: Vec<u8>,
    pub previous_secret: Vec<u8>,
    pub previous_expires_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// The result of probing a destination.
#[derive(Debug, Clone, PartialEq)]
pub struct VerificationResult {
    /// The destination probed: the result is recorded only if it is still the stored one.
    pub probed_config: serde_json::Value,
    pub probed_credentials: Option<Vec<u8>>,
    /// `None` when the probe succeeded; otherwise the reason, shown to the tenant.
    pub error: Option<String>,
    /// On success, also enable the subscription and clear its failure period and disabled
    /// reason (the recovery of an auto-disabled subscription).
    pub reenable: bool,
    /// The rate the receiver declared in its answer (kept on success only).
    pub allowed_rate: Option<f64>,
    pub now: DateTime<Utc>,
}

pub use hub_core::delivery::JobState;

/// A patch's values in the form both backends bind them.
pub(crate) struct PatchColumns {
    pub event_types: Option<String>,
    pub filters: Option<String>,
    pub transform_set: bool,
    pub transform: Option<String>,
    pub ordering: Option<&'static str>,
    pub limits: Option<String>,
    pub sink_config: Option<String>,
    pub credentials_set: bool,
    pub credentials: Option<Vec<u8>>,
    pub reverify: bool,
    pub pace_bucket: Option<i32>,
}

impl PatchColumns {
    pub(crate) fn of(patch: &SubscriptionPatch) -> Result<Self, crate::StoreError> {
        let event_types = patch
            .event_types
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| crate::StoreError::Corrupt(e.to_string()))?;
        let destination = patch.destination.as_ref();
        Ok(Self {
            event_types,
            filters: patch.filters.as_ref().map(serde_json::Value::to_string),
            transform_set: patch.transform.is_some(),
            transform: patch.transform.clone().flatten().map(|t| t.to_string()),
            ordering: patch.ordering.map(hub_core::Ordering::as_str),
            limits: patch.limits.map(|l| l.to_json().to_string()),
            sink_config: destination.map(|d| d.sink_config.to_string()),
            credentials_set: destination.is_some_and(|d| d.credentials.is_some()),
            credentials: destination.and_then(|d| d.credentials.clone().flatten()),
            reverify: destination.is_some_and(|d| d.reverify),
            pace_bucket: destination.and_then(|d| d.pace_bucket),
        })
    }
}
