//! The SQS and EventBridge sinks (and what the other AWS sinks' tests share) against a local AWS
//! API emulator (moto, which `scripts/test` starts). EventBridge is observed through a rule that
//! targets an SQS queue.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use hub_sinks::eventbridge::{EventBridgeSink, EventBridgeTarget};
use hub_sinks::sqs::{SqsSink, SqsTarget};
use hub_sinks::{AwsCredentials, AwsEndpoint, AwsSettings, Outcome, TypedSink};
use serde_json::Value;
use uuid::Uuid;

use crate::contract::{self, Case, Fixture, message};

pub const SECRET: &str = "test-secret-access-key-9f8e7d";

pub fn aws_endpoint() -> String {
    std::env::var("STREAMING_HUB_TEST_AWS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5000".to_owned())
}

pub fn credentials() -> AwsCredentials {
    AwsCredentials {
        access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
        secret_access_key: SECRET.into(),
        session_token: None,
    }
}

pub fn endpoint(url: &str, creds: Option<AwsCredentials>, timeout: Duration) -> AwsEndpoint {
    AwsEndpoint {
        region: "us-east-1".into(),
        endpoint_url: Some(url.to_owned()),
        credentials: creds,
        role: None,
        timeout,
        check_endpoint: false,
    }
}

/// Settings of a sink that may reach the emulator on loopback.
pub fn local() -> AwsSettings {
    AwsSettings { allow_private: true, ..AwsSettings::default() }
}

/// A destination's opened secrets: the emulator's key pair, or no credentials at all.
pub fn secrets(with_credentials: bool) -> hub_sinks::Secrets {
    let c = credentials();
    let credentials = with_credentials
        .then(|| serde_json::json!({"access_key_id": c.access_key_id, "secret_access_key": c.secret_access_key}));
    hub_sinks::Secrets { signing: Vec::new(), credentials, owner: None }
}

pub async fn sdk() -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(aws_endpoint())
        .credentials_provider(aws_credential_types::Credentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            SECRET,
            None,
            None,
            "test",
        ))
        .load()
        .await
}

/// A closed port (unreachable) and a server that accepts and never answers (slow).
pub async fn dead_endpoints() -> (String, String) {
    let closed = crate::receiver::closed_addr();
    (format!("http://{closed}"), format!("http://{}", crate::receiver::silent_addr().await))
}

pub struct Queue {
    pub client: aws_sdk_sqs::Client,
    pub url: String,
}

impl Queue {
    pub async fn create(fifo: bool) -> Self {
        let client = aws_sdk_sqs::Client::new(&sdk().await);
        let name = format!("sh-test-{}{}", Uuid::now_v7().simple(), if fifo { ".fifo" } else { "" });
        let mut req = client.create_queue().queue_name(&name);
        if fifo {
            req = req.attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
        }
        let out =
            req.send().await.unwrap_or_else(|e| panic!("the AWS emulator is required ({}): {e:?}", aws_endpoint()));
        Self { client, url: out.queue_url().expect("url").to_owned() }
    }

    pub async fn arn(&self) -> String {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("attributes");
        out.attributes().and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)).expect("arn").clone()
    }

    /// Receives up to `expected` messages, with a deadline.
    pub async fn receive(&self, expected: usize) -> Vec<aws_sdk_sqs::types::Message> {
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while got.len() < expected && tokio::time::Instant::now() < deadline {
            let out = self
                .client
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
                .wait_time_seconds(1)
                .send()
                .await
                .expect("receive");
            got.extend(out.messages().iter().cloned());
        }
        got
    }
}

pub fn attribute(m: &aws_sdk_sqs::types::Message, name: &str) -> Option<String> {
    m.message_attributes().and_then(|a| a.get(name)).and_then(|v| v.string_value().map(str::to_owned))
}

struct SqsFixture {
    sink: SqsSink,
    queue: Queue,
    dead: (String, String),
}

impl Fixture for SqsFixture {
    type S = SqsSink;

    fn sink(&self) -> &SqsSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> SqsTarget {
        let t = Duration::from_secs(5);
        let (url, creds, timeout, queue) = match case {
            Case::Healthy => (aws_endpoint(), Some(credentials()), t, self.queue.url.clone()),
            Case::Refusing => {
                (aws_endpoint(), Some(credentials()), t, format!("{}/123456789012/no-such-queue", aws_endpoint()))
            }
            Case::Unreachable => (self.dead.0.clone(), Some(credentials()), t, self.queue.url.clone()),
            // No credentials, and the default chain is not allowed.
            Case::BadCredentials => (aws_endpoint(), None, t, self.queue.url.clone()),
            Case::Slow => {
                (self.dead.1.clone(), Some(credentials()), Duration::from_millis(500), self.queue.url.clone())
            }
        };
        SqsTarget { queue_url: queue, endpoint: endpoint(&url, creds, timeout) }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        self.queue
            .receive(expected)
            .await
            .into_iter()
            .filter(|m| attribute(m, "ce-type").as_deref() != Some("streaming_hub.verification"))
            .map(|m| {
                (
                    attribute(&m, "ce-id").expect("ce-id").parse().expect("uuid"),
                    m.body().unwrap_or_default().as_bytes().to_vec(),
                )
            })
            .collect()
    }

    fn secrets(&self) -> Vec<String> {
        vec![SECRET.to_owned()]
    }
}

#[tokio::test]
async fn the_sqs_sink_passes_the_contract() {
    let fixture = SqsFixture {
        sink: SqsSink::new(AwsSettings::default()),
        queue: Queue::create(false).await,
        dead: dead_endpoints().await,
    };
    contract::run(&fixture).await;
}

#[tokio::test]
async fn sqs_messages_carry_attributes_and_fifo_ids() {
    let queue = Queue::create(true).await;
    let sink = SqsSink::new(AwsSettings::default());
    let ext = BTreeMap::from([("partner".to_owned(), "acme".to_owned())]);
    let id = Uuid::now_v7();
    let target = SqsTarget {
        queue_url: queue.url.clone(),
        endpoint: endpoint(&aws_endpoint(), Some(credentials()), Duration::from_secs(5)),
    };
    let outcome = sink.attempt(&target, &message(br#"{"a":1}"#, &ext, id)).await;
    assert!(outcome.is_delivered(), "{outcome:?}");
    let got = queue.receive(1).await;
    let m = &got[0];
    assert_eq!(m.body(), Some(r#"{"a":1}"#));
    let names: Vec<&String> = m.message_attributes().expect("attributes").keys().collect();
    assert!(names.len() <= 10, "SQS allows ten attributes: {names:?}");
    for (k, v) in [
        ("ce-id", id.to_string()),
        ("ce-source", "lender".to_owned()),
        ("ce-type", "studio.lerian.lender.loan_application.approved".to_owned()),
        ("ce-time", "2026-11-30T10:00:00Z".to_owned()),
        ("ce-tenantid", "tenant-a".to_owned()),
        ("ce-schemaversion", "1.0.0".to_owned()),
        ("ce-resourcetype", "loan_application".to_owned()),
        ("ce-eventtype", "approved".to_owned()),
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()),
    ] {
        assert_eq!(attribute(m, k).as_deref(), Some(v.as_str()), "{k}");
    }
    let extra: Value = serde_json::from_str(&attribute(m, "x-lerian-extra-headers").expect("packed")).expect("json");
    assert_eq!(extra["ce-subject"], "loan-42");
    assert_eq!(extra["ce-partner"], "acme");
    let system = m.attributes().expect("system attributes");
    use aws_sdk_sqs::types::MessageSystemAttributeName as N;
    assert_eq!(system.get(&N::MessageGroupId).map(String::as_str), Some("tenant-a"));
    assert_eq!(system.get(&N::MessageDeduplicationId), Some(&id.to_string()));
}

struct BusFixture {
    sink: EventBridgeSink,
    bus: String,
    queue: Queue,
    dead: (String, String),
}

impl BusFixture {
    /// A bus whose rule sends events from source `lender` to a fresh queue.
    async fn new() -> Self {
        let queue = Queue::create(false).await;
        let events = aws_sdk_eventbridge::Client::new(&sdk().await);
        let bus = format!("sh-test-{}", Uuid::now_v7().simple());
        events.create_event_bus().name(&bus).send().await.expect("bus");
        let rule = format!("{bus}-rule");
        events
            .put_rule()
            .name(&rule)
            .event_bus_name(&bus)
            .event_pattern(r#"{"source": ["lender"]}"#)
            .send()
            .await
            .expect("rule");
        let target =
            aws_sdk_eventbridge::types::Target::builder().id("queue").arn(queue.arn().await).build().expect("target");
        events.put_targets().rule(&rule).event_bus_name(&bus).targets(target).send().await.expect("targets");
        Self { sink: EventBridgeSink::new(AwsSettings::default()), bus, queue, dead: dead_endpoints().await }
    }
}

impl Fixture for BusFixture {
    type S = EventBridgeSink;

    fn sink(&self) -> &EventBridgeSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> EventBridgeTarget {
        let t = Duration::from_secs(5);
        let (url, creds, timeout, bus) = match case {
            Case::Healthy => (aws_endpoint(), Some(credentials()), t, self.bus.clone()),
            Case::Refusing => (aws_endpoint(), Some(credentials()), t, "no-such-bus".to_owned()),
            Case::Unreachable => (self.dead.0.clone(), Some(credentials()), t, self.bus.clone()),
            Case::BadCredentials => (aws_endpoint(), None, t, self.bus.clone()),
            Case::Slow => (self.dead.1.clone(), Some(credentials()), Duration::from_millis(500), self.bus.clone()),
        };
        EventBridgeTarget { event_bus: bus, endpoint: endpoint(&url, creds, timeout) }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        self.queue
            .receive(expected)
            .await
            .into_iter()
            .map(|m| {
                let event: Value = serde_json::from_str(m.body().expect("body")).expect("event json");
                let detail = &event["detail"];
                (
                    detail["id"].as_str().expect("id").parse().expect("uuid"),
                    serde_json::to_vec(&detail["data"]).expect("data"),
                )
            })
            .collect()
    }

    fn secrets(&self) -> Vec<String> {
        vec![SECRET.to_owned()]
    }

    fn exact_body(&self) -> bool {
        false
    }
}

#[tokio::test]
async fn the_eventbridge_sink_passes_the_contract() {
    contract::run(&BusFixture::new().await).await;
}

#[tokio::test]
async fn eventbridge_entries_are_structured_cloudevents() {
    let fixture = BusFixture::new().await;
    let ext = BTreeMap::new();
    let id = Uuid::now_v7();
    let target = fixture.target(Case::Healthy).await;
    assert!(matches!(
        fixture.sink.attempt(&target, &message(br#"{"a":1}"#, &ext, id)).await,
        Outcome::Delivered { .. }
    ));
    let got = fixture.queue.receive(1).await;
    let event: Value = serde_json::from_str(got[0].body().expect("body")).expect("json");
    assert_eq!(event["source"], "lender");
    assert_eq!(event["detail-type"], "studio.lerian.lender.loan_application.approved");
    let detail = &event["detail"];
    assert_eq!(detail["specversion"], "1.0");
    assert_eq!(detail["id"], id.to_string());
    assert_eq!(detail["tenantid"], "tenant-a");
    assert_eq!(detail["subject"], "loan-42");
    assert_eq!(detail["data"], serde_json::json!({"a": 1}));
}
