//! Identifier newtypes: tenants, sources, event ids and event keys.
//!
//! Each type is built only by `parse` (or `TryFrom`), so a value of the type is valid by
//! construction. Three strings must never be confused: the CloudEvents `ce-type`
//! (`studio.lerian.<source>.<resource>.<event>`), the Kafka topic (`lerian.streaming.<source>`)
//! and the [`EventKey`] (`<resource>.<event>`, deliberately without the source).

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Why an identifier did not parse. The message never repeats the offending value in full, so
/// it is safe to show to the caller who sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {max} bytes (got {got})")]
    TooLong { max: usize, got: usize },
    #[error("must match {pattern}")]
    Grammar { pattern: &'static str },
    #[error("must not contain control characters")]
    ControlCharacter,
    #[error("must be a UUID")]
    NotUuid,
    #[error("must be a UUIDv7 (got version {0})")]
    NotV7(usize),
}

/// Prefix of every topic the hub consumes.
pub const TOPIC_PREFIX: &str = "lerian.streaming.";

/// True for characters the hub refuses in any header value: C0, DEL and C1 controls.
pub fn is_control(c: char) -> bool {
    c.is_control()
}

fn check_len(s: &str, max: usize) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if s.len() > max {
        return Err(IdError::TooLong { max, got: s.len() });
    }
    if s.chars().any(is_control) {
        return Err(IdError::ControlCharacter);
    }
    Ok(())
}

/// `^[a-z0-9][a-z0-9_-]*$`
fn is_segment(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// `^[A-Za-z0-9][A-Za-z0-9_-]*$`: one segment of an event key.
fn is_key_segment(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The tenant that owns an event, a subscription or an API key: `^[A-Za-z0-9][A-Za-z0-9._-]*$`
/// with no `..`, at most 256 bytes; the only source of tenant identity at ingest is the
/// `ce-tenantid` header. A tenant id becomes a path segment (an S3 key, a URL), so it can never
/// be a dot segment or hold a separator.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct TenantId(String);

impl TenantId {
    pub const MAX_LEN: usize = 256;
    pub const PATTERN: &'static str = "^[A-Za-z0-9][A-Za-z0-9._-]*$ without \"..\"";

    /// A tenant id entering the hub (an event's `ce-tenantid`, an API key's or portal session's
    /// tenant, configuration): the grammar applies.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        check_len(s, Self::MAX_LEN)?;
        let mut bytes = s.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
        let rest_ok = s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !first_ok || !rest_ok || s.contains("..") {
            return Err(IdError::Grammar { pattern: Self::PATTERN });
        }
        Ok(Self(s.to_owned()))
    }

    /// A tenant id read back from the store, which may predate the grammar: only the length and
    /// control characters are checked, so a tenant created before keeps working with its keys.
    /// New ids never come this way.
    pub fn stored(s: &str) -> Result<Self, IdError> {
        check_len(s, Self::MAX_LEN)?;
        Ok(Self(s.to_owned()))
    }

    /// Whether the id follows today's grammar (one read with [`TenantId::stored`] may not).
    pub fn follows_grammar(&self) -> bool {
        Self::parse(&self.0).is_ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TenantId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The producing application: one lowercase segment, `^[a-z0-9][a-z0-9_-]*$`, at most 223 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Source(String);

impl Source {
    pub const MAX_LEN: usize = 223;
    pub const PATTERN: &'static str = "^[a-z0-9][a-z0-9_-]*$";

    pub fn parse(s: &str) -> Result<Self, IdError> {
        check_len(s, Self::MAX_LEN)?;
        if !is_segment(s) {
            return Err(IdError::Grammar { pattern: Self::PATTERN });
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The source named by a consumed topic, `lerian.streaming.<source>`; `None` for any other topic
/// (including the `.commands` and `.dlq` topics, which the ingest pattern never matches).
pub fn topic_source(topic: &str) -> Option<&str> {
    let rest = topic.strip_prefix(TOPIC_PREFIX)?;
    (rest.len() <= Source::MAX_LEN && is_segment(rest)).then_some(rest)
}

/// A CloudEvents id: always a UUIDv7 (RFC 9562).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct CeId(Uuid);

impl CeId {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let uuid = Uuid::try_parse(s).map_err(|_| IdError::NotUuid)?;
        Self::try_from(uuid)
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl TryFrom<Uuid> for CeId {
    type Error = IdError;

    fn try_from(uuid: Uuid) -> Result<Self, IdError> {
        if uuid.get_variant() != uuid::Variant::RFC4122 {
            return Err(IdError::NotUuid);
        }
        match uuid.get_version_num() {
            7 => Ok(Self(uuid)),
            v => Err(IdError::NotV7(v)),
        }
    }
}

impl fmt::Display for CeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// The event key `<resourcetype>.<eventtype>`, e.g. `loan_application.approved`: what
/// subscriptions filter on and what `X-Lerian-Event-Type` carries. Each part is one segment,
/// `^[A-Za-z0-9][A-Za-z0-9_-]*$`, at most 128 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventKey {
    resource: String,
    event: String,
}

impl EventKey {
    pub const PART_MAX_LEN: usize = 128;
    pub const PART_PATTERN: &'static str = "^[A-Za-z0-9][A-Za-z0-9_-]*$";

    /// Checks one part (a `ce-resourcetype` or `ce-eventtype` value).
    pub fn parse_part(s: &str) -> Result<&str, IdError> {
        check_len(s, Self::PART_MAX_LEN)?;
        if !is_key_segment(s) {
            return Err(IdError::Grammar { pattern: Self::PART_PATTERN });
        }
        Ok(s)
    }

    pub fn new(resource: &str, event: &str) -> Result<Self, IdError> {
        Ok(Self { resource: Self::parse_part(resource)?.to_owned(), event: Self::parse_part(event)?.to_owned() })
    }

    /// Parses `resource.event`.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let (resource, event) = s.split_once('.').ok_or(IdError::Grammar { pattern: "<resourcetype>.<eventtype>" })?;
        Self::new(resource, event)
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn event(&self) -> &str {
        &self.event
    }
}

impl fmt::Display for EventKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.resource, self.event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_grammar() {
        for ok in ["lender", "a", "0", "a_b-c9", &"s".repeat(223)] {
            assert!(Source::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Lender", "_x", "-x", "a.b", "a b", "a\u{7}", &"s".repeat(224)] {
            assert!(Source::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topic_sources() {
        assert_eq!(topic_source("lerian.streaming.lender"), Some("lender"));
        assert_eq!(topic_source("lerian.streaming.lender.commands"), None);
        assert_eq!(topic_source("lerian.streaming.lender.dlq"), None);
        assert_eq!(topic_source("lerian.streaming."), None);
        assert_eq!(topic_source("other.lender"), None);
    }

    #[test]
    fn ce_id_versions() {
        assert!(CeId::parse("01890a5d-ac96-774b-bcce-b302099a8057").is_ok());
        assert_eq!(CeId::parse("9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a"), Err(IdError::NotV7(4)));
        assert_eq!(CeId::parse("not-a-uuid"), Err(IdError::NotUuid));
        // Version nibble 7 but NCS variant: not an RFC 9562 UUID.
        assert_eq!(CeId::parse("01890a5d-ac96-774b-0cce-b302099a8057"), Err(IdError::NotUuid));
    }

    #[test]
    fn tenant_limits() {
        assert!(TenantId::parse(&"t".repeat(256)).is_ok());
        assert!(TenantId::parse(&"t".repeat(257)).is_err());
        assert_eq!(TenantId::parse(""), Err(IdError::Empty));
        assert_eq!(TenantId::parse("a\nb"), Err(IdError::ControlCharacter));
    }

    #[test]
    fn tenant_grammar() {
        for ok in ["t1", "acme", "Acme-Bank_01", "a.b", "0", "9f1c2b7e-1d2a-4c55-9a0e-3f9e6b1c2d3e", "x.y.z"] {
            assert!(TenantId::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "../victim",
            "a/../../b",
            "..",
            ".",
            ".hidden",
            "-lead",
            "_lead",
            "a..b",
            "a/b",
            "a\\b",
            "a b",
            "a%2Fb",
            "tenant:1",
            "ténant",
            "a\u{200b}b",
            "a@b",
            "a?b",
            "a#b",
        ] {
            assert!(
                matches!(TenantId::parse(bad), Err(IdError::Grammar { .. }) | Err(IdError::ControlCharacter)),
                "{bad}"
            );
        }
        // What was stored before the grammar still reads back.
        let old = TenantId::stored("ténant one").expect("stored");
        assert!(!old.follows_grammar());
        assert!(TenantId::stored("a\nb").is_err());
    }

    #[test]
    fn event_keys() {
        let k = EventKey::parse("loan_application.approved").expect("valid key");
        assert_eq!(k.resource(), "loan_application");
        assert_eq!(k.event(), "approved");
        assert_eq!(k.to_string(), "loan_application.approved");
        for bad in ["loan", ".x", "x.", "a.b.c", "a*.b", "a b.c"] {
            assert!(EventKey::parse(bad).is_err(), "{bad}");
        }
    }
}
