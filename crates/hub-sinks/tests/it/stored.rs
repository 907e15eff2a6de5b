//! Destinations as the store keeps them: each sink's stored JSON reads back as what was written, and
//! what counts as the same connection or the same credentials' origin.

use std::collections::BTreeMap;

use hub_core::signature::Scheme;

use hub_sinks::Destination;
use hub_sinks::rabbitmq::config::RabbitConfig;
use hub_sinks::webhook::config::{DEFAULT_WEBHOOK_TIMEOUT_MS, WebhookConfig};

#[test]
fn stored_destinations_round_trip() {
    let cases = [
        serde_json::json!({"type": "webhook", "url": "https://a.example/h", "headers": {"X-Team": "risk"}, "timeout_ms": 2000, "signature": "lerian"}),
        serde_json::json!({"type": "webhook", "url": "https://a.example/h", "headers": {}, "timeout_ms": 2000, "signature": "standard-webhooks"}),
        serde_json::json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1"}),
        serde_json::json!({"type": "eventbridge", "event_bus": "b", "region": "eu-west-1", "endpoint_url": "http://127.0.0.1:5000/"}),
        serde_json::json!({"type": "rabbitmq", "url": "amqps://hub@mq.example/vh", "exchange": "e", "routing_key": "{event}"}),
        serde_json::json!({"type": "pull"}),
    ];
    for stored in cases {
        let d = Destination::from_stored(&stored).expect("readable");
        assert_eq!(d.to_stored(), stored);
        assert_eq!(d.kind().as_str(), stored["type"]);
    }
    let old_webhook = serde_json::json!({"type": "webhook", "url": "https://a.example/h"});
    let d = Destination::from_stored(&old_webhook).expect("readable");
    assert!(matches!(
        d,
        Destination::Webhook(WebhookConfig { timeout_ms: DEFAULT_WEBHOOK_TIMEOUT_MS, signature: Scheme::Lerian, .. })
    ));
    assert!(Destination::from_stored(&serde_json::json!({"type": "ftp"})).is_err());
}

#[test]
fn a_connection_is_where_and_how_not_timeouts_or_headers() {
    let hook = |url: &str, timeout_ms| {
        Destination::Webhook(WebhookConfig {
            url: url.into(),
            headers: BTreeMap::new(),
            timeout_ms,
            signature: Scheme::Lerian,
            auth: None,
            tls: None,
        })
    };
    assert!(hook("https://a/h", 100).same_connection(&hook("https://a/h", 5000)));
    let standard = Destination::Webhook(WebhookConfig {
        url: "https://a/h".into(),
        headers: BTreeMap::new(),
        timeout_ms: 100,
        signature: Scheme::StandardWebhooks,
        auth: None,
        tls: None,
    });
    assert!(!hook("https://a/h", 100).same_connection(&standard), "receivers verify another way");
    assert!(!hook("https://a/h", 100).same_connection(&hook("https://b/h", 100)));
    assert!(!hook("https://a/h", 100).same_connection(&Destination::Pull));
    let mq = |url: &str| {
        Destination::Rabbitmq(RabbitConfig { url: url.into(), exchange: "e".into(), routing_key: String::new() })
    };
    assert_eq!(mq("amqps://h@a.example/x").credential_origins(), mq("amqps://h@a.example/y").credential_origins());
    assert_ne!(mq("amqps://h@a.example/x").credential_origins(), mq("amqps://h@b.example/x").credential_origins());
    assert_ne!(mq("amqps://h@a.example/x").credential_origins(), mq("amqp://h@a.example/x").credential_origins());
}
