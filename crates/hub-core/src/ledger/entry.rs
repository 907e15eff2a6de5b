//! What a ledger entry says: the exact JSON text of a delivery or a change, in a fixed field
//! order (the text is what the leaf hashes, so it is made once and stored as made).
//!
//! A delivery entry never holds what was sent, only a keyed digest of it: HMAC-SHA256 under a
//! random key kept beside the entry, outside the log. Whoever holds the bytes a receiver got and
//! that key can check them; once erasure destroys the key (SPEC §10), the digest links to
//! nothing, and the entry, and so the tree, stay as they were.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, SecondsFormat, Utc};
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The headers of a delivery that its digest covers, when the sink sent them: those that sign
/// it and name it, as the receiver got them.
pub const DIGESTED_HEADERS: [&str; 6] = [
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-webhook-timestamp",
    "x-webhook-signature",
    "x-lerian-delivery-id",
];

/// The digest of what was sent: HMAC-SHA256 under `key` of each digested header present, as
/// `name: value\n` in the order of [`DIGESTED_HEADERS`] (a header sent twice, in the order sent),
/// then `\n`, then the body. `hmac-sha256:` and standard base64.
pub fn sent_digest(key: &[u8], headers: &[(String, String)], body: &[u8]) -> String {
    // HMAC takes a key of any length: this never fails.
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(key) else {
        return "hmac-sha256:".to_owned();
    };
    for name in DIGESTED_HEADERS {
        for (n, v) in headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)) {
            mac.update(n.to_ascii_lowercase().as_bytes());
            mac.update(b": ");
            mac.update(v.as_bytes());
            mac.update(b"\n");
        }
    }
    mac.update(b"\n");
    mac.update(body);
    format!("hmac-sha256:{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The digest that stands for a destination (its key: sink and address): `sha256:` and hex.
pub fn destination_digest(destination: &str) -> String {
    let digest = Sha256::digest(destination.as_bytes());
    format!("sha256:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// One attempt's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delivery {
    pub time: String,
    pub delivery_id: Uuid,
    pub event_id: Option<Uuid>,
    pub subscription_id: Uuid,
    pub job_id: Uuid,
    pub attempt: u32,
    pub destination: String,
    /// The digest of what was sent ([`sent_digest`]); absent when nothing was.
    pub sent: Option<String>,
    pub status: Option<u16>,
    pub duration_ms: u64,
    /// `delivered`, `failed`, `skipped` or `cancelled`.
    pub outcome: String,
    /// What became of the job: `succeeded`, `retry`, `dead` (dead-lettered) or `cancelled`.
    pub job: String,
}

impl Delivery {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        at: DateTime<Utc>,
        delivery_id: Uuid,
        event_id: Option<Uuid>,
        subscription_id: Uuid,
        job_id: Uuid,
        attempt: u32,
        destination: &str,
        sent: Option<String>,
        status: Option<u16>,
        duration_ms: u64,
        outcome: &str,
        job: &str,
    ) -> Self {
        Self {
            time: time(at),
            delivery_id,
            event_id,
            subscription_id,
            job_id,
            attempt,
            destination: destination_digest(destination),
            sent,
            status,
            duration_ms,
            outcome: outcome.to_owned(),
            job: job.to_owned(),
        }
    }

    /// The entry's text.
    pub fn text(&self) -> String {
        tagged("delivery", self)
    }
}

/// Who made a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Actor {
    /// An API key, by id.
    ApiKey { id: String },
    /// The operator's admin token (break-glass), or an admin API key.
    Admin { id: Option<String> },
    /// A person in the tenant portal, by session.
    Portal { session: String },
    /// A signed-in person: their issuer and subject.
    Person { issuer: String, subject: String },
    /// The command line, run on a host with access to the store, as this OS user.
    Cli { user: Option<String> },
    /// The hub itself (auto-disable, key rotation on a schedule).
    Hub,
}

impl Actor {
    /// How lists show it.
    pub fn label(&self) -> String {
        match self {
            Actor::ApiKey { id } => format!("api key {id}"),
            Actor::Admin { id: Some(id) } => format!("admin key {id}"),
            Actor::Admin { id: None } => "admin token".to_owned(),
            Actor::Portal { session } => format!("portal session {session}"),
            Actor::Person { issuer, subject } => format!("{subject} ({issuer})"),
            Actor::Cli { user: Some(user) } => format!("command line ({user})"),
            Actor::Cli { user: None } => "command line".to_owned(),
            Actor::Hub => "the hub".to_owned(),
        }
    }
}

/// One change made through the API, the console, the portal or the CLI.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub time: String,
    pub actor: Actor,
    /// What was done, `<thing>.<verb>` (`subscription.created`, `api_key.revoked`, …).
    pub action: String,
    /// What it was done to: its kind and id.
    pub target: Value,
    /// The thing before and after, secrets removed; absent where it did not exist.
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl Change {
    pub fn new(
        at: DateTime<Utc>,
        actor: Actor,
        action: &str,
        target: Value,
        before: Option<Value>,
        after: Option<Value>,
    ) -> Self {
        Self { time: time(at), actor, action: action.to_owned(), target, before, after }
    }

    pub fn text(&self) -> String {
        tagged("change", self)
    }
}

/// `{"kind": …, <the fields>}` as compact JSON.
fn tagged(kind: &str, fields: &impl Serialize) -> String {
    let mut text = format!("{{\"kind\":\"{kind}\",");
    let body = serde_json::to_string(fields).unwrap_or_else(|_| "{}".to_owned());
    text.push_str(body.strip_prefix('{').unwrap_or("}"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sent_digest_covers_the_signing_headers_and_the_body_only() {
        let key = [9u8; 16];
        let sent = vec![
            ("Webhook-Id".to_owned(), "e1".to_owned()),
            ("webhook-timestamp".to_owned(), "1700000000".to_owned()),
            ("webhook-signature".to_owned(), "v1,abc".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
        ];
        let d = sent_digest(&key, &sent, b"{}");
        assert!(d.starts_with("hmac-sha256:"));
        // Other headers, or the names' case, do not count; the body, a signature or the key do.
        assert_eq!(
            d,
            sent_digest(&key, &sent[..3].iter().map(|(n, v)| (n.to_lowercase(), v.clone())).collect::<Vec<_>>(), b"{}")
        );
        assert_ne!(d, sent_digest(&key, &sent, b"{ }"));
        let mut resigned = sent.clone();
        resigned[2].1 = "v1,abd".to_owned();
        assert_ne!(d, sent_digest(&key, &resigned, b"{}"));
        assert_ne!(d, sent_digest(&[8u8; 16], &sent, b"{}"));
    }

    #[test]
    fn entries_are_compact_json_in_a_fixed_order() {
        let at = DateTime::from_timestamp_millis(1_765_000_000_123).expect("holds");
        let id = Uuid::nil();
        let d = Delivery::new(
            at,
            id,
            Some(id),
            id,
            id,
            2,
            "webhook https://x",
            None,
            Some(200),
            12,
            "delivered",
            "succeeded",
        );
        let text = d.text();
        assert!(text.starts_with(r#"{"kind":"delivery","time":"2025-12-06T05:46:40.123Z","delivery_id":"#), "{text}");
        assert!(text.contains(r#""destination":"sha256:"#) && text.ends_with(r#""job":"succeeded"}"#), "{text}");
        let c = Change::new(
            at,
            Actor::ApiKey { id: "k1".into() },
            "subscription.created",
            serde_json::json!({"subscription": "s1"}),
            None,
            Some(serde_json::json!({"name": "n"})),
        );
        assert_eq!(
            c.text(),
            r#"{"kind":"change","time":"2025-12-06T05:46:40.123Z","actor":{"type":"api_key","id":"k1"},"action":"subscription.created","target":{"subscription":"s1"},"before":null,"after":{"name":"n"}}"#
        );
    }
}
