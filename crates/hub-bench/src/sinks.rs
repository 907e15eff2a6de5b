//! The `sinks` scenario: a burst of one tenant's events to one subscription of each new sink type
//! (Kafka on Apache Kafka; NATS on a real `nats-server` with JetStream; Pub/Sub on Google's
//! in-memory server; SNS, Kinesis and S3 on the AWS API emulator), delivered/s and CPU per
//! event of the hub and PostgreSQL. Delivery is counted from the hub's own metrics (delivered
//! attempts: no database work, so the count does not weigh on what it measures), and for Kafka,
//! NATS, Pub/Sub and S3 read back from the destination as well. The AWS
//! figures are bounded by the emulator, a single Python process: they measure what the hub costs
//! per event, not what AWS would take.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::harness::{BenchHub, BenchTopic, Usage, f0, metric_sum, report};
use crate::scenarios::{PATIENCE, cpu_json, cpu_rows};

/// A sink the scenario measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Kafka,
    Nats,
    Pubsub,
    Sns,
    Kinesis,
    S3,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Kafka => "kafka",
            Self::Nats => "nats",
            Self::Pubsub => "pubsub",
            Self::Sns => "sns",
            Self::Kinesis => "kinesis",
            Self::S3 => "s3",
        }
    }
}

fn aws_endpoint() -> String {
    std::env::var("STREAMING_HUB_BENCH_AWS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5000".to_owned())
}

async fn aws_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(aws_endpoint())
        .credentials_provider(aws_credential_types::Credentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "bench",
            None,
            None,
            "bench",
        ))
        .load()
        .await
}

fn aws_sink(mut sink: Value) -> Value {
    sink["region"] = json!("us-east-1");
    sink["endpoint_url"] = json!(aws_endpoint());
    sink["credentials"] = json!({"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "bench"});
    sink
}

/// A destination made for one run, and what is needed to read it back.
enum Destination {
    Kafka(hub_testkit::kafka::Broker),
    Nats(hub_testkit::nats::NatsServer),
    Pubsub(hub_testkit::pubsub::PubSubServer),
    S3 { client: aws_sdk_s3::Client, bucket: String },
    Other,
}

async fn destination(kind: Kind) -> anyhow::Result<(Value, Destination)> {
    let tag = uuid::Uuid::now_v7().simple().to_string();
    match kind {
        Kind::Kafka => {
            let broker = hub_testkit::kafka::Broker::start().await?;
            broker.create_topic(4).await?;
            let sink = json!({"type": "kafka", "brokers": broker.brokers, "topic": crate::harness::TOPIC});
            Ok((sink, Destination::Kafka(broker)))
        }
        Kind::Nats => {
            let server = hub_testkit::nats::NatsServer::start(hub_testkit::nats::Auth::None).await?;
            server.client(json!({})).await?.create_stream("BENCH", &["bench.>"]).await?;
            let sink = json!({"type": "nats", "servers": server.url(), "subject": "bench.events"});
            Ok((sink, Destination::Nats(server)))
        }
        Kind::Pubsub => {
            let server = hub_testkit::pubsub::PubSubServer::start().await?;
            server.create_topic("lerian-bench", "bench").await?;
            let sink = json!({"type": "pubsub", "project": "lerian-bench", "topic": "bench",
                              "endpoint_url": server.endpoint_url()});
            Ok((sink, Destination::Pubsub(server)))
        }
        Kind::Sns => {
            let sns = aws_sdk_sns::Client::new(&aws_config().await);
            let topic = sns.create_topic().name(format!("bench-{tag}")).send().await.context("the AWS emulator")?;
            let arn = topic.topic_arn().context("no topic ARN")?;
            Ok((aws_sink(json!({"type": "sns", "topic_arn": arn})), Destination::Other))
        }
        Kind::Kinesis => {
            let kinesis = aws_sdk_kinesis::Client::new(&aws_config().await);
            let stream = format!("bench-{tag}");
            kinesis.create_stream().stream_name(&stream).shard_count(4).send().await.context("the AWS emulator")?;
            Ok((aws_sink(json!({"type": "kinesis", "stream_name": stream})), Destination::Other))
        }
        Kind::S3 => {
            let config = aws_config().await;
            let client = aws_sdk_s3::Client::from_conf(
                aws_sdk_s3::config::Builder::from(&config).force_path_style(true).build(),
            );
            let bucket = format!("bench-{tag}");
            client.create_bucket().bucket(&bucket).send().await.context("the AWS emulator")?;
            Ok((aws_sink(json!({"type": "s3", "bucket": bucket})), Destination::S3 { client, bucket }))
        }
    }
}

impl Destination {
    /// What the destination holds now (records or objects); `None` where it is not read back.
    async fn count(&self, at_least: usize) -> anyhow::Result<Option<usize>> {
        match self {
            Self::Kafka(broker) => {
                broker.read_all(at_least).await?;
                Ok(Some(at_least))
            }
            Self::Nats(server) => {
                let mut client = server.client(json!({})).await?;
                let deadline = Instant::now() + PATIENCE;
                loop {
                    let n = client.stream_messages("BENCH").await?;
                    if n as usize >= at_least || Instant::now() > deadline {
                        return Ok(Some(n as usize));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Self::Pubsub(server) => Ok(Some(server.wait_for(at_least).await?.len())),
            Self::S3 { client, bucket } => {
                let (mut n, mut token) = (0, None);
                loop {
                    let page =
                        client.list_objects_v2().bucket(bucket).set_continuation_token(token.clone()).send().await?;
                    n += page.contents().len();
                    token = page.next_continuation_token().map(str::to_owned);
                    if token.is_none() {
                        return Ok(Some(n));
                    }
                }
            }
            Self::Other => Ok(None),
        }
    }
}

/// Attempts of `sink` with `outcome`.
fn attempts(metrics: &str, sink: &str, outcome: &str) -> u64 {
    let labels = [format!("sink=\"{sink}\""), format!("outcome=\"{outcome}\"")];
    metric_sum(metrics, "streaming_hub_delivery_attempts_total", &labels) as u64
}

/// The mean attempt duration of `sink` in ms, from the hub's histogram.
fn mean_attempt_ms(metrics: &str, sink: &str) -> f64 {
    let label = [format!("sink=\"{sink}\"")];
    let count = metric_sum(metrics, "streaming_hub_delivery_attempt_duration_seconds_count", &label);
    let seconds = metric_sum(metrics, "streaming_hub_delivery_attempt_duration_seconds_sum", &label);
    if count > 0.0 { seconds * 1000.0 / count } else { f64::NAN }
}

/// Waits until the hub has delivered `n` events to `sink` in all, from its metrics.
async fn delivered(hub: &BenchHub, sink: &str, n: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while attempts(&hub.metrics().await?, sink, "delivered") < n {
        anyhow::ensure!(Instant::now() < deadline, "not every event was delivered within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// The subscription's dead jobs.
async fn dead(hub: &BenchHub, key: &str, id: &str) -> anyhow::Result<i64> {
    let page: Value =
        hub.http.get(format!("{}/v1/subscriptions?limit=10", hub.base)).bearer_auth(key).send().await?.json().await?;
    let sub = page["items"].as_array().and_then(|i| i.iter().find(|s| s["id"] == id)).context("listed")?;
    Ok(sub["health"]["jobs"]["dead"].as_i64().unwrap_or(0))
}

struct Run {
    kind: Kind,
    delivered_per_s: f64,
    dead: i64,
    /// Attempts that failed (and were retried) over the whole run.
    failed_attempts: u64,
    /// The mean duration of an attempt (the sink's own time) over the whole run.
    attempt_ms: f64,
    read_back: Option<usize>,
    spent: Usage,
}

async fn run(kind: Kind, events: usize, producers: usize) -> anyhow::Result<(Run, Usage)> {
    let (sink, dest) = destination(kind).await?;
    let hub = BenchHub::start(None).await?;
    let key = hub.tenant(kind.name()).await?;
    let id = hub.subscribe(&key, sink).await?;
    let who = [(key.clone(), kind.name().to_owned())];
    const WARM: usize = 100;
    hub.post_many(&who, WARM, producers).await?;
    delivered(&hub, kind.name(), WARM as u64).await?;
    let before = hub.usage();
    let started = Instant::now();
    hub.post_many(&who, events, producers).await?;
    delivered(&hub, kind.name(), (WARM + events) as u64).await?;
    let took = started.elapsed();
    let spent = hub.usage().since(&before);
    let text = hub.metrics().await?;
    let failed_attempts = attempts(&text, kind.name(), "failed");
    let attempt_ms = mean_attempt_ms(&text, kind.name());
    let dead = dead(&hub, &key, &id).await?;
    // Warm-up, measured events and the verification message.
    let read_back = dest.count(WARM + events + 1).await?;
    let usage = hub.finish().await?;
    Ok((
        Run {
            kind,
            delivered_per_s: events as f64 / took.as_secs_f64(),
            dead,
            failed_attempts,
            attempt_ms,
            read_back,
            spent,
        },
        usage,
    ))
}

/// `sinks`: a burst of `events` to one subscription of each sink in `kinds`.
pub async fn sinks(kinds: &[Kind], events: usize, producers: usize, json_out: &Path) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    let mut last_usage = None;
    for kind in kinds {
        let (r, usage) = run(*kind, events, producers).await?;
        runs.push(r);
        last_usage = Some(usage);
    }
    let usage = last_usage.context("no sink to measure")?;
    let store = if usage.postgres_cpu_s > 0.0 { "postgres" } else { "sqlite" };
    let mut rows = Vec::new();
    let mut figures = json!({"scenario": "sinks", "store": store, "events": events, "producers": producers});
    for r in &runs {
        let [hub_cpu, _, both] = cpu_rows(&r.spent, events);
        let name = r.kind.name();
        rows.push((format!("{name}: delivered/s"), f0(r.delivered_per_s)));
        rows.push((format!("{name}: hub CPU ms/event"), hub_cpu.1));
        rows.push((format!("{name}: hub + PostgreSQL CPU ms/event"), both.1));
        rows.push((format!("{name}: mean attempt ms"), format!("{:.2}", r.attempt_ms)));
        rows.push((format!("{name}: failed attempts / dead"), format!("{} / {}", r.failed_attempts, r.dead)));
        rows.push((format!("{name}: read back"), r.read_back.map_or("-".to_owned(), |n| n.to_string())));
        figures[name] = json!({"delivered_per_s": r.delivered_per_s, "dead": r.dead, "failed_attempts": r.failed_attempts, "mean_attempt_ms": r.attempt_ms, "read_back": r.read_back,
                               "cpu_ms_per_event": cpu_json(&r.spent, events)});
    }
    let rows: Vec<(&str, String)> = rows.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    report(
        &format!("sinks ({store}, {events} events of ~1 KiB of one tenant, one subscription per sink)"),
        &rows,
        figures,
        &usage,
        json_out,
    )
}
