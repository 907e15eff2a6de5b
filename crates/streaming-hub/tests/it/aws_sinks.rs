//! SNS, Kinesis and S3 end to end, on both stores: events ingested over HTTP are read back from an
//! SQS queue subscribed to the topic, from the stream's shards and from the bucket's dated keys.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::sinks::{KEY, SECRET, aws_endpoint, sdk};
use crate::support::{Backend, Event, TestHub, until};

const WAIT: Duration = Duration::from_secs(60);
const EVENTS: usize = 20;

crate::on_both_backends!(events_reach_a_topic_a_stream_and_a_bucket);

fn aws(sink: Value) -> Value {
    let mut sink = sink;
    sink["region"] = json!("us-east-1");
    sink["endpoint_url"] = json!(aws_endpoint());
    sink["credentials"] = json!({"access_key_id": KEY, "secret_access_key": SECRET});
    sink
}

async fn events_reach_a_topic_a_stream_and_a_bucket(backend: Backend) {
    let config = sdk().await;
    let tag = Uuid::now_v7().simple().to_string();
    // The topic, observed through a queue subscribed with raw delivery.
    let sns = aws_sdk_sns::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let topic_arn = sns.create_topic().name(format!("e2e-{tag}")).send().await.expect("the AWS emulator is required");
    let topic_arn = topic_arn.topic_arn().expect("arn").to_owned();
    let queue_url = sqs.create_queue().queue_name(format!("e2e-{tag}")).send().await.expect("queue");
    let queue_url = queue_url.queue_url().expect("url").to_owned();
    let queue_arn = format!("arn:aws:sqs:us-east-1:123456789012:e2e-{tag}");
    sns.subscribe()
        .topic_arn(&topic_arn)
        .protocol("sqs")
        .endpoint(queue_arn)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .expect("subscribe");
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let stream = format!("e2e-{tag}");
    kinesis.create_stream().stream_name(&stream).shard_count(1).send().await.expect("stream");
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&config).force_path_style(true).build());
    let bucket = format!("e2e-{tag}");
    s3.create_bucket().bucket(&bucket).send().await.expect("bucket");

    let hub = TestHub::start_with(backend, &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20")]).await;
    let key = hub.tenant_key("t1").await;
    let sinks = [
        aws(json!({"type": "sns", "topic_arn": topic_arn})),
        aws(json!({"type": "kinesis", "stream_name": stream})),
        aws(json!({"type": "s3", "bucket": bucket, "prefix": "archive/"})),
    ];
    for sink in sinks {
        let sub = hub.subscribe(&key, json!({"name": "a", "event_types": ["loan_application.*"], "sink": sink})).await;
        assert!(!sub.to_string().contains(SECRET), "credentials are never shown: {sub}");
        hub.wait_until_active(&key, sub["id"].as_str().expect("id")).await;
    }
    let mut sent = HashMap::new();
    for i in 0..EVENTS {
        let event =
            Event::new("t1").body(format!(r#"{{"n":{i}}}"#)).set("ce-partitionkey", &format!("account-{}", i % 3));
        sent.insert(event.id().to_string(), (i, event.get("ce-partitionkey").expect("key").to_owned()));
        hub.post_event(&key, &event).await;
    }

    // SNS: the body as the message, the attributes as message attributes.
    let mut from_sns = HashMap::new();
    until("every event reaches the topic", WAIT, async || {
        let out = sqs
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .message_attribute_names("All")
            .send()
            .await
            .ok()?;
        for m in out.messages() {
            let attr = |k: &str| m.message_attributes()?.get(k)?.string_value().map(str::to_owned);
            if attr("ce-type").as_deref() == Some("streaming_hub.verification") {
                continue;
            }
            from_sns.insert(attr("ce-id").expect("ce-id"), (m.body().map(str::to_owned), attr("ce-tenantid")));
        }
        (from_sns.len() == EVENTS).then_some(())
    })
    .await;
    for (id, (body, tenant)) in &from_sns {
        let (i, _) = &sent[id];
        assert_eq!(body.as_deref(), Some(format!(r#"{{"n":{i}}}"#).as_str()));
        assert_eq!(tenant.as_deref(), Some("t1"));
    }

    // Kinesis: the structured CloudEvent, keyed by the partitionkey.
    let shard = kinesis.list_shards().stream_name(&stream).send().await.expect("shards");
    let shard = shard.shards()[0].shard_id().to_owned();
    let records = until("every event reaches the stream", WAIT, async || {
        let it = kinesis
            .get_shard_iterator()
            .stream_name(&stream)
            .shard_id(&shard)
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .ok()?;
        let page = kinesis.get_records().shard_iterator(it.shard_iterator()?).send().await.ok()?;
        let records: Vec<(String, Value)> = page
            .records()
            .iter()
            .map(|r| (r.partition_key().to_owned(), serde_json::from_slice(r.data().as_ref()).expect("JSON")))
            .filter(|(_, doc): &(String, Value)| doc["type"] != "streaming_hub.verification")
            .collect();
        (records.len() == EVENTS).then_some(records)
    })
    .await;
    for (partition_key, doc) in records {
        let (i, key) = &sent[doc["id"].as_str().expect("id")];
        assert_eq!(&partition_key, key);
        assert_eq!(doc["data"], json!({"n": i}));
        assert_eq!(doc["tenantid"], "t1");
        assert_eq!(doc["partitionkey"], key.as_str());
    }

    // S3: one object per event under its dated key.
    let listed = until("every event reaches the bucket", WAIT, async || {
        let page =
            s3.list_objects_v2().bucket(&bucket).prefix("archive/t1/loan_application.approved/").send().await.ok()?;
        let keys: Vec<String> = page.contents().iter().filter_map(|o| o.key().map(str::to_owned)).collect();
        (keys.len() == EVENTS).then_some(keys)
    })
    .await;
    for object_key in listed {
        let object = s3.get_object().bucket(&bucket).key(&object_key).send().await.expect("get");
        assert_eq!(object.content_type(), Some("application/cloudevents+json"));
        let doc: Value =
            serde_json::from_slice(&object.body.collect().await.expect("body").into_bytes()).expect("JSON");
        let id = doc["id"].as_str().expect("id");
        let (i, _) = &sent[id];
        assert!(object_key.ends_with(&format!("/{id}.json")), "{object_key}");
        let day =
            chrono::DateTime::parse_from_rfc3339(doc["time"].as_str().expect("time")).expect("time").format("%Y/%m/%d");
        assert!(object_key.contains(&format!("/{day}/")), "{object_key}");
        assert_eq!(doc["data"], json!({"n": i}));
    }
}
