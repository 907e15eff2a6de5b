//! The event catalog's documents: a producer's manifest, as the original producer library serves
//! it (`GET <producer>/streaming`), read into the types it declares.
//!
//! A manifest is read field by field rather than through a derived deserializer, so that a
//! refusal names the field at fault (`events[3].resourceType`) and every field this hub does not
//! use (`routes`, `defaultPolicy`, anything a later library version adds) is ignored.

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::ids::{EventKey, Source};

/// Events one manifest may declare, at most.
pub const MAX_EVENTS: usize = 10_000;
/// Characters of any one text field, at most (a description may be longer, up to
/// [`MAX_DESCRIPTION`]).
const MAX_TEXT: usize = 1024;
const MAX_DESCRIPTION: usize = 8192;

/// Why a manifest was refused: the field at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub field: String,
    pub message: String,
}

impl ManifestError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() { f.write_str(&self.message) } else { write!(f, "{}: {}", self.field, self.message) }
    }
}

impl std::error::Error for ManifestError {}

/// Whether a declared event states a fact or asks for something to be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventClass {
    Fact,
    Command,
}

/// Where a declared event's payload schema is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum DataSchema {
    /// A URI: `http(s)://…` and `file:…` are fetched; any other scheme is only shown.
    Location(String),
    /// The schema itself, written into the manifest.
    Inline(Value),
}

impl DataSchema {
    /// The location to fetch, when this schema is one the hub can fetch.
    pub fn fetchable(&self) -> Option<&str> {
        match self {
            Self::Location(l) if is_fetchable(l) => Some(l),
            _ => None,
        }
    }
}

/// Whether a location is one the hub reads: an `http(s)` URL or a `file:` path.
pub fn is_fetchable(location: &str) -> bool {
    let lower = location.get(..8).unwrap_or(location).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("file:")
}

/// The producer a manifest describes.
#[derive(Debug, Clone, PartialEq)]
pub struct Publisher {
    /// The `ce-source` its events carry.
    pub source: Source,
    pub service_name: Option<String>,
    pub app_version: Option<String>,
    pub lib_version: Option<String>,
}

/// One event type a producer declares.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredEvent {
    /// `<resourcetype>.<eventtype>`.
    pub key: EventKey,
    pub schema_version: Option<String>,
    pub data_content_type: Option<String>,
    pub data_schema: Option<DataSchema>,
    pub description: Option<String>,
    pub class: Option<EventClass>,
    /// A platform event without a tenant: the hub discards these at ingest.
    pub system_event: bool,
}

/// A producer's manifest, as far as the catalog uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub version: Option<String>,
    pub publisher: Publisher,
    pub topic: Option<String>,
    pub events: Vec<DeclaredEvent>,
}

impl Manifest {
    /// Reads a manifest document. Unknown fields anywhere are ignored; a field this hub reads
    /// that holds the wrong kind of value, and a type that is not a valid event key, refuse it.
    pub fn parse(document: &[u8]) -> Result<Self, ManifestError> {
        let root: Value = serde_json::from_slice(document)
            .map_err(|e| ManifestError::new("", format!("the manifest is not JSON ({e})")))?;
        let root = root.as_object().ok_or_else(|| ManifestError::new("", "the manifest must be a JSON object"))?;
        let publisher =
            object(root, "publisher", "publisher")?.ok_or_else(|| ManifestError::new("publisher", "is required"))?;
        let source = text(publisher, "source", "publisher.source")?
            .ok_or_else(|| ManifestError::new("publisher.source", "is required"))?;
        let source = Source::parse(&source).map_err(|e| ManifestError::new("publisher.source", e.to_string()))?;
        let publisher = Publisher {
            source,
            service_name: text(publisher, "serviceName", "publisher.serviceName")?,
            app_version: text(publisher, "appVersion", "publisher.appVersion")?,
            lib_version: text(publisher, "libVersion", "publisher.libVersion")?,
        };
        let events = match root.get("events") {
            None | Some(Value::Null) => return Err(ManifestError::new("events", "is required")),
            Some(Value::Array(events)) => events,
            Some(_) => return Err(ManifestError::new("events", "must be an array")),
        };
        if events.len() > MAX_EVENTS {
            return Err(ManifestError::new("events", format!("declares more than {MAX_EVENTS} events")));
        }
        let events = events.iter().enumerate().map(|(i, e)| declared(i, e)).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { version: version(root)?, topic: text(root, "topic", "topic")?, publisher, events })
    }
}

/// `version` is a string in the library's documents; a number is read as its text.
fn version(root: &Map<String, Value>) -> Result<Option<String>, ManifestError> {
    match root.get("version") {
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        _ => text(root, "version", "version"),
    }
}

fn declared(i: usize, event: &Value) -> Result<DeclaredEvent, ManifestError> {
    let at = |name: &str| format!("events[{i}].{name}");
    let event = event.as_object().ok_or_else(|| ManifestError::new(format!("events[{i}]"), "must be an object"))?;
    let resource = text(event, "resourceType", &at("resourceType"))?;
    let kind = text(event, "eventType", &at("eventType"))?;
    let key = match (resource, kind) {
        (Some(resource), Some(kind)) => {
            let resource =
                EventKey::parse_part(&resource).map_err(|e| ManifestError::new(at("resourceType"), e.to_string()))?;
            EventKey::new(resource, &kind).map_err(|e| ManifestError::new(at("eventType"), e.to_string()))?
        }
        // Without the two segments, the event key names them.
        (None, None) => match text(event, "eventKey", &at("eventKey"))? {
            Some(key) => EventKey::parse(&key).map_err(|e| ManifestError::new(at("eventKey"), e.to_string()))?,
            None => return Err(ManifestError::new(at("resourceType"), "is required")),
        },
        (None, Some(_)) => return Err(ManifestError::new(at("resourceType"), "is required")),
        (Some(_), None) => return Err(ManifestError::new(at("eventType"), "is required")),
    };
    let class = match text(event, "class", &at("class"))? {
        None => None,
        Some(c) if c.eq_ignore_ascii_case("fact") => Some(EventClass::Fact),
        Some(c) if c.eq_ignore_ascii_case("command") => Some(EventClass::Command),
        Some(_) => return Err(ManifestError::new(at("class"), "must be \"fact\" or \"command\"")),
    };
    let data_schema = match event.get("dataSchema") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) if s.chars().count() > MAX_TEXT => {
            return Err(ManifestError::new(at("dataSchema"), format!("is longer than {MAX_TEXT} characters")));
        }
        Some(Value::String(s)) => Some(DataSchema::Location(s.clone())),
        Some(v @ (Value::Object(_) | Value::Bool(_))) => Some(DataSchema::Inline(v.clone())),
        Some(_) => return Err(ManifestError::new(at("dataSchema"), "must be a URI or a JSON Schema object")),
    };
    let system_event = match event.get("systemEvent") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ManifestError::new(at("systemEvent"), "must be true or false")),
    };
    let description = match event.get("description") {
        Some(Value::String(s)) if s.chars().count() > MAX_DESCRIPTION => {
            return Err(ManifestError::new(at("description"), format!("is longer than {MAX_DESCRIPTION} characters")));
        }
        // A description may run over lines; no other control character.
        Some(Value::String(s)) if s.chars().any(|c| crate::ids::is_control(c) && !matches!(c, '\n' | '\r' | '\t')) => {
            return Err(ManifestError::new(
                at("description"),
                "must not contain control characters other than line breaks",
            ));
        }
        Some(Value::String(s)) => Some(s.clone()).filter(|s| !s.is_empty()),
        _ => text(event, "description", &at("description"))?,
    };
    Ok(DeclaredEvent {
        key,
        schema_version: text(event, "schemaVersion", &at("schemaVersion"))?,
        data_content_type: text(event, "dataContentType", &at("dataContentType"))?,
        data_schema,
        description,
        class,
        system_event,
    })
}

/// An optional object field.
fn object<'a>(
    map: &'a Map<String, Value>,
    name: &str,
    field: &str,
) -> Result<Option<&'a Map<String, Value>>, ManifestError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(ManifestError::new(field, "must be an object")),
    }
}

/// An optional text field (empty reads as absent), bounded in length.
fn text(map: &Map<String, Value>, name: &str, field: &str) -> Result<Option<String>, ManifestError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() > MAX_TEXT => {
            Err(ManifestError::new(field, format!("is longer than {MAX_TEXT} characters")))
        }
        Some(Value::String(s)) if s.chars().any(crate::ids::is_control) => {
            Err(ManifestError::new(field, "must not contain control characters"))
        }
        Some(Value::String(s)) => Ok(Some(s.clone()).filter(|s| !s.is_empty())),
        Some(_) => Err(ManifestError::new(field, "must be a string")),
    }
}

#[cfg(test)]
mod tests;
