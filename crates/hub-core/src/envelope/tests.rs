//! Table-driven tests: every rule of the envelope with a passing and a failing case.

use proptest::prelude::*;

use super::*;

const ID: &str = "01890a5d-ac96-774b-bcce-b302099a8057";
const TOPIC: &str = "lerian.streaming.lender";

fn valid() -> Vec<(String, Vec<u8>)> {
    [
        ("ce-specversion", "1.0"),
        ("ce-id", ID),
        ("ce-source", "lender"),
        ("ce-type", "studio.lerian.lender.loan_application.approved"),
        ("ce-time", "2026-11-30T10:00:00Z"),
        ("ce-schemaversion", "1.0.0"),
        ("ce-resourcetype", "loan_application"),
        ("ce-eventtype", "approved"),
        ("ce-tenantid", "tenant-a"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
    .collect()
}

fn with(mut headers: Vec<(String, Vec<u8>)>, key: &str, value: &[u8]) -> Vec<(String, Vec<u8>)> {
    headers.retain(|(k, _)| k != key);
    headers.push((key.to_owned(), value.to_vec()));
    headers
}

fn without(mut headers: Vec<(String, Vec<u8>)>, key: &str) -> Vec<(String, Vec<u8>)> {
    headers.retain(|(k, _)| k != key);
    headers
}

fn run(headers: Vec<(String, Vec<u8>)>, body: &[u8]) -> Verdict {
    judge(headers, body, Some(TOPIC), &IngestPolicy::default())
}

fn accepted(v: Verdict) -> Envelope {
    match v {
        Verdict::Accept(env) => *env,
        other => panic!("expected accept, got {other:?}"),
    }
}

#[test]
fn a_valid_event_is_accepted_with_all_its_attributes() {
    let headers = with(valid(), "ce-subject", b"loan-42");
    let headers = with(headers, "traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    let headers = with(headers, "tracestate", b"vendor=1");
    let env = accepted(run(headers, br#"{"amount":10}"#));
    assert_eq!(env.id().to_string(), ID);
    assert_eq!(env.source().as_str(), "lender");
    assert_eq!(env.key().to_string(), "loan_application.approved");
    assert_eq!(env.tenant().as_str(), "tenant-a");
    assert_eq!(env.subject(), Some("loan-42"));
    assert_eq!(env.content_type(), "application/json");
    assert_eq!(env.traceparent(), Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    assert_eq!(env.tracestate(), Some("vendor=1"));
}

/// `(case, headers, body, expected code, expected field)` for every quarantine rule.
#[test]
fn every_malformed_record_is_quarantined_naming_its_field() {
    use ReasonCode::*;
    let big = vec![b' '; MAX_BODY_BYTES + 1];
    let cases: Vec<(&str, Vec<(String, Vec<u8>)>, &[u8], ReasonCode, &str)> = vec![
        ("no specversion", without(valid(), "ce-specversion"), b"{}", MissingHeader, "ce-specversion"),
        ("specversion 0.3", with(valid(), "ce-specversion", b"0.3"), b"{}", InvalidHeader, "ce-specversion"),
        ("no id", without(valid(), "ce-id"), b"{}", MissingHeader, "ce-id"),
        ("empty id", with(valid(), "ce-id", b""), b"{}", InvalidHeader, "ce-id"),
        ("id not a uuid", with(valid(), "ce-id", b"42"), b"{}", InvalidId, "ce-id"),
        ("id is a v4", with(valid(), "ce-id", b"9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a"), b"{}", InvalidId, "ce-id"),
        ("no source", without(valid(), "ce-source"), b"{}", MissingHeader, "ce-source"),
        ("source upper case", with(valid(), "ce-source", b"Lender"), b"{}", InvalidHeader, "ce-source"),
        ("source with dot", with(valid(), "ce-source", b"lender.x"), b"{}", InvalidHeader, "ce-source"),
        ("source too long", with(valid(), "ce-source", "s".repeat(224).as_bytes()), b"{}", InvalidHeader, "ce-source"),
        (
            "source not the topic's",
            {
                let h = with(valid(), "ce-source", b"crm");
                with(h, "ce-type", b"studio.lerian.crm.loan_application.approved")
            },
            b"{}",
            SourceMismatch,
            "ce-source",
        ),
        ("no type", without(valid(), "ce-type"), b"{}", MissingHeader, "ce-type"),
        (
            "type without prefix",
            with(valid(), "ce-type", b"lender.loan_application.approved"),
            b"{}",
            TypeMismatch,
            "ce-type",
        ),
        (
            "type with other event",
            with(valid(), "ce-type", b"studio.lerian.lender.loan_application.rejected"),
            b"{}",
            TypeMismatch,
            "ce-type",
        ),
        ("no time", without(valid(), "ce-time"), b"{}", MissingHeader, "ce-time"),
        ("time not rfc3339", with(valid(), "ce-time", b"30/11/2026"), b"{}", InvalidHeader, "ce-time"),
        ("time without zone", with(valid(), "ce-time", b"2026-11-30T10:00:00"), b"{}", InvalidHeader, "ce-time"),
        ("no schema version", without(valid(), "ce-schemaversion"), b"{}", MissingHeader, "ce-schemaversion"),
        (
            "schema version not semver",
            with(valid(), "ce-schemaversion", b"1.0"),
            b"{}",
            InvalidHeader,
            "ce-schemaversion",
        ),
        (
            "schema version too long",
            with(valid(), "ce-schemaversion", format!("1.0.0-{}", "a".repeat(60)).as_bytes()),
            b"{}",
            InvalidHeader,
            "ce-schemaversion",
        ),
        ("no resource type", without(valid(), "ce-resourcetype"), b"{}", MissingHeader, "ce-resourcetype"),
        (
            "resource type too long",
            with(valid(), "ce-resourcetype", "r".repeat(129).as_bytes()),
            b"{}",
            InvalidHeader,
            "ce-resourcetype",
        ),
        (
            "resource type with dot",
            with(valid(), "ce-resourcetype", b"loan.application"),
            b"{}",
            InvalidHeader,
            "ce-resourcetype",
        ),
        ("no event type", without(valid(), "ce-eventtype"), b"{}", MissingHeader, "ce-eventtype"),
        (
            "event type too long",
            with(valid(), "ce-eventtype", "e".repeat(129).as_bytes()),
            b"{}",
            InvalidHeader,
            "ce-eventtype",
        ),
        ("no tenant", without(valid(), "ce-tenantid"), b"{}", MissingHeader, "ce-tenantid"),
        ("empty tenant", with(valid(), "ce-tenantid", b""), b"{}", InvalidHeader, "ce-tenantid"),
        (
            "tenant too long",
            with(valid(), "ce-tenantid", "t".repeat(257).as_bytes()),
            b"{}",
            InvalidHeader,
            "ce-tenantid",
        ),
        (
            "subject too long",
            with(valid(), "ce-subject", "s".repeat(1025).as_bytes()),
            b"{}",
            InvalidHeader,
            "ce-subject",
        ),
        ("empty subject", with(valid(), "ce-subject", b""), b"{}", InvalidHeader, "ce-subject"),
        ("dataschema not a uri", with(valid(), "ce-dataschema", b"not a uri"), b"{}", InvalidHeader, "ce-dataschema"),
        ("systemevent not boolean", with(valid(), "ce-systemevent", b"yes"), b"{}", InvalidHeader, "ce-systemevent"),
        ("control char in subject", with(valid(), "ce-subject", b"a\nb"), b"{}", ControlCharacter, "ce-subject"),
        ("DEL in tenant", with(valid(), "ce-tenantid", b"a\x7fb"), b"{}", ControlCharacter, "ce-tenantid"),
        (
            "C1 control in extension",
            with(valid(), "ce-partner", "a\u{85}b".as_bytes()),
            b"{}",
            ControlCharacter,
            "ce-partner",
        ),
        ("header not utf-8", with(valid(), "ce-subject", b"\xff\xfe"), b"{}", InvalidHeader, "ce-subject"),
        ("bad extension name", with(valid(), "ce-some_ext", b"x"), b"{}", InvalidHeader, "ce-some_ext"),
        ("body over 1 MiB", valid(), &big, BodyTooLarge, "body"),
        ("body not json", valid(), b"{not json", InvalidBody, "body"),
        ("empty json body", valid(), b"", InvalidBody, "body"),
        (
            "body not json for +json type",
            with(valid(), "ce-datacontenttype", b"application/vnd.x+json"),
            b"<x/>",
            InvalidBody,
            "body",
        ),
    ];
    for (case, headers, body, code, field) in cases {
        match run(headers, body) {
            Verdict::Quarantine(reason) => {
                assert_eq!(reason.code, code, "{case}: {reason}");
                assert_eq!(reason.field, field, "{case}: {reason}");
            }
            other => panic!("{case}: expected quarantine, got {other:?}"),
        }
    }
}

/// The passing side of each rule: edge values that are accepted.
#[test]
fn edge_values_that_follow_the_rules_are_accepted() {
    let mut exactly_max = vec![b' '; MAX_BODY_BYTES];
    exactly_max[0] = b'{';
    exactly_max[MAX_BODY_BYTES - 1] = b'}';
    let cases: Vec<(&str, Vec<(String, Vec<u8>)>, Vec<u8>)> = vec![
        (
            "time with offset and fraction",
            with(valid(), "ce-time", b"2026-11-30T10:00:00.123456+03:00"),
            b"{}".to_vec(),
        ),
        ("semver with prerelease", with(valid(), "ce-schemaversion", b"2.1.0-beta.1+build.5"), b"{}".to_vec()),
        ("tenant of 256 bytes", with(valid(), "ce-tenantid", "t".repeat(256).as_bytes()), b"{}".to_vec()),
        ("subject of 1024 bytes", with(valid(), "ce-subject", "s".repeat(1024).as_bytes()), b"{}".to_vec()),
        (
            "resource type of 128 bytes",
            {
                let r = "r".repeat(128);
                let h = with(valid(), "ce-resourcetype", r.as_bytes());
                with(h, "ce-type", format!("studio.lerian.lender.{r}.approved").as_bytes())
            },
            b"{}".to_vec(),
        ),
        ("body of exactly 1 MiB", valid(), exactly_max),
        (
            "non-json content type with any body",
            with(valid(), "ce-datacontenttype", b"text/plain"),
            b"not json".to_vec(),
        ),
        ("dataschema uri", with(valid(), "ce-dataschema", b"https://schemas.example.com/loan/1.json"), b"{}".to_vec()),
        ("systemevent false", with(valid(), "ce-systemevent", b"false"), b"{}".to_vec()),
        ("extension", with(valid(), "ce-partner", b"acme"), b"{}".to_vec()),
        ("upper-case header keys", valid().into_iter().map(|(k, v)| (k.to_uppercase(), v)).collect(), b"{}".to_vec()),
    ];
    for (case, headers, body) in cases {
        let verdict = run(headers, &body);
        assert!(matches!(verdict, Verdict::Accept(_)), "{case}: {verdict:?}");
    }
}

#[test]
fn a_source_of_223_bytes_from_its_own_topic_is_accepted() {
    let s = "s".repeat(223);
    let h = with(valid(), "ce-source", s.as_bytes());
    let h = with(h, "ce-type", format!("studio.lerian.{s}.loan_application.approved").as_bytes());
    let topic = format!("lerian.streaming.{s}");
    assert!(matches!(judge(h, b"{}", Some(&topic), &IngestPolicy::default()), Verdict::Accept(_)));
}

#[test]
fn system_events_are_discarded_before_any_other_check() {
    // No tenant, no id: still a discard, never a quarantine.
    let h = vec![("ce-systemevent", "true")];
    assert_eq!(judge(h, b"", None, &IngestPolicy::default()), Verdict::Discard(DiscardReason::SystemEvent));
    let h = with(valid(), "ce-systemevent", b"TRUE");
    assert_eq!(run(h, b"{}"), Verdict::Discard(DiscardReason::SystemEvent));
}

#[test]
fn the_last_of_repeated_headers_wins() {
    let mut h = valid();
    h.insert(0, ("ce-tenantid".into(), b"first".to_vec()));
    h.push(("ce-tenantid".into(), b"last".to_vec()));
    assert_eq!(accepted(run(h, b"{}")).tenant().as_str(), "last");

    // A valid value followed by an invalid one is judged on the invalid one.
    let mut h = valid();
    h.push(("ce-id".into(), b"9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a".to_vec()));
    assert!(matches!(run(h, b"{}"), Verdict::Quarantine(r) if r.code == ReasonCode::InvalidId));
}

#[test]
fn without_a_topic_the_source_is_not_compared() {
    let h = with(valid(), "ce-source", b"crm");
    let h = with(h, "ce-type", b"studio.lerian.crm.loan_application.approved");
    assert!(matches!(judge(h, b"{}", None, &IngestPolicy::default()), Verdict::Accept(_)));
}

#[test]
fn single_tenant_mode_quarantines_other_tenants() {
    let policy = IngestPolicy { only_tenant: Some(TenantId::parse("tenant-a").expect("tenant")), ..Default::default() };
    assert!(matches!(judge(valid(), b"{}", Some(TOPIC), &policy), Verdict::Accept(_)));
    let other = with(valid(), "ce-tenantid", b"tenant-b");
    assert!(matches!(
        judge(other, b"{}", Some(TOPIC), &policy),
        Verdict::Quarantine(r) if r.code == ReasonCode::TenantNotAllowed
    ));
}

/// A cell discards another cell's tenants before any other check (their malformed records are
/// that cell's to quarantine), and judges its own and unattributable records as usual.
#[test]
fn a_cell_discards_other_cells_tenants_and_judges_its_own() {
    let cell = ["tenant-a", "tenant-c"].map(|t| TenantId::parse(t).expect("tenant"));
    let policy = IngestPolicy { cell: Some(cell.into_iter().collect()), ..Default::default() };
    let tenant = |t: &[u8]| with(valid(), "ce-tenantid", t);
    assert!(matches!(judge(tenant(b"tenant-a"), b"{}", Some(TOPIC), &policy), Verdict::Accept(_)));
    assert!(matches!(judge(tenant(b"tenant-c"), b"{}", Some(TOPIC), &policy), Verdict::Accept(_)));
    assert_eq!(judge(tenant(b"tenant-b"), b"{}", Some(TOPIC), &policy), Verdict::Discard(DiscardReason::OtherCell));
    // Malformed in every other way, but another cell's: discarded, not quarantined here.
    let broken = with(with(tenant(b"tenant-b"), "ce-specversion", b"0.3"), "ce-id", b"nope");
    assert_eq!(judge(broken, b"{}", Some(TOPIC), &policy), Verdict::Discard(DiscardReason::OtherCell));
    // Malformed and its own: quarantined as usual.
    let own = with(tenant(b"tenant-a"), "ce-id", b"nope");
    assert!(matches!(judge(own, b"{}", Some(TOPIC), &policy), Verdict::Quarantine(_)));
    // No tenant to attribute it to: every cell judges it.
    for t in [&b""[..], b"\xff", &[b'x'; 257]] {
        assert!(matches!(judge(tenant(t), b"{}", Some(TOPIC), &policy), Verdict::Quarantine(_)), "{t:?}");
    }
    assert!(matches!(judge(without(valid(), "ce-tenantid"), b"{}", Some(TOPIC), &policy), Verdict::Quarantine(_)));
}

#[test]
fn a_malformed_traceparent_is_dropped_not_fatal() {
    let h = with(valid(), "traceparent", b"garbage");
    let h = with(h, "tracestate", b"vendor=1");
    let env = accepted(run(h, b"{}"));
    assert_eq!(env.traceparent(), None);
    assert_eq!(env.tracestate(), None);
}

#[test]
fn other_headers_are_ignored() {
    let h = with(valid(), "authorization", b"Bearer secret\n");
    assert!(matches!(run(h, b"{}"), Verdict::Accept(_)));
}

#[test]
fn json_media_types() {
    for yes in ["application/json", "Application/JSON; charset=utf-8", "application/cloudevents+json", "text/json"] {
        assert!(is_json_media_type(yes), "{yes}");
    }
    for no in ["text/plain", "application/xml", "json", "+json", "x€json", "application/€json", "€€€€€€"]
    {
        assert!(!is_json_media_type(no), "{no}");
    }
}

#[test]
fn invalid_utf8_inside_a_json_string_is_quarantined() {
    for body in [&b"{\"a\":\"\xff\"}"[..], b"[\"\xc3\x28\"]", b"\"\xed\xa0\x80\""] {
        match run(valid(), body) {
            Verdict::Quarantine(q) => assert_eq!(q.field, "body", "{body:?}"),
            other => panic!("{body:?}: {other:?}"),
        }
    }
    assert!(matches!(run(valid(), "{\"a\":\"ação €\"}".as_bytes()), Verdict::Accept(_)));
}

#[test]
fn bodies_nested_beyond_the_limit_are_quarantined() {
    let nested = |depth: usize, open: &str, close: &str| format!("{}{}", open.repeat(depth), close.repeat(depth));
    for (depth, accepted) in
        [(1, true), (MAX_JSON_DEPTH, true), (MAX_JSON_DEPTH + 1, false), (1_001, false), (100_000, false)]
    {
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let body = if open == "[" {
                nested(depth, open, close)
            } else {
                format!("{}1{}", open.repeat(depth), close.repeat(depth))
            };
            match run(valid(), body.as_bytes()) {
                Verdict::Accept(_) => assert!(accepted, "depth {depth} {open}"),
                Verdict::Quarantine(q) => {
                    assert!(!accepted, "depth {depth} {open}");
                    assert_eq!(q.field, "body");
                    assert!(q.message.contains("levels deep"), "{}", q.message);
                }
                other => panic!("{other:?}"),
            }
        }
    }
    // Brackets inside strings (escaped quotes included) are text, not nesting.
    let strings = format!("[\"{}\", \"\\\"[[[\"]", "[".repeat(500));
    assert!(matches!(run(valid(), strings.as_bytes()), Verdict::Accept(_)), "{strings}");
    // A body that is not JSON by its content type is not scanned.
    let h = with(valid(), "ce-datacontenttype", b"text/plain");
    assert!(matches!(run(h, "[".repeat(5000).as_bytes()), Verdict::Accept(_)));
}

#[test]
fn a_multi_byte_content_type_is_judged_not_panicked_on() {
    for content_type in ["x€json", "application/€json", "€", "application/vnd.x+json€"] {
        let h = with(valid(), "ce-datacontenttype", content_type.as_bytes());
        // Not JSON, so any body is accepted as it is.
        assert!(matches!(run(h, b"\xff\xfe"), Verdict::Accept(_)), "{content_type}");
    }
    // A `+json` suffix after a multi-byte character is JSON, and the body must be.
    let h = with(valid(), "ce-datacontenttype", "a€+json".as_bytes());
    assert!(matches!(run(h, b"\xff\xfe"), Verdict::Quarantine(_)));
}

proptest! {
    /// The depth scan agrees with a real parser's count on any valid JSON value.
    #[test]
    fn the_depth_scan_agrees_with_a_parser(value in json_value()) {
        let text = serde_json::to_string(&value).expect("serializes");
        let depth = json_depth(&value);
        prop_assert!(!nests_deeper_than(text.as_bytes(), depth));
        prop_assert_eq!(nests_deeper_than(text.as_bytes(), depth.saturating_sub(1)), depth > 0);
    }

    /// Any text at all is a media type that is JSON or not, never a panic.
    #[test]
    fn any_media_type_is_judged(content_type in any::<String>()) {
        let _ = is_json_media_type(&content_type);
    }

    /// Arbitrary content types (any Unicode) with arbitrary bodies always get a verdict.
    #[test]
    fn any_content_type_gets_a_verdict(content_type in any::<String>(), body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let h = with(valid(), "ce-datacontenttype", content_type.as_bytes());
        let _ = run(h, &body);
    }

    /// Arbitrary header maps and bodies never panic and always yield a verdict.
    #[test]
    fn arbitrary_input_always_gets_a_verdict(
        headers in proptest::collection::vec(
            (prop_oneof![
                Just("ce-id".to_owned()), Just("ce-source".to_owned()), Just("ce-type".to_owned()),
                Just("ce-tenantid".to_owned()), Just("ce-time".to_owned()), Just("ce-systemevent".to_owned()),
                Just("ce-specversion".to_owned()), Just("traceparent".to_owned()), "[a-zA-Z-]{0,12}",
                "ce-[a-z_]{0,25}",
            ], proptest::collection::vec(any::<u8>(), 0..64)),
            0..24,
        ),
        body in proptest::collection::vec(any::<u8>(), 0..256),
        topic in proptest::option::of("[a-z.]{0,30}"),
    ) {
        let _ = judge(headers, &body, topic.as_deref(), &IngestPolicy::default());
    }

    /// Any valid record with arbitrary extra headers is accepted or quarantined, never discarded.
    #[test]
    fn valid_records_with_noise_are_not_discarded(
        noise in proptest::collection::vec(("x-[a-z]{1,8}", "[ -~]{0,16}"), 0..8),
    ) {
        let mut h: Vec<(String, Vec<u8>)> = valid();
        h.extend(noise.into_iter().map(|(k, v)| (k, v.into_bytes())));
        let accepted = matches!(run(h, b"{}"), Verdict::Accept(_));
        prop_assert!(accepted);
    }
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[\\[\\]{}\"\\\\a-z ]{0,8}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(12, 64, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map("[a-z\\[{\"]{0,3}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// How deep a value nests arrays and objects (a scalar: 0).
fn json_depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The publisher helpers' vectors (sdk/vectors/publish.json): each event, turned into headers
/// the way a helper sends it, gets the verdict the file gives — accepted, or quarantined naming
/// the same header — so a helper that refuses the invalid ones refuses exactly what the hub
/// would quarantine.
#[test]
fn publisher_vectors() {
    use base64::Engine;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/vectors/publish.json");
    let file: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("the vectors")).expect("JSON");
    let events = file["events"].as_array().expect("events");
    assert!(events.len() >= 30, "{} vectors", events.len());
    for v in events {
        let name = v["name"].as_str().expect("name");
        let e = &v["event"];
        let field = |k: &str| e[k].as_str().map(str::to_owned);
        let source = field("source").expect("source");
        let (resource, event) = (field("resource_type").expect("resource"), field("event_type").expect("event"));
        let mut headers: Vec<(String, Vec<u8>)> = vec![
            ("ce-specversion".into(), b"1.0".to_vec()),
            ("ce-id".into(), field("id").expect("id").into_bytes()),
            ("ce-source".into(), source.clone().into_bytes()),
            ("ce-type".into(), format!("studio.lerian.{source}.{resource}.{event}").into_bytes()),
            ("ce-time".into(), field("time").expect("time").into_bytes()),
            ("ce-schemaversion".into(), field("schema_version").expect("version").into_bytes()),
            ("ce-resourcetype".into(), resource.into_bytes()),
            ("ce-eventtype".into(), event.into_bytes()),
            ("ce-tenantid".into(), field("tenant_id").expect("tenant").into_bytes()),
        ];
        for (key, header) in [
            ("subject", "ce-subject"),
            ("data_content_type", "ce-datacontenttype"),
            ("data_schema", "ce-dataschema"),
            ("traceparent", "traceparent"),
            ("tracestate", "tracestate"),
        ] {
            if let Some(value) = field(key) {
                headers.push((header.into(), value.into_bytes()));
            }
        }
        for (k, value) in e["extensions"].as_object().into_iter().flatten() {
            headers.push((format!("ce-{k}"), value.as_str().expect("text").as_bytes().to_vec()));
        }
        let body = match (field("data"), field("data_base64")) {
            (Some(text), _) => text.into_bytes(),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD.decode(b64).expect("base64"),
            (None, None) => Vec::new(),
        };
        let topic = format!("lerian.streaming.{source}");
        let verdict = judge(headers, &body, Some(&topic), &IngestPolicy::default());
        if v["valid"] == true {
            assert!(matches!(verdict, Verdict::Accept(_)), "{name}: {verdict:?}");
        } else {
            let header = v["header"].as_str().expect("header");
            match verdict {
                Verdict::Quarantine(r) => assert_eq!(r.field, header, "{name}: {r:?}"),
                other => panic!("{name}: {other:?}, the vectors say quarantined for {header}"),
            }
        }
    }
}
