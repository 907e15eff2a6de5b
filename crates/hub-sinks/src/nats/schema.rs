//! What the API takes for this sink (its OpenAPI schema): read by the registry, checked against the
//! parse by the tests that create a subscription from each schema's example.
#![allow(dead_code)]

use serde::Deserialize;
use utoipa::ToSchema;

/// A subject of the tenant's own NATS servers: each event one message, the body as its payload,
/// the CloudEvents attributes as `ce-*` headers. With JetStream (the default) each publish is
/// acknowledged by the stream that captures the subject and deduplicated by `Nats-Msg-Id`, the
/// event id; a subject no stream captures fails the attempt.
#[derive(Debug, Deserialize, ToSchema)]
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
    pub credentials: Option<NatsCredentials>,
}

/// How the hub logs in to the servers.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum NatsCredentials {
    Token(NatsToken),
    User(NatsUser),
    Nkey(NatsNkey),
}

/// A token.
#[derive(Debug, Deserialize, ToSchema)]
pub struct NatsToken {
    #[schema(write_only)]
    pub token: String,
}

/// A user name and password.
#[derive(Debug, Deserialize, ToSchema)]
pub struct NatsUser {
    #[schema(write_only)]
    pub username: String,
    #[schema(write_only)]
    pub password: String,
}

/// An nkey: the user's seed (`SU…`); the hub signs the server's challenge with it.
#[derive(Debug, Deserialize, ToSchema)]
pub struct NatsNkey {
    #[schema(write_only)]
    pub nkey_seed: String,
}
