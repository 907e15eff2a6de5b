//! An SQS destination: its configuration, identity and validation.

use serde::{Deserialize, Serialize};

use crate::aws::config::{AwsAccess, place};
use super::schema::SqsSink;
use crate::fields::{Credentials, Invalid, MAX_URL, Origin, SinkConfig, SinkRequest, destination_url, origin, required};

/// An SQS queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqsConfig {
    pub queue_url: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<AwsAccess>,
}

crate::aws::config::located!(SqsConfig);

impl SinkConfig for SqsConfig {
    fn uses_hub_tokens(&self) -> bool {
        self.credentials.is_some()
    }

    fn key(&self) -> String {
        format!("sqs {}", self.queue_url)
    }

    fn same_connection(&self, other: &Self) -> bool {
        (&self.queue_url, &self.region, &self.endpoint_url, &self.credentials)
            == (&other.queue_url, &other.region, &other.endpoint_url, &other.credentials)
    }

    fn credential_origins(&self) -> Vec<Origin> {
        vec![origin(Some(&self.queue_url)), origin(self.endpoint_url.as_deref())]
    }
}

impl SinkRequest for SqsSink {
    type Config = SqsConfig;

    fn checked(self, allow_private: bool) -> Result<(SqsConfig, Credentials), Invalid> {
        let schemes: &[&str] = if allow_private { &["https", "http"] } else { &["https"] };
        let queue_url = required("sink.queue_url", &self.queue_url, MAX_URL)?;
        let queue = destination_url("sink.queue_url", queue_url, schemes, allow_private)?;
        let at = place(&self.region, self.endpoint_url.as_deref(), self.credentials, allow_private)?;
        let config =
            SqsConfig { queue_url: queue.into(), region: at.region, endpoint_url: at.endpoint_url, credentials: at.access };
        Ok((config, at.credentials))
    }
}
