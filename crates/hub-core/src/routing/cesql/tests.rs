//! Parser and evaluator cases beyond the TCK (`tests/cesql_tck.rs` runs the official suite):
//! precedence, bounds, positions of parse errors, and totality over any text.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::*;

struct Event(BTreeMap<&'static str, Value<'static>>);

impl Attributes for Event {
    fn attribute(&self, name: &str) -> Option<Value<'_>> {
        self.0.get(name).cloned()
    }
}

fn event() -> Event {
    Event(BTreeMap::from([
        ("id", Value::Str(Cow::Borrowed("0192"))),
        ("subject", Value::Str(Cow::Borrowed("loan-7"))),
        ("amount", Value::Str(Cow::Borrowed("1200"))),
    ]))
}

fn run(text: &str) -> (Value<'static>, Option<ErrorKind>) {
    let expr = Expression::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let ev = event();
    let (v, e) = expr.evaluate(&ev);
    (v.into_owned(), e.map(|e| e.kind))
}

#[test]
fn precedence_follows_the_grammar() {
    assert_eq!(run("1 + 2 * 3 = 7"), (Value::Bool(true), None));
    assert_eq!(run("5-1"), (Value::Int(4), None));
    assert_eq!(run("- 2147483648"), (Value::Int(i32::MIN), None));
    // AND, OR and XOR share a precedence and group to the right.
    assert_eq!(run("FALSE AND TRUE OR TRUE"), (Value::Bool(false), None));
    assert_eq!(run("(FALSE AND TRUE) OR TRUE"), (Value::Bool(true), None));
    assert_eq!(run("amount > 1000 AND subject LIKE 'loan-%'"), (Value::Bool(true), None));
    assert_eq!(run("subject NOT IN ('a', 'b')"), (Value::Bool(true), None));
    assert_eq!(run("2147483647 + 1"), (Value::Int(0), Some(ErrorKind::Math)));
}

#[test]
fn parse_errors_name_the_position() {
    let cases = [
        ("", 1),
        ("a =", 4),
        ("a = = b", 5),
        ("x LIKE 123", 8),
        ("(a = 1", 7),
        ("a IN ()", 7),
        ("2147483648", 1),
        ("my_ext = 1", 1),
        ("a = 'open", 5),
        ("EXISTS 1", 8),
        ("a b", 3),
    ];
    for (text, position) in cases {
        let e = Expression::parse(text).expect_err(text);
        assert_eq!(e.position, position, "{text}: {e}");
    }
}

#[test]
fn bounds_are_parse_errors() {
    let deep = format!("{}TRUE{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
    assert!(Expression::parse(&deep).is_err());
    let long_chain = vec!["1"; MAX_DEPTH + 2].join(" + ");
    assert!(Expression::parse(&long_chain).is_err(), "a left-grouping chain is bounded too");
    let nots = format!("{}TRUE", "NOT ".repeat(MAX_DEPTH + 1));
    assert!(Expression::parse(&nots).is_err());
    let long = format!("'{}'", "a".repeat(MAX_EXPRESSION_CHARS));
    assert!(Expression::parse(&long).is_err());
    let ok = vec!["1"; MAX_DEPTH - 2].join(" + ");
    assert!(Expression::parse(&ok).is_ok());
}

#[test]
fn unknown_functions_are_listed_with_positions() {
    let expr = Expression::parse("LENGTH(x) = 1 AND NOPE(1, 2) AND CONCAT_WS()").expect("parse");
    let unknown: Vec<(String, usize, usize)> =
        expr.unknown_functions().into_iter().map(|f| (f.name, f.arity, f.position)).collect();
    assert_eq!(unknown, vec![("NOPE".to_owned(), 2, 19), ("CONCAT_WS".to_owned(), 0, 34)]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

    /// Any text parses or is refused with a position inside it (or just past it), and a parsed
    /// expression evaluates without panicking.
    #[test]
    fn any_text_parses_or_is_refused(text in "[ -~]{0,60}") {
        match Expression::parse(&text) {
            Ok(expr) => {
                let ev = event();
                let _ = expr.evaluate(&ev);
            }
            Err(e) => proptest::prop_assert!(e.position >= 1 && e.position <= text.chars().count() + 1, "{e}"),
        }
    }

    /// Expressions built from the grammar's pieces always parse and evaluate.
    #[test]
    fn grammar_shaped_text(parts in proptest::collection::vec(proptest::sample::select(vec![
        "subject", "amount", "missing", "1", "-3", "'x'", "TRUE", "AND", "OR", "NOT", "=", "<", "+", "*",
        "/", "%", "(", ")", "LIKE 'a%'", "IN (1, 'b')", "LENGTH(", "SUBSTRING(", ",", "EXISTS subject",
    ]), 0..24)) {
        let text = parts.join(" ");
        if let Ok(expr) = Expression::parse(&text) {
            let ev = event();
            let _ = expr.evaluate(&ev);
        }
    }
}
