//! A RabbitMQ destination: its configuration, identity and validation.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::schema::RabbitmqSink;
use crate::fields::{
    Credentials, Invalid, MAX_URL, Origin, SinkConfig, SinkRequest, destination_url_with_userinfo, origin, required, text,
};

/// A RabbitMQ exchange; the URL never holds the password (a credential, kept sealed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RabbitConfig {
    pub url: String,
    pub exchange: String,
    #[serde(default)]
    pub routing_key: String,
}

impl SinkConfig for RabbitConfig {
    fn key(&self) -> String {
        format!("rabbitmq {} {}", self.url, self.exchange)
    }

    fn same_connection(&self, other: &Self) -> bool {
        (&self.url, &self.exchange, &self.routing_key) == (&other.url, &other.exchange, &other.routing_key)
    }

    fn credential_origins(&self) -> Vec<Origin> {
        vec![origin(Some(&self.url))]
    }

    /// The password travels in the URL.
    fn credentials_field(&self) -> &'static str {
        "sink.url"
    }
}

/// The routing-key placeholders a RabbitMQ sink may use.
pub const ROUTING_PLACEHOLDERS: [&str; 3] = ["{resource}", "{event}", "{source}"];

impl SinkRequest for RabbitmqSink {
    type Config = RabbitConfig;

    fn checked(self, allow_private: bool) -> Result<(RabbitConfig, Credentials), Invalid> {
        let schemes: &[&str] = if allow_private { &["amqps", "amqp"] } else { &["amqps"] };
        let raw = required("sink.url", &self.url, MAX_URL)?;
        let mut url = destination_url_with_userinfo("sink.url", raw, schemes, allow_private)?;
        let credentials = match url.password() {
            Some(p) => {
                let password = urlencoding_decode(p);
                Credentials::Set(json!({"password": password}))
            }
            None => Credentials::Unchanged,
        };
        let _ = url.set_password(None);
        let exchange = text("sink.exchange", &self.exchange, 255)?;
        if !exchange.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b)) {
            return Err(Invalid::new("sink.exchange", "may contain letters, digits, '_', '.', ':' and '-'"));
        }
        let routing_key = self.routing_key.as_deref().map(|k| text("sink.routing_key", k, 255)).transpose()?;
        let routing_key = routing_key.unwrap_or_default();
        let mut rest = routing_key.to_owned();
        for p in ROUTING_PLACEHOLDERS {
            rest = rest.replace(p, "");
        }
        if rest.contains('{') || rest.contains('}') {
            return Err(Invalid::new(
                "sink.routing_key",
                "may only use the placeholders {resource}, {event} and {source}",
            ));
        }
        let config =
            RabbitConfig { url: url.into(), exchange: exchange.to_owned(), routing_key: routing_key.to_owned() };
        Ok((config, credentials))
    }
}

/// A URL's userinfo part as its owner meant it: percent-decoded (`%2B` is `+`, and `+` stays
/// `+`, unlike form decoding, which would make it a space).
fn urlencoding_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}
