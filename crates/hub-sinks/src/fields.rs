//! What every sink's configuration is made of, shared by each sink's `config.rs` and by the
//! request parser: the [`SinkConfig`] trait, the [`SinkRequest`] a `sink` object is read into
//! ([`read`], with errors that name the field: [`Invalid`]), what a request says of credentials,
//! and the rules of texts and URLs. It depends
//! on no sink, so the arrows run one way: `destination/request.rs` → each sink's `config.rs` →
//! here.

use std::net::IpAddr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use url::Url;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};

/// What every push destination's configuration answers.
pub trait SinkConfig {
    /// What identifies the destination for the breaker and the per-destination worker cap: the
    /// same URL (or queue, bus, exchange) is one destination, whichever subscription points at
    /// it.
    fn key(&self) -> String;

    /// Whether `other` connects to the same place in the same way (what a probe proved);
    /// timeouts and static headers do not count.
    fn same_connection(&self, other: &Self) -> bool
    where
        Self: Sized;

    /// The scheme, host and port of each URL the destination's credentials are sent to: stored
    /// credentials may follow a change only while these stay the same.
    fn credential_origins(&self) -> Vec<Origin> {
        Vec::new()
    }

    /// The request field its credentials are given in.
    fn credentials_field(&self) -> &'static str {
        "sink.credentials"
    }

    /// Why it cannot be reached without credentials, when it cannot: such a destination is refused
    /// at create, and at a change, without them.
    fn needs_credentials(&self) -> Option<&'static str> {
        None
    }

    /// How its deliveries are signed, when the subscription's secret signs them.
    fn signature(&self) -> Option<hub_core::signature::Scheme> {
        None
    }

    /// Whether its credentials are tokens the hub signs as an OIDC issuer.
    fn uses_hub_tokens(&self) -> bool {
        false
    }
}

/// The scheme, host and port of a URL a destination connects through.
pub type Origin = Option<(String, String, Option<u16>)>;

pub(crate) fn origin(url: Option<&str>) -> Origin {
    let url = url::Url::parse(url?).ok()?;
    Some((url.scheme().to_owned(), url.host_str()?.to_owned(), url.port_or_known_default()))
}

/// A field of the request that is not valid, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Invalid {
    pub field: String,
    pub problem: String,
}

impl Invalid {
    pub(crate) fn new(field: &str, problem: impl std::fmt::Display) -> Self {
        Self { field: field.to_owned(), problem: problem.to_string() }
    }
}

/// The longest URL a destination may have.
pub const MAX_URL: usize = 2048;
/// What a request says about credentials.
#[derive(Debug, Clone, PartialEq)]
pub enum Credentials {
    /// Not mentioned: on create none, on update keep what is stored.
    Unchanged,
    /// `"credentials": null`: remove them.
    Cleared,
    Set(Value),
}

/// A request field that `null` clears and omission leaves as stored: a destination's credentials
/// on `PATCH`. Read with `#[serde(default)]`.
#[derive(Debug, Default)]
pub enum Given<T> {
    #[default]
    Omitted,
    Null,
    Value(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Given<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(d).map(|v| v.map_or(Self::Null, Self::Value))
    }
}

/// A sink's request: its OpenAPI schema type, which the `sink` object is read into (serde, unknown
/// fields refused), turned into the configuration stored and shown and the credentials to seal by
/// the rules serde cannot say (URLs, names, one field against another).
pub trait SinkRequest: DeserializeOwned {
    type Config;

    /// The configuration and what the request says of credentials; `allow_private`: private
    /// destinations are allowed.
    fn checked(self, allow_private: bool) -> Result<(Self::Config, Credentials), Invalid>;
}

/// Reads a `sink` object (its `type` already read) into its request type, with errors that name
/// the field (`sink.auth.username: is required`) and never repeat the value given.
pub(crate) fn read<T: DeserializeOwned>(mut map: Map<String, Value>) -> Result<T, Invalid> {
    map.remove("type");
    serde_path_to_error::deserialize(Value::Object(map))
        .map_err(|e| invalid(&e.path().to_string(), &e.inner().to_string()))
}

/// Marks the path of an error found by [`shape`] inside a field, which [`read`] puts back.
const INNER: char = '\u{1}';

/// Reads one of several shapes of a field (chosen by its tag or by the fields it has) in a second
/// pass: the error keeps its path inside the field, so the field named is still the innermost.
pub(crate) fn shape<T: DeserializeOwned, E: serde::de::Error>(map: Map<String, Value>) -> Result<T, E> {
    serde_path_to_error::deserialize(Value::Object(map))
        .map_err(|e| E::custom(format_args!("{INNER}{}{INNER}{}", e.path(), e.inner())))
}

/// An error about `name`, a field inside the one being read (a tag): named as that field.
pub(crate) fn inner_error<E: serde::de::Error>(name: &str, problem: impl std::fmt::Display) -> E {
    E::custom(format_args!("{INNER}{name}{INNER}{problem}"))
}

/// Takes the `type` of a tagged object out of it: one of `names`.
pub(crate) fn tag<E: serde::de::Error>(map: &mut Map<String, Value>, names: &[&str]) -> Result<String, E> {
    match map.remove("type") {
        None | Some(Value::Null) => Err(E::missing_field("type")),
        Some(Value::String(t)) if names.contains(&t.as_str()) => Ok(t),
        Some(_) => Err(inner_error("type", format_args!("must be one of {}", names.join(", ")))),
    }
}

/// The schema of one shape of a tagged field: `shape` with its `type` (`name`) among its
/// properties and required.
pub(crate) fn tagged(name: &str, shape: RefOr<Schema>) -> RefOr<Schema> {
    let RefOr::T(Schema::Object(mut object)) = shape else { return shape };
    let tag = ObjectBuilder::new().schema_type(SchemaType::new(Type::String)).enum_values(Some([name]));
    object.properties.insert("type".to_owned(), tag.into());
    object.required.push("type".to_owned());
    RefOr::T(Schema::Object(object))
}

/// The field and problem of a serde error at `path`, in the words the API uses.
fn invalid(path: &str, message: &str) -> Invalid {
    let mut field = "sink".to_owned();
    let push = |field: &mut String, segment: &str| {
        let segment = segment.trim_start_matches('.');
        if segment.is_empty() {
            return;
        }
        if !segment.starts_with('[') {
            field.push('.');
        }
        field.push_str(segment);
    };
    push(&mut field, path);
    let mut message = message;
    while let Some(rest) = message.strip_prefix(INNER) {
        let (inner, rest) = rest.split_once(INNER).unwrap_or(("", rest));
        push(&mut field, inner);
        message = rest;
    }
    let quoted = |after: &str| message.strip_prefix(after).and_then(|m| m.split('`').next());
    if let Some(name) = quoted("missing field `") {
        push(&mut field, name);
        return Invalid::new(&field, "is required");
    }
    if let Some(name) = quoted("unknown field `") {
        if !field.ends_with(&format!(".{name}")) {
            push(&mut field, name);
        }
        return Invalid::new(&field, "is not a field of this sink type");
    }
    if message.starts_with("unknown variant `") {
        let expected = message.split_once("expected").map_or("", |(_, e)| e);
        let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        return Invalid::new(&field, format!("must be one of {}", names.join(", ")));
    }
    if message.starts_with("invalid type: null") {
        return Invalid::new(&field, "is required");
    }
    if message.starts_with("invalid type: ")
        || message.starts_with("invalid value: ")
        || message.starts_with("invalid length ")
    {
        let expected = message.rsplit_once(", expected ").map_or("", |(_, e)| e);
        let problem = match expected {
            "a string" | "string or map" | "variant identifier" => "must be a string",
            "a boolean" => "must be true or false",
            "a map" | "an object" => "must be an object",
            "a sequence" => "must be an array",
            e if e.starts_with("struct ") => "must be an object",
            e if e.len() <= 4 && (e.starts_with('u') || e.starts_with('i')) => "must be a whole number",
            _ => "has the wrong type",
        };
        return Invalid::new(&field, problem);
    }
    Invalid::new(&field, message)
}

/// A text field: at most `max` bytes, no control characters.
pub(crate) fn text<'s>(field: &str, s: &'s str, max: usize) -> Result<&'s str, Invalid> {
    if s.len() > max {
        return Err(Invalid::new(field, format!("must be at most {max} bytes")));
    }
    if s.chars().any(char::is_control) {
        return Err(Invalid::new(field, "must not contain control characters"));
    }
    Ok(s)
}

/// A required text field: as [`text`], and not blank.
pub(crate) fn required<'s>(field: &str, s: &'s str, max: usize) -> Result<&'s str, Invalid> {
    let s = text(field, s, max)?;
    if s.trim().is_empty() {
        return Err(Invalid::new(field, "is required"));
    }
    Ok(s)
}

/// A required text of lines (a PEM document): control characters but line breaks refused.
pub(crate) fn lines<'s>(field: &str, s: &'s str, max: usize) -> Result<&'s str, Invalid> {
    if s.len() > max {
        return Err(Invalid::new(field, format!("must be at most {max} bytes")));
    }
    if s.chars().any(|c| c.is_control() && c != '\n' && c != '\r') {
        return Err(Invalid::new(field, "must not contain control characters other than line breaks"));
    }
    if s.trim().is_empty() {
        return Err(Invalid::new(field, "is required"));
    }
    Ok(s)
}

/// Parses a URL and applies the destination rules: allowed schemes, a host, no credentials (a
/// URL's userinfo would be stored and shown as it is), and no private address literal unless
/// private sinks are allowed. Host names are checked again when they are resolved, at delivery.
pub(crate) fn destination_url(field: &str, raw: &str, schemes: &[&str], allow_private: bool) -> Result<Url, Invalid> {
    let url = destination_url_with_userinfo(field, raw, schemes, allow_private)?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Invalid::new(
            field,
            "must not carry credentials (user:password@); give them in the sink's credentials",
        ));
    }
    Ok(url)
}

/// [`destination_url`] for a sink that takes its URL's userinfo apart itself and seals the
/// password (RabbitMQ): the userinfo is kept.
pub(crate) fn destination_url_with_userinfo(
    f: &str,
    raw: &str,
    schemes: &[&str],
    allow_private: bool,
) -> Result<Url, Invalid> {
    let url = Url::parse(raw).map_err(|_| Invalid::new(f, "must be an absolute URL"))?;
    if !schemes.contains(&url.scheme()) {
        return Err(Invalid::new(f, format!("must use {}", schemes.join(" or "))));
    }
    let host = url.host().ok_or_else(|| Invalid::new(f, "must name a host"))?;
    if !allow_private {
        if let Some(why) = literal_ip(&host).and_then(hub_core::netpolicy::restriction) {
            return Err(Invalid::new(
                f,
                format!("points to a {} address; private destinations are not allowed", why.as_str()),
            ));
        }
        if let url::Host::Domain(d) = host {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") {
                return Err(Invalid::new(f, "points to localhost; private destinations are not allowed"));
            }
        }
    }
    Ok(url)
}

/// The address a host names literally, however it is written. For `http(s)` the URL parser has
/// already read `2130706433` or `0x7f.1` as an IPv4 address; for other schemes (`amqp`, `kafka`
/// brokers) the host is opaque text, which the system resolver would still read as an address,
/// so it is read here the way an `http` host is.
pub(crate) fn literal_ip(host: &url::Host<&str>) -> Option<IpAddr> {
    match host {
        url::Host::Ipv4(ip) => Some((*ip).into()),
        url::Host::Ipv6(ip) => Some((*ip).into()),
        url::Host::Domain(d) => match Url::parse(&format!("http://{d}/")).ok()?.host()? {
            url::Host::Ipv4(ip) => Some(ip.into()),
            url::Host::Ipv6(ip) => Some(ip.into()),
            url::Host::Domain(_) => None,
        },
    }
}
