//! CloudEvents envelopes and the ingest verdict.
//!
//! [`judge`] turns one record — its header list (Kafka record headers or HTTP `ce-*` headers),
//! its body and, for Kafka, the topic it came from — into exactly one [`Verdict`]:
//!
//! 1. **Discard** a platform event (`ce-systemevent: true`), before any other check, the tenant
//!    check included; and, in a cell ([`IngestPolicy::cell`]), an event whose `ce-tenantid` is
//!    another cell's tenant, before any other check too: it is that cell's to judge;
//! 2. **Quarantine** anything malformed, naming the offending header in the reason;
//! 3. **Accept** everything else as an [`Envelope`], valid by construction.
//!
//! Header keys are compared case-insensitively and, when a key repeats, the last value wins.
//! Only `ce-*`, `traceparent` and `tracestate` are read; everything else is ignored.

use std::collections::BTreeMap;
use std::fmt;

use chrono::DateTime;
use serde::Serialize;

use crate::ids::{CeId, EventKey, IdError, Source, TenantId, is_control, topic_source};

/// Largest accepted event body: 1 MiB.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The content type assumed when `ce-datacontenttype` is absent.
pub const DEFAULT_CONTENT_TYPE: &str = "application/json";
/// Cap on any header value the spec sets no length for (data content type, data schema, trace
/// state, extensions). A record over it is quarantined rather than stored unbounded.
pub const MAX_OTHER_HEADER_BYTES: usize = 4096;

const MAX_SCHEMA_VERSION: usize = 64;
const MAX_SUBJECT: usize = 1024;
/// CloudEvents limits extension attribute names to 20 lowercase alphanumerics.
const MAX_EXTENSION_NAME: usize = 20;

/// The attributes the hub knows by name; every other `ce-*` header is an extension.
const KNOWN: [&str; 13] = [
    "ce-specversion",
    "ce-id",
    "ce-source",
    "ce-type",
    "ce-time",
    "ce-schemaversion",
    "ce-resourcetype",
    "ce-eventtype",
    "ce-tenantid",
    "ce-subject",
    "ce-datacontenttype",
    "ce-dataschema",
    "ce-systemevent",
];

/// Ingest rules that depend on configuration.
#[derive(Debug, Clone, Default)]
pub struct IngestPolicy {
    /// Single-tenant mode: events of any other tenant are quarantined.
    pub only_tenant: Option<TenantId>,
    /// A cell (`STREAMING_HUB_TENANTS`): the tenants this install serves. A record whose
    /// `ce-tenantid` is a valid tenant id outside the set is discarded (another cell, reading the
    /// same topics, stores it); a record with no readable tenant is judged as usual.
    pub cell: Option<std::collections::BTreeSet<TenantId>>,
}

impl IngestPolicy {
    /// Whether `tenant` is served here: always outside a cell.
    pub fn serves(&self, tenant: &TenantId) -> bool {
        self.cell.as_ref().is_none_or(|cell| cell.contains(tenant))
    }
}

/// The verdict on one record.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Accept(Box<Envelope>),
    Discard(DiscardReason),
    Quarantine(QuarantineReason),
}

/// Why a well-formed record is dropped without being stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscardReason {
    /// `ce-systemevent: true`: a tenant-less platform event.
    SystemEvent,
    /// The event's tenant is another cell's ([`IngestPolicy::cell`]).
    OtherCell,
}

/// The class of a quarantine, stable for filtering and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    MissingHeader,
    InvalidHeader,
    ControlCharacter,
    InvalidId,
    SourceMismatch,
    TypeMismatch,
    TenantNotAllowed,
    BodyTooLarge,
    InvalidBody,
    /// The body does not satisfy the JSON Schema its producer declares for its type
    /// (`STREAMING_HUB_VALIDATE_PAYLOADS=quarantine`).
    SchemaMismatch,
}

impl ReasonCode {
    pub const ALL: [ReasonCode; 10] = [
        Self::MissingHeader,
        Self::InvalidHeader,
        Self::ControlCharacter,
        Self::InvalidId,
        Self::SourceMismatch,
        Self::TypeMismatch,
        Self::TenantNotAllowed,
        Self::BodyTooLarge,
        Self::InvalidBody,
        Self::SchemaMismatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingHeader => "missing_header",
            Self::InvalidHeader => "invalid_header",
            Self::ControlCharacter => "control_character",
            Self::InvalidId => "invalid_id",
            Self::SourceMismatch => "source_mismatch",
            Self::TypeMismatch => "type_mismatch",
            Self::TenantNotAllowed => "tenant_not_allowed",
            Self::BodyTooLarge => "body_too_large",
            Self::InvalidBody => "invalid_body",
            Self::SchemaMismatch => "schema_mismatch",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// Why a record was quarantined: a stable code, the header (or `body`) at fault, and a message
/// for operators. Messages never echo more than a short excerpt of a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineReason {
    pub code: ReasonCode,
    pub field: String,
    pub message: String,
}

impl QuarantineReason {
    pub fn new(code: ReasonCode, field: &str, message: impl Into<String>) -> Self {
        Self { code, field: field.to_owned(), message: message.into() }
    }

    fn invalid(field: &str, err: IdError) -> Self {
        let code = match err {
            IdError::ControlCharacter => ReasonCode::ControlCharacter,
            _ => ReasonCode::InvalidHeader,
        };
        Self::new(code, field, err.to_string())
    }
}

impl fmt::Display for QuarantineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// An accepted CloudEvent's attributes. Built only by [`judge`], so every field holds a value
/// that passed the rules of the envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    id: CeId,
    source: Source,
    ce_type: String,
    time: String,
    schema_version: String,
    key: EventKey,
    tenant: TenantId,
    subject: Option<String>,
    data_content_type: Option<String>,
    data_schema: Option<String>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    extensions: BTreeMap<String, String>,
}

impl Envelope {
    pub fn id(&self) -> CeId {
        self.id
    }
    pub fn source(&self) -> &Source {
        &self.source
    }
    /// `studio.lerian.<source>.<resource>.<event>`.
    pub fn ce_type(&self) -> &str {
        &self.ce_type
    }
    /// `ce-time` exactly as sent (a valid RFC 3339 timestamp).
    pub fn time(&self) -> &str {
        &self.time
    }
    pub fn schema_version(&self) -> &str {
        &self.schema_version
    }
    pub fn key(&self) -> &EventKey {
        &self.key
    }
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }
    /// `ce-datacontenttype` as sent, if it was.
    pub fn data_content_type(&self) -> Option<&str> {
        self.data_content_type.as_deref()
    }
    /// The body's media type, with the default applied.
    pub fn content_type(&self) -> &str {
        self.data_content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE)
    }
    pub fn data_schema(&self) -> Option<&str> {
        self.data_schema.as_deref()
    }
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
    /// Extension attributes (`ce-<name>` headers the hub does not know), by name without prefix.
    pub fn extensions(&self) -> &BTreeMap<String, String> {
        &self.extensions
    }
}

/// True when a media type denotes JSON (`application/json`, `text/json`, `*/*+json`).
pub fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.eq_ignore_ascii_case("text/json")
        // Compared as bytes: a suffix boundary may fall inside a multi-byte character.
        || essence.len() > 5 && essence.as_bytes()[essence.len().saturating_sub(5)..].eq_ignore_ascii_case(b"+json")
}

/// Reads the headers the verdict depends on: lower-cased keys, last value wins.
fn relevant_headers<I, K, V>(headers: I) -> BTreeMap<String, V>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut map = BTreeMap::new();
    for (key, value) in headers {
        let key = key.as_ref().to_ascii_lowercase();
        if key.starts_with("ce-") || key == "traceparent" || key == "tracestate" {
            map.insert(key, value);
        }
    }
    map
}

/// Decides the verdict on one record. See the module documentation for the order of the rules.
pub fn judge<I, K, V>(headers: I, body: &[u8], topic: Option<&str>, policy: &IngestPolicy) -> Verdict
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    judge_as(headers, body, topic, policy, false)
}

/// [`judge`] for the hub's own operational events (`crate::operational`): the same rules, except
/// that their resource type, reserved to the hub, is required instead of refused.
pub fn judge_operational<I, K, V>(headers: I, body: &[u8], policy: &IngestPolicy) -> Verdict
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    judge_as(headers, body, None, policy, true)
}

fn judge_as<I, K, V>(headers: I, body: &[u8], topic: Option<&str>, policy: &IngestPolicy, operational: bool) -> Verdict
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let raw = relevant_headers(headers);
    let system = raw.get("ce-systemevent").is_some_and(|v| v.as_ref().eq_ignore_ascii_case(b"true"));
    if system {
        return Verdict::Discard(DiscardReason::SystemEvent);
    }
    if policy.cell.is_some()
        && let Some(tenant) = raw.get("ce-tenantid")
        && let Some(tenant) = std::str::from_utf8(tenant.as_ref()).ok().and_then(|t| TenantId::parse(t).ok())
        && !policy.serves(&tenant)
    {
        return Verdict::Discard(DiscardReason::OtherCell);
    }
    match parse_envelope(&raw, topic, policy, operational).and_then(|env| check_body(env, body)) {
        Ok(env) => Verdict::Accept(Box::new(env)),
        Err(reason) => Verdict::Quarantine(reason),
    }
}

fn parse_envelope<V: AsRef<[u8]>>(
    raw: &BTreeMap<String, V>,
    topic: Option<&str>,
    policy: &IngestPolicy,
    operational: bool,
) -> Result<Envelope, QuarantineReason> {
    // Every value must be text without control characters, whatever header carries it.
    let mut h: BTreeMap<&str, &str> = BTreeMap::new();
    for (key, value) in raw {
        let text = std::str::from_utf8(value.as_ref())
            .map_err(|_| QuarantineReason::new(ReasonCode::InvalidHeader, key, "must be valid UTF-8"))?;
        if text.chars().any(is_control) {
            return Err(QuarantineReason::invalid(key, IdError::ControlCharacter));
        }
        h.insert(key.as_str(), text);
    }
    let required = |name: &str| -> Result<&str, QuarantineReason> {
        match h.get(name) {
            Some(v) if !v.is_empty() => Ok(v),
            Some(_) => Err(QuarantineReason::new(ReasonCode::InvalidHeader, name, "must not be empty")),
            None => Err(QuarantineReason::new(ReasonCode::MissingHeader, name, "is required")),
        }
    };
    let optional = |name: &str, max: usize| -> Result<Option<String>, QuarantineReason> {
        match h.get(name) {
            None => Ok(None),
            Some(&"") => Err(QuarantineReason::new(ReasonCode::InvalidHeader, name, "must not be empty when present")),
            Some(v) if v.len() > max => Err(QuarantineReason::invalid(name, IdError::TooLong { max, got: v.len() })),
            Some(v) => Ok(Some((*v).to_owned())),
        }
    };

    let spec = required("ce-specversion")?;
    if spec != "1.0" {
        return Err(QuarantineReason::new(ReasonCode::InvalidHeader, "ce-specversion", "must be exactly 1.0"));
    }

    let id = CeId::parse(required("ce-id")?)
        .map_err(|e| QuarantineReason::new(ReasonCode::InvalidId, "ce-id", e.to_string()))?;

    let source = Source::parse(required("ce-source")?).map_err(|e| QuarantineReason::invalid("ce-source", e))?;
    if let Some(topic) = topic
        && topic_source(topic) != Some(source.as_str())
    {
        return Err(QuarantineReason::new(
            ReasonCode::SourceMismatch,
            "ce-source",
            format!("must equal the source segment of topic {topic}"),
        ));
    }

    let resource = required("ce-resourcetype")?;
    EventKey::parse_part(resource).map_err(|e| QuarantineReason::invalid("ce-resourcetype", e))?;
    if (resource == crate::operational::RESOURCE) != operational {
        return Err(QuarantineReason::new(
            ReasonCode::InvalidHeader,
            "ce-resourcetype",
            format!("{} is reserved for the hub's own operational events", crate::operational::RESOURCE),
        ));
    }
    let event = required("ce-eventtype")?;
    EventKey::parse_part(event).map_err(|e| QuarantineReason::invalid("ce-eventtype", e))?;
    let key = EventKey::new(resource, event).map_err(|e| QuarantineReason::invalid("ce-eventtype", e))?;

    let ce_type = required("ce-type")?;
    let expected = format!("studio.lerian.{source}.{resource}.{event}");
    if ce_type != expected {
        return Err(QuarantineReason::new(
            ReasonCode::TypeMismatch,
            "ce-type",
            "must equal studio.lerian.<ce-source>.<ce-resourcetype>.<ce-eventtype>",
        ));
    }

    let time = required("ce-time")?;
    DateTime::parse_from_rfc3339(time)
        .map_err(|_| QuarantineReason::new(ReasonCode::InvalidHeader, "ce-time", "must be an RFC 3339 timestamp"))?;

    let schema_version = required("ce-schemaversion")?;
    if schema_version.len() > MAX_SCHEMA_VERSION {
        return Err(QuarantineReason::invalid(
            "ce-schemaversion",
            IdError::TooLong { max: MAX_SCHEMA_VERSION, got: schema_version.len() },
        ));
    }
    semver::Version::parse(schema_version).map_err(|_| {
        QuarantineReason::new(ReasonCode::InvalidHeader, "ce-schemaversion", "must be a semantic version such as 1.0.0")
    })?;

    let tenant = TenantId::parse(required("ce-tenantid")?).map_err(|e| QuarantineReason::invalid("ce-tenantid", e))?;
    if let Some(only) = &policy.only_tenant
        && &tenant != only
    {
        return Err(QuarantineReason::new(
            ReasonCode::TenantNotAllowed,
            "ce-tenantid",
            "this hub runs in single-tenant mode and the tenant is not its own",
        ));
    }

    let subject = optional("ce-subject", MAX_SUBJECT)?;
    let data_content_type = optional("ce-datacontenttype", MAX_OTHER_HEADER_BYTES)?;
    let data_schema = optional("ce-dataschema", MAX_OTHER_HEADER_BYTES)?;
    if let Some(schema) = &data_schema {
        url::Url::parse(schema).map_err(|_| {
            QuarantineReason::new(ReasonCode::InvalidHeader, "ce-dataschema", "must be an absolute URI")
        })?;
    }
    if let Some(flag) = h.get("ce-systemevent")
        && !flag.eq_ignore_ascii_case("false")
    {
        return Err(QuarantineReason::new(ReasonCode::InvalidHeader, "ce-systemevent", "must be true or false"));
    }

    // A malformed trace context is dropped, not fatal: W3C says to start a new trace.
    let traceparent = h.get("traceparent").filter(|v| is_traceparent(v)).map(|v| (*v).to_owned());
    let tracestate = match traceparent {
        Some(_) => optional("tracestate", MAX_OTHER_HEADER_BYTES)?,
        None => None,
    };

    let mut extensions = BTreeMap::new();
    for (key, value) in &h {
        let Some(name) = key.strip_prefix("ce-") else { continue };
        if KNOWN.contains(key) {
            continue;
        }
        let valid_name = !name.is_empty()
            && name.len() <= MAX_EXTENSION_NAME
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !valid_name {
            return Err(QuarantineReason::new(
                ReasonCode::InvalidHeader,
                key,
                "extension attribute names are 1 to 20 lowercase letters or digits",
            ));
        }
        if value.len() > MAX_OTHER_HEADER_BYTES {
            return Err(QuarantineReason::invalid(
                key,
                IdError::TooLong { max: MAX_OTHER_HEADER_BYTES, got: value.len() },
            ));
        }
        extensions.insert(name.to_owned(), (*value).to_owned());
    }

    Ok(Envelope {
        id,
        source,
        ce_type: ce_type.to_owned(),
        time: time.to_owned(),
        schema_version: schema_version.to_owned(),
        key,
        tenant,
        subject,
        data_content_type,
        data_schema,
        traceparent,
        tracestate,
        extensions,
    })
}

fn check_body(env: Envelope, body: &[u8]) -> Result<Envelope, QuarantineReason> {
    if body.len() > MAX_BODY_BYTES {
        return Err(QuarantineReason::new(
            ReasonCode::BodyTooLarge,
            "body",
            format!("must be at most {MAX_BODY_BYTES} bytes (got {})", body.len()),
        ));
    }
    // JSON is UTF-8 throughout (RFC 8259 §8.1): the text is checked whole first, because skipping
    // over values (`IgnoredAny`) does not look inside strings.
    let valid_json =
        || std::str::from_utf8(body).is_ok_and(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok());
    if is_json_media_type(env.content_type()) {
        if !valid_json() {
            return Err(QuarantineReason::new(
                ReasonCode::InvalidBody,
                "body",
                format!("must be valid JSON for content type {}", env.content_type()),
            ));
        }
        if nests_deeper_than(body, MAX_JSON_DEPTH) {
            return Err(QuarantineReason::new(
                ReasonCode::InvalidBody,
                "body",
                format!("must nest arrays and objects at most {MAX_JSON_DEPTH} levels deep"),
            ));
        }
    }
    Ok(env)
}

/// How deep a JSON body may nest arrays and objects. Every receiver must be able to parse what
/// it is given, and a pull page wraps the body in three more levels: Ruby's parser stops at 100,
/// serde_json at 128, Python's at about 1 000 (a `RecursionError`), Go's at 10 000.
pub const MAX_JSON_DEPTH: usize = 64;

/// Whether valid JSON `text` nests arrays and objects more than `max` levels deep. A scan, not
/// a parse: no recursion, whatever the input.
pub fn nests_deeper_than(text: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// `version-traceid-parentid-flags`, lowercase hex, as W3C Trace Context defines it.
fn is_traceparent(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    parts.len() >= 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && (parts[0] != "00" || parts.len() == 4)
        && hex(parts[1], 32)
        && parts[1] != "0".repeat(32)
        && hex(parts[2], 16)
        && parts[2] != "0".repeat(16)
        && hex(parts[3], 2)
}

#[cfg(test)]
mod tests;
