//! A Google Cloud Pub/Sub destination: its configuration, identity and validation. The service
//! account key (`credentials_json`) is a credential: sealed, never shown.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::schema::PubsubSink;
use crate::fields::{
    Credentials, Given, Invalid, MAX_URL, Origin, SinkConfig, SinkRequest, destination_url, origin, required, text,
};

/// Pub/Sub's own endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://pubsub.googleapis.com";

/// A topic of the tenant's own Google Cloud project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PubSubConfig {
    pub project: String,
    pub topic: String,
    /// Another Pub/Sub endpoint (an emulator, a regional or private endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
}

impl PubSubConfig {
    /// `projects/<project>/topics/<topic>`.
    pub fn topic_name(&self) -> String {
        format!("projects/{}/topics/{}", self.project, self.topic)
    }

    /// Where the publisher connects.
    pub fn endpoint(&self) -> &str {
        self.endpoint_url.as_deref().unwrap_or(DEFAULT_ENDPOINT)
    }
}

impl SinkConfig for PubSubConfig {
    fn key(&self) -> String {
        format!("pubsub {} {}", self.endpoint(), self.topic_name())
    }

    fn same_connection(&self, other: &Self) -> bool {
        self == other
    }

    /// The key signs tokens for the endpoint: it never follows a change of it.
    fn credential_origins(&self) -> Vec<Origin> {
        vec![origin(Some(self.endpoint()))]
    }

    fn credentials_field(&self) -> &'static str {
        "sink.credentials_json"
    }

    /// Google's endpoints take no request without a token; an emulator's endpoint may.
    fn needs_credentials(&self) -> Option<&'static str> {
        let host = url::Url::parse(self.endpoint()).ok()?.host_str()?.to_ascii_lowercase();
        (host == "googleapis.com" || host.ends_with(".googleapis.com"))
            .then_some("Google's Pub/Sub endpoints take no publish without a service account key")
    }
}

/// A project id: 6 to 30 of lower-case letters, digits and `-`, starting with a letter, not ending
/// with `-`.
fn valid_project(p: &str) -> bool {
    (6..=30).contains(&p.len())
        && p.starts_with(|c: char| c.is_ascii_lowercase())
        && !p.ends_with('-')
        && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A topic id: 3 to 255 of letters, digits and `-_.~+%`, starting with a letter, not `goog…`.
fn valid_topic(t: &str) -> bool {
    (3..=255).contains(&t.len())
        && t.starts_with(|c: char| c.is_ascii_alphabetic())
        && !t.to_ascii_lowercase().starts_with("goog")
        && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.~+%".contains(&b))
}

impl SinkRequest for PubsubSink {
    type Config = PubSubConfig;

    fn checked(self, allow_private: bool) -> Result<(PubSubConfig, Credentials), Invalid> {
        let project = required("sink.project", &self.project, 30)?;
        if !valid_project(project) {
            return Err(Invalid::new(
                "sink.project",
                "must be a project id: 6 to 30 lower-case letters, digits and '-', starting with a letter",
            ));
        }
        let topic = required("sink.topic", &self.topic, 255)?;
        if !valid_topic(topic) {
            return Err(Invalid::new(
                "sink.topic",
                "must be a topic id: 3 to 255 letters, digits and '-_.~+%', starting with a letter, not 'goog'",
            ));
        }
        let endpoint_url = match self.endpoint_url.as_deref() {
            None => None,
            Some(raw) => {
                let raw = text("sink.endpoint_url", raw, MAX_URL)?;
                let url = destination_url("sink.endpoint_url", raw, &["https", "http"], allow_private)?;
                if url.scheme() == "http" && !allow_private {
                    return Err(Invalid::new("sink.endpoint_url", "must use https"));
                }
                if url.path().trim_start_matches('/') != "" || url.query().is_some() {
                    return Err(Invalid::new(
                        "sink.endpoint_url",
                        "must be a scheme, a host and a port, without a path",
                    ));
                }
                Some(raw.trim_end_matches('/').to_owned())
            }
        };
        let credentials = match self.credentials_json {
            Given::Omitted => Credentials::Unchanged,
            Given::Null => Credentials::Cleared,
            Given::Value(v) => {
                let key = super::auth::ServiceAccount::read(&v)
                    .map_err(|why| Invalid::new("sink.credentials_json", why))?;
                Credentials::Set(json!({"credentials_json": key.stored()}))
            }
        };
        if endpoint_url.as_deref().is_some_and(|u| u.starts_with("http:")) && matches!(credentials, Credentials::Set(_))
        {
            return Err(Invalid::new("sink.endpoint_url", "must use https when the destination has credentials"));
        }
        Ok((PubSubConfig { project: project.to_owned(), topic: topic.to_owned(), endpoint_url }, credentials))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn parse(v: Value, allow_private: bool) -> Result<(PubSubConfig, Credentials), Invalid> {
        let map = v.as_object().expect("object").clone();
        crate::fields::read::<PubsubSink>(map)?.checked(allow_private)
    }

    #[test]
    fn a_sink_is_read_with_its_key_sealed_and_bad_fields_named() {
        let key = super::super::auth::tests::key();
        let (config, credentials) =
            parse(json!({"type": "pubsub", "project": "lerian-prod", "topic": "events", "credentials_json": key}), false)
                .expect("valid");
        assert_eq!(config.topic_name(), "projects/lerian-prod/topics/events");
        assert_eq!(config.endpoint(), DEFAULT_ENDPOINT);
        let Credentials::Set(sealed) = credentials else { panic!("credentials") };
        assert_eq!(sealed["credentials_json"]["client_email"], key["client_email"]);
        assert!(sealed["credentials_json"].get("project_id").is_none(), "only what is used is kept");
        assert!(!serde_json::to_string(&config).expect("json").contains("PRIVATE KEY"), "not in the public part");
        // The key as text is taken too.
        let text = json!({"project": "lerian-prod", "topic": "events", "credentials_json": key.to_string()});
        assert!(parse(text, false).is_ok());
        for (sink, field) in [
            (json!({"project": "Bad", "topic": "events"}), "sink.project"),
            (json!({"project": "lerian-prod", "topic": "goog-x"}), "sink.topic"),
            (json!({"project": "lerian-prod", "topic": "events", "credentials_json": {"type": "x"}}), "sink.credentials_json"),
            (json!({"project": "lerian-prod", "topic": "events", "credentials_json": "{"}), "sink.credentials_json"),
            (json!({"project": "lerian-prod", "topic": "events", "endpoint_url": "http://pubsub.example.com"}), "sink.endpoint_url"),
            (json!({"project": "lerian-prod", "topic": "events", "endpoint_url": "https://127.0.0.1:8085"}), "sink.endpoint_url"),
            (json!({"project": "lerian-prod", "topic": "events", "endpoint_url": "https://p.example.com/v1"}), "sink.endpoint_url"),
            (json!({"project": "lerian-prod", "topic": "events", "extra": 1}), "sink.extra"),
        ] {
            let err = parse(sink.clone(), false).expect_err(&sink.to_string());
            assert_eq!(err.field, field, "{sink}: {err}");
        }
        // An emulator on the operator's network, with private sinks allowed; never a key over http.
        let emulator = json!({"project": "lerian-prod", "topic": "events", "endpoint_url": "http://127.0.0.1:8085"});
        assert!(parse(emulator.clone(), true).is_ok());
        let mut keyed = emulator;
        keyed["credentials_json"] = key;
        assert_eq!(parse(keyed, true).expect_err("key over http").field, "sink.endpoint_url");
    }

    #[test]
    fn googles_endpoints_need_a_key_and_an_emulator_does_not() {
        let at = |endpoint: Option<&str>| PubSubConfig {
            project: "lerian-prod".into(),
            topic: "events".into(),
            endpoint_url: endpoint.map(str::to_owned),
        };
        for google in [None, Some("https://europe-west1-pubsub.googleapis.com"), Some("https://PubSub.GoogleApis.com:443")] {
            assert!(at(google).needs_credentials().is_some(), "{google:?}");
        }
        for other in ["http://127.0.0.1:8085", "https://pubsub.example.com", "https://googleapis.com.example.com"] {
            assert!(at(Some(other)).needs_credentials().is_none(), "{other}");
        }
    }

    #[test]
    fn projects_and_topics_follow_googles_rules() {
        for ok in ["lerian-prod", "a12345", "bank-events-2026"] {
            assert!(valid_project(ok), "{ok}");
        }
        for bad in ["short", "Upper-case", "1starts", "ends-", "has_underscore", &"a".repeat(31)] {
            assert!(!valid_project(bad), "{bad}");
        }
        for ok in ["events", "lerian.events-v1", "a~b+c%d"] {
            assert!(valid_topic(ok), "{ok}");
        }
        for bad in ["ab", "1events", "google-events", "Goog-x", "with space", "é-topic"] {
            assert!(!valid_topic(bad), "{bad}");
        }
    }
}
