//! One sink for every AWS service: the part they share (a client per endpoint and credentials,
//! the target's endpoint from the destination and its sealed secrets, the attempt's timeout, the
//! outcome of one request) is here once, and each service (`sqs/`, `sns/`, `eventbridge/`,
//! `kinesis/`, `s3/`) says only what is its own: its configuration, its target and its request
//! ([`Service`]).

use std::marker::PhantomData;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use uuid::Uuid;

use super::config::AwsAccess;
use super::{AwsEndpoint, AwsSettings, Clients};
use crate::message::Message;
use crate::sink::{Failure, Outcome, Probed, Secrets, Settings, TypedSink};

/// Where a destination of an AWS service is: the fields every AWS sink's configuration has.
pub trait Located {
    fn region(&self) -> &str;
    /// Another endpoint than AWS's own for the region.
    fn endpoint_url(&self) -> Option<&str>;
    /// A role to assume with the hub's own token, in place of sealed keys.
    fn access(&self) -> Option<&AwsAccess>;
}

/// What an AWS service's sink adds to [`AwsSink`]: its name and configuration (as
/// [`TypedSink`] has them), its target, its SDK client, and the one request an attempt or a
/// verification makes.
#[async_trait]
pub trait Service: Send + Sync + 'static {
    const NAME: &'static str;
    const SUMMARY: &'static str;
    type Config: crate::fields::SinkConfig
        + Located
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + PartialEq
        + Eq
        + std::fmt::Debug
        + Send
        + Sync;
    type Request: utoipa::ToSchema + crate::fields::SinkRequest<Config = Self::Config>;
    /// The destination with its endpoint opened.
    type Target: Send + Sync;
    /// The service's SDK client.
    type Client: Clone + Send + Sync + 'static;

    /// Its SDK's client on `config` (as `aws_sdk_<service>::Client::new`), for `endpoint` (one
    /// client serves one endpoint).
    fn client(config: &SdkConfig, endpoint: &AwsEndpoint) -> Self::Client;

    /// The target of a destination at `endpoint`.
    fn target(config: &Self::Config, endpoint: AwsEndpoint) -> Self::Target;

    /// Where the target's client connects.
    fn endpoint(target: &Self::Target) -> &AwsEndpoint;

    /// The one request of an attempt.
    async fn send(client: &Self::Client, target: &Self::Target, message: &Message<'_>) -> Result<(), Failure>;

    /// The one request of a verification.
    async fn verify(
        client: &Self::Client,
        target: &Self::Target,
        tenant: &str,
        subscription: Uuid,
    ) -> Result<(), Failure>;
}

/// The sink of an AWS service: one client per endpoint and credentials, reused.
pub struct AwsSink<S: Service> {
    clients: Clients<S::Client>,
    service: PhantomData<S>,
}

impl<S: Service> std::fmt::Debug for AwsSink<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSink").field("service", &S::NAME).finish_non_exhaustive()
    }
}

impl<S: Service> AwsSink<S> {
    pub fn new(settings: AwsSettings) -> Self {
        Self { clients: Clients::new(settings), service: PhantomData }
    }

    async fn client(&self, target: &S::Target) -> Result<S::Client, Failure> {
        let endpoint = S::endpoint(target);
        self.clients.get(endpoint, |sdk| S::client(sdk, endpoint)).await
    }
}

#[async_trait]
impl<S: Service> TypedSink for AwsSink<S> {
    const NAME: &'static str = S::NAME;
    const SUMMARY: &'static str = S::SUMMARY;
    type Config = S::Config;
    type Request = S::Request;
    type Target = S::Target;

    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.into()))
    }

    fn target(&self, config: &S::Config, secrets: &Secrets, max_timeout: Duration) -> Result<S::Target, Failure> {
        let timeout = crate::sink::BROKER_TIMEOUT.min(max_timeout);
        let endpoint =
            self.clients.settings.endpoint(config.region(), config.endpoint_url(), config.access(), secrets, timeout);
        Ok(S::target(config, endpoint))
    }

    async fn attempt(&self, target: &S::Target, message: &Message<'_>) -> Outcome {
        let sent = match self.client(target).await {
            Ok(client) => S::send(&client, target, message).await,
            Err(failure) => Err(failure),
        };
        match sent {
            Ok(()) => Outcome::Delivered { status: None, response: None, stalled: false },
            Err(failure) => Outcome::Failed(failure),
        }
    }

    async fn check(&self, target: &S::Target, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let client = self.client(target).await?;
        S::verify(&client, target, tenant, subscription_id).await.map(|()| Probed::default())
    }
}
