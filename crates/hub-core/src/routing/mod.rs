//! Routing by content: a subscription's `filters` ([`Filters`]), in the CloudEvents
//! Subscriptions API dialects with CESQL ([`cesql`]) and the content patterns of `data`
//! ([`data`]), and the views of an event they read.
//!
//! An accepted event is read through [`EventView`]: its context attributes by their lower-case
//! CloudEvents names (`id`, `source`, `type`, `time`, `subject`, `specversion`,
//! `datacontenttype`, `dataschema`, the hub's required `schemaversion`, `resourcetype`,
//! `eventtype`, `tenantid`, the trace context and every other `ce-` extension), all as strings,
//! and its body parsed as JSON once, only when a `data` filter asks. A structured CloudEvent
//! (`POST /v1/filters/test`, the TCK) is read through [`JsonEvent`], with its attributes typed as
//! the JSON gives them.

pub mod cesql;
pub mod data;
mod filters;
mod glob;
pub mod meter;

use std::borrow::Cow;
use std::cell::OnceCell;

use serde_json::{Map, Value as Json};

pub use cesql::{Attributes, Value};
pub use filters::{
    BUDGET_ERROR, Budgeted, FilterError, FilterEvent, FilterResult, Filters, MAX_FILTERS, MAX_FILTERS_BYTES,
    MAX_NESTING,
};
pub use glob::Glob;

use crate::envelope::{Envelope, is_json_media_type};

/// The context attributes every accepted event may have, by their CloudEvents names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    SpecVersion,
    Id,
    Source,
    Type,
    Time,
    Subject,
    DataContentType,
    DataSchema,
    SchemaVersion,
    ResourceType,
    EventType,
    TenantId,
    TraceParent,
    TraceState,
}

impl Context {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "specversion" => Self::SpecVersion,
            "id" => Self::Id,
            "source" => Self::Source,
            "type" => Self::Type,
            "time" => Self::Time,
            "subject" => Self::Subject,
            "datacontenttype" => Self::DataContentType,
            "dataschema" => Self::DataSchema,
            "schemaversion" => Self::SchemaVersion,
            "resourcetype" => Self::ResourceType,
            "eventtype" => Self::EventType,
            "tenantid" => Self::TenantId,
            "traceparent" => Self::TraceParent,
            "tracestate" => Self::TraceState,
            _ => return None,
        })
    }
}

/// An accepted event's attributes, however it is held (an [`Envelope`] at ingest, a stored
/// row in a replay): the context attributes and the extensions, as strings.
pub trait Accepted {
    fn context(&self, attribute: Context) -> Option<Cow<'_, str>>;
    fn extension(&self, name: &str) -> Option<&str>;
}

impl Accepted for Envelope {
    fn context(&self, attribute: Context) -> Option<Cow<'_, str>> {
        let borrowed = match attribute {
            Context::SpecVersion => Some("1.0"),
            Context::Id => return Some(Cow::Owned(self.id().to_string())),
            Context::Source => Some(self.source().as_str()),
            Context::Type => Some(self.ce_type()),
            Context::Time => Some(self.time()),
            Context::Subject => self.subject(),
            Context::DataContentType => self.data_content_type(),
            Context::DataSchema => self.data_schema(),
            Context::SchemaVersion => Some(self.schema_version()),
            Context::ResourceType => Some(self.key().resource()),
            Context::EventType => Some(self.key().event()),
            Context::TenantId => Some(self.tenant().as_str()),
            Context::TraceParent => self.traceparent(),
            Context::TraceState => self.tracestate(),
        };
        borrowed.map(Cow::Borrowed)
    }

    fn extension(&self, name: &str) -> Option<&str> {
        self.extensions().get(name).map(String::as_str)
    }
}

/// The most characters of an ordering key kept; a longer key is cut (ordering by a prefix of the
/// key only ever orders more, never less, than asked). The store's SQL cuts the same way.
pub const MAX_ORDERING_KEY: usize = 256;

/// An event's ordering key: the CloudEvents Partitioning extension's `partitionkey`, else its
/// `subject`, else none (the event is not ordered). An empty value is no key.
pub fn ordering_key<E: Accepted + ?Sized>(event: &E) -> Option<String> {
    let key = event.extension("partitionkey").map(Cow::Borrowed).or_else(|| event.context(Context::Subject))?;
    if key.is_empty() {
        return None;
    }
    Some(key.chars().take(MAX_ORDERING_KEY).collect())
}

/// An accepted event as filters read it: its attributes, and its body parsed as JSON once, when
/// a `data` filter first asks.
#[derive(Debug)]
pub struct EventView<'a, E: ?Sized> {
    event: &'a E,
    body: &'a [u8],
    data: OnceCell<Option<Json>>,
}

impl<'a, E: Accepted + ?Sized> EventView<'a, E> {
    pub fn new(event: &'a E, body: &'a [u8]) -> Self {
        Self { event, body, data: OnceCell::new() }
    }
}

impl<E: Accepted + ?Sized> Attributes for EventView<'_, E> {
    fn attribute(&self, name: &str) -> Option<Value<'_>> {
        match Context::parse(name) {
            Some(c) => self.event.context(c),
            None => self.event.extension(name).map(Cow::Borrowed),
        }
        .map(Value::Str)
    }
}

impl<E: Accepted + ?Sized> FilterEvent for EventView<'_, E> {
    fn data(&self) -> Option<&Json> {
        self.data
            .get_or_init(|| {
                let content_type = self.event.context(Context::DataContentType);
                if is_json_media_type(content_type.as_deref().unwrap_or(crate::envelope::DEFAULT_CONTENT_TYPE)) {
                    serde_json::from_slice(self.body).ok()
                } else {
                    None
                }
            })
            .as_ref()
    }
}

/// A structured CloudEvent (a JSON object) as filters read it: every member but `data` and
/// `data_base64` is an attribute; a Boolean or a 32-bit integer keeps its type, anything else
/// is its text.
#[derive(Debug)]
pub struct JsonEvent<'a> {
    object: &'a Map<String, Json>,
}

impl<'a> JsonEvent<'a> {
    pub fn new(object: &'a Map<String, Json>) -> Self {
        Self { object }
    }
}

impl Attributes for JsonEvent<'_> {
    fn attribute(&self, name: &str) -> Option<Value<'_>> {
        if name == "data" || name == "data_base64" {
            return None;
        }
        Some(match self.object.get(name)? {
            Json::Bool(b) => Value::Bool(*b),
            Json::String(s) => Value::Str(Cow::Borrowed(s)),
            Json::Number(n) => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
                Some(i) => Value::Int(i),
                None => Value::Str(Cow::Owned(n.to_string())),
            },
            Json::Null => return None,
            other => Value::Str(Cow::Owned(other.to_string())),
        })
    }
}

impl FilterEvent for JsonEvent<'_> {
    fn data(&self) -> Option<&Json> {
        match self.object.get("datacontenttype").and_then(Json::as_str) {
            Some(ct) if !is_json_media_type(ct) => None,
            _ => self.object.get("data"),
        }
    }
}
