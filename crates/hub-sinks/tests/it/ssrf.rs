//! The SSRF matrix: every sink type against every form of a private address, with a listener on
//! loopback that must see no connection while private sinks are off, and that is reached (or at
//! least connected to) once they are on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hub_sinks::eventbridge::config::EventBridgeConfig;
use hub_sinks::kafka::config::{KafkaConfig, Mechanism, Sasl};
use hub_sinks::kinesis::config::KinesisConfig;
use hub_sinks::nats::config::NatsConfig;
use hub_sinks::pubsub::config::PubSubConfig;
use hub_sinks::rabbitmq::config::RabbitConfig;
use hub_sinks::s3::config::S3Config;
use hub_sinks::sns::config::SnsConfig;
use hub_sinks::sqs::config::SqsConfig;
use hub_sinks::webhook::config::AuthConfig;
use hub_sinks::webhook::config::WebhookConfig;
use hub_sinks::{Destination, FailureKind, Outcome, Secrets, Sink, Sinks};
use uuid::Uuid;

use crate::contract::message;

/// A TCP listener on loopback that counts the connections it accepts.
async fn listener() -> (u16, Arc<AtomicUsize>) {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = socket.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = socket.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            drop(tcp);
        }
    });
    (port, accepted)
}

fn destinations(host: &str, port: u16) -> Vec<Destination> {
    vec![
        Destination::Webhook(WebhookConfig {
            url: format!("http://{host}:{port}/hook"),
            headers: BTreeMap::new(),
            timeout_ms: 2000,
            signature: Default::default(),
            auth: None,
            tls: None,
        }),
        // A public receiver whose token endpoint is private: the token request is what the
        // guard must stop.
        Destination::Webhook(WebhookConfig {
            url: "https://receiver.example/hook".into(),
            headers: BTreeMap::new(),
            timeout_ms: 2000,
            signature: Default::default(),
            auth: Some(AuthConfig::OAuth2 {
                token_url: format!("http://{host}:{port}/token"),
                client_id: "hub".into(),
                scope: None,
                audience: None,
            }),
            tls: None,
        }),
        Destination::Rabbitmq(RabbitConfig {
            url: format!("amqp://hub@{host}:{port}/vh"),
            exchange: "events".into(),
            routing_key: String::new(),
        }),
        Destination::Rabbitmq(RabbitConfig {
            url: format!("amqps://hub@{host}:{port}/vh"),
            exchange: "events".into(),
            routing_key: String::new(),
        }),
        Destination::Sqs(SqsConfig {
            queue_url: "https://sqs.us-east-1.amazonaws.com/123456789012/q".into(),
            region: "us-east-1".into(),
            endpoint_url: Some(format!("http://{host}:{port}")),
            credentials: None,
        }),
        Destination::Eventbridge(EventBridgeConfig {
            event_bus: "bus".into(),
            region: "us-east-1".into(),
            endpoint_url: Some(format!("http://{host}:{port}")),
            credentials: None,
        }),
        // The same dialer serves the bootstrap brokers and every broker the cluster's metadata
        // names, so a bootstrap broker is where the guard is seen.
        Destination::Kafka(KafkaConfig {
            brokers: format!("{host}:{port}"),
            topic: "events".into(),
            tls: false,
            sasl: None,
        }),
        Destination::Kafka(KafkaConfig {
            brokers: format!("kafka.example.com:9092,{host}:{port}"),
            topic: "events".into(),
            tls: true,
            sasl: Some(Sasl { mechanism: Mechanism::ScramSha512, username: "hub".into() }),
        }),
        Destination::Sns(SnsConfig {
            topic_arn: "arn:aws:sns:us-east-1:123456789012:t".into(),
            region: "us-east-1".into(),
            endpoint_url: Some(format!("http://{host}:{port}")),
            credentials: None,
        }),
        Destination::Kinesis(KinesisConfig {
            stream_name: "s".into(),
            region: "us-east-1".into(),
            endpoint_url: Some(format!("http://{host}:{port}")),
            credentials: None,
        }),
        Destination::S3(S3Config {
            bucket: "b".into(),
            prefix: String::new(),
            region: "us-east-1".into(),
            endpoint_url: Some(format!("http://{host}:{port}")),
            credentials: None,
        }),
        // Every listed server goes through the guard; a later one is tried when an earlier fails.
        Destination::Nats(NatsConfig {
            servers: format!("nats://{host}:{port}"),
            subject: "events".into(),
            jetstream: true,
        }),
        Destination::Nats(NatsConfig {
            servers: format!("tls://nats.example.invalid:4222,tls://{host}:{port}"),
            subject: "events".into(),
            jetstream: false,
        }),
        Destination::Pubsub(PubSubConfig {
            project: "lerian-test".into(),
            topic: "events".into(),
            endpoint_url: Some(format!("http://{host}:{port}")),
        }),
    ]
}

fn secrets() -> Secrets {
    Secrets {
        signing: vec!["whsec_test".into()],
        credentials: Some(serde_json::json!({"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "x",
            "password": "p", "client_secret": "s"})),
        owner: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sink_connects_to_a_private_address_unless_allowed() {
    let (port, accepted) = listener().await;
    let guarded = Sinks::new(false, false, None, None).expect("sinks");
    let ext = BTreeMap::new();
    // Every way of writing loopback a tenant might try, as each URL form carries it.
    let hosts = ["127.0.0.1", "2130706433", "0x7f000001", "127.1", "localhost", "[::1]", "[::ffff:127.0.0.1]"];
    let mut refused = 0;
    for host in hosts {
        for destination in destinations(host, port) {
            let outcome = guarded
                .deliver(&destination, &secrets(), &message(b"{}", &ext, Uuid::now_v7()), Duration::from_secs(2))
                .await;
            match &outcome {
                Outcome::Failed(f) if f.kind == FailureKind::Forbidden => {
                    // A token endpoint's refusal says which request it was.
                    assert!(f.reason.ends_with(hub_sinks::guard::NOT_ALLOWED), "{host} {destination:?}: {}", f.reason);
                    assert!(!f.retryable);
                    refused += 1;
                }
                // A form the URL itself cannot carry is refused as invalid, which is no connection either.
                Outcome::Failed(f) if f.kind == FailureKind::Refused && f.status.is_none() => {}
                other => panic!("{host} {destination:?}: {other:?}"),
            }
            let probe = guarded.probe(&destination, &secrets(), "t1", Uuid::now_v7(), Duration::from_secs(2)).await;
            assert!(probe.is_err(), "{host} {destination:?}: a probe got through");
        }
    }
    assert!(refused >= hosts.len() * 9, "most forms are refused by the guard itself ({refused})");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "the private listener saw a connection");

    // The same destinations, private sinks allowed: the sinks do connect.
    let open = Sinks::new(true, false, None, None).expect("sinks");
    for destination in destinations("127.0.0.1", port) {
        let _ =
            open.deliver(&destination, &secrets(), &message(b"{}", &ext, Uuid::now_v7()), Duration::from_secs(2)).await;
    }
    assert!(accepted.load(Ordering::SeqCst) >= 10, "every sink connected with private sinks allowed");
}
