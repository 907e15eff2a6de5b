//! `streaming-hub bench`: measured figures, never test assertions.
//!
//! Each scenario starts what it needs — the hub in this process (on the embedded SQLite store, or
//! on PostgreSQL when `STREAMING_HUB_POSTGRES_DSN` is set, in a fresh schema it drops afterwards),
//! a Kafka-protocol broker where Kafka is measured, and a local webhook receiver that counts
//! deliveries by `X-Lerian-Event-Id` and measures latency from the send timestamp (`sent_at_us`)
//! in each payload — then prints a table and writes JSON. The scenarios are in [`scenarios`].
//!
//! The load generator and the receiver run in the hub's process, so its CPU seconds and peak RSS
//! include them: they bound the hub's own figures from above.

pub mod scenarios;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// The source (and so the topic) of every benchmark event.
pub const SOURCE: &str = "bench";
/// The Kafka topic benchmark events are produced to.
pub const TOPIC: &str = "lerian.streaming.bench";
/// How long a slow receiver takes to answer.
pub const SLOW_ANSWER: Duration = Duration::from_secs(2);

pub fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// An event body of about 1 KiB carrying its send time.
pub fn body(sent_at_us: u64) -> String {
    json!({"sent_at_us": sent_at_us, "filler": FILLER}).to_string()
}

const FILLER: &str = concat!(
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
);

/// The CloudEvents attributes of a benchmark event of `tenant`.
pub fn ce_headers(tenant: &str) -> [(&'static str, String); 9] {
    [
        ("ce-specversion", "1.0".to_owned()),
        ("ce-id", uuid::Uuid::now_v7().to_string()),
        ("ce-source", SOURCE.to_owned()),
        ("ce-type", "studio.lerian.bench.payment.settled".to_owned()),
        ("ce-time", chrono::Utc::now().to_rfc3339()),
        ("ce-schemaversion", "1.0.0".to_owned()),
        ("ce-resourcetype", "payment".to_owned()),
        ("ce-eventtype", "settled".to_owned()),
        ("ce-tenantid", tenant.to_owned()),
    ]
}

// ---------------------------------------------------------------------------------------------
// The receiver

/// What one receiver label (one URL path) got.
#[derive(Debug, Default, Clone)]
pub struct Received {
    pub per_event: HashMap<String, u32>,
    pub latencies_us: Vec<u64>,
    /// When each delivered event was sent (µs since the epoch), in the order of `latencies_us`.
    pub sent_us: Vec<u64>,
    pub first_at: Option<Instant>,
    pub last_at: Option<Instant>,
}

impl Received {
    pub fn distinct(&self) -> usize {
        self.per_event.len()
    }
    pub fn duplicates(&self) -> usize {
        self.per_event.values().map(|n| *n as usize).sum::<usize>() - self.per_event.len()
    }
    /// Distinct deliveries per second between `since` and the last one.
    pub fn rate_since(&self, since: Instant) -> f64 {
        self.last_at.map_or(0.0, |last| self.distinct() as f64 / (last - since).as_secs_f64().max(1e-9))
    }
    pub fn latency(&self) -> Latency {
        Latency::of(&self.latencies_us)
    }
    /// The latency of the events sent within `[from_us, to_us)`.
    pub fn latency_of_sent(&self, from_us: u64, to_us: u64) -> (Latency, usize) {
        let samples: Vec<u64> = self
            .latencies_us
            .iter()
            .zip(&self.sent_us)
            .filter(|(_, s)| (from_us..to_us).contains(*s))
            .map(|(l, _)| *l)
            .collect();
        (Latency::of(&samples), samples.len())
    }
}

type Tally = Arc<Mutex<HashMap<String, Received>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A local webhook receiver: `/fast/<label>` answers 204 at once, `/slow/<label>` after
/// [`SLOW_ANSWER`]. Verification requests are answered at once.
#[derive(Debug, Clone)]
pub struct Receiver {
    base: String,
    tally: Tally,
}

async fn receive(State(t): State<Tally>, uri: Uri, headers: HeaderMap, body: Bytes) -> (StatusCode, Bytes) {
    if headers.get("x-lerian-event-type").is_some_and(|v| v == "streaming_hub.verification") {
        return (StatusCode::OK, body);
    }
    let mut parts = uri.path().trim_start_matches('/').splitn(2, '/');
    let (speed, label) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default().to_owned());
    if speed == "slow" {
        tokio::time::sleep(SLOW_ANSWER).await;
    }
    let id = headers.get("x-lerian-event-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let sent = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["sent_at_us"].as_u64()).unwrap_or(0);
    let latency = now_us().saturating_sub(sent);
    let now = Instant::now();
    let mut tally = lock(&t);
    let r = tally.entry(label).or_default();
    *r.per_event.entry(id).or_default() += 1;
    r.latencies_us.push(latency);
    r.sent_us.push(sent);
    r.first_at.get_or_insert(now);
    r.last_at = Some(now);
    (StatusCode::NO_CONTENT, Bytes::new())
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Self> {
        let tally: Tally = Arc::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let app = axum::Router::new().fallback(receive).with_state(Arc::clone(&tally));
        // As production web servers do, answers go out without a Nagle delay.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { base, tally })
    }

    pub fn url(&self, label: &str, slow: bool) -> String {
        format!("{}/{}/{label}", self.base, if slow { "slow" } else { "fast" })
    }

    pub fn delivered(&self, label: &str) -> usize {
        lock(&self.tally).get(label).map_or(0, Received::distinct)
    }

    /// A copy of what `label` received so far.
    pub fn received(&self, label: &str) -> Received {
        lock(&self.tally).get(label).cloned().unwrap_or_default()
    }

    /// Takes (and clears) what `label` received.
    pub fn take(&self, label: &str) -> Received {
        lock(&self.tally).remove(label).unwrap_or_default()
    }

    /// Waits until `label` got `n` distinct events; false at the deadline.
    pub async fn wait_for(&self, label: &str, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.delivered(label) < n {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(samples_us: &[u64]) -> Self {
        let mut sorted = samples_us.to_vec();
        sorted.sort_unstable();
        let at = |p: f64| {
            if sorted.is_empty() {
                return 0.0;
            }
            sorted[((sorted.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0
        };
        Self { p50: at(0.5), p99: at(0.99), max: at(1.0) }
    }
    pub fn json(&self) -> Value {
        json!({"p50": self.p50, "p99": self.p99, "max": self.max})
    }
}

// ---------------------------------------------------------------------------------------------
// The hub under measurement

/// CPU seconds (user + system) and peak RSS in MiB of this process, from /proc.
pub fn process_usage() -> (f64, f64) {
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            let f: Vec<&str> = after.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(0.0);
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0);
    (cpu, rss)
}

/// The database a bench runs on.
#[derive(Debug)]
pub enum Db {
    Sqlite { path: PathBuf },
    Postgres { pool: sqlx::PgPool, schema: String },
}

/// A hub started for one scenario.
#[derive(Debug)]
pub struct BenchHub {
    pub hub: crate::Hub,
    pub base: String,
    pub http: reqwest::Client,
    pub db: Db,
    pub workers: u32,
    shutdown: CancellationToken,
    dir: PathBuf,
}

impl BenchHub {
    /// Starts a hub on a fresh database; `kafka` subscribes it to that broker.
    pub async fn start(kafka: Option<&Broker>) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("streaming-hub-bench-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir)?;
        let mut vars: HashMap<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("STREAMING_HUB_") && !k.starts_with("STREAMING_HUB_BENCH_"))
            .collect();
        let sqlite = dir.join("bench.db");
        for (k, v) in [
            ("STREAMING_HUB_ENV", "local".to_owned()),
            ("STREAMING_HUB_SQLITE_PATH", sqlite.display().to_string()),
            ("STREAMING_HUB_HTTP_LISTEN_ADDR", "127.0.0.1:0".to_owned()),
            ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
            ("STREAMING_HUB_DEV_KEK", crate::keys::generate("")),
            // A bench measures the hub, not the per-tenant ingest quota (set them to measure it).
            ("STREAMING_HUB_INGEST_RATE", "10000000".to_owned()),
            ("STREAMING_HUB_INGEST_BURST", "10000000".to_owned()),
        ] {
            vars.entry(k.to_owned()).or_insert(v);
        }
        let db = match vars.get("STREAMING_HUB_POSTGRES_DSN") {
            Some(dsn) => {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(2)
                    .connect(dsn)
                    .await
                    .context("STREAMING_HUB_POSTGRES_DSN: cannot connect")?;
                let schema = format!("shbench_{}", uuid::Uuid::now_v7().simple());
                sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&pool).await?;
                vars.insert("STREAMING_HUB_POSTGRES_SCHEMA".to_owned(), schema.clone());
                Db::Postgres { pool, schema }
            }
            None => Db::Sqlite { path: sqlite },
        };
        if let Some(broker) = kafka {
            vars.insert("STREAMING_HUB_KAFKA_BROKERS".to_owned(), broker.brokers.clone());
            vars.insert("STREAMING_HUB_KAFKA_GROUP_ID".to_owned(), format!("bench-{}", uuid::Uuid::now_v7().simple()));
            vars.entry("STREAMING_HUB_KAFKA_TOPIC_REFRESH".to_owned()).or_insert_with(|| "1s".to_owned());
        }
        let config = Config::from_vars(vars).map_err(|e| anyhow::anyhow!("{e}"))?;
        let workers = config.dispatch_workers;
        let shutdown = CancellationToken::new();
        let hub = crate::start(config, shutdown.clone()).await?;
        let base = format!("http://{}", hub.addr);
        hub_sinks::webhook::install_crypto_provider();
        let http = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
        Ok(Self { hub, base, http, db, workers, shutdown, dir })
    }

    pub fn store_name(&self) -> &'static str {
        match self.db {
            Db::Sqlite { .. } => "sqlite",
            Db::Postgres { .. } => "postgres",
        }
    }

    /// Stops the hub and removes its database.
    pub async fn finish(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.hub.wait().await?;
        if let Db::Postgres { pool, schema } = &self.db {
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(pool).await?;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(())
    }

    /// An API key of a new tenant.
    pub async fn tenant(&self, tenant: &str) -> anyhow::Result<String> {
        let id = hub_core::TenantId::parse(tenant).map_err(anyhow::Error::msg)?;
        Ok(crate::keys::issue(self.hub.store.as_ref(), Some(&id), "bench").await?.1)
    }

    /// Creates a subscription to every event and waits until it is active; returns its id.
    pub async fn subscribe(&self, key: &str, sink: Value) -> anyhow::Result<String> {
        let response = self
            .http
            .post(format!("{}/v1/subscriptions", self.base))
            .bearer_auth(key)
            .json(&json!({"name": "bench", "event_types": ["*.*"], "sink": sink}))
            .send()
            .await?;
        anyhow::ensure!(response.status().is_success(), "creating a subscription: {}", response.text().await?);
        let sub: Value = response.json().await?;
        let id = sub["id"].as_str().context("no subscription id")?.to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s: Value = self
                .http
                .get(format!("{}/v1/subscriptions/{id}", self.base))
                .bearer_auth(key)
                .send()
                .await?
                .json()
                .await?;
            if s["verification_state"] == "active" {
                return Ok(id);
            }
            anyhow::ensure!(Instant::now() < deadline, "subscription {id} never became active: {s}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Posts one event of `tenant` over HTTP.
    pub async fn post(&self, key: &str, tenant: &str) -> anyhow::Result<()> {
        self.clone_client().post(key, tenant).await
    }

    /// Posts `n` events of each `(key, tenant)` in turn, from `producers` concurrent producers;
    /// returns how long it took.
    pub async fn post_many(&self, who: &[(String, String)], n: usize, producers: usize) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let this = Arc::new(self.clone_client());
        let who = Arc::new(who.to_vec());
        let mut tasks = Vec::new();
        for _ in 0..producers.max(1) {
            let (next, this, who) = (Arc::clone(&next), Arc::clone(&this), Arc::clone(&who));
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= n {
                        return Ok::<_, anyhow::Error>(());
                    }
                    let (key, tenant) = &who[i % who.len()];
                    this.post(key, tenant).await?;
                }
            }));
        }
        for t in tasks {
            t.await??;
        }
        Ok(started.elapsed())
    }

    fn clone_client(&self) -> Poster {
        Poster { base: self.base.clone(), http: self.http.clone() }
    }

    /// How many events the inbox holds (exactly).
    pub async fn inbox_count(&self) -> anyhow::Result<i64> {
        Ok(match &self.db {
            Db::Postgres { pool, schema } => {
                sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.events")).fetch_one(pool).await?
            }
            Db::Sqlite { .. } => self.hub.store.inbox_size().await?,
        })
    }

    /// Waits until the inbox holds `n` events; returns when it first held any and when it held all.
    pub async fn wait_inbox(&self, n: i64, within: Duration) -> anyhow::Result<(Instant, Instant)> {
        let deadline = Instant::now() + within;
        let mut first = None;
        loop {
            let count = self.inbox_count().await?;
            let now = Instant::now();
            if count > 0 {
                first.get_or_insert(now);
            }
            if count >= n {
                return Ok((first.unwrap_or(now), now));
            }
            anyhow::ensure!(now < deadline, "the inbox holds {count} of {n} events after {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The HTTP side of a bench hub, shareable with producer tasks.
#[derive(Debug, Clone)]
struct Poster {
    base: String,
    http: reqwest::Client,
}

impl Poster {
    async fn post(&self, key: &str, tenant: &str) -> anyhow::Result<()> {
        let mut request = self
            .http
            .post(format!("{}/v1/events", self.base))
            .bearer_auth(key)
            .header("content-type", "application/json");
        for (k, v) in ce_headers(tenant) {
            request = request.header(k, v);
        }
        let response = request.body(body(now_us())).send().await?;
        anyhow::ensure!(response.status().as_u16() == 202, "an event was not accepted: {}", response.status());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The broker

/// A Kafka broker: `STREAMING_HUB_BENCH_KAFKA_BROKERS` when set; otherwise an Apache Kafka
/// broker started here from the jars `scripts/services kafka` installs
/// (`STREAMING_HUB_KAFKA_HOME`, default `~/.cache/streaming-hub/kafka/<version>`); only when those
/// are missing, and said so, the `tansu` broker (`STREAMING_HUB_BENCH_TANSU`).
#[derive(Debug)]
pub struct Broker {
    pub brokers: String,
    process: Option<BrokerProcess>,
}

#[derive(Debug)]
enum BrokerProcess {
    /// A single-node KRaft broker and controller, with its configuration and data in `dir`.
    Kafka {
        child: std::process::Child,
        dir: PathBuf,
        /// The Apache Kafka installation.
        home: PathBuf,
    },
    Tansu(std::process::Child),
}

/// Starts the Apache Kafka broker configured in `dir` (its `server.properties`), logging there.
fn spawn_kafka(dir: &Path, home: &Path, quick: bool) -> anyhow::Result<std::process::Child> {
    let lib = home.join("lib");
    let classpath = format!("{}/*", lib.display());
    let log = |name: &str| std::fs::OpenOptions::new().create(true).append(true).open(dir.join(name));
    let mut java = std::process::Command::new("java");
    java.args(["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC"]);
    if quick {
        java.arg("-XX:TieredStopAtLevel=1");
    }
    java.args(["-cp", &classpath, "kafka.Kafka"])
        .arg(dir.join("server.properties"))
        .stdout(log("broker.log")?)
        .stderr(log("broker.err")?)
        .spawn()
        .context("starting the Kafka broker")
}

impl Drop for Broker {
    fn drop(&mut self) {
        match &mut self.process {
            Some(BrokerProcess::Kafka { child, dir, .. }) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(dir);
            }
            Some(BrokerProcess::Tansu(child)) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            None => {}
        }
    }
}

/// The Apache Kafka version `scripts/services kafka` installs.
pub const KAFKA_VERSION: &str = "4.1.1";

/// Where `scripts/services` installs tools: `STREAMING_HUB_CACHE`, or `~/.cache/streaming-hub`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("STREAMING_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/streaming-hub")
    })
}

/// Where `scripts/services kafka` puts the Apache Kafka jars (`<home>/lib`).
pub fn kafka_home() -> PathBuf {
    if let Ok(home) = std::env::var("STREAMING_HUB_KAFKA_HOME") {
        return PathBuf::from(home);
    }
    cache_dir().join("kafka").join(KAFKA_VERSION)
}

/// A local port nothing listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Broker {
    pub async fn start() -> anyhow::Result<Self> {
        if let Ok(brokers) = std::env::var("STREAMING_HUB_BENCH_KAFKA_BROKERS") {
            return Ok(Self { brokers, process: None });
        }
        let home = kafka_home();
        if home.join("lib").is_dir() {
            return Self::apache(&home, false).await;
        }
        let bin = std::env::var("STREAMING_HUB_BENCH_TANSU")
            .map(PathBuf::from)
            .unwrap_or_else(|_| cache_dir().join("tansu/bin/tansu"));
        anyhow::ensure!(
            bin.is_file(),
            "no Apache Kafka at {} (`scripts/services kafka` installs it; STREAMING_HUB_KAFKA_HOME names \
             another), no tansu broker at {}, and STREAMING_HUB_BENCH_KAFKA_BROKERS is unset",
            home.display(),
            bin.display()
        );
        eprintln!(
            "bench: Apache Kafka is not installed at {}; falling back to the tansu broker, whose figures \
             are not comparable",
            home.display()
        );
        Self::tansu(&bin).await
    }

    /// Starts a single-node Apache Kafka (KRaft, broker and controller in one process) from the
    /// jars under `home/lib`, on free local ports, with its data in a fresh temporary folder, and
    /// waits until it serves metadata. `quick` trades peak speed for a faster JVM start (tests).
    /// The process is stopped and its folder removed when the broker is dropped.
    pub async fn apache(home: &Path, quick: bool) -> anyhow::Result<Self> {
        let lib = home.join("lib");
        anyhow::ensure!(lib.is_dir(), "no Apache Kafka jars under {} (`scripts/services kafka`)", lib.display());
        let (port, controller) = (free_port()?, free_port()?);
        let dir = std::env::temp_dir().join(format!("streaming-hub-kafka-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(dir.join("data"))?;
        let properties = dir.join("server.properties");
        std::fs::write(
            &properties,
            format!(
                "process.roles=broker,controller\n\
                 node.id=1\n\
                 controller.quorum.voters=1@127.0.0.1:{controller}\n\
                 listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
                 controller.listener.names=CONTROLLER\n\
                 inter.broker.listener.name=PLAINTEXT\n\
                 listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
                 log.dirs={data}\n\
                 offsets.topic.replication.factor=1\n\
                 offsets.topic.num.partitions=4\n\
                 transaction.state.log.replication.factor=1\n\
                 transaction.state.log.min.isr=1\n\
                 share.coordinator.state.topic.replication.factor=1\n\
                 share.coordinator.state.topic.min.isr=1\n\
                 group.initial.rebalance.delay.ms=0\n\
                 auto.create.topics.enable=false\n\
                 num.network.threads=2\n\
                 num.io.threads=2\n",
                data = dir.join("data").display()
            ),
        )?;
        let classpath = format!("{}/*", lib.display());
        let log = |name: &str| std::fs::File::create(dir.join(name));
        // A cluster id is a UUID in unpadded URL-safe base64.
        let cluster = {
            use base64::Engine;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::now_v7().as_bytes())
        };
        let format = std::process::Command::new("java")
            .args(["-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", &classpath, "kafka.tools.StorageTool", "format"])
            .args(["-t", &cluster, "-c"])
            .arg(&properties)
            .stdout(log("format.log")?)
            .stderr(log("format.err")?)
            .spawn()
            .context("starting java (Apache Kafka needs a Java runtime)")?;
        let formatted = tokio::task::spawn_blocking(move || format.wait_with_output()).await??;
        anyhow::ensure!(
            formatted.status.success(),
            "formatting the Kafka storage failed; see {}",
            dir.join("format.err").display()
        );
        let child = spawn_kafka(&dir, home, quick)?;
        let broker = Self {
            brokers: format!("127.0.0.1:{port}"),
            process: Some(BrokerProcess::Kafka { child, dir: dir.clone(), home: home.to_owned() }),
        };
        broker.ready(&dir).await?;
        Ok(broker)
    }

    /// Kills an Apache Kafka broker (a crash: no clean shutdown), keeping its data and ports.
    pub fn kill(&mut self) {
        if let Some(BrokerProcess::Kafka { child, .. }) = &mut self.process {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed Apache Kafka broker again on its data and ports, and waits until it serves.
    pub async fn start_again(&mut self, quick: bool) -> anyhow::Result<()> {
        let Some(BrokerProcess::Kafka { child, dir, home }) = &mut self.process else {
            anyhow::bail!("only an Apache Kafka broker started here can be started again");
        };
        *child = spawn_kafka(dir, home, quick)?;
        let dir = dir.clone();
        self.ready(&dir).await
    }

    /// Waits until the broker answers a metadata request.
    async fn ready(&self, dir: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let brokers = self.brokers.clone();
            let ready = tokio::task::spawn_blocking(move || {
                let consumer: Result<BaseConsumer, _> = ClientConfig::new().set("bootstrap.servers", &brokers).create();
                consumer.is_ok_and(|c| {
                    c.fetch_metadata(None, Duration::from_secs(2)).is_ok_and(|m| !m.brokers().is_empty())
                })
            })
            .await?;
            if ready {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the Kafka broker did not start within 90 s; see {}",
                dir.join("broker.err").display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether this is the tansu fallback, which needs one record per produce batch.
    pub fn is_tansu(&self) -> bool {
        matches!(self.process, Some(BrokerProcess::Tansu(_)))
    }

    /// Starts the tansu broker `bin` on a free local port, with in-memory storage, and waits until
    /// it accepts connections. The process is stopped when the broker is dropped.
    pub async fn tansu(bin: &Path) -> anyhow::Result<Self> {
        let port = free_port()?;
        let url = format!("tcp://127.0.0.1:{port}");
        let child = std::process::Command::new(bin)
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let broker = Self { brokers: format!("127.0.0.1:{port}"), process: Some(BrokerProcess::Tansu(child)) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            anyhow::ensure!(Instant::now() < deadline, "tansu did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(broker)
    }

    /// Creates the benchmark topic and waits until every partition is served.
    pub async fn create_topic(&self, partitions: i32) -> anyhow::Result<()> {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &self.brokers).create()?;
        let topic = NewTopic::new(TOPIC, partitions, TopicReplication::Fixed(1));
        for r in admin.create_topics(&[topic], &AdminOptions::new()).await? {
            if let Err((t, e)) = r {
                anyhow::ensure!(e == rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists, "creating {t}: {e}");
            }
        }
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &self.brokers).set("group.id", "bench-metadata").create()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = consumer.fetch_metadata(Some(TOPIC), Duration::from_secs(5)).ok().and_then(|m| {
                m.topics().first().map(|t| t.error().is_none() && t.partitions().len() == partitions as usize)
            });
            if ready == Some(true) {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "topic {TOPIC} never became visible");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Reads the benchmark topic from the start with a plain consumer until it has `n` records;
    /// returns how long it took: the rate at which this broker serves the topic, a ceiling for
    /// any consumer of it.
    pub async fn read_all(&self, n: usize) -> anyhow::Result<Duration> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", format!("bench-reader-{}", uuid::Uuid::now_v7().simple()))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()?;
        consumer.subscribe(&[TOPIC])?;
        tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + Duration::from_secs(600);
            let (mut read, mut started) = (0usize, None);
            while read < n {
                anyhow::ensure!(Instant::now() < deadline, "the broker served {read} of {n} records");
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(_)) => {
                        started.get_or_insert_with(Instant::now);
                        read += 1;
                    }
                    Some(Err(e)) => anyhow::bail!("reading the topic: {e}"),
                    None => {}
                }
            }
            // From the first record on: the group join is not reading.
            Ok(started.map_or(Duration::ZERO, |s| s.elapsed()))
        })
        .await?
    }

    /// Produces `n` events, tenants and partitions taken round-robin; returns how long it took.
    pub async fn produce(&self, tenants: &[String], partitions: i32, n: usize) -> anyhow::Result<Duration> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("message.timeout.ms", "60000")
            .set("linger.ms", "5")
            .set("queue.buffering.max.messages", "1000000");
        if self.is_tansu() {
            // tansu 0.6 under-reports its high watermark after a multi-record batch, and then stops
            // serving fetches there: one record per batch keeps it exact.
            config.set("batch.num.messages", "1");
        }
        let producer: FutureProducer = config.create()?;
        let started = Instant::now();
        let mut pending = std::collections::VecDeque::new();
        for i in 0..n {
            let tenant = &tenants[i % tenants.len()];
            let mut headers = OwnedHeaders::new();
            let attributes = ce_headers(tenant);
            for (k, v) in &attributes {
                headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
            }
            headers = headers.insert(Header { key: "content-type", value: Some("application/json".as_bytes()) });
            let payload = body(now_us());
            let record = FutureRecord::<(), str>::to(TOPIC)
                .partition((i % partitions.max(1) as usize) as i32)
                .payload(&payload)
                .headers(headers);
            let delivery = producer.send_result(record).map_err(|(e, _)| anyhow::anyhow!("producing: {e}"))?;
            pending.push_back(delivery);
            if pending.len() >= 10_000 {
                if let Some(d) = pending.pop_front() {
                    d.await?.map_err(|(e, _)| anyhow::anyhow!("producing: {e}"))?;
                }
            }
        }
        for d in pending {
            d.await?.map_err(|(e, _)| anyhow::anyhow!("producing: {e}"))?;
        }
        Ok(started.elapsed())
    }
}

// ---------------------------------------------------------------------------------------------
// Reporting

/// Prints a scenario's table and writes its JSON (`figures`, plus the store and process usage).
pub fn report(title: &str, rows: &[(&str, String)], mut figures: Value, json_out: &Path) -> anyhow::Result<()> {
    let (cpu, rss) = process_usage();
    figures["process_cpu_s"] = json!(cpu);
    figures["process_peak_rss_mib"] = json!(rss);
    figures["cores"] = json!(std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!("{title}");
    for (name, value) in rows {
        println!("  {name:<34} {value:>12}");
    }
    println!("  {:<34} {:>12}", "process CPU s (hub+load+receiver)", format!("{cpu:.1}"));
    println!("  {:<34} {:>12}", "process peak RSS MiB", format!("{rss:.1}"));
    if let Some(parent) = json_out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(json_out, serde_json::to_string_pretty(&figures)?)?;
    println!("  written to {}", json_out.display());
    Ok(())
}

pub fn f0(x: f64) -> String {
    format!("{x:.0}")
}

pub fn f1(x: f64) -> String {
    format!("{x:.1}")
}
