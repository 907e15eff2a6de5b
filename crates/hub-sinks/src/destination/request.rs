//! Parsing and validation of a subscription's `sink` as the API takes it (SPEC §2.1.1), with
//! errors that name the field (`sink.url: …`).
//!
//! A destination splits in two: the public configuration (stored in clear, shown by the API) and
//! the credentials (sealed at rest, never shown). A RabbitMQ URL's password is a credential: the
//! URL is shown without it.

use std::net::IpAddr;

use hub_core::SinkKind;
use serde_json::{Map, Value, json};
use url::Url;

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
pub(crate) const MAX_URL: usize = 2048;
/// What a request says about credentials.
#[derive(Debug, Clone, PartialEq)]
pub enum Credentials {
    /// Not mentioned: on create none, on update keep what is stored.
    Unchanged,
    /// `"credentials": null`: remove them.
    Cleared,
    Set(Value),
}

/// A validated destination.
#[derive(Debug, Clone)]
pub struct Requested {
    pub kind: SinkKind,
    /// The typed destination.
    pub typed: super::Destination,
    /// Shown by the API and stored in clear: the typed destination's own JSON.
    pub public: Value,
    pub credentials: Credentials,
}

impl Requested {
    /// Checks the validated JSON against the typed destination and keeps the typed form's JSON,
    /// so what is stored is exactly what the dispatcher will read back.
    pub(crate) fn typed(public: Value, credentials: Credentials) -> Result<Self, Invalid> {
        let typed = super::Destination::from_stored(&public).map_err(|e| Invalid::new("sink", e))?;
        Ok(Self { kind: typed.kind(), public: typed.to_stored(), typed, credentials })
    }
}

/// Whether two stored destinations connect to the same place in the same way (what a probe
/// proved). Timeouts and static headers do not count; an unreadable one never matches.
pub fn same_connection(old: &Value, new: &Value) -> bool {
    match (super::Destination::from_stored(old), super::Destination::from_stored(new)) {
        (Ok(old), Ok(new)) => old.same_connection(&new),
        _ => false,
    }
}

/// The fields of a `sink` object, read with errors that name them.
pub(crate) struct Fields<'a> {
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

    pub(crate) fn required(&self, name: &str, max: usize) -> Result<&'a str, Invalid> {
        match self.string(name, max)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(Invalid::new(&field(name), "is required")),
        }
    }
}

/// Parses a URL and applies the destination rules: allowed schemes, a host, no credentials in
/// clear (unless `allow_userinfo`), and no private address literal unless private sinks are
/// allowed. Host names are checked again when they are resolved, at delivery.
pub(crate) fn destination_url(name: &str, raw: &str, schemes: &[&str], allow_private: bool) -> Result<Url, Invalid> {
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

/// Stored credentials were given for one destination: they never follow a change of scheme, host
/// or port to another one. Such a change must carry the credentials again.
pub fn credentials_follow(stored: &Value, new: &Requested) -> Result<(), Invalid> {
    let stored = super::Destination::from_stored(stored).map_err(|e| Invalid::new("sink", e))?;
    if new.credentials != Credentials::Unchanged || stored.credential_origins() == new.typed.credential_origins() {
        return Ok(());
    }
    let field = if new.kind == SinkKind::Rabbitmq { "sink.url" } else { "sink.credentials" };
    Err(Invalid::new(
        field,
        "the destination moved to another scheme, host or port: give its credentials again (they are never sent to a new host)",
    ))
}

/// Parses a `sink` object.
pub fn parse(value: &Value, allow_private: bool) -> Result<Requested, Invalid> {
    let map = value.as_object().ok_or_else(|| Invalid::new("sink", "must be an object"))?;
    let fields = Fields { map };
    let kind = match map.get("type") {
        Some(Value::String(t)) => SinkKind::parse(t)
            .ok_or_else(|| Invalid::new("sink.type", "must be one of webhook, sqs, rabbitmq, eventbridge, pull"))?,
        _ => return Err(Invalid::new("sink.type", "is required")),
    };
    match kind {
        SinkKind::Webhook => crate::webhook::config::validate(&fields, allow_private),
        SinkKind::Sqs => crate::sqs::config::validate(&fields, allow_private),
        SinkKind::Eventbridge => crate::eventbridge::config::validate(&fields, allow_private),
        SinkKind::Rabbitmq => crate::rabbitmq::config::validate(&fields, allow_private),
        SinkKind::Pull => {
            fields.only(&[])?;
            Requested::typed(json!({"type": "pull"}), Credentials::Unchanged)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(v: Value, private: bool) -> String {
        parse(&v, private).expect_err("invalid").to_string()
    }

    #[test]
    fn webhook_rules() {
        let ok =
            parse(&json!({"type": "webhook", "url": "https://example.com/h", "headers": {"X-Team": "risk"}}), false)
                .expect("valid");
        assert_eq!(ok.public["timeout_ms"], 10_000);
        assert_eq!(ok.public["headers"]["X-Team"], "risk");
        assert!(
            err(json!({"type": "webhook", "url": "http://example.com/h"}), false)
                .starts_with("sink.url: must use https")
        );
        assert!(parse(&json!({"type": "webhook", "url": "http://127.0.0.1:9/h"}), true).is_ok());
        for url in [
            "https://127.0.0.1/h",
            "https://10.0.0.1/",
            "https://[::1]/",
            "https://169.254.169.254/",
            "https://localhost/",
        ] {
            assert!(err(json!({"type": "webhook", "url": url}), false).starts_with("sink.url:"), "{url}");
        }
        assert!(err(json!({"type": "webhook", "url": "https://u:p@example.com/"}), false).contains("credentials"));
        assert!(err(json!({"type": "webhook"}), false).starts_with("sink.url: is required"));
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "timeout_ms": 5}), false)
                .starts_with("sink.timeout_ms")
        );
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "headers": {"Authorization": "x"}}), false)
                .starts_with("sink.headers.Authorization")
        );
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "headers": {"X-Lerian-Tenant-Id": "x"}}), false)
                .starts_with("sink.headers.X-Lerian-Tenant-Id")
        );
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "queue_url": "x"}), false)
                .starts_with("sink.queue_url")
        );
        assert_eq!(ok.public["signature"], "lerian", "the original's scheme by default");
        let standard =
            parse(&json!({"type": "webhook", "url": "https://e.com", "signature": "standard-webhooks"}), false)
                .expect("valid");
        assert_eq!(standard.public["signature"], "standard-webhooks");
        assert_eq!(
            err(json!({"type": "webhook", "url": "https://e.com", "signature": "svix"}), false),
            "sink.signature: must be one of lerian, standard-webhooks"
        );
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "headers": {"Webhook-Id": "x"}}), false)
                .starts_with("sink.headers.Webhook-Id")
        );
    }

    /// Every way of writing a private address literally is refused at create, for every sink
    /// that takes a URL, not only the schemes whose hosts the URL parser reads as addresses.
    #[test]
    fn private_literals_are_refused_at_create_for_every_sink() {
        let hosts = [
            "127.0.0.1",
            "2130706433",
            "0x7f.1",
            "0177.0.0.1",
            "127.1",
            "169.254.169.254",
            "0.0.0.0",
            "user@127.0.0.1",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "10.0.0.1",
            "LOCALHOST",
            "mq.localhost",
        ];
        for host in hosts {
            let sinks = [
                json!({"type": "webhook", "url": format!("https://{host}/h")}),
                json!({"type": "rabbitmq", "url": format!("amqps://{host}:5671/vh"), "exchange": "e"}),
                json!({"type": "rabbitmq", "url": format!("amqps://hub:pw@{host}/vh"), "exchange": "e"}),
                json!({"type": "sqs", "queue_url": format!("https://{host}/123/q"), "region": "us-east-1"}),
                json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1",
                       "endpoint_url": format!("https://{host}/")}),
                json!({"type": "eventbridge", "event_bus": "b", "region": "us-east-1",
                       "endpoint_url": format!("https://{host}/")}),
            ];
            for sink in sinks {
                let refused = err(sink.clone(), false);
                assert!(refused.starts_with("sink."), "{host} in {sink}: {refused}");
                assert!(parse(&sink, true).is_ok() || host.contains('@'), "allowed when private sinks are: {sink}");
            }
        }
        // A public name or address is still accepted.
        for host in ["mq.example.com", "93.184.216.34"] {
            parse(&json!({"type": "rabbitmq", "url": format!("amqps://{host}/vh"), "exchange": "e"}), false)
                .expect(host);
        }
    }

    #[test]
    fn aws_sinks_split_credentials() {
        let d = parse(
            &json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1",
                    "credentials": {"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "wJalr"}}),
            false,
        )
        .expect("valid");
        assert!(d.public.get("credentials").is_none());
        assert!(!d.public.to_string().contains("wJalr"));
        assert!(matches!(d.credentials, Credentials::Set(_)));
        assert!(err(json!({"type": "sqs", "queue_url": "https://q", "region": "us-east-1", "credentials": {"access_key_id": "AKIAIOSFODNN7EXAMPLE"}}), false)
            .starts_with("sink.credentials.secret_access_key"));
        assert!(err(json!({"type": "sqs", "queue_url": "https://q"}), false).starts_with("sink.region"));
        assert!(err(json!({"type": "eventbridge", "region": "us-east-1"}), false).starts_with("sink.event_bus"));
        let cleared = parse(
            &json!({"type": "eventbridge", "event_bus": "default", "region": "us-east-1", "credentials": null}),
            false,
        )
        .expect("valid");
        assert_eq!(cleared.credentials, Credentials::Cleared);
    }

    #[test]
    fn rabbitmq_password_is_a_credential() {
        let d = parse(
            &json!({"type": "rabbitmq", "url": "amqps://hub:s%40cret@mq.example.com:5671/vh", "exchange": "events",
                    "routing_key": "{source}.{resource}.{event}"}),
            false,
        )
        .expect("valid");
        assert_eq!(d.public["url"], "amqps://hub@mq.example.com:5671/vh");
        assert_eq!(d.credentials, Credentials::Set(json!({"password": "s@cret"})));
        let plus = parse(
            &json!({"type": "rabbitmq", "url": "amqps://hub:a+b%2Bc@mq.example.com/vh", "exchange": "events"}),
            false,
        )
        .expect("valid");
        assert_eq!(plus.credentials, Credentials::Set(json!({"password": "a+b+c"})), "+ is not a space");
        assert!(
            err(json!({"type": "rabbitmq", "url": "amqp://mq.example.com", "exchange": "e"}), false)
                .starts_with("sink.url")
        );
        assert!(err(json!({"type": "rabbitmq", "url": "amqps://mq.example.com", "exchange": "e", "routing_key": "{tenant}"}), false)
            .starts_with("sink.routing_key"));
        assert!(err(json!({"type": "rabbitmq", "url": "amqps://mq.example.com"}), false).starts_with("sink.exchange"));
    }

    #[test]
    fn type_is_required_and_known() {
        assert!(err(json!({}), false).starts_with("sink.type: is required"));
        assert!(err(json!({"type": "ftp"}), false).starts_with("sink.type"));
        assert!(err(json!("pull"), false).starts_with("sink: must be an object"));
        assert!(err(json!({"type": "pull", "url": "x"}), false).starts_with("sink.url"));
    }
}
