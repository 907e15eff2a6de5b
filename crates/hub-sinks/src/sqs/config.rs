//! An SQS destination: its configuration, identity and validation.

use serde::{Deserialize, Serialize};

use crate::aws::config::{AwsAccess, aws_credentials, endpoint, region};
use crate::fields::{Credentials, Fields, Invalid, MAX_URL, Origin, SinkConfig, destination_url, origin};

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

/// Validates an SQS `sink` object.
pub(crate) fn validate(fields: &Fields<'_>, allow_private: bool) -> Result<(SqsConfig, Credentials), Invalid> {
    fields.only(&["queue_url", "region", "credentials", "endpoint_url"])?;
    let schemes: &[&str] = if allow_private { &["https", "http"] } else { &["https"] };
    let queue = destination_url("queue_url", fields.required("queue_url", MAX_URL)?, schemes, allow_private)?;
    let (access, credentials) = aws_credentials(fields)?;
    let config = SqsConfig {
        queue_url: queue.into(),
        region: region(fields)?,
        endpoint_url: endpoint(fields, allow_private)?,
        credentials: access,
    };
    Ok((config, credentials))
}
