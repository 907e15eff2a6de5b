//! A Kafka destination: its configuration, identity and validation. The SASL password is a
//! credential (sealed, never shown); the mechanism and user name are shown.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::schema::KafkaSink;
use crate::fields::{Credentials, Given, Invalid, Origin, SinkConfig, SinkRequest, destination_url, required, text};

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = KafkaMechanism)]
pub enum Mechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 3] = [Self::Plain, Self::ScramSha256, Self::ScramSha512];

    /// The name SASL knows it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// The public half of a SASL login: the password is a credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sasl {
    pub mechanism: Mechanism,
    pub username: String,
}

/// A topic of the tenant's own Kafka cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaConfig {
    /// `host:port` of the bootstrap brokers, comma-separated.
    pub brokers: String,
    pub topic: String,
    #[serde(default)]
    pub tls: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<Sasl>,
}

impl KafkaConfig {
    /// The bootstrap brokers as `(host, port)`.
    pub fn bootstrap(&self) -> Vec<(String, u16)> {
        self.brokers.split(',').filter_map(|b| split_broker(b.trim()).ok()).collect()
    }
}

impl SinkConfig for KafkaConfig {
    fn key(&self) -> String {
        format!("kafka {} {}", self.brokers, self.topic)
    }

    fn same_connection(&self, other: &Self) -> bool {
        (&self.brokers, &self.topic, self.tls, &self.sasl) == (&other.brokers, &other.topic, other.tls, &other.sasl)
    }

    /// Every bootstrap broker, with TLS or not: the password never follows a change of either.
    fn credential_origins(&self) -> Vec<Origin> {
        let scheme = if self.tls { "kafka+ssl" } else { "kafka" };
        self.bootstrap().into_iter().map(|(host, port)| Some((scheme.to_owned(), host, Some(port)))).collect()
    }

    fn credentials_field(&self) -> &'static str {
        "sink.sasl"
    }
}

/// Bootstrap brokers a destination may list, at most.
pub const MAX_BROKERS: usize = 16;

/// Splits `host:port` (`[v6]:port` for an IPv6 literal).
fn split_broker(broker: &str) -> Result<(String, u16), &'static str> {
    let (host, port) = broker.rsplit_once(':').ok_or("must be host:port")?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or("must end with a port from 1 to 65535")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("must name a host");
    }
    Ok((host.to_owned(), port))
}

impl SinkRequest for KafkaSink {
    type Config = KafkaConfig;

    fn checked(self, allow_private: bool) -> Result<(KafkaConfig, Credentials), Invalid> {
        let raw = required("sink.brokers", &self.brokers, 2048)?;
        let mut brokers = Vec::new();
        for (i, broker) in raw.split(',').map(str::trim).enumerate() {
            let f = format!("sink.brokers[{i}]");
            let (host, port) = split_broker(broker).map_err(|why| Invalid::new(&f, why))?;
            let literal = if host.contains(':') { format!("[{host}]") } else { host.clone() };
            // The same rules as every destination's host: no private address literal, no localhost.
            destination_url(&f, &format!("kafka://{literal}:{port}"), &["kafka"], allow_private)?;
            brokers.push(format!("{literal}:{port}"));
        }
        if brokers.len() > MAX_BROKERS {
            return Err(Invalid::new("sink.brokers", format!("must list at most {MAX_BROKERS} brokers")));
        }
        let topic = required("sink.topic", &self.topic, 249)?;
        if topic == "." || topic == ".." || !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
            return Err(Invalid::new("sink.topic", "must be a Kafka topic name: letters, digits, '.', '_' and '-'"));
        }
        let tls = self.tls.unwrap_or(false);
        let (sasl, credentials) = match self.sasl {
            Given::Omitted => (None, Credentials::Unchanged),
            Given::Null => (None, Credentials::Cleared),
            Given::Value(s) => {
                let username = required("sink.sasl.username", &s.username, 255)?;
                let credentials = match s.password.as_deref().map(|p| text("sink.sasl.password", p, 1024)).transpose()? {
                    Some(p) if !p.is_empty() => Credentials::Set(json!({"password": p})),
                    _ => Credentials::Unchanged,
                };
                (Some(Sasl { mechanism: s.mechanism, username: username.to_owned() }), credentials)
            }
        };
        if sasl.is_some() && !tls && !allow_private {
            return Err(Invalid::new(
                "sink.tls",
                "must be true when sink.sasl is given: a password is never sent in clear",
            ));
        }
        Ok((KafkaConfig { brokers: brokers.join(","), topic: topic.to_owned(), tls, sasl }, credentials))
    }
}
