//! Payload checking on request (`STREAMING_HUB_VALIDATE_PAYLOADS`): an accepted event's body
//! against the JSON Schema its producer declares for its source, type and schema version.
//!
//! Schemas are compiled once and kept by their text, so a manifest refresh that brings the same
//! schema again compiles nothing. Each check reads the current table behind a lock held for a
//! pointer copy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use hub_core::{Envelope, QuarantineReason, ReasonCode};

use crate::telemetry::metric;

/// What a body that does not satisfy its schema becomes (the configuration's own type).
pub use crate::config::PayloadValidation as Mode;

/// One declared schema: which events it checks.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `None`: the declaration names no schema version, so it checks every version.
    pub schema_version: Option<String>,
    pub validator: Arc<jsonschema::Validator>,
}

/// `(source, event key)` → the declared schemas of that type.
pub type Table = HashMap<(String, String), Vec<Rule>>;

/// The payload checks of one process.
#[derive(Debug)]
pub struct Payloads {
    mode: Mode,
    table: RwLock<Arc<Table>>,
    /// Compiled schemas by their text (or why they do not compile).
    compiled: Mutex<HashMap<String, Result<Arc<jsonschema::Validator>, String>>>,
}

/// Characters of a validation message kept in a quarantine reason: it may quote the body.
const MESSAGE_CHARS: usize = 200;

impl Payloads {
    pub fn new(mode: Mode) -> Self {
        Self { mode, table: RwLock::default(), compiled: Mutex::default() }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Compiles a schema, or answers why it cannot be used; each distinct text is compiled once.
    pub fn compile(&self, schema: &serde_json::Value) -> Result<Arc<jsonschema::Validator>, String> {
        let text = schema.to_string();
        let mut compiled = self.compiled.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        compiled
            .entry(text)
            .or_insert_with(|| {
                jsonschema::validator_for(schema).map(Arc::new).map_err(|e| {
                    // Where, never what: the message of a schema's error may quote the schema.
                    let at = e.instance_path().to_string();
                    format!("is not a usable JSON Schema (at {})", if at.is_empty() { "/" } else { &at })
                })
            })
            .clone()
    }

    /// Replaces the table; compiled schemas no longer in it are dropped.
    pub fn install(&self, table: Table) {
        let live: std::collections::HashSet<*const jsonschema::Validator> =
            table.values().flatten().map(|r| Arc::as_ptr(&r.validator)).collect();
        self.compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, v| v.as_ref().is_ok_and(|v| live.contains(&Arc::as_ptr(v))));
        *self.table.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(table);
    }

    /// Checks an accepted event's body: `Some` reason to quarantine it (in `quarantine` mode,
    /// when it does not satisfy its schema); a mismatch in `warn` mode is only counted.
    pub fn check(&self, envelope: &Envelope, body: &[u8]) -> Option<QuarantineReason> {
        if self.mode == Mode::Off {
            return None;
        }
        let table = Arc::clone(&self.table.read().unwrap_or_else(std::sync::PoisonError::into_inner));
        let rules = table.get(&(envelope.source().as_str().to_owned(), envelope.key().to_string()))?;
        let version = envelope.schema_version();
        let rule = rules
            .iter()
            .find(|r| r.schema_version.as_deref() == Some(version))
            .or_else(|| rules.iter().find(|r| r.schema_version.is_none()))?;
        let (pointer, message) = mismatch(&rule.validator, body)?;
        metrics::counter!(metric::PAYLOAD_SCHEMA_MISMATCHES, "mode" => self.mode.as_str()).increment(1);
        (self.mode == Mode::Quarantine).then(|| {
            QuarantineReason::new(
                ReasonCode::SchemaMismatch,
                &format!("body{pointer}"),
                format!("the body does not satisfy the schema of {} {version}: {message}", envelope.key()),
            )
        })
    }
}

/// The JSON Pointer and message of a body's first error against `validator`, if any.
fn mismatch(validator: &jsonschema::Validator, body: &[u8]) -> Option<(String, String)> {
    let instance: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => return Some((String::new(), "the body is not JSON".to_owned())),
    };
    let error = validator.iter_errors(&instance).next()?;
    let message: String = error.to_string().chars().take(MESSAGE_CHARS).collect();
    Some((error.instance_path().to_string(), message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(version: &str) -> Envelope {
        let id = uuid::Uuid::now_v7().to_string();
        let headers = [
            ("ce-specversion", "1.0"),
            ("ce-id", id.as_str()),
            ("ce-source", "ledger"),
            ("ce-type", "studio.lerian.ledger.account.created"),
            ("ce-time", "2026-01-01T00:00:00Z"),
            ("ce-schemaversion", version),
            ("ce-resourcetype", "account"),
            ("ce-eventtype", "created"),
            ("ce-tenantid", "t1"),
            ("content-type", "application/json"),
        ];
        match hub_core::judge(headers.iter().map(|(k, v)| (*k, v.as_bytes())), b"{}", None, &Default::default()) {
            hub_core::Verdict::Accept(e) => *e,
            other => panic!("not accepted: {other:?}"),
        }
    }

    fn payloads(mode: Mode) -> Payloads {
        let p = Payloads::new(mode);
        let schema = json!({"type": "object", "required": ["amount"],
                            "properties": {"amount": {"type": "integer", "minimum": 0}}});
        let v1 = p.compile(&schema).expect("compiles");
        let any = p.compile(&json!({"type": "object"})).expect("compiles");
        let mut table = Table::new();
        table.insert(
            ("ledger".into(), "account.created".into()),
            vec![
                Rule { schema_version: Some("1.0.0".into()), validator: v1 },
                Rule { schema_version: None, validator: any },
            ],
        );
        p.install(table);
        p
    }

    #[test]
    fn quarantine_names_the_first_error_by_json_pointer() {
        let p = payloads(Mode::Quarantine);
        let e = envelope("1.0.0");
        assert_eq!(p.check(&e, br#"{"amount": 5}"#), None);
        let r = p.check(&e, br#"{"amount": -1}"#).expect("mismatch");
        assert_eq!((r.code, r.field.as_str()), (ReasonCode::SchemaMismatch, "body/amount"));
        let r = p.check(&e, br#"{"note": "x"}"#).expect("mismatch");
        assert_eq!(r.field, "body");
        assert!(r.message.contains("amount"), "{}", r.message);
        let r = p.check(&e, b"not json").expect("mismatch");
        assert_eq!((r.field.as_str(), r.message.ends_with("the body is not JSON")), ("body", true));
    }

    #[test]
    fn a_version_without_its_own_schema_uses_the_unversioned_one_and_off_checks_nothing() {
        let p = payloads(Mode::Quarantine);
        // 2.0.0 has no schema of its own: the declaration without a version applies.
        assert_eq!(p.check(&envelope("2.0.0"), br#"{"amount": -1}"#), None);
        assert!(p.check(&envelope("2.0.0"), b"[]").is_some());
        assert_eq!(payloads(Mode::Warn).check(&envelope("1.0.0"), b"[]"), None, "warn only counts");
        assert_eq!(payloads(Mode::Off).check(&envelope("1.0.0"), b"[]"), None);
    }

    #[test]
    fn a_schema_is_compiled_once_and_a_bad_one_is_refused_with_a_reason() {
        let p = Payloads::new(Mode::Warn);
        let a = p.compile(&json!({"type": "string"})).expect("compiles");
        let b = p.compile(&json!({"type": "string"})).expect("compiles");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(p.compile(&json!({"type": 12})).expect_err("bad").contains("JSON Schema"));
        assert_eq!(Mode::parse(" Quarantine ").expect("mode"), Mode::Quarantine);
        assert!(Mode::parse("strict").expect_err("bad").contains("off, warn or quarantine"));
    }
}
