//! A subscription's `filters`: the CloudEvents Subscriptions API dialects (`exact`, `prefix`,
//! `suffix`, `all`, `any`, `not`, `sql`) and the content dialect `data`.
//!
//! Every filter of the list must match. `exact`, `prefix` and `suffix` compare context attributes
//! (extensions included) as strings, case-sensitively; a missing attribute does not match. `sql`
//! passes when its CESQL expression answers `true` without an error. `data` applies a content
//! pattern to the JSON body; an event whose body is not JSON does not match it.
//!
//! Compiled once ([`Filters::compile`]); evaluation reads the compiled tree only.

use serde_json::Value as Json;

use super::cesql::{Attributes, Expression, Type, Value};
use super::data::ContentPattern;

/// The most filters at the top of a subscription's list.
pub const MAX_FILTERS: usize = 32;
/// The deepest nesting of `all`, `any` and `not`.
pub const MAX_NESTING: usize = 8;
/// The most bytes the whole list may take as JSON.
pub const MAX_FILTERS_BYTES: usize = 16 * 1024;

/// What filters read of an event: its attributes and, for `data`, its body as JSON.
pub trait FilterEvent: Attributes {
    /// The body as JSON; `None` when it is not JSON.
    fn data(&self) -> Option<&Json>;
}

/// A filter list that is not valid: where (`filters[1].all[0].sql`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FilterError {
    pub path: String,
    pub message: String,
}

fn invalid(path: &str, message: impl Into<String>) -> FilterError {
    FilterError { path: path.to_owned(), message: message.into() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    Exact,
    Prefix,
    Suffix,
}

#[derive(Debug, Clone, PartialEq)]
enum Filter {
    Attributes(Compare, Vec<(String, String)>),
    All(Vec<Filter>),
    Any(Vec<Filter>),
    Not(Box<Filter>),
    Sql(Expression),
    Data(ContentPattern),
}

/// A compiled filter list.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filters {
    list: Vec<Filter>,
}

/// The error of a filter whose evaluation used up its budget (SPEC §10).
pub const BUDGET_ERROR: &str = "budget: the evaluation used up its budget (STREAMING_HUB_FILTER_BUDGET)";

/// Filters evaluated within a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgeted {
    /// Whether every filter matched (never, when the budget ran out).
    pub matches: bool,
    /// Whether the budget ran out.
    pub exhausted: bool,
}

/// One top-level filter's result for an event, as `POST /v1/filters/test` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterResult {
    pub matches: bool,
    /// Why it could not match as written (an evaluation error, a body that is not JSON).
    pub error: Option<String>,
}

/// A CloudEvents attribute name: lower-case letters and digits.
fn attribute_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl Filters {
    /// Compiles a `filters` value: an array of filter expressions.
    pub fn compile(value: &Json) -> Result<Self, FilterError> {
        let items = value.as_array().ok_or_else(|| invalid("filters", "must be an array of filter expressions"))?;
        if items.len() > MAX_FILTERS {
            return Err(invalid("filters", format!("holds at most {MAX_FILTERS} filters (combine them with all/any)")));
        }
        let size = value.to_string().len();
        if size > MAX_FILTERS_BYTES {
            return Err(invalid("filters", format!("is {size} bytes as JSON; at most {MAX_FILTERS_BYTES}")));
        }
        let list =
            items.iter().enumerate().map(|(i, f)| filter(f, &format!("filters[{i}]"), 0)).collect::<Result<_, _>>()?;
        Ok(Self { list })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether every filter matches the event.
    pub fn matches(&self, event: &dyn FilterEvent) -> bool {
        self.list.iter().all(|f| f.check(event, &mut None))
    }

    /// [`Filters::matches`] within a budget of `steps` (`meter`): whether every filter matches,
    /// and whether the budget ran out (then they do not match).
    pub fn matches_within(&self, event: &dyn FilterEvent, steps: u64) -> Budgeted {
        let (matches, exhausted) = super::meter::measured(steps, || self.matches(event));
        Budgeted { matches: matches && !exhausted, exhausted }
    }

    /// [`Filters::explain`] within a budget of `steps` for the whole list: a filter the budget
    /// did not reach, or ran out in, answers the error `budget`.
    pub fn explain_within(&self, event: &dyn FilterEvent, steps: u64) -> Vec<FilterResult> {
        let (mut results, exhausted) = super::meter::measured(steps, || {
            let mut out = Vec::new();
            for f in &self.list {
                if super::meter::exhausted() {
                    out.push(FilterResult { matches: false, error: Some(BUDGET_ERROR.to_owned()) });
                    continue;
                }
                let mut error = None;
                let matches = f.check(event, &mut Some(&mut error));
                if super::meter::exhausted() {
                    out.push(FilterResult { matches: false, error: Some(BUDGET_ERROR.to_owned()) });
                } else {
                    out.push(FilterResult { matches, error });
                }
            }
            out
        });
        if exhausted {
            for r in &mut results {
                if r.error.as_deref() == Some(BUDGET_ERROR) {
                    r.matches = false;
                }
            }
        }
        results
    }

    /// Each filter's result, with the first error it met.
    pub fn explain(&self, event: &dyn FilterEvent) -> Vec<FilterResult> {
        self.list
            .iter()
            .map(|f| {
                let mut error = None;
                let matches = f.check(event, &mut Some(&mut error));
                FilterResult { matches, error }
            })
            .collect()
    }

    /// Whether any filter reads the body (so matching parses it).
    pub fn reads_data(&self) -> bool {
        fn reads(f: &Filter) -> bool {
            match f {
                Filter::Data(_) => true,
                Filter::All(fs) | Filter::Any(fs) => fs.iter().any(reads),
                Filter::Not(f) => reads(f),
                Filter::Attributes(..) | Filter::Sql(_) => false,
            }
        }
        self.list.iter().any(reads)
    }
}

fn filter(value: &Json, path: &str, nesting: usize) -> Result<Filter, FilterError> {
    let map = value.as_object().ok_or_else(|| {
        invalid(path, "a filter is an object with one dialect, such as {\"exact\": {\"subject\": \"x\"}}")
    })?;
    let mut entries = map.iter();
    let (Some((dialect, arg)), None) = (entries.next(), entries.next()) else {
        return Err(invalid(
            path,
            "a filter names exactly one dialect: exact, prefix, suffix, all, any, not, sql or data",
        ));
    };
    let here = format!("{path}.{dialect}");
    let nested = |nesting: usize| {
        if nesting >= MAX_NESTING {
            Err(invalid(&here, format!("all, any and not nest at most {MAX_NESTING} levels")))
        } else {
            Ok(nesting + 1)
        }
    };
    Ok(match dialect.as_str() {
        "exact" => Filter::Attributes(Compare::Exact, attributes(arg, &here)?),
        "prefix" => Filter::Attributes(Compare::Prefix, attributes(arg, &here)?),
        "suffix" => Filter::Attributes(Compare::Suffix, attributes(arg, &here)?),
        "all" | "any" => {
            let deeper = nested(nesting)?;
            let items = arg
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| invalid(&here, "needs a non-empty array of filters"))?;
            let list = items
                .iter()
                .enumerate()
                .map(|(i, f)| filter(f, &format!("{here}[{i}]"), deeper))
                .collect::<Result<_, _>>()?;
            if dialect == "all" { Filter::All(list) } else { Filter::Any(list) }
        }
        "not" => Filter::Not(Box::new(filter(arg, &here, nested(nesting)?)?)),
        "sql" => Filter::Sql(sql(arg, &here)?),
        "data" => {
            Filter::Data(ContentPattern::compile(arg).map_err(|e| invalid(&format!("{here}{}", e.path), e.message))?)
        }
        other => {
            return Err(invalid(
                path,
                format!("unknown filter dialect {other:?}: use exact, prefix, suffix, all, any, not, sql or data"),
            ));
        }
    })
}

fn attributes(arg: &Json, path: &str) -> Result<Vec<(String, String)>, FilterError> {
    let map = arg
        .as_object()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| invalid(path, "needs an object of attribute names and values, such as {\"subject\": \"x\"}"))?;
    map.iter()
        .map(|(name, v)| {
            if !attribute_name(name) {
                return Err(invalid(
                    path,
                    format!("{name:?} is not a CloudEvents attribute name (lower-case letters and digits)"),
                ));
            }
            match v.as_str() {
                Some(s) if !s.is_empty() && s.len() <= 1024 => Ok((name.clone(), s.to_owned())),
                _ => Err(invalid(&format!("{path}.{name}"), "needs a non-empty string of at most 1024 bytes")),
            }
        })
        .collect()
}

fn sql(arg: &Json, path: &str) -> Result<Expression, FilterError> {
    let text = arg.as_str().ok_or_else(|| invalid(path, "needs a CESQL expression as a string"))?;
    let expr = Expression::parse(text).map_err(|e| invalid(path, e.to_string()))?;
    if let Some(f) = expr.unknown_functions().first() {
        return Err(invalid(
            path,
            format!("at character {}: there is no function {} taking {} argument(s)", f.position, f.name, f.arity),
        ));
    }
    match expr.static_type() {
        Some(Type::Int) => Err(invalid(path, "the expression answers an Integer; a filter needs a Boolean")),
        Some(Type::Str) => Err(invalid(path, "the expression answers a String; a filter needs a Boolean")),
        _ => Ok(expr),
    }
}

/// Keeps the first error met, when one is asked for.
fn note(error: &mut Option<&mut Option<String>>, message: String) {
    if let Some(slot) = error.as_deref_mut()
        && slot.is_none()
    {
        *slot = Some(message);
    }
}

impl Filter {
    /// Whether it matches; the first error met goes to `error` when one is asked for.
    fn check(&self, event: &dyn FilterEvent, error: &mut Option<&mut Option<String>>) -> bool {
        match self {
            Filter::Attributes(compare, pairs) => pairs.iter().all(|(name, wanted)| {
                event.attribute(name).is_some_and(|v| {
                    if !super::meter::spend_bytes(wanted.len()) {
                        return false;
                    }
                    let owned;
                    let text: &str = match &v {
                        Value::Str(s) => s,
                        other => {
                            owned = other.to_string();
                            &owned
                        }
                    };
                    match compare {
                        Compare::Exact => text == wanted,
                        Compare::Prefix => text.starts_with(wanted.as_str()),
                        Compare::Suffix => text.ends_with(wanted.as_str()),
                    }
                })
            }),
            Filter::All(list) => list.iter().all(|f| f.check(event, error)),
            Filter::Any(list) => list.iter().any(|f| f.check(event, error)),
            Filter::Not(inner) => !inner.check(event, error),
            Filter::Sql(expr) => {
                if error.is_none() {
                    return expr.passes(event);
                }
                match expr.evaluate(event) {
                    (Value::Bool(b), None) => b,
                    (_, Some(e)) => {
                        note(error, format!("{}: {e}", e.kind.as_str()));
                        false
                    }
                    (other, None) => {
                        note(error, format!("the expression answered a {}, not a Boolean", other.type_name()));
                        false
                    }
                }
            }
            Filter::Data(pattern) => match event.data() {
                Some(data) => pattern.matches(data),
                None => {
                    note(error, "the event's data is not JSON".to_owned());
                    false
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::routing::JsonEvent;

    fn event() -> Json {
        json!({
            "specversion": "1.0", "id": "0192", "source": "lender", "type": "studio.lerian.lender.loan.approved",
            "subject": "loan-7", "resourcetype": "loan", "eventtype": "approved", "region": "br",
            "datacontenttype": "application/json", "data": {"amount": 1200, "currency": "BRL"}
        })
    }

    fn check(filters: Json) -> (bool, Vec<FilterResult>) {
        let f = Filters::compile(&filters).unwrap_or_else(|e| panic!("{filters}: {e}"));
        let ev = event();
        let view = JsonEvent::new(ev.as_object().expect("object"));
        (f.matches(&view), f.explain(&view))
    }

    #[test]
    fn every_dialect() {
        let cases = [
            (json!([]), true),
            (json!([{"exact": {"subject": "loan-7"}}]), true),
            (json!([{"exact": {"subject": "loan-7", "region": "us"}}]), false),
            (json!([{"prefix": {"type": "studio.lerian.lender."}}]), true),
            (json!([{"suffix": {"type": ".approved"}}]), true),
            (json!([{"suffix": {"missing": "x"}}]), false),
            (json!([{"all": [{"exact": {"region": "br"}}, {"prefix": {"subject": "loan-"}}]}]), true),
            (json!([{"any": [{"exact": {"region": "us"}}, {"prefix": {"subject": "loan-"}}]}]), true),
            (json!([{"not": {"exact": {"region": "br"}}}]), false),
            (json!([{"sql": "region = 'br' AND subject LIKE 'loan-%'"}]), true),
            (json!([{"sql": "missing = 'x'"}]), false),
            (json!([{"data": {"amount": [{"numeric": [">", 1000]}]}}]), true),
            (json!([{"data": {"currency": ["USD"]}}]), false),
            (json!([{"exact": {"region": "br"}}, {"data": {"currency": ["USD"]}}]), false),
        ];
        for (filters, expected) in cases {
            assert_eq!(check(filters.clone()).0, expected, "{filters}");
        }
    }

    #[test]
    fn explain_tells_each_result_and_error() {
        let (matches, results) =
            check(json!([{"exact": {"region": "br"}}, {"sql": "missing = 'x'"}, {"sql": "subject"}]));
        assert!(!matches);
        assert_eq!(results[0], FilterResult { matches: true, error: None });
        assert!(!results[1].matches);
        assert!(results[1].error.as_deref().is_some_and(|e| e.starts_with("missingAttribute")), "{results:?}");
        assert_eq!(results[2].error.as_deref(), Some("the expression answered a String, not a Boolean"));
    }

    #[test]
    fn invalid_filters_name_the_path() {
        let cases = [
            (json!({}), "filters"),
            (json!([1]), "filters[0]"),
            (json!([{"exact": {"subject": "x"}, "prefix": {"subject": "x"}}]), "filters[0]"),
            (json!([{"regex": {"subject": "x"}}]), "filters[0]"),
            (json!([{"exact": {}}]), "filters[0].exact"),
            (json!([{"exact": {"Subject": "x"}}]), "filters[0].exact"),
            (json!([{"exact": {"subject": ""}}]), "filters[0].exact.subject"),
            (json!([{"all": []}]), "filters[0].all"),
            (json!([{"any": [{"not": {"sql": "a ="}}]}]), "filters[0].any[0].not.sql"),
            (json!([{"sql": "1 + 1"}]), "filters[0].sql"),
            (json!([{"sql": "NOPE(subject)"}]), "filters[0].sql"),
            (json!([{"data": {"amount": [{"numeric": ["~", 1]}]}}]), "filters[0].data.amount[0].numeric"),
        ];
        for (filters, path) in cases {
            let e = Filters::compile(&filters).expect_err("invalid");
            assert_eq!(e.path, path, "{filters}: {e}");
        }
        let e = Filters::compile(&json!([{"sql": "a = = 1"}])).expect_err("invalid");
        assert_eq!(e.message, "at character 5: expected an expression, found '='");
        let mut nested = json!({"exact": {"subject": "x"}});
        for _ in 0..=MAX_NESTING {
            nested = json!({ "not": nested });
        }
        assert!(Filters::compile(&json!([nested])).is_err());
        let many: Vec<Json> = (0..=MAX_FILTERS).map(|_| json!({"exact": {"subject": "x"}})).collect();
        assert!(Filters::compile(&Json::Array(many)).is_err());
    }

    #[test]
    fn a_body_that_is_not_json_matches_no_data_filter() {
        let ev = json!({"id": "1", "datacontenttype": "text/plain", "data": "amount"});
        let view = JsonEvent::new(ev.as_object().expect("object"));
        let f = Filters::compile(&json!([{"data": {"amount": [{"exists": false}]}}])).expect("compile");
        assert!(!f.matches(&view));
        assert_eq!(f.explain(&view)[0].error.as_deref(), Some("the event's data is not JSON"));
    }
}
