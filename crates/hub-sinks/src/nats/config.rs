//! A NATS destination: its configuration, identity and validation. The login (a token, a user and
//! password, or an nkey seed) is a credential: sealed, never shown.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::schema::{NatsCredentials, NatsSink};
use crate::fields::{Credentials, Given, Invalid, Origin, SinkConfig, SinkRequest, destination_url, required};

/// Servers a destination may list, at most.
pub const MAX_SERVERS: usize = 16;
/// The longest subject.
pub const MAX_SUBJECT: usize = 255;
/// NATS's own port.
pub const DEFAULT_PORT: u16 = 4222;

/// A subject of the tenant's own NATS servers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatsConfig {
    /// `nats://host:port` or `tls://host:port` (TLS), comma-separated.
    pub servers: String,
    pub subject: String,
    /// Published to a JetStream stream that acknowledges each message (deduplicated by the event
    /// id), rather than fired at core NATS.
    #[serde(default = "yes")]
    pub jetstream: bool,
}

fn yes() -> bool {
    true
}

/// One server: whether it is reached over TLS, its host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl NatsConfig {
    /// The servers, in order.
    pub fn servers(&self) -> Vec<Server> {
        self.servers.split(',').filter_map(|s| server(s.trim()).ok()).collect()
    }
}

/// Reads `nats://host:port` or `tls://host:port` (the port defaults to 4222).
fn server(raw: &str) -> Result<Server, &'static str> {
    let url = url::Url::parse(raw).map_err(|_| "must be nats://host:port or tls://host:port")?;
    let tls = match url.scheme() {
        "nats" => false,
        "tls" => true,
        _ => return Err("must be nats://host:port or tls://host:port"),
    };
    let host = url.host_str().filter(|h| !h.is_empty()).ok_or("must name a host")?;
    if url.path().trim_start_matches('/') != "" || url.query().is_some() || url.fragment().is_some() {
        return Err("must be only a scheme, a host and a port");
    }
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    Ok(Server { tls, host, port: url.port().unwrap_or(DEFAULT_PORT) })
}

impl SinkConfig for NatsConfig {
    fn key(&self) -> String {
        format!("nats {} {}", self.servers, self.subject)
    }

    fn same_connection(&self, other: &Self) -> bool {
        (&self.servers, &self.subject, self.jetstream) == (&other.servers, &other.subject, other.jetstream)
    }

    /// Every server, with TLS or not: the login never follows a change of either.
    fn credential_origins(&self) -> Vec<Origin> {
        self.servers()
            .into_iter()
            .map(|s| Some((if s.tls { "tls" } else { "nats" }.to_owned(), s.host, Some(s.port))))
            .collect()
    }
}

/// Whether `subject` is one a message can be published to: tokens of printable ASCII separated by
/// `.`, none empty, no wildcard (`*`, `>`), no white space.
pub fn valid_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.len() <= MAX_SUBJECT
        && subject.split('.').all(|token| {
            !token.is_empty() && token != "*" && token != ">" && token.bytes().all(|b| b.is_ascii_graphic())
        })
        && !subject.contains(['*', '>'])
}

impl SinkRequest for NatsSink {
    type Config = NatsConfig;

    fn checked(self, allow_private: bool) -> Result<(NatsConfig, Credentials), Invalid> {
        let raw = required("sink.servers", &self.servers, 4096)?;
        let mut servers = Vec::new();
        for (i, s) in raw.split(',').map(str::trim).enumerate() {
            let f = format!("sink.servers[{i}]");
            let parsed = server(s).map_err(|why| Invalid::new(&f, why))?;
            // The same rules as every destination's host: no private address literal, no localhost.
            let scheme = if parsed.tls { "tls" } else { "nats" };
            destination_url(&f, s, &[scheme], allow_private)?;
            let literal = if parsed.host.contains(':') { format!("[{}]", parsed.host) } else { parsed.host.clone() };
            servers.push(format!("{scheme}://{literal}:{}", parsed.port));
        }
        if servers.len() > MAX_SERVERS {
            return Err(Invalid::new("sink.servers", format!("must list at most {MAX_SERVERS} servers")));
        }
        let subject = required("sink.subject", &self.subject, MAX_SUBJECT)?;
        if !valid_subject(subject) {
            return Err(Invalid::new(
                "sink.subject",
                "must be a NATS subject: tokens of printable characters separated by '.', no wildcard ('*', '>') and no space",
            ));
        }
        let credentials = match self.credentials {
            Given::Omitted => Credentials::Unchanged,
            Given::Null => Credentials::Cleared,
            Given::Value(login) => Credentials::Set(sealed(login)?),
        };
        let login_over_plain_text =
            matches!(credentials, Credentials::Set(_)) && servers.iter().any(|s| s.starts_with("nats:"));
        if login_over_plain_text && !allow_private {
            return Err(Invalid::new(
                "sink.servers",
                "must all be tls:// when the destination has credentials (a login is never sent in clear)",
            ));
        }
        let jetstream = self.jetstream.unwrap_or(true);
        Ok((NatsConfig { servers: servers.join(","), subject: subject.to_owned(), jetstream }, credentials))
    }
}

/// What is sealed of a login: `{"token"}`, `{"username", "password"}` or `{"nkey_seed"}`.
fn sealed(login: NatsCredentials) -> Result<Value, Invalid> {
    Ok(match login {
        NatsCredentials::Token(t) => json!({"token": required("sink.credentials.token", &t.token, 4096)?}),
        NatsCredentials::Nkey(n) => {
            let seed = required("sink.credentials.nkey_seed", &n.nkey_seed, 128)?;
            super::nkey::KeyPair::from_seed(seed).map_err(|why| Invalid::new("sink.credentials.nkey_seed", why))?;
            json!({"nkey_seed": seed})
        }
        NatsCredentials::User(u) => json!({
            "username": required("sink.credentials.username", &u.username, 1024)?,
            "password": required("sink.credentials.password", &u.password, 4096)?,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_literal_nats_subjects() {
        for ok in ["orders", "lerian.events", "a.b-c.d_e", "x.$y"] {
            assert!(valid_subject(ok), "{ok}");
        }
        for bad in ["", ".", "a..b", "a.", ".a", "a.*", "a.>", "a b", "a\tb", "a.b*", "é", &"a".repeat(256)] {
            assert!(!valid_subject(bad), "{bad:?}");
        }
    }

    fn parse(v: Value, allow_private: bool) -> Result<(NatsConfig, Credentials), Invalid> {
        let map = v.as_object().expect("object").clone();
        crate::fields::read::<NatsSink>(map)?.checked(allow_private)
    }

    #[test]
    fn a_sink_is_read_with_its_login_sealed_and_bad_fields_named() {
        let seed = super::super::nkey::KeyPair::seed_of(&[1; 32]);
        let (config, credentials) = parse(
            json!({"type": "nats", "servers": "tls://n1.example.com, tls://n2.example.com:7422", "subject": "lerian.events",
                   "credentials": {"nkey_seed": seed}}),
            false,
        )
        .expect("valid");
        assert_eq!(config.servers, "tls://n1.example.com:4222,tls://n2.example.com:7422");
        assert!(config.jetstream, "JetStream unless said otherwise");
        assert_eq!(credentials, Credentials::Set(json!({"nkey_seed": seed})));
        assert!(!serde_json::to_string(&config).expect("json").contains(&seed), "the seed is not in the public part");
        for (sink, field) in [
            (json!({"servers": "nats://n.example.com", "subject": "a.*"}), "sink.subject"),
            (json!({"servers": "http://n.example.com", "subject": "a"}), "sink.servers[0]"),
            (json!({"servers": "nats://127.0.0.1", "subject": "a"}), "sink.servers[0]"),
            (json!({"servers": "nats://u:p@n.example.com", "subject": "a"}), "sink.servers[0]"),
            (json!({"servers": "nats://n.example.com", "subject": "a", "jetstream": "yes"}), "sink.jetstream"),
            (json!({"servers": "nats://n.example.com", "subject": "a", "credentials": {"token": "t"}}), "sink.servers"),
            (json!({"servers": "tls://n.example.com", "subject": "a", "credentials": {"token": "t", "username": "u"}}), "sink.credentials"),
            (json!({"servers": "tls://n.example.com", "subject": "a", "credentials": {"username": "u"}}), "sink.credentials"),
            (json!({"servers": "tls://n.example.com", "subject": "a", "credentials": {"nkey_seed": "SUAAAA"}}), "sink.credentials.nkey_seed"),
            (json!({"servers": "tls://n.example.com", "subject": "a", "extra": 1}), "sink.extra"),
        ] {
            let err = parse(sink.clone(), false).expect_err(&sink.to_string());
            assert_eq!(err.field, field, "{sink}: {err}");
        }
        let many = (0..17).map(|i| format!("nats://n{i}.example.com")).collect::<Vec<_>>().join(",");
        assert_eq!(parse(json!({"servers": many, "subject": "a"}), false).expect_err("many").field, "sink.servers");
        // With private sinks allowed a login may go to a plain-text server on the operator's network.
        assert!(parse(json!({"servers": "nats://127.0.0.1:4222", "subject": "a", "credentials": {"token": "t"}}), true).is_ok());
    }

    #[test]
    fn servers_are_nats_or_tls_urls_with_a_default_port() {
        assert_eq!(server("nats://n.example").unwrap(), Server { tls: false, host: "n.example".into(), port: 4222 });
        assert_eq!(server("tls://n.example:7422").unwrap(), Server { tls: true, host: "n.example".into(), port: 7422 });
        assert_eq!(server("tls://[2001:db8::1]:7422").unwrap().host, "2001:db8::1");
        for bad in ["n.example:4222", "http://n.example", "nats://", "nats://n.example/x", "nats://n.example?q=1"] {
            assert!(server(bad).is_err(), "{bad}");
        }
    }
}
