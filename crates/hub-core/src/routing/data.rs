//! Content patterns: the `data` filter dialect, EventBridge-style patterns over an event's JSON
//! body.
//!
//! A pattern is a JSON object shaped like the part of the body it looks at. A field whose value is
//! an object looks inside that field; a field whose value is an array lists what the field may be
//! — exact values (string, number, `true`/`false`, `null`) or matchers: `{"prefix": "…"}`,
//! `{"suffix": "…"}`, `{"equals-ignore-case": "…"}`, `{"wildcard": "…"}` (`*` any run, `\*` a
//! star), `{"anything-but": <value | [values] | {"prefix"|"suffix"|"equals-ignore-case"|"wildcard": …}>}`,
//! `{"numeric": [">", 0, "<=", 5]}`, `{"exists": true|false}`. Every field of an object must
//! match; any entry of a field's array may. `{"$or": [<pattern>, …]}` inside an object matches
//! when one of the patterns does. When the body's field is an array, the field matches when one
//! of its elements does. A missing field matches only `{"exists": false}`; `exists: true` wants a
//! value that is not an object (a leaf, `null` included).
//!
//! Bounds: at most [`MAX_DEPTH`] levels of objects, [`MAX_VALUES`] values and matchers in all,
//! strings of at most [`MAX_STRING`] bytes. Matching is linear in the pattern for each value it
//! looks at, wildcards included (see `glob`).

use serde_json::{Map, Value as Json};

use super::glob::Glob;

/// The deepest nesting of objects (and `$or`) in a pattern.
pub const MAX_DEPTH: usize = 16;
/// The most values and matchers a pattern holds, in all.
pub const MAX_VALUES: usize = 256;
/// The longest string in a pattern, in bytes.
pub const MAX_STRING: usize = 1024;

/// A pattern that is not valid: where (a JSON path below the pattern, such as `.amount[0]`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct PatternError {
    pub path: String,
    pub message: String,
}

fn invalid(path: &str, message: impl Into<String>) -> PatternError {
    PatternError { path: path.to_owned(), message: message.into() }
}

/// A compiled content pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentPattern {
    root: Object,
}

#[derive(Debug, Clone, PartialEq)]
struct Object {
    fields: Vec<(String, Rule)>,
    /// Each `$or`: one of its patterns must match.
    ors: Vec<Vec<Object>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Rule {
    Nested(Object),
    OneOf(Vec<Matcher>),
}

#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Str(String),
    Num(f64),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Eq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

#[derive(Debug, Clone, PartialEq)]
enum Matcher {
    Equals(Scalar),
    Prefix(String),
    Suffix(String),
    /// Compared in lower case (the pattern's is stored lowered).
    EqualsIgnoreCase(String),
    Wildcard(Glob),
    /// A value present that none of these matches.
    AnythingBut(Vec<Matcher>),
    Numeric(Vec<(Cmp, f64)>),
    Exists(bool),
}

/// Counts what a pattern holds while it compiles.
struct Budget {
    values: usize,
}

impl Budget {
    fn take(&mut self, path: &str) -> Result<(), PatternError> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(invalid(path, format!("a content pattern holds at most {MAX_VALUES} values and matchers")));
        }
        Ok(())
    }
}

fn string<'a>(value: &'a Json, path: &str, what: &str) -> Result<&'a str, PatternError> {
    let s = value.as_str().ok_or_else(|| invalid(path, format!("{what} needs a string")))?;
    if s.len() > MAX_STRING {
        return Err(invalid(path, format!("strings are at most {MAX_STRING} bytes")));
    }
    Ok(s)
}

impl ContentPattern {
    /// Compiles a pattern: a non-empty JSON object.
    pub fn compile(pattern: &Json) -> Result<Self, PatternError> {
        let mut budget = Budget { values: 0 };
        let root = object(pattern, "", 1, &mut budget)?;
        Ok(Self { root })
    }

    /// Whether the body (parsed JSON) matches.
    pub fn matches(&self, data: &Json) -> bool {
        self.root.matches(Some(data))
    }
}

fn object(value: &Json, path: &str, depth: usize, budget: &mut Budget) -> Result<Object, PatternError> {
    if depth > MAX_DEPTH {
        return Err(invalid(path, format!("a content pattern nests at most {MAX_DEPTH} levels")));
    }
    let map: &Map<String, Json> =
        value.as_object().ok_or_else(|| invalid(path, "a content pattern is a JSON object"))?;
    if map.is_empty() {
        return Err(invalid(path, "a content pattern needs at least one field"));
    }
    let mut out = Object { fields: Vec::new(), ors: Vec::new() };
    for (key, v) in map {
        let here = format!("{path}.{key}");
        if key.len() > MAX_STRING {
            return Err(invalid(path, format!("field names are at most {MAX_STRING} bytes")));
        }
        if key == "$or" {
            let items = v
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| invalid(&here, "$or needs a non-empty array of patterns"))?;
            let alternatives = items
                .iter()
                .enumerate()
                .map(|(i, p)| object(p, &format!("{here}[{i}]"), depth + 1, budget))
                .collect::<Result<_, _>>()?;
            out.ors.push(alternatives);
            continue;
        }
        let rule = match v {
            Json::Object(_) => Rule::Nested(object(v, &here, depth + 1, budget)?),
            Json::Array(items) if !items.is_empty() => Rule::OneOf(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, m)| matcher(m, &format!("{here}[{i}]"), budget))
                    .collect::<Result<_, _>>()?,
            ),
            Json::Array(_) => return Err(invalid(&here, "needs at least one allowed value")),
            _ => {
                return Err(invalid(
                    &here,
                    "must be an array of allowed values or matchers (write [\"x\"], not \"x\"), or an object",
                ));
            }
        };
        out.fields.push((key.clone(), rule));
    }
    Ok(out)
}

fn scalar(value: &Json, path: &str) -> Result<Scalar, PatternError> {
    Ok(match value {
        Json::String(_) => Scalar::Str(string(value, path, "a value")?.to_owned()),
        Json::Number(n) => Scalar::Num(n.as_f64().ok_or_else(|| invalid(path, "a number must be finite"))?),
        Json::Bool(b) => Scalar::Bool(*b),
        Json::Null => Scalar::Null,
        _ => return Err(invalid(path, "must be a string, a number, a boolean or null")),
    })
}

fn matcher(value: &Json, path: &str, budget: &mut Budget) -> Result<Matcher, PatternError> {
    budget.take(path)?;
    let Json::Object(map) = value else {
        return Ok(Matcher::Equals(scalar(value, path)?));
    };
    let mut entries = map.iter();
    let (Some((name, arg)), None) = (entries.next(), entries.next()) else {
        return Err(invalid(path, "a matcher is an object with exactly one key, such as {\"prefix\": \"x\"}"));
    };
    let here = format!("{path}.{name}");
    Ok(match name.as_str() {
        "prefix" => Matcher::Prefix(string(arg, &here, "prefix")?.to_owned()),
        "suffix" => Matcher::Suffix(string(arg, &here, "suffix")?.to_owned()),
        "equals-ignore-case" => Matcher::EqualsIgnoreCase(string(arg, &here, "equals-ignore-case")?.to_lowercase()),
        "wildcard" => Matcher::Wildcard(Glob::wildcard(string(arg, &here, "wildcard")?)),
        "exists" => Matcher::Exists(arg.as_bool().ok_or_else(|| invalid(&here, "exists needs true or false"))?),
        "numeric" => Matcher::Numeric(numeric(arg, &here)?),
        "anything-but" => Matcher::AnythingBut(anything_but(arg, &here, budget)?),
        other => {
            return Err(invalid(
                path,
                format!(
                    "unknown matcher {other:?}: use prefix, suffix, equals-ignore-case, wildcard, anything-but, numeric or exists"
                ),
            ));
        }
    })
}

fn anything_but(arg: &Json, path: &str, budget: &mut Budget) -> Result<Vec<Matcher>, PatternError> {
    match arg {
        Json::Array(items) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let here = format!("{path}[{i}]");
                budget.take(&here)?;
                scalar(v, &here).map(Matcher::Equals)
            })
            .collect(),
        Json::Array(_) => Err(invalid(path, "anything-but needs at least one value")),
        Json::Object(map) => {
            let mut entries = map.iter();
            let (Some((name, v)), None) = (entries.next(), entries.next()) else {
                return Err(invalid(path, "anything-but takes one of prefix, suffix, equals-ignore-case or wildcard"));
            };
            let here = format!("{path}.{name}");
            match name.as_str() {
                "prefix" | "suffix" | "wildcard" => {
                    let s = string(v, &here, name)?.to_owned();
                    Ok(vec![match name.as_str() {
                        "prefix" => Matcher::Prefix(s),
                        "suffix" => Matcher::Suffix(s),
                        _ => Matcher::Wildcard(Glob::wildcard(&s)),
                    }])
                }
                "equals-ignore-case" => match v {
                    Json::Array(items) if !items.is_empty() => items
                        .iter()
                        .enumerate()
                        .map(|(i, s)| {
                            let here = format!("{here}[{i}]");
                            budget.take(&here)?;
                            Ok(Matcher::EqualsIgnoreCase(string(s, &here, "equals-ignore-case")?.to_lowercase()))
                        })
                        .collect(),
                    _ => Ok(vec![Matcher::EqualsIgnoreCase(string(v, &here, "equals-ignore-case")?.to_lowercase())]),
                },
                other => Err(invalid(
                    path,
                    format!("anything-but takes prefix, suffix, equals-ignore-case or wildcard, not {other:?}"),
                )),
            }
        }
        other => Ok(vec![Matcher::Equals(scalar(other, path)?)]),
    }
}

fn numeric(arg: &Json, path: &str) -> Result<Vec<(Cmp, f64)>, PatternError> {
    let items = arg.as_array().filter(|a| !a.is_empty() && a.len() % 2 == 0 && a.len() <= 4).ok_or_else(|| {
        invalid(path, "numeric needs one or two [operator, number] pairs, such as [\">\", 0, \"<=\", 5]")
    })?;
    items
        .chunks(2)
        .map(|pair| {
            let op = match pair[0].as_str() {
                Some("=") => Cmp::Eq,
                Some("<") => Cmp::Lt,
                Some("<=") => Cmp::LtEq,
                Some(">") => Cmp::Gt,
                Some(">=") => Cmp::GtEq,
                _ => return Err(invalid(path, "numeric operators are =, <, <=, > and >=")),
            };
            let n = pair[1].as_f64().ok_or_else(|| invalid(path, "numeric needs a number after each operator"))?;
            Ok((op, n))
        })
        .collect()
}

impl Object {
    fn matches(&self, value: Option<&Json>) -> bool {
        let map = value.and_then(Json::as_object);
        self.fields.iter().all(|(key, rule)| {
            let field = map.and_then(|m| m.get(key));
            match rule {
                Rule::Nested(inner) => match field {
                    Some(Json::Array(items)) => items.iter().any(|i| inner.matches(Some(i))),
                    other => inner.matches(other),
                },
                Rule::OneOf(matchers) => matchers.iter().any(|m| m.matches(field)),
            }
        }) && self.ors.iter().all(|alternatives| alternatives.iter().any(|o| o.matches(value)))
    }
}

impl Matcher {
    /// Whether the field (absent, or its value) matches.
    fn matches(&self, field: Option<&Json>) -> bool {
        match (self, field) {
            (Matcher::Exists(wanted), None) => !wanted,
            (_, None) => false,
            (_, Some(Json::Object(_))) => false,
            (Matcher::Exists(wanted), Some(_)) => *wanted,
            (_, Some(Json::Array(items))) => items.iter().any(|i| !i.is_array() && !i.is_object() && self.leaf(i)),
            (_, Some(leaf)) => self.leaf(leaf),
        }
    }

    /// Whether one scalar value matches.
    fn leaf(&self, value: &Json) -> bool {
        let text = value.as_str();
        // Each value compared is a step of the evaluation's budget, and a string its length's.
        if !super::meter::spend_bytes(text.map_or(0, str::len)) {
            return false;
        }
        match self {
            Matcher::Equals(Scalar::Str(s)) => text == Some(s.as_str()),
            Matcher::Equals(Scalar::Num(n)) => value.as_f64() == Some(*n),
            Matcher::Equals(Scalar::Bool(b)) => value.as_bool() == Some(*b),
            Matcher::Equals(Scalar::Null) => value.is_null(),
            Matcher::Prefix(p) => text.is_some_and(|t| t.starts_with(p.as_str())),
            Matcher::Suffix(p) => text.is_some_and(|t| t.ends_with(p.as_str())),
            Matcher::EqualsIgnoreCase(lowered) => {
                text.is_some_and(|t| t.chars().flat_map(char::to_lowercase).eq(lowered.chars()))
            }
            Matcher::Wildcard(glob) => text.is_some_and(|t| glob.matches(t)),
            Matcher::AnythingBut(excluded) => !excluded.iter().any(|m| m.leaf(value)),
            Matcher::Numeric(cmps) => value.as_f64().is_some_and(|x| {
                cmps.iter().all(|(op, n)| match op {
                    Cmp::Eq => x == *n,
                    Cmp::Lt => x < *n,
                    Cmp::LtEq => x <= *n,
                    Cmp::Gt => x > *n,
                    Cmp::GtEq => x >= *n,
                })
            }),
            Matcher::Exists(wanted) => *wanted,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(pattern: Json, data: Json) -> bool {
        ContentPattern::compile(&pattern).expect("pattern").matches(&data)
    }

    #[test]
    fn every_matcher() {
        let order = json!({"status": "APPROVED", "amount": 1200.5, "tags": ["vip", "new"], "customer": {"tier": "gold", "email": "a@bank.example"}, "note": null});
        let cases = [
            (json!({"status": ["APPROVED"]}), true),
            (json!({"status": ["REJECTED", "APPROVED"]}), true),
            (json!({"status": ["approved"]}), false),
            (json!({"status": [{"equals-ignore-case": "approved"}]}), true),
            (json!({"status": [{"prefix": "APP"}]}), true),
            (json!({"status": [{"suffix": "VED"}]}), true),
            (json!({"status": [{"wildcard": "A*D"}]}), true),
            (json!({"status": [{"wildcard": "A*X"}]}), false),
            (json!({"status": [{"anything-but": "REJECTED"}]}), true),
            (json!({"status": [{"anything-but": ["APPROVED", "X"]}]}), false),
            (json!({"status": [{"anything-but": {"prefix": "APP"}}]}), false),
            (json!({"amount": [{"numeric": [">", 1000, "<=", 5000]}]}), true),
            (json!({"amount": [{"numeric": ["<", 1000]}]}), false),
            (json!({"amount": [1200.5]}), true),
            (json!({"tags": ["vip"]}), true),
            (json!({"tags": ["old"]}), false),
            (json!({"customer": {"tier": ["gold"]}}), true),
            (json!({"customer": {"email": [{"suffix": "@bank.example"}]}}), true),
            (json!({"customer": {"missing": [{"exists": false}]}}), true),
            (json!({"customer": {"tier": [{"exists": true}]}}), true),
            (json!({"customer": [{"exists": true}]}), false),
            (json!({"gone": [{"exists": false}]}), true),
            (json!({"gone": [{"exists": true}]}), false),
            (json!({"gone": [{"anything-but": "x"}]}), false),
            (json!({"note": [null]}), true),
            (json!({"note": [{"exists": true}]}), true),
            (json!({"$or": [{"status": ["REJECTED"]}, {"amount": [{"numeric": [">", 1000]}]}]}), true),
            (json!({"status": ["APPROVED"], "$or": [{"tags": ["old"]}, {"customer": {"tier": ["silver"]}}]}), false),
        ];
        for (pattern, expected) in cases {
            assert_eq!(check(pattern.clone(), order.clone()), expected, "{pattern}");
        }
    }

    #[test]
    fn invalid_patterns_name_the_path() {
        let cases = [
            (json!([]), ""),
            (json!({}), ""),
            (json!({"a": "x"}), ".a"),
            (json!({"a": []}), ".a"),
            (json!({"a": {"b": [{"nope": 1}]}}), ".a.b[0]"),
            (json!({"a": [{"numeric": [">"]}]}), ".a[0].numeric"),
            (json!({"a": [{"numeric": ["~", 1]}]}), ".a[0].numeric"),
            (json!({"a": [{"prefix": 1}]}), ".a[0].prefix"),
            (json!({"a": [[1]]}), ".a[0]"),
            (json!({"$or": []}), ".$or"),
            (json!({"a": [{"prefix": "x", "suffix": "y"}]}), ".a[0]"),
        ];
        for (pattern, path) in cases {
            let e = ContentPattern::compile(&pattern).expect_err("invalid");
            assert_eq!(e.path, path, "{pattern}: {e}");
        }
        let mut deep = json!({"leaf": ["x"]});
        for _ in 0..MAX_DEPTH {
            deep = json!({ "n": deep });
        }
        assert!(ContentPattern::compile(&deep).is_err());
        let many: Vec<Json> = (0..=MAX_VALUES).map(|i| json!(i)).collect();
        assert!(ContentPattern::compile(&json!({ "a": many })).is_err());
    }
}
