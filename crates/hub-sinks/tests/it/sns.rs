//! The SNS sink against the AWS API emulator, observed through an SQS queue subscribed to the
//! topic with raw message delivery (the body and message attributes as published).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use hub_sinks::sns::config::SnsConfig;
use hub_sinks::sns::{SnsSink, SnsTarget};
use hub_sinks::{Outcome, TypedSink};
use serde_json::Value;
use uuid::Uuid;

use crate::aws::{Queue, SECRET, attribute, aws_endpoint, dead_endpoints, local, sdk, secrets};
use crate::contract::{self, Case, Fixture, message};

/// A topic with a queue subscribed to it (raw delivery).
struct Topic {
    arn: String,
    queue: Queue,
}

impl Topic {
    async fn create(fifo: bool) -> Self {
        let sns = aws_sdk_sns::Client::new(&sdk().await);
        let name = format!("sh-test-{}{}", Uuid::now_v7().simple(), if fifo { ".fifo" } else { "" });
        let mut req = sns.create_topic().name(&name);
        if fifo {
            req = req.attributes("FifoTopic", "true").attributes("ContentBasedDeduplication", "false");
        }
        let arn = req.send().await.expect("the AWS emulator creates topics").topic_arn().expect("arn").to_owned();
        let queue = Queue::create(fifo).await;
        sns.subscribe()
            .topic_arn(&arn)
            .protocol("sqs")
            .endpoint(queue.arn().await)
            .attributes("RawMessageDelivery", "true")
            .send()
            .await
            .expect("subscribe");
        Self { arn, queue }
    }
}

fn target(sink: &SnsSink, arn: &str, url: &str, with_credentials: bool, timeout: Duration) -> SnsTarget {
    let config = SnsConfig {
        topic_arn: arn.to_owned(),
        region: "us-east-1".into(),
        endpoint_url: Some(url.to_owned()),
        credentials: None,
    };
    sink.target(&config, &secrets(with_credentials), timeout).expect("an SNS target")
}

struct SnsFixture {
    sink: SnsSink,
    topic: Topic,
    dead: (String, String),
}

impl Fixture for SnsFixture {
    type S = SnsSink;

    fn sink(&self) -> &SnsSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> SnsTarget {
        let t = Duration::from_secs(5);
        let arn = self.topic.arn.as_str();
        match case {
            Case::Healthy => target(&self.sink, arn, &aws_endpoint(), true, t),
            Case::Refusing => {
                target(&self.sink, "arn:aws:sns:us-east-1:123456789012:no-such-topic", &aws_endpoint(), true, t)
            }
            Case::Unreachable => target(&self.sink, arn, &self.dead.0, true, t),
            Case::BadCredentials => target(&self.sink, arn, &aws_endpoint(), false, t),
            Case::Slow => target(&self.sink, arn, &self.dead.1, true, Duration::from_millis(500)),
        }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        self.topic
            .queue
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

    fn refusal_is_permanent(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn the_sns_sink_passes_the_contract() {
    let fixture =
        SnsFixture { sink: SnsSink::new(local()), topic: Topic::create(false).await, dead: dead_endpoints().await };
    contract::run(&fixture).await;
}

/// A thousand events published, every one read back once from the subscribed queue with its body
/// and attributes (native and packed). The queue is drained while the events are published: the
/// emulator's queue slows down with every message it holds.
#[tokio::test]
async fn a_thousand_events_are_read_back_with_their_attributes() {
    let topic = Topic::create(false).await;
    let (client, url) = (topic.queue.client.clone(), topic.queue.url.clone());
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while got.len() < 1000 && tokio::time::Instant::now() < deadline {
            let page = client
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .wait_time_seconds(1)
                .send()
                .await
                .expect("receive");
            let mut done = Vec::new();
            for (n, m) in page.messages().iter().enumerate() {
                let handle = m.receipt_handle().expect("handle");
                done.push(
                    DeleteMessageBatchRequestEntry::builder()
                        .id(n.to_string())
                        .receipt_handle(handle)
                        .build()
                        .expect("entry"),
                );
                got.push(m.clone());
            }
            if !done.is_empty() {
                client.delete_message_batch().queue_url(&url).set_entries(Some(done)).send().await.expect("delete");
            }
        }
        got
    });
    // One at a time: the emulator numbers concurrent messages of one topic unsafely; the real
    // service takes the hub's per-destination cap side by side.
    let sink = SnsSink::new(local());
    let target = target(&sink, &topic.arn, &aws_endpoint(), true, Duration::from_secs(10));
    let mut sent = HashMap::new();
    for i in 0..1000u32 {
        let id = Uuid::now_v7();
        let body = format!(r#"{{"n":{i}}}"#);
        let ext = BTreeMap::from([("partner".to_owned(), format!("p{i}"))]);
        let outcome = sink.attempt(&target, &message(body.as_bytes(), &ext, id)).await;
        assert!(matches!(outcome, Outcome::Delivered { .. }), "{outcome:?}");
        sent.insert(id, (body, format!("p{i}")));
    }
    let got = reader.await.expect("reader");
    assert_eq!(got.len(), 1000, "every event once");
    let mut seen = std::collections::HashSet::new();
    for m in &got {
        let id: Uuid = attribute(m, "ce-id").expect("ce-id").parse().expect("uuid");
        assert!(seen.insert(id), "{id} twice");
        let (body, partner) = &sent[&id];
        assert_eq!(m.body(), Some(body.as_str()));
        assert_eq!(attribute(m, "ce-type").as_deref(), Some("studio.lerian.lender.loan_application.approved"));
        assert_eq!(attribute(m, "ce-tenantid").as_deref(), Some("tenant-a"));
        let extra: Value =
            serde_json::from_str(&attribute(m, "x-lerian-extra-headers").expect("packed")).expect("json");
        assert_eq!(extra["ce-subject"], "loan-42");
        assert_eq!(extra["ce-partner"], partner.as_str());
    }
}

/// A FIFO topic gets the ordering key (else the tenant) as the message group and the event id as
/// the deduplication id: the same event published twice arrives once.
#[tokio::test]
async fn fifo_topics_group_by_key_and_deduplicate_by_event_id() {
    let topic = Topic::create(true).await;
    let sink = SnsSink::new(local());
    let t = target(&sink, &topic.arn, &aws_endpoint(), true, Duration::from_secs(5));
    let ext = BTreeMap::new();
    let id = Uuid::now_v7();
    let mut m = message(br#"{"a":1}"#, &ext, id);
    m.ordering_key = Some("account-7");
    assert!(sink.attempt(&t, &m).await.is_delivered());
    assert!(sink.attempt(&t, &m).await.is_delivered(), "a repeated attempt is accepted");
    let got = topic.queue.receive(2).await;
    assert_eq!(got.len(), 1, "deduplicated by the event id");
    let system = got[0].attributes().expect("system attributes");
    use aws_sdk_sqs::types::MessageSystemAttributeName as N;
    assert_eq!(system.get(&N::MessageGroupId).map(String::as_str), Some("account-7"));
}
