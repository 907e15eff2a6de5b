//! The official CESQL TCK (`cesql/cesql_tck/` of the CloudEvents specification repository, at the
//! revision in `cesql_tck/REVISION`, Apache-2.0, its licence beside it): every case of every file
//! is parsed and evaluated, each result is reported, and the test fails unless all pass.

use std::borrow::Cow;
use std::path::Path;

use hub_core::routing::cesql::{Expression, Value};
use hub_core::routing::{Attributes, JsonEvent};
use serde_json::{Map, Value as Json, json};

struct Case {
    file: String,
    name: String,
    expression: String,
    result: Option<Json>,
    error: Option<String>,
    event: Map<String, Json>,
}

fn cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cesql_tck");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the TCK directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 18, "every file of the TCK is here");
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read");
        let doc: Json = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = path.file_name().expect("name").to_string_lossy().into_owned();
        for test in doc["tests"].as_array().expect("tests") {
            let mut event = match test.get("event") {
                Some(Json::Object(e)) => e.clone(),
                _ => json!({"specversion": "1.0", "id": "myId", "source": "localhost.localdomain", "type": "myType"})
                    .as_object()
                    .expect("object")
                    .clone(),
            };
            if let Some(Json::Object(overrides)) = test.get("eventOverrides") {
                event.extend(overrides.clone());
            }
            // YAML reads `TRUE` or `0` as a Boolean or a number: the text is what was written.
            let text = |v: &Json| match v {
                Json::String(s) => s.clone(),
                other => other.to_string(),
            };
            let expression = text(&test["expression"]);
            out.push(Case {
                file: file.clone(),
                name: text(&test["name"]),
                expression,
                result: test.get("result").cloned(),
                error: test.get("error").and_then(Json::as_str).map(str::to_owned),
                event,
            });
        }
    }
    out
}

fn same(expected: &Json, got: &Value<'_>) -> bool {
    match (expected, got) {
        (Json::Bool(a), Value::Bool(b)) => a == b,
        (Json::Number(a), Value::Int(b)) => a.as_i64() == Some(i64::from(*b)),
        (Json::String(a), Value::Str(b)) => a == b,
        _ => false,
    }
}

fn run(case: &Case) -> Result<(), String> {
    let expr = match Expression::parse(&case.expression) {
        Ok(expr) => expr,
        Err(_) if case.error.as_deref() == Some("parse") => return Ok(()),
        Err(e) => return Err(format!("parse error {e}")),
    };
    if case.error.as_deref() == Some("parse") {
        return Err("parsed, a parse error was expected".to_owned());
    }
    let event = JsonEvent::new(&case.event);
    let (value, error) = expr.evaluate(&event);
    let kind = error.as_ref().map(|e| e.kind.as_str());
    if kind != case.error.as_deref() {
        return Err(format!("error {kind:?} ({error:?}), expected {:?}", case.error));
    }
    if let Some(expected) = &case.result
        && !same(expected, &value)
    {
        return Err(format!("answered {value:?}, expected {expected}"));
    }
    Ok(())
}

#[test]
fn the_official_tck_passes_in_full() {
    let cases = cases();
    let mut failed = 0;
    for case in &cases {
        match run(case) {
            Ok(()) => println!("ok    {}: {}", case.file, case.name),
            Err(why) => {
                failed += 1;
                println!("FAIL  {}: {} ({}): {why}", case.file, case.name, case.expression);
            }
        }
    }
    println!("CESQL TCK: {} cases, {} passed, {failed} failed", cases.len(), cases.len() - failed);
    assert_eq!(failed, 0, "every TCK case passes");
}

/// The TCK's events use typed extensions; the hub's events carry every attribute as a string,
/// which the same expressions read through the casting rules.
#[test]
fn string_attributes_cast_like_typed_ones() {
    struct Strings;
    impl Attributes for Strings {
        fn attribute(&self, name: &str) -> Option<Value<'_>> {
            match name {
                "hop" => Some(Value::Str(Cow::Borrowed("5"))),
                "ttl" => Some(Value::Str(Cow::Borrowed("10"))),
                "flag" => Some(Value::Str(Cow::Borrowed("true"))),
                _ => None,
            }
        }
    }
    for text in ["hop < ttl", "INT(hop) + 5 = ttl", "flag = TRUE", "BOOL(flag)", "hop IN (4, 5)"] {
        let expr = Expression::parse(text).expect("parse");
        assert!(expr.passes(&Strings), "{text}");
    }
}
