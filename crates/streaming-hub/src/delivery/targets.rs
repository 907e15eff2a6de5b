//! From a stored subscription to a sink target: the destination's identity (for the breaker and
//! the per-destination worker cap) and its secrets, opened in memory for one attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use hub_core::SinkKind;
use hub_sinks::{AwsCredentials, AwsEndpoint, EventBridgeTarget, RabbitTarget, SqsTarget, WebhookTarget};
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

fn field(sub: &SubscriptionRecord, name: &str) -> Option<String> {
    sub.sink_config.get(name).and_then(|v| v.as_str()).map(str::to_owned)
}

/// The subscription's credentials, opened: a JSON object, or `None` when none are stored.
fn credentials(sub: &SubscriptionRecord, sealer: &Sealer) -> Result<Option<serde_json::Value>, String> {
    let Some(sealed) = &sub.credentials else { return Ok(None) };
    let bytes = sealer
        .open(sub.id, Purpose::Credentials, sealed)
        .map_err(|e| format!("the credentials cannot be opened: {e}"))?;
    serde_json::from_slice(&bytes).map(Some).map_err(|_| "the stored credentials are not readable".to_owned())
}

fn aws_endpoint(
    sub: &SubscriptionRecord,
    sealer: &Sealer,
    timeout: Duration,
    default_endpoint: Option<&str>,
) -> Result<AwsEndpoint, String> {
    let creds = credentials(sub, sealer)?.map(|c| AwsCredentials {
        access_key_id: c["access_key_id"].as_str().unwrap_or_default().to_owned(),
        secret_access_key: c["secret_access_key"].as_str().unwrap_or_default().to_owned(),
        session_token: c["session_token"].as_str().map(str::to_owned),
    });
    Ok(AwsEndpoint {
        region: field(sub, "region").ok_or("the subscription has no region")?,
        endpoint_url: field(sub, "endpoint_url").or_else(|| default_endpoint.map(str::to_owned)),
        credentials: creds,
        timeout,
    })
}

/// Timeout of a broker or AWS call.
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

pub fn sqs_target(
    sub: &SubscriptionRecord,
    sealer: &Sealer,
    max_timeout: Duration,
    default_endpoint: Option<&str>,
) -> Result<SqsTarget, String> {
    Ok(SqsTarget {
        queue_url: field(sub, "queue_url").ok_or("the subscription has no queue_url")?,
        endpoint: aws_endpoint(sub, sealer, BROKER_TIMEOUT.min(max_timeout), default_endpoint)?,
    })
}

pub fn eventbridge_target(
    sub: &SubscriptionRecord,
    sealer: &Sealer,
    max_timeout: Duration,
    default_endpoint: Option<&str>,
) -> Result<EventBridgeTarget, String> {
    Ok(EventBridgeTarget {
        event_bus: field(sub, "event_bus").ok_or("the subscription has no event_bus")?,
        endpoint: aws_endpoint(sub, sealer, BROKER_TIMEOUT.min(max_timeout), default_endpoint)?,
    })
}

pub fn rabbitmq_target(
    sub: &SubscriptionRecord,
    sealer: &Sealer,
    max_timeout: Duration,
) -> Result<RabbitTarget, String> {
    let password = credentials(sub, sealer)?.and_then(|c| c["password"].as_str().map(str::to_owned));
    Ok(RabbitTarget {
        url: field(sub, "url").ok_or("the subscription has no url")?,
        password,
        exchange: field(sub, "exchange").unwrap_or_default(),
        routing_key: field(sub, "routing_key").unwrap_or_default(),
        timeout: BROKER_TIMEOUT.min(max_timeout),
    })
}
