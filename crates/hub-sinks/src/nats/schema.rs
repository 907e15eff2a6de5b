//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::fields::{Given, shape};

/// A subject of the tenant's own NATS servers: each event one message, the body as its payload,
/// the CloudEvents attributes as `ce-*` headers. With JetStream (the default) each publish is
/// acknowledged by the stream that captures the subject and deduplicated by `Nats-Msg-Id`, the
/// event id; a subject no stream captures fails the attempt.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "nats", "servers": "tls://nats-1.example.com:4222,tls://nats-2.example.com:4222", "subject": "lerian.events", "jetstream": true, "credentials": {"token": "secret"}}))]
pub struct NatsSink {
    /// `nats://host:port` or `tls://host:port`, comma-separated (at most 16); all `tls://` when
    /// the destination has credentials.
    pub servers: String,
    /// A literal subject: tokens separated by `.`, no wildcard.
    #[schema(min_length = 1, max_length = 255)]
    pub subject: String,
    /// Default `true`.
    pub jetstream: Option<bool>,
    /// Sealed at rest and never shown; `null` removes them on `PATCH`, omitted keeps them.
    #[serde(default)]
    #[schema(value_type = Option<NatsCredentials>)]
    pub credentials: Given<NatsCredentials>,
}

/// How the hub logs in to the servers.
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum NatsCredentials {
    Token(NatsToken),
    User(NatsUser),
    Nkey(NatsNkey),
}

/// Told apart by the fields given, which must be exactly one shape's.
impl<'de> Deserialize<'de> for NatsCredentials {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        let mut given: Vec<&str> = map.keys().map(String::as_str).collect();
        given.sort_unstable();
        match given.as_slice() {
            ["token"] => shape(map).map(Self::Token),
            ["nkey_seed"] => shape(map).map(Self::Nkey),
            ["password", "username"] => shape(map).map(Self::User),
            _ => Err(serde::de::Error::custom(
                "must be {\"token\"}, {\"username\", \"password\"} or {\"nkey_seed\"}",
            )),
        }
    }
}

/// A token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsToken {
    #[schema(write_only)]
    pub token: String,
}

/// A user name and password.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsUser {
    #[schema(write_only)]
    pub username: String,
    #[schema(write_only)]
    pub password: String,
}

/// An nkey: the user's seed (`SU…`); the hub signs the server's challenge with it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsNkey {
    #[schema(write_only)]
    pub nkey_seed: String,
}
