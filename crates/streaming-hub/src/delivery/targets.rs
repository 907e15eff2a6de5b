//! From a stored subscription to a sink target: the destination's identity (for the breaker and
//! the per-destination worker cap) and its secrets, opened in memory for one attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use hub_core::SinkKind;
use hub_sinks::WebhookTarget;
use hub_store::SubscriptionRecord;

use crate::secrets::{Purpose, Sealer};

/// What identifies a destination: the same URL (or queue, bus, exchange) is one destination,
/// whichever subscription points at it.
pub fn destination_key(sub: &SubscriptionRecord) -> String {
    let c = &sub.sink_config;
    let field = |name: &str| c.get(name).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    match sub.sink {
        SinkKind::Webhook => format!("webhook {}", field("url")),
        SinkKind::Sqs => format!("sqs {}", field("queue_url")),
        SinkKind::Eventbridge => format!("eventbridge {} {}", field("region"), field("event_bus")),
        SinkKind::Rabbitmq => format!("rabbitmq {} {}", field("url"), field("exchange")),
        SinkKind::Pull => format!("pull {}", sub.id),
    }
}

/// The webhook target of a subscription, its secrets opened: the current one, and the previous
/// one while its rotation overlap lasts. `max_timeout` caps the request timeout below the lease.
pub fn webhook_target(
    sub: &SubscriptionRecord,
    sealer: &Sealer,
    now: DateTime<Utc>,
    max_timeout: Duration,
) -> Result<WebhookTarget, String> {
    let c = &sub.sink_config;
    let url = c
        .get("url")
        .and_then(|v| v.as_str())
        .and_then(|u| u.parse().ok())
        .ok_or("the subscription has no valid webhook url")?;
    let headers = c
        .get("headers")
        .and_then(|h| h.as_object())
        .map(|h| h.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned()))).collect())
        .unwrap_or_default();
    let timeout =
        Duration::from_millis(c.get("timeout_ms").and_then(|v| v.as_u64()).unwrap_or(10_000)).min(max_timeout);
    let open = |purpose, sealed: &[u8]| -> Result<String, String> {
        let bytes =
            sealer.open(sub.id, purpose, sealed).map_err(|e| format!("the signing secret cannot be opened: {e}"))?;
        String::from_utf8(bytes).map_err(|_| "the signing secret is not text".to_owned())
    };
    let current = sub.signing_secret.as_deref().ok_or("the subscription has no signing secret")?;
    let mut secrets = vec![open(Purpose::SigningSecret, current)?];
    if let (Some(previous), Some(until)) = (&sub.previous_secret, sub.previous_secret_expires_at) {
        if now < until {
            secrets.push(open(Purpose::PreviousSecret, previous)?);
        }
    }
    Ok(WebhookTarget { url, headers, timeout, secrets })
}
