//! An S3 destination: its configuration, identity and validation.

use serde::{Deserialize, Serialize};

use crate::aws::config::{AwsAccess, place};
use super::schema::S3Sink;
use crate::fields::{Credentials, Invalid, Origin, SinkConfig, SinkRequest, origin, required, text};

/// An S3 bucket, with the prefix every object key starts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct S3Config {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<AwsAccess>,
}

crate::aws::config::located!(S3Config);

impl SinkConfig for S3Config {
    fn uses_hub_tokens(&self) -> bool {
        self.credentials.is_some()
    }

    fn key(&self) -> String {
        format!("s3 {} {}", self.region, self.bucket)
    }

    fn same_connection(&self, other: &Self) -> bool {
        (&self.bucket, &self.region, &self.endpoint_url, &self.credentials)
            == (&other.bucket, &other.region, &other.endpoint_url, &other.credentials)
    }

    fn credential_origins(&self) -> Vec<Origin> {
        vec![origin(self.endpoint_url.as_deref())]
    }
}

/// The longest prefix: object keys are at most 1 024 bytes, and the rest of one needs room.
pub const MAX_PREFIX: usize = 512;

impl SinkRequest for S3Sink {
    type Config = S3Config;

    fn checked(self, allow_private: bool) -> Result<(S3Config, Credentials), Invalid> {
        let bucket = required("sink.bucket", &self.bucket, 63)?;
        let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let valid = bucket.len() >= 3
            && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && edge(bucket.as_bytes().first())
            && edge(bucket.as_bytes().last())
            && !bucket.contains("..")
            && bucket.parse::<std::net::Ipv4Addr>().is_err();
        if !valid {
            return Err(Invalid::new(
                "sink.bucket",
                "must be an S3 bucket name: 3 to 63 lower-case letters, digits, '.' and '-', beginning and ending with a letter or digit",
            ));
        }
        let prefix = self.prefix.as_deref().map(|p| text("sink.prefix", p, MAX_PREFIX)).transpose()?.unwrap_or_default();
        if prefix.starts_with('/') {
            return Err(Invalid::new("sink.prefix", "must not begin with '/'"));
        }
        let at = place(&self.region, self.endpoint_url.as_deref(), self.credentials, allow_private)?;
        let config = S3Config {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            region: at.region,
            endpoint_url: at.endpoint_url,
            credentials: at.access,
        };
        Ok((config, at.credentials))
    }
}
