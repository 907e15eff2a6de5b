//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use utoipa::openapi::schema::{OneOfBuilder, Schema};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

use crate::fields::{shape, tag, tagged};

/// A signed `POST` of each event to `url`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "webhook", "url": "https://receiver.example.com/hooks/lerian", "headers": {"X-Team": "risk"}, "timeout_ms": 5000, "signature": "lerian"}))]
pub struct WebhookSink {
    /// `https` (or `http` with private sinks allowed); no credentials in it.
    #[schema(format = Uri)]
    pub url: String,
    /// Static headers sent with every delivery (at most 20; not `Authorization`, `X-Webhook-*`,
    /// `X-Lerian-*`, `webhook-*` or transport headers).
    pub headers: Option<BTreeMap<String, String>>,
    /// 100 to 60000, default 10000.
    #[schema(minimum = 100, maximum = 60000)]
    pub timeout_ms: Option<u64>,
    /// How requests are signed: `lerian` (default; `X-Webhook-Signature`),
    /// `standard-webhooks` (`webhook-id`, `webhook-timestamp`, `webhook-signature`) or
    /// `ed25519` (the same headers, an asymmetric signature).
    pub signature: Option<Signature>,
    /// How the hub authenticates to the receiver beside the signature. Its secret
    /// (`password`, `client_secret`, `private_key_pem`) is sealed at rest and never shown;
    /// the rest is. Give it whole (secret included) on every change of the sink; a sink
    /// without it has no authentication.
    pub auth: Option<WebhookAuth>,
    /// TLS trust beyond the system's roots.
    pub tls: Option<WebhookTls>,
}

/// A webhook's authentication: one shape per `type`.
#[derive(Debug)]
pub enum WebhookAuth {
    Basic(BasicAuth),
    Oauth2ClientCredentials(Oauth2ClientCredentials),
    Mtls(MtlsAuth),
}

impl WebhookAuth {
    const TYPES: [&str; 3] = ["basic", "oauth2_client_credentials", "mtls"];
}

impl<'de> Deserialize<'de> for WebhookAuth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut map = Map::<String, Value>::deserialize(d)?;
        match tag::<D::Error>(&mut map, &Self::TYPES)?.as_str() {
            "basic" => shape(map).map(Self::Basic),
            "oauth2_client_credentials" => shape(map).map(Self::Oauth2ClientCredentials),
            _ => shape(map).map(Self::Mtls),
        }
    }
}

impl utoipa::PartialSchema for WebhookAuth {
    fn schema() -> RefOr<Schema> {
        let shapes = [BasicAuth::schema(), Oauth2ClientCredentials::schema(), MtlsAuth::schema()];
        let mut one_of = OneOfBuilder::new().description(Some("A webhook's authentication."));
        for (name, shape) in Self::TYPES.into_iter().zip(shapes) {
            one_of = one_of.item(tagged(name, shape));
        }
        one_of.into()
    }
}

impl ToSchema for WebhookAuth {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("WebhookAuth")
    }
}

/// `Authorization: Basic` (RFC 7617).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "basic", "username": "streaming-hub", "password": "secret"}))]
pub struct BasicAuth {
    /// Without `:`.
    pub username: String,
    /// Required in a request; never in an answer.
    #[schema(write_only)]
    pub password: Option<String>,
}

/// A bearer token from the token endpoint (OAuth 2.0 client credentials, RFC 6749 §4.4;
/// the client authenticates with HTTP Basic). Kept until 60 s before it expires and
/// fetched again on a `401` from the receiver; a failed fetch fails the attempt and the
/// endpoint is asked again after 10 s at the soonest.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "oauth2_client_credentials", "token_url": "https://login.bank.example/oauth2/token", "client_id": "streaming-hub", "client_secret": "secret", "scope": "webhooks:write"}))]
pub struct Oauth2ClientCredentials {
    /// `https` (or `http` with private sinks allowed); it passes the same address guard
    /// as the receiver.
    pub token_url: String,
    pub client_id: String,
    /// Required in a request; never in an answer.
    #[schema(write_only)]
    pub client_secret: Option<String>,
    pub scope: Option<String>,
    pub audience: Option<String>,
}

/// Mutual TLS: a client certificate (with its chain) and its private key (PKCS#8, PKCS#1
/// or SEC1), both PEM.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "mtls", "certificate_pem": "-----BEGIN CERTIFICATE-----\n…\n-----END CERTIFICATE-----\n", "private_key_pem": "-----BEGIN PRIVATE KEY-----\n…\n-----END PRIVATE KEY-----\n"}))]
pub struct MtlsAuth {
    /// Only `CERTIFICATE` blocks: the key goes in `private_key_pem`, which is kept sealed.
    #[schema(content_media_type = "application/x-pem-file")]
    pub certificate_pem: String,
    /// Required in a request; never in an answer.
    #[schema(write_only, content_media_type = "application/x-pem-file")]
    pub private_key_pem: Option<String>,
}

/// A webhook's TLS trust.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookTls {
    /// PEM certificates of a private CA, trusted beside the system's roots. Only `CERTIFICATE`
    /// blocks, each an X.509 certificate: any other block (a private key) is refused.
    #[schema(content_media_type = "application/x-pem-file")]
    pub ca_pem: String,
}

/// A webhook's signature scheme.
#[derive(Debug, Deserialize, ToSchema)]
pub enum Signature {
    #[serde(rename = "lerian")]
    Lerian,
    #[serde(rename = "standard-webhooks")]
    StandardWebhooks,
    /// Standard Webhooks' asymmetric scheme (`webhook-signature: v1a,<base64>`): the
    /// subscription gets a key pair, receivers verify with its public key (`whpk_…`).
    /// Cannot be changed to or from on `PATCH`.
    #[serde(rename = "ed25519")]
    Ed25519,
}
