//! From a stored subscription to what a sink needs: its typed destination (read back from the
//! store's JSON) and its secrets, opened in memory for one attempt or probe.

use chrono::{DateTime, Utc};
use hub_sinks::{Destination, Message, Secrets};
use hub_store::{StoredEvent, SubscriptionRecord};
use uuid::Uuid;

use crate::secrets::{Purpose, Sealer};

/// The subscription's destination.
pub fn destination(sub: &SubscriptionRecord) -> Result<Destination, String> {
    Destination::from_stored(&sub.sink_config)
}

/// A claimed job's subscription with its destination read from the stored JSON once per claim
/// (not again for the worker cap, the breaker and the attempt).
#[derive(Debug)]
pub(super) struct Subscribed {
    pub record: SubscriptionRecord,
    pub destination: Result<Destination, String>,
    /// What identifies the destination for the breaker and the worker cap.
    pub key: String,
    /// Its transform's code, keyed to this subscription (SPEC §10); the reason when the stored
    /// one cannot be read.
    pub transform: Option<Result<hub_transform::Code, String>>,
}

impl Subscribed {
    pub fn new(record: SubscriptionRecord) -> Self {
        let destination = destination(&record);
        let key = destination_key(&record, &destination);
        let transform = record.transform.as_ref().map(|t| match t["code"].as_str() {
            Some(code) => Ok(hub_transform::Code::new(&format!("{}/{}", record.tenant_id, record.id), code)),
            None => Err("the stored transform is not readable".to_owned()),
        });
        Self { record, destination, key, transform }
    }
}

/// `event` as `sub`'s sink delivers it in attempt number `attempt` (before any transform).
pub fn message<'a>(
    event: &'a StoredEvent,
    sub: &SubscriptionRecord,
    ordering_key: Option<&'a str>,
    attempt: u32,
    delivery_id: Uuid,
) -> Message<'a> {
    Message {
        tenant: &event.tenant_id,
        subscription_id: sub.id,
        ce_id: event.ce_id,
        source: &event.source,
        ce_type: &event.ce_type,
        resource_type: &event.resource_type,
        event_type: &event.event_type,
        time: &event.event_time,
        schema_version: &event.schema_version,
        subject: event.subject.as_deref(),
        content_type: event.data_content_type.as_deref().unwrap_or("application/json"),
        data_schema: event.data_schema.as_deref(),
        traceparent: event.traceparent.as_deref(),
        tracestate: event.tracestate.as_deref(),
        extensions: &event.extensions,
        ordering_key,
        payload: &event.payload,
        headers: &[],
        path: "",
        attempt,
        delivery_id,
        sent: None,
    }
}

/// What identifies a subscription's destination for the breaker and the attempts in flight.
pub(super) fn destination_key(sub: &SubscriptionRecord, destination: &Result<Destination, String>) -> String {
    match destination {
        Ok(d) => d.key(sub.id),
        // Unreadable: the subscription is its own destination, and its attempts say why.
        Err(_) => format!("unreadable {}", sub.id),
    }
}

/// The bucket of a subscription's destination (`hub_core::delivery::owners`): which replica
/// paces it when several deliver. Stored beside the subscription.
pub fn pace_bucket(id: Uuid, sink_config: &serde_json::Value) -> i32 {
    let key = match Destination::from_stored(sink_config) {
        Ok(d) => d.key(id),
        Err(_) => format!("unreadable {id}"),
    };
    hub_core::delivery::owners::bucket_of(&key)
}

/// The subscription's secrets, opened: the signing secret (and the previous one while its
/// rotation overlap lasts) and the sink credentials.
pub fn secrets(sub: &SubscriptionRecord, sealer: &Sealer, now: DateTime<Utc>) -> Result<Secrets, String> {
    let open = |purpose, sealed: &[u8]| -> Result<String, String> {
        let bytes =
            sealer.open(sub.id, purpose, sealed).map_err(|e| format!("the signing secret cannot be opened: {e}"))?;
        String::from_utf8(bytes).map_err(|_| "the signing secret is not text".to_owned())
    };
    let mut signing = Vec::new();
    if let Some(current) = &sub.signing_secret {
        signing.push(open(Purpose::SigningSecret, current)?);
        if let (Some(previous), Some(until)) = (&sub.previous_secret, sub.previous_secret_expires_at) {
            if now < until {
                signing.push(open(Purpose::PreviousSecret, previous)?);
            }
        }
    }
    let credentials = match &sub.credentials {
        None => None,
        Some(sealed) => {
            let bytes = sealer
                .open(sub.id, Purpose::Credentials, sealed)
                .map_err(|e| format!("the credentials cannot be opened: {e}"))?;
            Some(serde_json::from_slice(&bytes).map_err(|_| "the stored credentials are not readable".to_owned())?)
        }
    };
    let owner = Some(hub_sinks::Owner { tenant: sub.tenant_id.clone(), subscription: sub.id });
    Ok(Secrets { signing, credentials, owner })
}
