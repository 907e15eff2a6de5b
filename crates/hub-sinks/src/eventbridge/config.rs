//! An EventBridge destination: its configuration, identity and validation.

use serde::{Deserialize, Serialize};

use crate::aws::config::{AwsAccess, place};
use super::schema::EventbridgeSink;
use crate::fields::{Credentials, Invalid, Origin, SinkConfig, SinkRequest, origin, required};

/// An EventBridge bus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventBridgeConfig {
    pub event_bus: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<AwsAccess>,
}

crate::aws::config::located!(EventBridgeConfig);

impl SinkConfig for EventBridgeConfig {
    fn uses_hub_tokens(&self) -> bool {
        self.credentials.is_some()
    }

    fn key(&self) -> String {
        format!("eventbridge {} {}", self.region, self.event_bus)
    }

    fn same_connection(&self, other: &Self) -> bool {
        (&self.event_bus, &self.region, &self.endpoint_url, &self.credentials)
            == (&other.event_bus, &other.region, &other.endpoint_url, &other.credentials)
    }

    fn credential_origins(&self) -> Vec<Origin> {
        vec![origin(self.endpoint_url.as_deref())]
    }
}

impl SinkRequest for EventbridgeSink {
    type Config = EventBridgeConfig;

    fn checked(self, allow_private: bool) -> Result<(EventBridgeConfig, Credentials), Invalid> {
        let bus = required("sink.event_bus", &self.event_bus, 1600)?;
        if !bus.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/:".contains(&b)) {
            return Err(Invalid::new("sink.event_bus", "must be an event bus name or ARN"));
        }
        let at = place(&self.region, self.endpoint_url.as_deref(), self.credentials, allow_private)?;
        let config = EventBridgeConfig {
            event_bus: bus.to_owned(),
            region: at.region,
            endpoint_url: at.endpoint_url,
            credentials: at.access,
        };
        Ok((config, at.credentials))
    }
}
