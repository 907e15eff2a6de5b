//! The API's view of a subscription's `sink`: `hub_sinks::destination::request` validates it,
//! and its errors become the API's `422` naming the field.

pub use hub_sinks::destination::request::{Credentials, Requested as Destination, same_connection};
use serde_json::Value;

use super::error::ApiError;

fn invalid(e: hub_sinks::destination::request::Invalid) -> ApiError {
    ApiError::validation(&e.field, e.problem)
}

/// Parses and validates a `sink` object: a role assumed with the hub's token needs the hub to
/// be an OIDC issuer.
pub fn parse(value: &Value, state: &super::AppState) -> Result<Destination, ApiError> {
    let dest = hub_sinks::destination::request::parse(value, state.allow_private_sinks).map_err(invalid)?;
    if dest.typed.web_identity().is_some() && state.issuer.is_none() {
        return Err(ApiError::validation(
            "sink.credentials.web_identity",
            "this hub is not an OIDC issuer (STREAMING_HUB_OIDC_ISSUER): give keys, or ask the operator to make it one",
        ));
    }
    Ok(dest)
}

/// Stored credentials never follow a destination to another scheme, host or port.
pub fn credentials_follow(stored: &Value, new: &Destination) -> Result<(), ApiError> {
    hub_sinks::destination::request::credentials_follow(stored, new).map_err(invalid)
}

/// The OpenAPI description of a `sink`, one schema per sink type (`type` is the discriminator).
/// Requests are validated by `hub_sinks::destination::request`; the tests create a subscription
/// from each schema's example, so the two cannot drift apart unseen.
pub mod schema {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use utoipa::ToSchema;

    /// Where a subscription's events go.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(tag = "type", rename_all = "lowercase")]
    #[allow(dead_code)]
    pub enum Sink {
        Webhook(WebhookSink),
        Sqs(SqsSink),
        Rabbitmq(RabbitmqSink),
        Eventbridge(EventbridgeSink),
        Kafka(KafkaSink),
        Sns(SnsSink),
        Kinesis(KinesisSink),
        S3(S3Sink),
        Pull(PullSink),
    }

    /// A signed `POST` of each event to `url`.
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "webhook", "url": "https://receiver.example.com/hooks/lerian", "headers": {"X-Team": "risk"}, "timeout_ms": 5000, "signature": "lerian"}))]
    #[allow(dead_code)]
    pub struct WebhookSink {
        /// `https` (or `http` with private sinks allowed); no credentials in it.
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

    /// A webhook's authentication.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(tag = "type", rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum WebhookAuth {
        /// `Authorization: Basic` (RFC 7617).
        #[schema(example = json!({"type": "basic", "username": "streaming-hub", "password": "secret"}))]
        Basic {
            /// Without `:`.
            username: String,
            /// Required in a request; never in an answer.
            #[schema(write_only)]
            password: Option<String>,
        },
        /// A bearer token from the token endpoint (OAuth 2.0 client credentials, RFC 6749 §4.4;
        /// the client authenticates with HTTP Basic). Kept until 60 s before it expires and
        /// fetched again on a `401` from the receiver; a failed fetch fails the attempt and the
        /// endpoint is asked again after 10 s at the soonest.
        #[serde(rename = "oauth2_client_credentials")]
        #[schema(example = json!({"type": "oauth2_client_credentials", "token_url": "https://login.bank.example/oauth2/token", "client_id": "streaming-hub", "client_secret": "secret", "scope": "webhooks:write"}))]
        Oauth2ClientCredentials {
            /// `https` (or `http` with private sinks allowed); it passes the same address guard
            /// as the receiver.
            token_url: String,
            client_id: String,
            /// Required in a request; never in an answer.
            #[schema(write_only)]
            client_secret: Option<String>,
            scope: Option<String>,
            audience: Option<String>,
        },
        /// Mutual TLS: a client certificate (with its chain) and its private key (PKCS#8, PKCS#1
        /// or SEC1), both PEM.
        #[schema(example = json!({"type": "mtls", "certificate_pem": "-----BEGIN CERTIFICATE-----\n…\n-----END CERTIFICATE-----\n", "private_key_pem": "-----BEGIN PRIVATE KEY-----\n…\n-----END PRIVATE KEY-----\n"}))]
        Mtls {
            certificate_pem: String,
            /// Required in a request; never in an answer.
            #[schema(write_only)]
            private_key_pem: Option<String>,
        },
    }

    /// A webhook's TLS trust.
    #[derive(Debug, Deserialize, ToSchema)]
    #[allow(dead_code)]
    pub struct WebhookTls {
        /// PEM certificates of a private CA, trusted beside the system's roots.
        pub ca_pem: String,
    }

    /// A webhook's signature scheme.
    #[derive(Debug, Deserialize, ToSchema)]
    #[allow(dead_code)]
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

    /// An AWS destination's credentials: keys (sealed at rest and never shown), or a role the
    /// hub assumes with its own OIDC token (shown; no key stored). Omit them to use the hub's own.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(untagged)]
    #[allow(dead_code)]
    pub enum AwsCredentials {
        Keys(AwsKeys),
        WebIdentity(AwsWebIdentityCredentials),
    }

    /// Static AWS keys, sealed at rest and never shown.
    #[derive(Debug, Deserialize, ToSchema)]
    #[allow(dead_code)]
    pub struct AwsKeys {
        pub access_key_id: String,
        pub secret_access_key: String,
        pub session_token: Option<String>,
    }

    /// Keyless: the hub signs a short-lived token as an OIDC issuer (`STREAMING_HUB_OIDC_ISSUER`)
    /// and calls `AssumeRoleWithWebIdentity` for the role's credentials. The role's trust policy
    /// names the hub's issuer, the audience `sts.amazonaws.com` and the subject
    /// `tenant:<tenant>:subscription:<id>` (docs/SINKS.md).
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"web_identity": {"role_arn": "arn:aws:iam::123456789012:role/streaming-hub-delivery"}}))]
    #[allow(dead_code)]
    pub struct AwsWebIdentityCredentials {
        pub web_identity: AwsWebIdentity,
    }

    /// The role to assume.
    #[derive(Debug, Deserialize, ToSchema)]
    #[allow(dead_code)]
    pub struct AwsWebIdentity {
        /// An IAM role ARN.
        #[schema(example = "arn:aws:iam::123456789012:role/streaming-hub-delivery")]
        pub role_arn: String,
        /// 2 to 64 of letters, digits and `+=,.@_-`; default `streaming-hub-<subscription id>`.
        #[schema(min_length = 2, max_length = 64, pattern = "^[A-Za-z0-9+=,.@_-]+$")]
        pub session_name: Option<String>,
    }

    /// An SQS queue; FIFO queues get a message group and deduplication id.
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/lerian-events", "region": "us-east-1"}))]
    #[allow(dead_code)]
    pub struct SqsSink {
        pub queue_url: String,
        pub region: String,
        /// Another SQS-compatible endpoint.
        pub endpoint_url: Option<String>,
        /// `null` removes stored credentials on `PATCH`; omitted keeps them.
        pub credentials: Option<AwsCredentials>,
    }

    /// A RabbitMQ exchange; the password in `url` is sealed at rest and removed from the shown URL.
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "rabbitmq", "url": "amqps://hub:secret@mq.example.com/vhost", "exchange": "lerian.events", "routing_key": "{resource}.{event}"}))]
    #[allow(dead_code)]
    pub struct RabbitmqSink {
        /// `amqps` (or `amqp` with private sinks allowed).
        pub url: String,
        pub exchange: String,
        /// May use `{resource}`, `{event}` and `{source}`.
        pub routing_key: Option<String>,
    }

    /// An EventBridge bus.
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "eventbridge", "event_bus": "lerian-bus", "region": "us-east-1"}))]
    #[allow(dead_code)]
    pub struct EventbridgeSink {
        /// A bus name or ARN.
        pub event_bus: String,
        pub region: String,
        pub endpoint_url: Option<String>,
        pub credentials: Option<AwsCredentials>,
    }

    /// A topic of the tenant's own Kafka cluster, written with the CloudEvents Kafka binding in
    /// binary mode (`ce_*` headers, the body as the value, `content-type`); the record key is the
    /// `partitionkey`, else the `subject`, else the tenant. Acknowledged by every in-sync replica,
    /// through an idempotent producer.
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "kafka", "brokers": "kafka-1.example.com:9093,kafka-2.example.com:9093", "topic": "lerian.events", "tls": true, "sasl": {"mechanism": "SCRAM-SHA-512", "username": "hub", "password": "secret"}}))]
    #[allow(dead_code)]
    pub struct KafkaSink {
        /// Bootstrap brokers, `host:port`, comma-separated (at most 16).
        pub brokers: String,
        /// 1 to 249 letters, digits, `.`, `_` and `-`; it must exist (it is never created).
        #[schema(min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")]
        pub topic: String,
        /// TLS to every broker (required with `sasl` unless private sinks are allowed).
        pub tls: Option<bool>,
        /// `null` removes the login on `PATCH`; omitted keeps it.
        pub sasl: Option<KafkaSasl>,
    }

    /// A SASL login; the password is sealed at rest and never shown.
    #[derive(Debug, Deserialize, ToSchema)]
    #[allow(dead_code)]
    pub struct KafkaSasl {
        pub mechanism: KafkaMechanism,
        #[schema(min_length = 1, max_length = 255)]
        pub username: String,
        /// Omitted on `PATCH` keeps the stored one.
        pub password: Option<String>,
    }

    /// A SASL mechanism.
    #[derive(Debug, Deserialize, ToSchema)]
    #[allow(dead_code)]
    pub enum KafkaMechanism {
        #[serde(rename = "PLAIN")]
        Plain,
        #[serde(rename = "SCRAM-SHA-256")]
        ScramSha256,
        #[serde(rename = "SCRAM-SHA-512")]
        ScramSha512,
    }

    /// An SNS topic: the body is the message, the `ce-*` attributes message attributes (as for
    /// SQS); FIFO topics get a message group (the ordering key, else the tenant) and deduplication
    /// id (the event id).
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:lerian-events", "region": "us-east-1"}))]
    #[allow(dead_code)]
    pub struct SnsSink {
        /// In the region given.
        pub topic_arn: String,
        pub region: String,
        pub endpoint_url: Option<String>,
        pub credentials: Option<AwsCredentials>,
    }

    /// A Kinesis data stream: each event one record, the CloudEvent in structured JSON, its
    /// partition key the event's `partitionkey`, else its `subject`, else the tenant.
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "kinesis", "stream_name": "lerian-events", "region": "us-east-1"}))]
    #[allow(dead_code)]
    pub struct KinesisSink {
        #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._-]+$")]
        pub stream_name: String,
        pub region: String,
        pub endpoint_url: Option<String>,
        pub credentials: Option<AwsCredentials>,
    }

    /// An S3 bucket: each event one object,
    /// `<prefix><tenant>/<resourcetype>.<eventtype>/<yyyy>/<mm>/<dd>/<ce-id>.json` (the event's
    /// day in UTC), the CloudEvent in structured JSON (`application/cloudevents+json`); a repeated
    /// delivery overwrites the same object.
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "s3", "bucket": "lerian-archive", "prefix": "events/", "region": "us-east-1"}))]
    #[allow(dead_code)]
    pub struct S3Sink {
        #[schema(min_length = 3, max_length = 63)]
        pub bucket: String,
        /// At most 512 bytes, not beginning with `/`; default empty.
        #[schema(max_length = 512)]
        pub prefix: Option<String>,
        pub region: String,
        pub endpoint_url: Option<String>,
        pub credentials: Option<AwsCredentials>,
    }

    /// Events kept for `GET /v1/subscriptions/{id}/events` behind a durable cursor.
    #[derive(Debug, Deserialize, ToSchema)]
    #[schema(example = json!({"type": "pull"}))]
    pub struct PullSink {}
}
