//! A Kinesis destination: its configuration, identity and validation.

use serde::{Deserialize, Serialize};

use crate::aws::config::{AwsAccess, aws_credentials, endpoint, region};
use crate::fields::{Credentials, Fields, Invalid, Origin, SinkConfig, origin};

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

/// Validates a Kinesis `sink` object (a stream name: 1–128 of letters, digits, `_`, `.`, `-`).
pub(crate) fn validate(fields: &Fields<'_>, allow_private: bool) -> Result<(KinesisConfig, Credentials), Invalid> {
    fields.only(&["stream_name", "region", "credentials", "endpoint_url"])?;
    let name = fields.required("stream_name", 128)?;
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
        return Err(Invalid::new("sink.stream_name", "may contain letters, digits, '_', '.' and '-'"));
    }
    let (access, credentials) = aws_credentials(fields)?;
    let config = KinesisConfig {
        stream_name: name.to_owned(),
        region: region(fields)?,
        endpoint_url: endpoint(fields, allow_private)?,
        credentials: access,
    };
    Ok((config, credentials))
}
