use proptest::prelude::*;
use serde_json::json;

use super::*;

/// A manifest in the original producer library's shape, with fields this hub does not read.
fn ledger() -> Value {
    json!({
        "version": "1.0",
        "publisher": {
            "serviceName": "ledger-api", "source": "ledger", "routePath": "/streaming",
            "outboxSupported": true, "appVersion": "3.4.1", "libVersion": "1.2.0",
            "producerId": "ledger-7f9c", "region": "sa-east-1"
        },
        "topic": "lerian.streaming.ledger",
        "dlqTopic": "lerian.streaming.ledger.dlq",
        "commandsTopic": "lerian.streaming.ledger.commands",
        "events": [
            {"key": "account.created.v1", "resourceType": "account", "eventType": "created",
             "eventKey": "account.created", "schemaVersion": "1.0.0", "dataContentType": "application/json",
             "dataSchema": "https://schemas.example.com/ledger/account.created.json", "systemEvent": false,
             "description": "An account was opened.", "class": "fact",
             "defaultPolicy": {"retries": 8, "ordering": "none"}, "owner": "core-banking"},
            {"resourceType": "account", "eventType": "freeze", "schemaVersion": "2",
             "dataSchema": {"type": "object", "required": ["reason"]}, "class": "command"},
            {"eventKey": "balance.updated"}
        ],
        "routes": [{"path": "/streaming", "method": "GET"}]
    })
}

fn parse(v: &Value) -> Result<Manifest, ManifestError> {
    Manifest::parse(v.to_string().as_bytes())
}

fn refused(v: Value) -> ManifestError {
    parse(&v).expect_err("refused")
}

#[test]
fn the_documented_shape_parses_with_unknown_fields_ignored() {
    let m = parse(&ledger()).expect("parses");
    assert_eq!(m.publisher.source.as_str(), "ledger");
    assert_eq!(m.publisher.service_name.as_deref(), Some("ledger-api"));
    assert_eq!(m.version.as_deref(), Some("1.0"));
    assert_eq!(m.topic.as_deref(), Some("lerian.streaming.ledger"));
    assert_eq!(m.events.len(), 3);
    let created = &m.events[0];
    assert_eq!(created.key.to_string(), "account.created");
    assert_eq!(created.schema_version.as_deref(), Some("1.0.0"));
    assert_eq!(created.class, Some(EventClass::Fact));
    assert_eq!(
        created.data_schema.as_ref().and_then(DataSchema::fetchable),
        Some("https://schemas.example.com/ledger/account.created.json")
    );
    assert_eq!(m.events[1].class, Some(EventClass::Command));
    assert!(matches!(m.events[1].data_schema, Some(DataSchema::Inline(_))));
    // The event key alone names the type when the two segments are absent.
    assert_eq!(m.events[2].key.to_string(), "balance.updated");
    assert_eq!(m.events[2].schema_version, None);
}

#[test]
fn a_refusal_names_the_field_at_fault() {
    let cases: Vec<(Value, &str)> = vec![
        (json!([]), ""),
        (json!({"events": []}), "publisher"),
        (json!({"publisher": {}, "events": []}), "publisher.source"),
        (json!({"publisher": {"source": "Ledger.API"}, "events": []}), "publisher.source"),
        (json!({"publisher": {"source": "ledger", "serviceName": 7}, "events": []}), "publisher.serviceName"),
        (json!({"publisher": {"source": "ledger"}}), "events"),
        (json!({"publisher": {"source": "ledger"}, "events": {}}), "events"),
        (json!({"publisher": {"source": "ledger"}, "events": [7]}), "events[0]"),
        (json!({"publisher": {"source": "ledger"}, "events": [{"eventType": "x"}]}), "events[0].resourceType"),
        (json!({"publisher": {"source": "ledger"}, "events": [{"resourceType": "x"}]}), "events[0].eventType"),
        (
            json!({"publisher": {"source": "ledger"}, "events": [{"resourceType": "a", "eventType": "b"},
                   {"resourceType": "a b", "eventType": "c"}]}),
            "events[1].resourceType",
        ),
        (json!({"publisher": {"source": "ledger"}, "events": [{"eventKey": "nodot"}]}), "events[0].eventKey"),
        (
            json!({"publisher": {"source": "ledger"}, "events": [{"eventKey": "a.b", "class": "event"}]}),
            "events[0].class",
        ),
        (
            json!({"publisher": {"source": "ledger"}, "events": [{"eventKey": "a.b", "dataSchema": 5}]}),
            "events[0].dataSchema",
        ),
        (
            json!({"publisher": {"source": "ledger"}, "events": [{"eventKey": "a.b", "systemEvent": "no"}]}),
            "events[0].systemEvent",
        ),
        (
            json!({"publisher": {"source": "ledger"}, "events": [{"eventKey": "a.b", "schemaVersion": 1}]}),
            "events[0].schemaVersion",
        ),
        (
            json!({"publisher": {"source": "ledger"}, "events": [{"eventKey": "a.b", "description": "x\u{0007}"}]}),
            "events[0].description",
        ),
    ];
    for (doc, field) in cases {
        let e = refused(doc.clone());
        assert_eq!(e.field, field, "{doc}: {e}");
        assert!(!e.message.is_empty());
    }
    assert_eq!(Manifest::parse(b"{not json").expect_err("not JSON").field, "");
}

#[test]
fn a_manifest_is_bounded() {
    let events: Vec<Value> = (0..=MAX_EVENTS).map(|i| json!({"eventKey": format!("r.e{i}")})).collect();
    let e = refused(json!({"publisher": {"source": "ledger"}, "events": events}));
    assert_eq!(e.field, "events");
    let long = "x".repeat(MAX_TEXT + 1);
    assert_eq!(
        refused(json!({"publisher": {"source": "ledger", "serviceName": long}, "events": []})).field,
        "publisher.serviceName"
    );
}

#[test]
fn only_http_and_file_locations_are_fetched() {
    for (location, fetched) in [
        ("https://x.example/s.json", true),
        ("HTTP://x.example/s.json", true),
        ("file:/etc/schemas/a.json", true),
        ("urn:lerian:ledger:account", false),
        ("ftp://x.example/s.json", false),
        ("", false),
    ] {
        assert_eq!(DataSchema::Location(location.to_owned()).fetchable().is_some(), fetched, "{location}");
    }
    assert_eq!(DataSchema::Inline(json!({})).fetchable(), None);
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-zA-Z._ -]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("publisher".to_owned()),
                        Just("source".to_owned()),
                        Just("events".to_owned()),
                        Just("resourceType".to_owned()),
                        Just("eventType".to_owned()),
                        Just("eventKey".to_owned()),
                        Just("dataSchema".to_owned()),
                        Just("class".to_owned()),
                        "[a-z]{1,6}",
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_bytes_are_read_or_refused_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Manifest::parse(&bytes);
    }

    /// Any JSON document: a manifest whose every declared type is a valid key, or a refusal that
    /// names a field.
    #[test]
    fn any_document_parses_to_valid_keys_or_a_named_refusal(doc in any_json()) {
        match parse(&doc) {
            Ok(m) => for e in &m.events {
                prop_assert!(EventKey::parse(&e.key.to_string()).is_ok());
            },
            Err(e) => prop_assert!(!e.message.is_empty()),
        }
    }

    /// A valid manifest with fields of any name added anywhere still parses to the same types.
    #[test]
    fn unknown_fields_never_change_what_is_read(extra in "[a-z]{1,8}", value in any_json()) {
        let mut doc = ledger();
        let known = ["version", "publisher", "topic", "events", "source", "serviceName", "appVersion", "libVersion",
            "resourceType", "eventType", "eventKey", "schemaVersion", "dataContentType", "dataSchema",
            "systemEvent", "description", "class"];
        prop_assume!(!known.contains(&extra.as_str()));
        doc[&extra] = value.clone();
        doc["publisher"][&extra] = value.clone();
        doc["events"][0][&extra] = value;
        prop_assert_eq!(parse(&doc).expect("parses"), parse(&ledger()).expect("parses"));
    }
}
