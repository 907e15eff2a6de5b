//! An SNS destination: its configuration, identity and validation.

use serde::{Deserialize, Serialize};

use crate::aws::config::{AwsAccess, place, region};
use super::schema::SnsSink;
use crate::fields::{Credentials, Invalid, Origin, SinkConfig, SinkRequest, origin, required};

/// An SNS topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnsConfig {
    pub topic_arn: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<AwsAccess>,
}

impl SnsConfig {
    /// A FIFO topic keeps order per message group and deduplicates.
    pub fn is_fifo(&self) -> bool {
        self.topic_arn.ends_with(".fifo")
    }
}

crate::aws::config::located!(SnsConfig);

impl SinkConfig for SnsConfig {
    fn uses_hub_tokens(&self) -> bool {
        self.credentials.is_some()
    }

    fn key(&self) -> String {
        format!("sns {}", self.topic_arn)
    }

    fn same_connection(&self, other: &Self) -> bool {
        (&self.topic_arn, &self.region, &self.endpoint_url, &self.credentials)
            == (&other.topic_arn, &other.region, &other.endpoint_url, &other.credentials)
    }

    fn credential_origins(&self) -> Vec<Origin> {
        vec![origin(self.endpoint_url.as_deref())]
    }
}

impl SinkRequest for SnsSink {
    type Config = SnsConfig;

    fn checked(self, allow_private: bool) -> Result<(SnsConfig, Credentials), Invalid> {
        let arn = required("sink.topic_arn", &self.topic_arn, 1024)?;
        let region = region(&self.region)?;
        let parts: Vec<&str> = arn.split(':').collect();
        let name = parts.get(5).copied().unwrap_or_default();
        let base = name.strip_suffix(".fifo").unwrap_or(name);
        let well_formed = parts.len() == 6
            && parts[0] == "arn"
            && parts[1].starts_with("aws")
            && parts[2] == "sns"
            && parts[4].len() == 12
            && parts[4].bytes().all(|b| b.is_ascii_digit())
            && (1..=256).contains(&base.len())
            && base.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !well_formed {
            return Err(Invalid::new(
                "sink.topic_arn",
                "must be an SNS topic ARN such as arn:aws:sns:us-east-1:123456789012:events",
            ));
        }
        if parts[3] != region {
            return Err(Invalid::new(
                "sink.topic_arn",
                format!("is in region {}, not in sink.region {region}", parts[3]),
            ));
        }
        let at = place(&self.region, self.endpoint_url.as_deref(), self.credentials, allow_private)?;
        let config =
            SnsConfig { topic_arn: arn.to_owned(), region, endpoint_url: at.endpoint_url, credentials: at.access };
        Ok((config, at.credentials))
    }
}
