//! SQS, RabbitMQ and EventBridge end to end: an event ingested over HTTP is found, with its
//! body and attributes, in a real RabbitMQ queue, an SQS queue, and (through an EventBridge
//! rule) an SQS queue; broken destinations end as recorded failed attempts on the retry curve.

use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use hub_core::seal::Kek;
use lapin::options::{BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use reqwest::StatusCode;
use serde_json::{Value, json};
use streaming_hub::testing::{Purpose, Sealer};
use uuid::Uuid;

use crate::support::{Backend, Event, TestHub};

const WAIT: Duration = Duration::from_secs(20);
pub const KEY: &str = "AKIAIOSFODNN7EXAMPLE";
pub const SECRET: &str = "moto-secret-access-key";

pub fn aws_endpoint() -> String {
    std::env::var("STREAMING_HUB_TEST_AWS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5000".to_owned())
}

pub async fn sdk() -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(aws_endpoint())
        .credentials_provider(aws_credential_types::Credentials::new(KEY, SECRET, None, None, "test"))
        .load()
        .await
}

async fn fast_hub() -> TestHub {
    TestHub::start_with(
        Backend::Sqlite,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s,20ms,20ms")],
    )
    .await
}

async fn subscribe_active(hub: &TestHub, key: &str, sink: Value) -> String {
    let sub = hub.subscribe(key, json!({"name": "s", "event_types": ["loan_application.*"], "sink": sink})).await;
    assert!(sub.get("signing_secret").is_none(), "only webhooks have a signing secret");
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(key, &id).await;
    id
}

async fn deliveries_until(hub: &TestHub, key: &str, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, page) = hub.get(key, &format!("/v1/subscriptions/{id}/deliveries")).await;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        if done(&items) {
            return items;
        }
        assert!(tokio::time::Instant::now() < end, "deliveries never reached the expected state: {items:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every attempt failed, the job is dead after the whole (three-step) curve.
fn dead_after_the_curve(items: &[Value]) -> bool {
    items.len() == 1 && items[0]["state"] == "dead" && items[0]["attempt_log"].as_array().is_some_and(|l| l.len() == 3)
}

/// Replaces a subscription's stored credentials, as if they had been rotated at the broker.
async fn break_credentials(hub: &TestHub, id: &str, credentials: Value) {
    let sealer = Sealer::new(Some(Kek::derive(&[0x4b; 32]).expect("kek")));
    let id: Uuid = id.parse().expect("uuid");
    let sub = hub.store.subscription("t1", id).await.expect("read").expect("exists");
    let sealed = sealer.seal(id, Purpose::Credentials, credentials.to_string().as_bytes()).expect("seal");
    let patch = hub_store::SubscriptionPatch {
        destination: Some(hub_store::DestinationChange {
            sink_config: sub.sink_config,
            credentials: Some(Some(sealed)),
            reverify: false,
            pace_bucket: None,
        }),
        now: chrono::Utc::now(),
        ..hub_store::SubscriptionPatch::default()
    };
    assert!(hub.store.patch_subscription("t1", id, &patch).await.expect("update").is_some());
}

/// A fresh topic exchange of the local RabbitMQ with a fresh queue bound to it by `pattern`:
/// `(connection, channel, exchange, queue)`, both deleted once unused.
pub async fn bound_queue(pattern: &str) -> (Connection, lapin::Channel, String, String) {
    let connection = Connection::connect("amqp://guest:guest@127.0.0.1:5672/%2f", ConnectionProperties::default())
        .await
        .expect("RabbitMQ is required for this test");
    let channel = connection.create_channel().await.expect("channel");
    let tag = Uuid::now_v7().simple().to_string();
    let (exchange, queue) = (format!("sh-e2e-{tag}"), format!("sh-e2e-{tag}"));
    let opts = ExchangeDeclareOptions { auto_delete: true, ..Default::default() };
    channel
        .exchange_declare(ShortString::from(exchange.as_str()), ExchangeKind::Topic, opts, FieldTable::default())
        .await
        .expect("x");
    let qopts = QueueDeclareOptions { auto_delete: true, ..Default::default() };
    channel.queue_declare(ShortString::from(queue.as_str()), qopts, FieldTable::default()).await.expect("q");
    channel
        .queue_bind(
            ShortString::from(queue.as_str()),
            ShortString::from(exchange.as_str()),
            ShortString::from(pattern),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    (connection, channel, exchange, queue)
}

/// The next message of `queue`, waited for with a deadline.
pub async fn next_message(channel: &lapin::Channel, queue: &str) -> lapin::message::BasicGetMessage {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(m) =
            channel.basic_get(ShortString::from(queue), BasicGetOptions { no_ack: true }).await.expect("get")
        {
            return m;
        }
        assert!(tokio::time::Instant::now() < end, "nothing arrived in the queue");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A message's AMQP header `name`, as text.
pub fn amqp_header(message: &lapin::message::BasicGetMessage, name: &str) -> Option<String> {
    let headers = message.delivery.properties.headers().clone()?;
    match headers.inner().get(&ShortString::from(name)) {
        Some(AMQPValue::LongString(s)) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_a_rabbitmq_queue_and_failures_follow_the_curve() {
    let (_connection, channel, exchange, queue) = bound_queue("lender.loan_application.*").await;

    let hub = fast_hub().await;
    let key = hub.tenant_key("t1").await;
    let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
    let id = subscribe_active(
        &hub,
        &key,
        json!({"type": "rabbitmq", "url": url, "exchange": exchange,
        "routing_key": "{source}.{resource}.{event}"}),
    )
    .await;
    let event = Event::new("t1").set("ce-subject", "loan-77");
    assert_eq!(hub.post_event(&key, &event).await.0, StatusCode::ACCEPTED);
    let message = next_message(&channel, &queue).await;
    assert_eq!(message.delivery.data, event.body);
    let props = &message.delivery.properties;
    assert_eq!(props.message_id().as_ref().map(|s| s.to_string()), Some(event.id().to_string()));
    assert_eq!(props.delivery_mode(), &Some(2), "persistent");
    let h = |k: &str| amqp_header(&message, k).unwrap_or_else(|| panic!("{k}"));
    assert_eq!(h("ce-id"), event.id().to_string());
    assert_eq!(h("ce-subject"), "loan-77");
    assert_eq!(h("ce-tenantid"), "t1");

    // An unroutable publish (no queue for the key) is a failure, retried on the curve.
    let (_, changed) = hub
        .patch_json(
            &key,
            &format!("/v1/subscriptions/{id}"),
            &json!({"sink": {"type": "rabbitmq", "url": url,
            "exchange": exchange, "routing_key": "nowhere.{event}"}}),
        )
        .await;
    assert_eq!(changed["sink"]["routing_key"], "nowhere.{event}");
    hub.wait_until_active(&key, &id).await;
    hub.post_event(&key, &Event::new("t1")).await;
    let items = deliveries_until(&hub, &key, &id, |i| i.len() == 2 && i[1]["state"] == "dead").await;
    let log = items[1]["attempt_log"].as_array().expect("log");
    assert_eq!(log.len(), 3, "the whole curve");
    assert!(log.iter().all(|a| a["error"].as_str().is_some_and(|e| e.contains("unroutable"))), "{log:?}");

    // A wrong credential (the password changed at the broker) fails every attempt too.
    let (_, _) = hub
        .patch_json(
            &key,
            &format!("/v1/subscriptions/{id}"),
            &json!({"sink": {"type": "rabbitmq", "url": url,
            "exchange": exchange, "routing_key": "{source}.{resource}.{event}"}}),
        )
        .await;
    hub.wait_until_active(&key, &id).await;
    break_credentials(&hub, &id, json!({"password": "not-the-password"})).await;
    hub.post_event(&key, &Event::new("t1")).await;
    let items = deliveries_until(&hub, &key, &id, |i| i.len() == 3 && i[2]["state"] == "dead").await;
    let log = items[2]["attempt_log"].as_array().expect("log");
    assert_eq!(log.len(), 3);
    assert!(log.iter().all(|a| a["error"].as_str().is_some_and(|e| e.starts_with("unauthorized"))), "{log:?}");
    assert!(!Value::from(items.clone()).to_string().contains("not-the-password"), "no credential in any error");
}

/// The message of event `ce_id` in the SQS queue at `queue_url`, with its attributes, waited for
/// with a deadline (the verification probe is a message too; it is passed over).
pub async fn sqs_message(sqs: &aws_sdk_sqs::Client, queue_url: &str, ce_id: Uuid) -> aws_sdk_sqs::types::Message {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let out = sqs
            .receive_message()
            .queue_url(queue_url)
            .message_attribute_names("All")
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        if let Some(m) = out.messages().iter().find(|m| {
            m.message_attributes().and_then(|a| a.get("ce-id")).and_then(|v| v.string_value())
                == Some(&ce_id.to_string())
        }) {
            return m.clone();
        }
        assert!(tokio::time::Instant::now() < end, "nothing arrived in the queue");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_an_sqs_queue_and_a_refusal_follows_the_curve() {
    let sqs = aws_sdk_sqs::Client::new(&sdk().await);
    let name = format!("sh-e2e-{}", Uuid::now_v7().simple());
    let queue_url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .expect("the AWS emulator is required")
        .queue_url()
        .expect("url")
        .to_owned();
    let hub = fast_hub().await;
    let key = hub.tenant_key("t1").await;
    let id = subscribe_active(
        &hub,
        &key,
        json!({"type": "sqs", "queue_url": queue_url, "region": "us-east-1",
        "endpoint_url": aws_endpoint(), "credentials": {"access_key_id": KEY, "secret_access_key": SECRET}}),
    )
    .await;
    let event = Event::new("t1");
    hub.post_event(&key, &event).await;
    let message = sqs_message(&sqs, &queue_url, event.id()).await;
    assert_eq!(message.body().map(str::as_bytes), Some(&event.body[..]));
    let attr =
        |k: &str| message.message_attributes().and_then(|a| a.get(k)).and_then(|v| v.string_value()).map(str::to_owned);
    assert_eq!(attr("ce-tenantid").as_deref(), Some("t1"));
    assert_eq!(attr("ce-type").as_deref(), Some("studio.lerian.lender.loan_application.approved"));

    // The queue is gone: the broker refuses every attempt, and the job is dead after the curve.
    sqs.delete_queue().queue_url(&queue_url).send().await.expect("delete");
    hub.post_event(&key, &Event::new("t1")).await;
    let items = deliveries_until(&hub, &key, &id, |i| i.len() == 2 && dead_after_the_curve(&i[1..])).await;
    let log = items[1]["attempt_log"].as_array().expect("log");
    assert!(log.iter().all(|a| a["error"].as_str().is_some_and(|e| e.starts_with("refused"))), "{log:?}");
    assert!(!Value::from(items.clone()).to_string().contains(SECRET), "no credential in any error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_eventbridge_and_through_a_rule_an_sqs_queue() {
    let config = sdk().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let events = aws_sdk_eventbridge::Client::new(&config);
    let tag = Uuid::now_v7().simple().to_string();
    let queue_url = sqs
        .create_queue()
        .queue_name(format!("sh-e2e-{tag}"))
        .send()
        .await
        .expect("queue")
        .queue_url()
        .expect("url")
        .to_owned();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("attributes")
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn).cloned())
        .expect("arn");
    let bus = format!("sh-e2e-{tag}");
    events.create_event_bus().name(&bus).send().await.expect("bus");
    events
        .put_rule()
        .name(&bus)
        .event_bus_name(&bus)
        .event_pattern(r#"{"source": ["lender"]}"#)
        .send()
        .await
        .expect("rule");
    let target = aws_sdk_eventbridge::types::Target::builder().id("q").arn(arn).build().expect("target");
    events.put_targets().rule(&bus).event_bus_name(&bus).targets(target).send().await.expect("targets");

    let hub = fast_hub().await;
    let key = hub.tenant_key("t1").await;
    subscribe_active(
        &hub,
        &key,
        json!({"type": "eventbridge", "event_bus": bus, "region": "us-east-1",
        "endpoint_url": aws_endpoint(), "credentials": {"access_key_id": KEY, "secret_access_key": SECRET}}),
    )
    .await;
    let event = Event::new("t1").body(br#"{"amount":5}"#.to_vec());
    hub.post_event(&key, &event).await;
    let end = tokio::time::Instant::now() + WAIT;
    let detail = loop {
        let out = sqs.receive_message().queue_url(&queue_url).wait_time_seconds(1).send().await.expect("receive");
        if let Some(m) = out.messages().first() {
            let envelope: Value = serde_json::from_str(m.body().expect("body")).expect("json");
            break envelope["detail"].clone();
        }
        assert!(tokio::time::Instant::now() < end, "nothing came through the rule");
    };
    assert_eq!(detail["id"], event.id().to_string());
    assert_eq!(detail["tenantid"], "t1");
    assert_eq!(detail["type"], "studio.lerian.lender.loan_application.approved");
    assert_eq!(detail["data"], json!({"amount": 5}));
}
