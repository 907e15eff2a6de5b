//! One event as the sinks deliver it, and the forms it takes: its CloudEvents attributes as
//! headers, and the structured JSON form.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use uuid::Uuid;

/// One event to deliver, with the attempt's identity.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    pub tenant: &'a str,
    pub subscription_id: Uuid,
    pub ce_id: Uuid,
    pub source: &'a str,
    pub ce_type: &'a str,
    pub resource_type: &'a str,
    pub event_type: &'a str,
    pub time: &'a str,
    pub schema_version: &'a str,
    pub subject: Option<&'a str>,
    /// The body's media type (`ce-datacontenttype`, default `application/json`).
    pub content_type: &'a str,
    pub data_schema: Option<&'a str>,
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
    pub extensions: &'a BTreeMap<String, String>,
    /// The event's ordering key when its subscription orders by key (SQS FIFO queues group by it).
    pub ordering_key: Option<&'a str>,
    /// The body: exactly as received, or as the subscription's transform made it.
    pub payload: &'a [u8],
    /// Headers the subscription's transform added or changed (SPEC §10), sent after the hub's own
    /// in place of any of the same name, where the sink carries headers or attributes.
    pub headers: &'a [(String, String)],
    /// What the transform appended to a webhook's URL path (empty: nothing).
    pub path: &'a str,
    /// 1-based.
    pub attempt: u32,
    /// New for every attempt.
    pub delivery_id: Uuid,
    /// Where a sink that signs its requests notes the headers it sent (for the ledger's digest).
    pub sent: Option<&'a Sent>,
}

/// The headers a sink sent with an attempt, as it sent them (SPEC §11, the ledger's digest of
/// what was sent): a webhook's signature and id headers.
#[derive(Debug, Default)]
pub struct Sent(std::sync::Mutex<Vec<(String, String)>>);

impl Sent {
    pub fn note(&self, headers: Vec<(String, String)>) {
        if let Ok(mut sent) = self.0.lock() {
            *sent = headers;
        }
    }

    pub fn headers(&self) -> Vec<(String, String)> {
        self.0.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

impl Message<'_> {
    /// The event key `<resourcetype>.<eventtype>`.
    pub fn event_key(&self) -> String {
        format!("{}.{}", self.resource_type, self.event_type)
    }

    /// What keys the event in a partitioned stream (a Kafka record, a Kinesis partition key):
    /// its `partitionkey`, else its `subject`, else the tenant, whether or not its subscription
    /// orders by key, so one key's events share a partition or shard.
    pub fn record_key(&self) -> &str {
        self.extensions.get("partitionkey").map(String::as_str).or(self.subject).unwrap_or(self.tenant)
    }
}

/// The CloudEvents attributes of a message as `(header, value)` pairs.
pub fn attributes(m: &Message<'_>) -> Vec<(String, String)> {
    let mut a = vec![
        ("ce-specversion".to_owned(), "1.0".to_owned()),
        ("ce-id".to_owned(), m.ce_id.to_string()),
        ("ce-source".to_owned(), m.source.to_owned()),
        ("ce-type".to_owned(), m.ce_type.to_owned()),
        ("ce-time".to_owned(), m.time.to_owned()),
        ("ce-tenantid".to_owned(), m.tenant.to_owned()),
        ("ce-schemaversion".to_owned(), m.schema_version.to_owned()),
        ("ce-resourcetype".to_owned(), m.resource_type.to_owned()),
        ("ce-eventtype".to_owned(), m.event_type.to_owned()),
        ("ce-datacontenttype".to_owned(), m.content_type.to_owned()),
        ("x-lerian-delivery-id".to_owned(), m.delivery_id.to_string()),
        ("x-lerian-attempt".to_owned(), m.attempt.to_string()),
    ];
    let optional = [
        ("ce-subject", m.subject),
        ("ce-dataschema", m.data_schema),
        ("traceparent", m.traceparent),
        ("tracestate", m.tracestate),
    ];
    for (k, v) in optional {
        if let Some(v) = v {
            a.push((k.to_owned(), v.to_owned()));
        }
    }
    for (name, value) in m.extensions {
        a.push((format!("ce-{name}"), value.clone()));
    }
    with_headers(a, m.headers)
}

/// `own` with `added` after it, each added header in place of any of the same name (names
/// compared without case).
pub fn with_headers(mut own: Vec<(String, String)>, added: &[(String, String)]) -> Vec<(String, String)> {
    if added.is_empty() {
        return own;
    }
    own.retain(|(k, _)| !added.iter().any(|(a, _)| a.eq_ignore_ascii_case(k)));
    own.extend(added.iter().cloned());
    own
}

/// The CloudEvent in structured JSON form: attributes plus `data` (or `data_base64`).
pub fn structured(m: &Message<'_>) -> Value {
    let mut doc = Map::new();
    for (k, v) in attributes(m) {
        if let Some(name) = k.strip_prefix("ce-") {
            doc.insert(name.to_owned(), Value::String(v));
        } else if k == "traceparent" || k == "tracestate" {
            doc.insert(k, Value::String(v));
        }
    }
    let json_data = hub_core::envelope::is_json_media_type(m.content_type)
        .then(|| serde_json::from_slice::<Value>(m.payload).ok())
        .flatten();
    match (json_data, std::str::from_utf8(m.payload)) {
        (Some(data), _) => doc.insert("data".to_owned(), data),
        (None, Ok(text)) => doc.insert("data".to_owned(), Value::String(text.to_owned())),
        (None, Err(_)) => doc.insert("data_base64".to_owned(), Value::String(b64(m.payload))),
    };
    Value::Object(doc)
}

/// Standard base64, padded.
pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
