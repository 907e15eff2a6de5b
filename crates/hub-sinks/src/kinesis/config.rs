//! A Kinesis destination: its configuration, identity and validation.

use serde::{Deserialize, Serialize};

use crate::aws::config::{AwsAccess, place};
use super::schema::KinesisSink;
use crate::fields::{Credentials, Invalid, Origin, SinkConfig, SinkRequest, origin, required};

/// A Kinesis data stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KinesisConfig {
    pub stream_name: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<AwsAccess>,
}

crate::aws::config::located!(KinesisConfig);

impl SinkConfig for KinesisConfig {
    fn uses_hub_tokens(&self) -> bool {
        self.credentials.is_some()
    }

    fn key(&self) -> String {
        format!("kinesis {} {}", self.region, self.stream_name)
    }

    fn same_connection(&self, other: &Self) -> bool {
        (&self.stream_name, &self.region, &self.endpoint_url, &self.credentials)
            == (&other.stream_name, &other.region, &other.endpoint_url, &other.credentials)
    }

    fn credential_origins(&self) -> Vec<Origin> {
        vec![origin(self.endpoint_url.as_deref())]
    }
}

impl SinkRequest for KinesisSink {
    type Config = KinesisConfig;

    fn checked(self, allow_private: bool) -> Result<(KinesisConfig, Credentials), Invalid> {
        let name = required("sink.stream_name", &self.stream_name, 128)?;
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
            return Err(Invalid::new("sink.stream_name", "may contain letters, digits, '_', '.' and '-'"));
        }
        let at = place(&self.region, self.endpoint_url.as_deref(), self.credentials, allow_private)?;
        let config = KinesisConfig {
            stream_name: name.to_owned(),
            region: at.region,
            endpoint_url: at.endpoint_url,
            credentials: at.access,
        };
        Ok((config, at.credentials))
    }
}
