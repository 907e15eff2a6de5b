//! The S3 sink against the AWS API emulator: objects read back by their keys.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hub_sinks::s3::config::S3Config;
use hub_sinks::s3::{S3Sink, S3Target};
use hub_sinks::{Outcome, TypedSink};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::aws::{SECRET, aws_endpoint, dead_endpoints, local, sdk, secrets};
use crate::contract::{self, Case, Fixture, message};

fn s3(sdk: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(sdk).force_path_style(true).build())
}

async fn create_bucket() -> String {
    let name = format!("sh-test-{}", Uuid::now_v7().simple());
    s3(&sdk().await).create_bucket().bucket(&name).send().await.expect("the AWS emulator creates buckets");
    name
}

/// Every object under `prefix`: `(key, content type, body)`.
async fn objects(bucket: &str, prefix: &str, expected: usize) -> Vec<(String, Option<String>, Vec<u8>)> {
    let client = s3(&sdk().await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let page = client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .set_continuation_token(token.clone())
                .send()
                .await
                .expect("list");
            keys.extend(page.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
            token = page.next_continuation_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        if keys.len() >= expected || tokio::time::Instant::now() > deadline {
            let mut got = Vec::new();
            for key in keys {
                let object = client.get_object().bucket(bucket).key(&key).send().await.expect("get");
                let content_type = object.content_type().map(str::to_owned);
                let body = object.body.collect().await.expect("body").into_bytes().to_vec();
                got.push((key, content_type, body));
            }
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn target(sink: &S3Sink, bucket: &str, prefix: &str, url: &str, with_credentials: bool, timeout: Duration) -> S3Target {
    let config = S3Config {
        bucket: bucket.to_owned(),
        prefix: prefix.to_owned(),
        region: "us-east-1".into(),
        endpoint_url: Some(url.to_owned()),
        credentials: None,
    };
    sink.target(&config, &secrets(with_credentials), timeout).expect("an S3 target")
}

struct S3Fixture {
    sink: S3Sink,
    bucket: String,
    dead: (String, String),
}

impl Fixture for S3Fixture {
    type S = S3Sink;

    fn sink(&self) -> &S3Sink {
        &self.sink
    }

    async fn target(&self, case: Case) -> S3Target {
        let t = Duration::from_secs(5);
        let b = self.bucket.as_str();
        match case {
            Case::Healthy => target(&self.sink, b, "archive/", &aws_endpoint(), true, t),
            Case::Refusing => target(&self.sink, "no-such-bucket-sh", "", &aws_endpoint(), true, t),
            Case::Unreachable => target(&self.sink, b, "", &self.dead.0, true, t),
            Case::BadCredentials => target(&self.sink, b, "", &aws_endpoint(), false, t),
            Case::Slow => target(&self.sink, b, "", &self.dead.1, true, Duration::from_millis(500)),
        }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        objects(&self.bucket, "archive/tenant-a/loan_application.approved/", expected)
            .await
            .into_iter()
            .map(|(_, _, body)| serde_json::from_slice::<Value>(&body).expect("structured JSON"))
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
async fn the_s3_sink_passes_the_contract() {
    let fixture = S3Fixture { sink: S3Sink::new(local()), bucket: create_bucket().await, dead: dead_endpoints().await };
    contract::run(&fixture).await;
}

/// A thousand events written side by side, every one read back from its dated key as a structured
/// CloudEvent with its media type; a repeated delivery overwrites the same object.
#[tokio::test]
async fn a_thousand_events_are_read_back_from_their_dated_keys() {
    let bucket = create_bucket().await;
    let sink = std::sync::Arc::new(S3Sink::new(local()));
    let target = std::sync::Arc::new(target(&sink, &bucket, "hub/", &aws_endpoint(), true, Duration::from_secs(10)));
    let mut sent = HashMap::new();
    // As many at once as the hub's per-destination cap lets through (the emulator is one process).
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000u32 {
        let id = Uuid::now_v7();
        sent.insert(id, i);
        let (sink, target, permits) = (sink.clone(), target.clone(), permits.clone());
        tasks.spawn(async move {
            let _permit = permits.acquire().await.expect("permit");
            let ext = BTreeMap::new();
            let body = format!(r#"{{"n":{i}}}"#);
            let outcome = sink.attempt(&target, &message(body.as_bytes(), &ext, id)).await;
            // Every tenth is delivered twice: the second overwrites the first.
            if i % 10 == 0 && outcome.is_delivered() {
                return sink.attempt(&target, &message(body.as_bytes(), &ext, id)).await;
            }
            outcome
        });
    }
    while let Some(outcome) = tasks.join_next().await {
        let outcome = outcome.expect("task");
        assert!(matches!(outcome, Outcome::Delivered { .. }), "{outcome:?}");
    }
    let got = objects(&bucket, "hub/", 1000).await;
    assert_eq!(got.len(), 1000, "one object per event");
    for (key, content_type, body) in got {
        let doc: Value = serde_json::from_slice(&body).expect("structured JSON");
        let id: Uuid = doc["id"].as_str().expect("id").parse().expect("uuid");
        assert_eq!(key, format!("hub/tenant-a/loan_application.approved/2026/11/30/{id}.json"));
        assert_eq!(content_type.as_deref(), Some("application/cloudevents+json"));
        assert_eq!(doc["data"], json!({"n": sent[&id]}));
        assert_eq!(doc["source"], "lender");
        assert_eq!(doc["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    }
}
