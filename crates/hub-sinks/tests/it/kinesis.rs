//! The Kinesis sink against the AWS API emulator: records read back from every shard.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hub_sinks::kinesis::config::KinesisConfig;
use hub_sinks::kinesis::{KinesisSink, KinesisTarget};
use hub_sinks::{Outcome, TypedSink};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::aws::{SECRET, aws_endpoint, dead_endpoints, local, sdk, secrets};
use crate::contract::{self, Case, Fixture, message};

async fn create_stream(shards: i32) -> String {
    let kinesis = aws_sdk_kinesis::Client::new(&sdk().await);
    let name = format!("sh-test-{}", Uuid::now_v7().simple());
    kinesis
        .create_stream()
        .stream_name(&name)
        .shard_count(shards)
        .send()
        .await
        .expect("the AWS emulator creates streams");
    name
}

/// Every record of a stream: `(partition key, data)`.
async fn records(stream: &str, expected: usize) -> Vec<(String, Vec<u8>)> {
    let kinesis = aws_sdk_kinesis::Client::new(&sdk().await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut got = Vec::new();
        let shards = kinesis.list_shards().stream_name(stream).send().await.expect("shards");
        for shard in shards.shards() {
            let iterator = kinesis
                .get_shard_iterator()
                .stream_name(stream)
                .shard_id(shard.shard_id())
                .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
                .send()
                .await
                .expect("iterator");
            let mut next = iterator.shard_iterator().map(str::to_owned);
            while let Some(it) = next {
                let page = kinesis.get_records().shard_iterator(it).limit(10_000).send().await.expect("records");
                if page.records().is_empty() {
                    break;
                }
                got.extend(page.records().iter().map(|r| (r.partition_key().to_owned(), r.data().as_ref().to_vec())));
                next = page.next_shard_iterator().map(str::to_owned);
            }
        }
        if got.len() >= expected || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn target(sink: &KinesisSink, stream: &str, url: &str, with_credentials: bool, timeout: Duration) -> KinesisTarget {
    let config = KinesisConfig {
        stream_name: stream.to_owned(),
        region: "us-east-1".into(),
        endpoint_url: Some(url.to_owned()),
        credentials: None,
    };
    sink.target(&config, &secrets(with_credentials), timeout).expect("a Kinesis target")
}

struct KinesisFixture {
    sink: KinesisSink,
    stream: String,
    dead: (String, String),
}

impl Fixture for KinesisFixture {
    type S = KinesisSink;

    fn sink(&self) -> &KinesisSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> KinesisTarget {
        let t = Duration::from_secs(5);
        match case {
            Case::Healthy => target(&self.sink, &self.stream, &aws_endpoint(), true, t),
            Case::Refusing => target(&self.sink, "no-such-stream", &aws_endpoint(), true, t),
            Case::Unreachable => target(&self.sink, &self.stream, &self.dead.0, true, t),
            Case::BadCredentials => target(&self.sink, &self.stream, &aws_endpoint(), false, t),
            Case::Slow => target(&self.sink, &self.stream, &self.dead.1, true, Duration::from_millis(500)),
        }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        records(&self.stream, expected)
            .await
            .into_iter()
            .map(|(_, data)| serde_json::from_slice::<Value>(&data).expect("structured JSON"))
            .filter(|doc| doc["type"] != "streaming_hub.verification")
            .map(|doc| {
                (
                    doc["id"].as_str().expect("id").parse().expect("uuid"),
                    serde_json::to_vec(&doc["data"]).expect("data"),
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

    fn refusal_is_permanent(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn the_kinesis_sink_passes_the_contract() {
    let fixture = KinesisFixture {
        sink: KinesisSink::new(local()),
        stream: create_stream(1).await,
        dead: dead_endpoints().await,
    };
    contract::run(&fixture).await;
}

/// A thousand events put one by one, every one read back once as a structured CloudEvent, its
/// partition key the event's `partitionkey` when it has one, else its subject.
#[tokio::test]
async fn a_thousand_events_are_read_back_as_structured_cloudevents_with_their_keys() {
    let stream = create_stream(2).await;
    let sink = std::sync::Arc::new(KinesisSink::new(local()));
    let target = std::sync::Arc::new(target(&sink, &stream, &aws_endpoint(), true, Duration::from_secs(10)));
    let mut sent = HashMap::new();
    // One at a time: the emulator numbers concurrent records of one stream or topic unsafely (it
    // loses some); the real services take the hub's per-destination cap side by side.
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000u32 {
        let id = Uuid::now_v7();
        let key = (i % 2 == 0).then(|| format!("account-{}", i % 13));
        sent.insert(id, (i, key.clone().unwrap_or_else(|| "loan-42".to_owned())));
        let (sink, target, permits) = (sink.clone(), target.clone(), permits.clone());
        tasks.spawn(async move {
            let _permit = permits.acquire().await.expect("permit");
            let ext: BTreeMap<String, String> = key.into_iter().map(|k| ("partitionkey".to_owned(), k)).collect();
            let body = format!(r#"{{"n":{i}}}"#);
            sink.attempt(&target, &message(body.as_bytes(), &ext, id)).await
        });
    }
    while let Some(outcome) = tasks.join_next().await {
        let outcome = outcome.expect("task");
        assert!(matches!(outcome, Outcome::Delivered { .. }), "{outcome:?}");
    }
    let got = records(&stream, 1000).await;
    assert_eq!(got.len(), 1000, "every event once");
    let mut seen = std::collections::HashSet::new();
    for (partition_key, data) in got {
        let doc: Value = serde_json::from_slice(&data).expect("structured JSON");
        let id: Uuid = doc["id"].as_str().expect("id").parse().expect("uuid");
        assert!(seen.insert(id), "{id} twice");
        let (i, key) = &sent[&id];
        assert_eq!(&partition_key, key);
        assert_eq!(doc["specversion"], "1.0");
        assert_eq!(doc["type"], "studio.lerian.lender.loan_application.approved");
        assert_eq!(doc["tenantid"], "tenant-a");
        assert_eq!(doc["subject"], "loan-42");
        assert_eq!(doc["datacontenttype"], "application/json");
        assert_eq!(doc["data"], json!({"n": i}));
    }
}
