//! What every sink's configuration is made of, shared by each sink's `config.rs` and by the
//! request parser: the [`SinkConfig`] trait, the reader of a `sink` object's fields with errors
//! that name them ([`Invalid`]), what a request says of credentials, and the URL rules. It depends
//! on no sink, so the arrows run one way: `destination/request.rs` → each sink's `config.rs` →
//! here.

use std::net::IpAddr;

use serde_json::{Map, Value};
use url::Url;

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

/// The fields of a `sink` object, read with errors that name them.
#[derive(Debug)]
pub struct Fields<'a> {
    pub(crate) map: &'a Map<String, Value>,
}

pub(crate) fn field(name: &str) -> String {
    format!("sink.{name}")
}

impl<'a> Fields<'a> {
    pub(crate) fn only(&self, allowed: &[&str]) -> Result<(), Invalid> {
        match self.map.keys().find(|k| k.as_str() != "type" && !allowed.contains(&k.as_str())) {
            Some(k) => Err(Invalid::new(&field(k), "is not a field of this sink type")),
            None => Ok(()),
        }
    }

    pub(crate) fn string(&self, name: &str, max: usize) -> Result<Option<&'a str>, Invalid> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.len() > max => {
                Err(Invalid::new(&field(name), format!("must be at most {max} bytes")))
            }
            Some(Value::String(s)) if s.chars().any(char::is_control) => {
                Err(Invalid::new(&field(name), "must not contain control characters"))
            }
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Invalid::new(&field(name), "must be a string")),
        }
    }

    /// A required text of lines (a PEM document): control characters but line breaks refused.
    pub(crate) fn lines(&self, name: &str, max: usize) -> Result<&'a str, Invalid> {
        match self.map.get(name) {
            None | Some(Value::Null) => Err(Invalid::new(&field(name), "is required")),
            Some(Value::String(s)) if s.len() > max => {
                Err(Invalid::new(&field(name), format!("must be at most {max} bytes")))
            }
            Some(Value::String(s)) if s.chars().any(|c| c.is_control() && c != '\n' && c != '\r') => {
                Err(Invalid::new(&field(name), "must not contain control characters other than line breaks"))
            }
            Some(Value::String(s)) if s.trim().is_empty() => Err(Invalid::new(&field(name), "is required")),
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(Invalid::new(&field(name), "must be a string")),
        }
    }

    pub(crate) fn required(&self, name: &str, max: usize) -> Result<&'a str, Invalid> {
        match self.string(name, max)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(Invalid::new(&field(name), "is required")),
        }
    }
}

/// Parses a URL and applies the destination rules: allowed schemes, a host, no credentials (a
/// URL's userinfo would be stored and shown as it is), and no private address literal unless
/// private sinks are allowed. Host names are checked again when they are resolved, at delivery.
pub(crate) fn destination_url(name: &str, raw: &str, schemes: &[&str], allow_private: bool) -> Result<Url, Invalid> {
    let url = destination_url_with_userinfo(name, raw, schemes, allow_private)?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Invalid::new(
            &field(name),
            "must not carry credentials (user:password@); give them in the sink's credentials",
        ));
    }
    Ok(url)
}

/// [`destination_url`] for a sink that takes its URL's userinfo apart itself and seals the
/// password (RabbitMQ): the userinfo is kept.
pub(crate) fn destination_url_with_userinfo(
    name: &str,
    raw: &str,
    schemes: &[&str],
    allow_private: bool,
) -> Result<Url, Invalid> {
    let f = field(name);
    let url = Url::parse(raw).map_err(|_| Invalid::new(&f, "must be an absolute URL"))?;
    if !schemes.contains(&url.scheme()) {
        return Err(Invalid::new(&f, format!("must use {}", schemes.join(" or "))));
    }
    let host = url.host().ok_or_else(|| Invalid::new(&f, "must name a host"))?;
    if !allow_private {
        if let Some(why) = literal_ip(&host).and_then(hub_core::netpolicy::restriction) {
            return Err(Invalid::new(
                &f,
                format!("points to a {} address; private destinations are not allowed", why.as_str()),
            ));
        }
        if let url::Host::Domain(d) = host {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") {
                return Err(Invalid::new(&f, "points to localhost; private destinations are not allowed"));
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
