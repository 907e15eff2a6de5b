//! Destinations as the store keeps them: each sink's stored JSON reads back as what was written, and
//! what counts as the same connection or the same credentials' origin; and any `sink` object a
//! tenant sends is either refused, naming a field, or read into a destination that is stored and
//! read back unchanged.

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

/// Every field name any sink's request schema has (at any depth), from the OpenAPI schemas: the
/// names a hostile `sink` object is made of, whatever sinks the list holds.
fn field_names() -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Object(props)) = map.get("properties") {
                    out.extend(props.keys().cloned());
                }
                map.values().for_each(|v| walk(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut schemas = Vec::new();
    <hub_sinks::SinkSchema as utoipa::ToSchema>::schemas(&mut schemas);
    let mut names = std::collections::BTreeSet::new();
    for (_, schema) in &schemas {
        walk(&serde_json::to_value(schema).expect("a schema as JSON"), &mut names);
    }
    names.extend(["extra".to_owned(), String::new()]);
    names.into_iter().collect()
}

fn hostile_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,40}".prop_map(Value::from),
        proptest::sample::select(vec![
            "https://a.example/h",
            "http://127.0.0.1:8085",
            "https://10.0.0.1:443",
            "nats://127.0.0.1:4222",
            "tls://n1.example.com,tls://n2.example.com:7422",
            "amqps://u:p@mq.example/vh",
            "b1.example.com:9092",
            "arn:aws:sns:us-east-1:123456789012:t",
            "us-east-1",
            "lerian-prod",
            "events",
            "basic",
            "mtls",
            "oauth2_client_credentials",
            "scram-sha-512",
            "ed25519",
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(proptest::sample::select(field_names()), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Each sink type's example from its schema (one the hub takes), by type.
fn examples() -> Vec<(String, serde_json::Map<String, serde_json::Value>)> {
    let mut schemas = Vec::new();
    <hub_sinks::SinkSchema as utoipa::ToSchema>::schemas(&mut schemas);
    let mut out = Vec::new();
    for (_, schema) in &schemas {
        let schema = serde_json::to_value(schema).expect("a schema as JSON");
        if let Some(serde_json::Value::Object(example)) = schema.get("example") {
            if let Some(kind) = example.get("type").and_then(|t| t.as_str()) {
                out.push((kind.to_owned(), example.clone()));
            }
        }
    }
    assert_eq!(out.len(), hub_sinks::registry::NAMES.len(), "every sink type has an example: {out:?}");
    out
}

proptest::proptest! {
    /// A sink's example with fields removed, replaced or added, or any type with any fields.
    #[test]
    fn any_sink_object_is_refused_by_field_or_stored_and_read_back(
        (kind, example) in proptest::sample::select(examples()),
        edits in proptest::collection::btree_map(
            proptest::sample::select(field_names()),
            proptest::option::of(hostile_value()),
            0..4,
        ),
        from_example in proptest::bool::weighted(0.8),
        allow_private in proptest::bool::ANY,
    ) {
        let mut sink = if from_example { example } else { serde_json::Map::new() };
        for (field, value) in edits {
            match value {
                Some(v) if field != "type" => { sink.insert(field, v); }
                _ => { sink.remove(&field); }
            }
        }
        sink.insert("type".into(), kind.clone().into());
        match hub_sinks::destination::request::parse(&serde_json::Value::Object(sink), allow_private) {
            Ok(read) => {
                proptest::prop_assert_eq!(read.kind.as_str(), kind.as_str());
                let back = Destination::from_stored(&read.public).expect("what is stored reads back");
                proptest::prop_assert_eq!(&back, &read.typed);
                proptest::prop_assert_eq!(back.to_stored(), read.public);
            }
            Err(e) => proptest::prop_assert!(e.field.starts_with("sink"), "{}: {}", e.field, e.problem),
        }
    }
}
