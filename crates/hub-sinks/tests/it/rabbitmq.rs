//! The RabbitMQ sink against the real broker on this machine (127.0.0.1:5672, guest/guest).

use std::time::Duration;

use hub_sinks::TypedSink;
use hub_sinks::rabbitmq::{RabbitSink, RabbitTarget};
use lapin::options::{BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use uuid::Uuid;

use crate::contract::{self, Case, Fixture, message};

pub fn amqp_url() -> String {
    std::env::var("STREAMING_HUB_TEST_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A fresh exchange, and a queue bound to it with `#`, for one test.
pub struct Topology {
    pub channel: Channel,
    pub exchange: String,
    pub queue: String,
    _connection: Connection,
}

impl Topology {
    pub async fn new() -> Self {
        let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ is required for these tests ({}): {e}", amqp_url()));
        let channel = connection.create_channel().await.expect("channel");
        let tag = Uuid::now_v7().simple().to_string();
        let (exchange, queue) = (format!("sh-test-{tag}"), format!("sh-test-{tag}"));
        let auto_delete = ExchangeDeclareOptions { auto_delete: true, ..Default::default() };
        channel
            .exchange_declare(
                ShortString::from(exchange.as_str()),
                ExchangeKind::Topic,
                auto_delete,
                FieldTable::default(),
            )
            .await
            .expect("exchange");
        let queue_options = QueueDeclareOptions { auto_delete: true, ..Default::default() };
        channel
            .queue_declare(ShortString::from(queue.as_str()), queue_options, FieldTable::default())
            .await
            .expect("queue");
        channel
            .queue_bind(
                ShortString::from(queue.as_str()),
                ShortString::from(exchange.as_str()),
                ShortString::from("loan_application.#"),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind");
        Self { channel, exchange, queue, _connection: connection }
    }

    /// Messages in the queue: (headers, properties' message id, body).
    pub async fn drain(&self, expected: usize) -> Vec<(FieldTable, String, Vec<u8>)> {
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while got.len() < expected && tokio::time::Instant::now() < deadline {
            match self.channel.basic_get(ShortString::from(self.queue.as_str()), BasicGetOptions { no_ack: true }).await
            {
                Ok(Some(m)) => {
                    let props = m.delivery.properties.clone();
                    let headers = props.headers().clone().unwrap_or_default();
                    let id = props.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
                    got.push((headers, id, m.delivery.data.clone()));
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        got
    }
}

pub fn header(headers: &FieldTable, key: &str) -> String {
    match headers.inner().get(&ShortString::from(key)) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("header {key}: {other:?}"),
    }
}

fn target(url: &str, password: Option<&str>, exchange: &str, timeout: Duration) -> RabbitTarget {
    RabbitTarget {
        url: url.to_owned(),
        password: password.map(str::to_owned),
        exchange: exchange.to_owned(),
        routing_key: "{resource}.{event}".to_owned(),
        timeout,
        allow_private: true,
    }
}

/// A TCP server that accepts connections and never speaks: every attempt times out.
async fn silent_server() -> String {
    format!("amqp://guest@{}/%2f", crate::receiver::silent_addr().await)
}

struct RabbitFixture {
    sink: RabbitSink,
    topology: Topology,
    missing: String,
    silent: String,
}

impl Fixture for RabbitFixture {
    type S = RabbitSink;

    fn sink(&self) -> &RabbitSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> RabbitTarget {
        let base = "amqp://guest@127.0.0.1:5672/%2f";
        let t = Duration::from_secs(5);
        match case {
            Case::Healthy => target(base, Some("guest"), &self.topology.exchange, t),
            // An exchange that does not exist: the broker closes the channel (404).
            Case::Refusing => target(base, Some("guest"), &self.missing, t),
            Case::Unreachable => {
                let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
                target(&format!("amqp://guest@127.0.0.1:{port}/%2f"), Some("guest"), "x", t)
            }
            Case::BadCredentials => target(base, Some("wrong-password-123"), &self.topology.exchange, t),
            Case::Slow => target(&self.silent, Some("guest"), "x", Duration::from_millis(500)),
        }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        self.topology
            .drain(expected)
            .await
            .into_iter()
            .map(|(headers, id, body)| {
                assert_eq!(header(&headers, "ce-id"), id, "message_id is the ce-id");
                (id.parse().expect("uuid"), body)
            })
            .collect()
    }

    fn secrets(&self) -> Vec<String> {
        vec!["wrong-password-123".to_owned()]
    }
}

#[tokio::test]
async fn the_rabbitmq_sink_passes_the_contract() {
    let fixture = RabbitFixture {
        sink: RabbitSink::new(true),
        topology: Topology::new().await,
        missing: format!("sh-test-missing-{}", Uuid::now_v7().simple()),
        silent: silent_server().await,
    };
    contract::run(&fixture).await;
}

#[tokio::test]
async fn an_unroutable_message_is_a_failure() {
    let topology = Topology::new().await;
    let sink = RabbitSink::new(true);
    let ext = std::collections::BTreeMap::new();
    let mut t = target("amqp://guest@127.0.0.1:5672/%2f", Some("guest"), &topology.exchange, Duration::from_secs(5));
    // No queue is bound for this key: with `mandatory`, the broker returns the message.
    t.routing_key = "nobody.listens".to_owned();
    match sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await {
        hub_sinks::Outcome::Failed(f) => {
            assert_eq!(f.kind, hub_sinks::FailureKind::Refused);
            assert!(f.reason.contains("unroutable"), "{f:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(topology.drain(1).await.is_empty());
}

#[tokio::test]
async fn messages_carry_the_cloudevents_headers_persistently() {
    let topology = Topology::new().await;
    let sink = RabbitSink::new(true);
    let ext = std::collections::BTreeMap::from([("partner".to_owned(), "acme".to_owned())]);
    let id = Uuid::now_v7();
    let t = target("amqp://guest@127.0.0.1:5672/%2f", Some("guest"), &topology.exchange, Duration::from_secs(5));
    assert!(sink.attempt(&t, &message(br#"{"a":1}"#, &ext, id)).await.is_delivered());
    let mut got = topology.drain(1).await;
    assert_eq!(got.len(), 1);
    let (headers, message_id, body) = got.remove(0);
    assert_eq!(message_id, id.to_string());
    assert_eq!(body, br#"{"a":1}"#);
    for (k, v) in [
        ("ce-id", id.to_string()),
        ("ce-source", "lender".to_owned()),
        ("ce-type", "studio.lerian.lender.loan_application.approved".to_owned()),
        ("ce-tenantid", "tenant-a".to_owned()),
        ("ce-subject", "loan-42".to_owned()),
        ("ce-partner", "acme".to_owned()),
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()),
    ] {
        assert_eq!(header(&headers, k), v, "{k}");
    }
    // The routing key came from the placeholders: the queue is bound to loan_application.#.
    // A broken connection is replaced on the next attempt: closing it here does not stick.
    assert!(sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await.is_delivered());
}
