//! What every scenario uses: the hub under measurement, started as a process of its own (on the
//! embedded SQLite store, or on PostgreSQL when `STREAMING_HUB_POSTGRES_DSN` is set, in a fresh
//! schema dropped afterwards); a Kafka broker where Kafka is measured (its topic: `topic.rs`); a
//! local webhook receiver (`receiver.rs`) that counts deliveries by `X-Lerian-Event-Id` and
//! measures latency from the send timestamp (`sent_at_us`) in each payload; and the report (a
//! table and JSON).
//!
//! The load generator and the receiver run in this process, the hub in another, so the hub's CPU
//! and memory, PostgreSQL's CPU and the load's CPU are measured apart (from /proc).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use streaming_hub::config::Config;

pub use hub_testkit::kafka::Broker;
pub use load::{History, load_history};
pub use receiver::{Latency, Received, Receiver, quantile_ms};
pub use topic::BenchTopic;

mod load;
mod receiver;
mod topic;

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
// The hub under measurement

/// What a process used, from /proc: CPU seconds (user + system) and peak RSS in MiB.
pub(crate) fn usage_of(pid: &str) -> (f64, f64) {
    let cpu = stat_of(pid).map_or(0.0, |f| cpu_seconds(&f, 11, 12));
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0);
    (cpu, rss)
}

/// CPU seconds of `pid` with its children: its own, its reaped children's (`cutime`, `cstime`)
/// and its live children's (the hub's transform workers).
pub(crate) fn cpu_with_children(pid: &str) -> f64 {
    // After the command's name: state, ppid, …, utime (11), stime (12), cutime (13), cstime (14).
    let Some(own) = stat_of(pid) else { return 0.0 };
    let mut cpu = cpu_seconds(&own, 11, 14);
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.bytes().all(|b| b.is_ascii_digit())
                && let Some(f) = stat_of(&name).filter(|f| f.get(1).is_some_and(|ppid| ppid == pid))
            {
                cpu += cpu_seconds(&f, 11, 12);
            }
        }
    }
    cpu
}

/// The fields of `/proc/<pid>/stat` after the command's name (state first).
fn stat_of(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_owned).collect())
}

/// The clock ticks of fields `from..=to` of a stat, in seconds (absent fields count nothing).
fn cpu_seconds(fields: &[String], from: usize, to: usize) -> f64 {
    fields.iter().skip(from).take(to + 1 - from).filter_map(|v| v.parse::<f64>().ok()).sum::<f64>() / 100.0
}

/// CPU seconds of every PostgreSQL process on this machine (the server and its backends).
pub fn postgres_cpu() -> f64 {
    cpu_of_named("postgres")
}

/// CPU seconds of every process on this machine whose name (`comm`) is `comm`.
pub fn cpu_of_named(comm: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0.0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == comm))
        .map(|e| usage_of(&e.file_name().to_string_lossy()).0)
        .sum()
}

/// CPU and memory of the hub's process (its transform workers' CPU included), of PostgreSQL, and
/// of the bench's own process (the load
/// and the receiver), at one moment; differences between two are what a phase cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub hub_cpu_s: f64,
    pub hub_peak_rss_mib: f64,
    pub postgres_cpu_s: f64,
    pub bench_cpu_s: f64,
}

impl Usage {
    /// What was used since `before` (the peak RSS is the peak so far).
    pub fn since(&self, before: &Usage) -> Usage {
        Usage {
            hub_cpu_s: self.hub_cpu_s - before.hub_cpu_s,
            hub_peak_rss_mib: self.hub_peak_rss_mib,
            postgres_cpu_s: self.postgres_cpu_s - before.postgres_cpu_s,
            bench_cpu_s: self.bench_cpu_s - before.bench_cpu_s,
        }
    }

    /// This replica's usage with another's beside it: their hub CPU added, the higher peak (the
    /// database and this process are measured once, by the first).
    pub fn beside(&self, other: &Usage) -> Usage {
        Usage {
            hub_cpu_s: self.hub_cpu_s + other.hub_cpu_s,
            hub_peak_rss_mib: self.hub_peak_rss_mib.max(other.hub_peak_rss_mib),
            postgres_cpu_s: self.postgres_cpu_s,
            bench_cpu_s: self.bench_cpu_s,
        }
    }

    /// Milliseconds of hub and of PostgreSQL CPU per event, for `events` events.
    pub fn per_event_ms(&self, events: usize) -> (f64, f64) {
        let n = events.max(1) as f64;
        (self.hub_cpu_s * 1000.0 / n, self.postgres_cpu_s * 1000.0 / n)
    }

    pub fn json(&self) -> Value {
        json!({"hub_cpu_s": self.hub_cpu_s, "hub_peak_rss_mib": self.hub_peak_rss_mib,
            "postgres_cpu_s": self.postgres_cpu_s, "bench_cpu_s": self.bench_cpu_s})
    }
}

/// The database a bench runs on.
#[derive(Debug)]
pub enum Db {
    Sqlite { path: PathBuf },
    Postgres { pool: sqlx::PgPool, schema: String },
}

/// The `streaming-hub` binary the benches start: `STREAMING_HUB_BENCH_HUB`, or the one beside
/// this binary.
fn hub_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("STREAMING_HUB_BENCH_HUB") {
        return Ok(PathBuf::from(path));
    }
    let me = std::env::current_exe().context("locating hub-bench")?;
    let bin = me.with_file_name("streaming-hub");
    anyhow::ensure!(
        bin.is_file(),
        "no streaming-hub binary beside {} (build it: cargo build --release -p streaming-hub; or set \
         STREAMING_HUB_BENCH_HUB)",
        me.display()
    );
    Ok(bin)
}

/// A hub started for one scenario: `streaming-hub serve` in a process of its own, so its CPU
/// and memory are measured apart from the load and the receiver, which run in this process.
#[derive(Debug)]
pub struct BenchHub {
    child: std::process::Child,
    pub base: String,
    pub http: reqwest::Client,
    pub db: Db,
    pub max_in_flight: u32,
    /// The hub's configuration, for what a scenario does beside it on the same database.
    pub config: Config,
    admin: String,
    dir: PathBuf,
    /// Whether its PostgreSQL schema was made for it (and is dropped when it finishes); a hub
    /// started [`BenchHub::beside`] another shares that one's.
    owns_schema: bool,
}

/// A scenario that fails midway leaves no hub behind (one still serving held its binary busy and
/// its port, and took CPU from the next run).
impl Drop for BenchHub {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl BenchHub {
    /// Starts a hub on a fresh database; `kafka` subscribes it to that broker. Every
    /// `STREAMING_HUB_*` variable of this process (but the bench's own) is passed on.
    pub async fn start(kafka: Option<&Broker>) -> anyhow::Result<Self> {
        Self::start_with(kafka, &[]).await
    }

    /// [`Self::start`] with `extra` variables set (over this process's own).
    pub async fn start_with(kafka: Option<&Broker>, extra: &[(&str, String)]) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("streaming-hub-bench-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir)?;
        let mut vars: HashMap<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("STREAMING_HUB_") && !k.starts_with("STREAMING_HUB_BENCH_"))
            .collect();
        let sqlite = dir.join("bench.db");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let admin = streaming_hub::testing::generate_key("bench-admin-");
        for (k, v) in [
            ("STREAMING_HUB_ENV", "local".to_owned()),
            ("STREAMING_HUB_SQLITE_PATH", sqlite.display().to_string()),
            ("STREAMING_HUB_HTTP_LISTEN_ADDR", format!("127.0.0.1:{port}")),
            ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
            ("STREAMING_HUB_DEV_KEK", streaming_hub::testing::generate_key("")),
            ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
            ("STREAMING_HUB_LOG", "warn".to_owned()),
            // A bench measures the hub, not the per-tenant ingest quota (set them to measure it).
            ("STREAMING_HUB_INGEST_RATE", "10000000".to_owned()),
            ("STREAMING_HUB_INGEST_BURST", "10000000".to_owned()),
        ] {
            vars.entry(k.to_owned()).or_insert(v);
        }
        for (k, v) in extra {
            vars.insert((*k).to_owned(), v.clone());
        }
        // A schema named in `extra` is another hub's (`beside`); otherwise one is made.
        let shared = extra.iter().find(|(k, _)| *k == "STREAMING_HUB_POSTGRES_SCHEMA").map(|(_, v)| v.clone());
        let owns_schema = shared.is_none();
        let db = match vars.get("STREAMING_HUB_POSTGRES_DSN") {
            Some(dsn) => {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(2)
                    .connect(dsn)
                    .await
                    .context("STREAMING_HUB_POSTGRES_DSN: cannot connect")?;
                let schema = match shared {
                    Some(schema) => schema,
                    None => {
                        let schema = format!("shbench_{}", uuid::Uuid::now_v7().simple());
                        sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&pool).await?;
                        schema
                    }
                };
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
        // Checked here first, so a bad variable is reported by name before anything starts.
        let config = Config::from_vars(vars.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let max_in_flight = config.max_in_flight;
        let log = dir.join("hub.log");
        let mut cmd = std::process::Command::new(hub_binary()?);
        for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("STREAMING_HUB_")) {
            cmd.env_remove(key);
        }
        cmd.arg("serve")
            .envs(&vars)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        let mut child = cmd.spawn().context("starting the hub")?;
        let base = format!("http://127.0.0.1:{port}");
        hub_sinks::install_crypto_provider();
        // Idle connections are let go before the hub's header timeout closes them (10 s), so no
        // post goes out on a connection being closed.
        let http =
            reqwest::Client::builder().pool_max_idle_per_host(256).pool_idle_timeout(Duration::from_secs(5)).build()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                anyhow::bail!("the hub exited ({status}) before it was ready:\n{tail}");
            }
            if http.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the hub was not ready within 60 s (log: {})", log.display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Self { child, base, http, db, max_in_flight, config, admin, dir, owns_schema })
    }

    /// Another hub process on this one's PostgreSQL schema (left to this one to drop), with
    /// `extra` variables (a role, say) and no Kafka; its admin token is this one's.
    pub async fn beside(&self, extra: &[(&str, String)]) -> anyhow::Result<Self> {
        let Db::Postgres { schema, .. } = &self.db else {
            anyhow::bail!("hubs side by side need PostgreSQL (STREAMING_HUB_POSTGRES_DSN)");
        };
        let mut vars: Vec<(&str, String)> = vec![
            ("STREAMING_HUB_POSTGRES_SCHEMA", schema.clone()),
            ("STREAMING_HUB_ADMIN_TOKEN", self.admin.clone()),
            ("STREAMING_HUB_DEV_KEK", self.config.dev_kek.as_ref().map(|k| k.expose().to_owned()).unwrap_or_default()),
        ];
        vars.extend(extra.iter().map(|(k, v)| (*k, v.clone())));
        Self::start_with(None, &vars).await
    }

    pub fn store_name(&self) -> &'static str {
        match self.db {
            Db::Sqlite { .. } => "sqlite",
            Db::Postgres { .. } => "postgres",
        }
    }

    /// CPU and memory used so far by the hub, PostgreSQL and this process.
    pub fn usage(&self) -> Usage {
        let pid = self.child.id().to_string();
        let (_, hub_peak_rss_mib) = usage_of(&pid);
        // The hub's transform workers are its children: their CPU is the hub's.
        let hub_cpu_s = cpu_with_children(&pid);
        let postgres_cpu_s = if matches!(self.db, Db::Postgres { .. }) { postgres_cpu() } else { 0.0 };
        Usage { hub_cpu_s, hub_peak_rss_mib, postgres_cpu_s, bench_cpu_s: usage_of("self").0 }
    }

    /// Stops the hub (SIGTERM, its graceful shutdown) and removes its database; returns what the
    /// hub used over its life.
    pub async fn finish(mut self) -> anyhow::Result<Usage> {
        let usage = self.usage();
        let _ = std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.child.wait();
        if let Db::Postgres { pool, schema } = &self.db {
            if self.owns_schema {
                sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(pool).await?;
            }
            pool.close().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(usage)
    }

    /// A request with `token` as the bearer: its status, JSON answer and how long it took.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value, Duration)> {
        let token = token.unwrap_or(&self.admin);
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let started = Instant::now();
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let took = started.elapsed();
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null), took))
    }

    /// Posts one event with these CloudEvents headers: its status and answer.
    pub async fn post_raw(&self, key: &str, headers: &[(&str, String)], body: &str) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .http
            .post(format!("{}/v1/events", self.base))
            .bearer_auth(key)
            .header("content-type", "application/json");
        for (k, v) in headers {
            request = request.header(*k, v);
        }
        let response = request.body(body.to_owned()).send().await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.unwrap_or(Value::Null)))
    }

    /// The hub's metrics as Prometheus text (reading them is no database work).
    pub async fn metrics(&self) -> anyhow::Result<String> {
        Ok(self.http.get(format!("{}/metrics", self.base)).send().await?.text().await?)
    }

    /// The sum and count of each histogram named, from the hub's `/metrics` (every series of a
    /// name added up): its own account of where time went.
    pub async fn histograms(&self, names: &[&str]) -> anyhow::Result<Vec<(f64, f64)>> {
        let text = self.metrics().await?;
        Ok(names
            .iter()
            .map(|name| {
                (metric_sum(&text, &format!("{name}_sum"), &[]), metric_sum(&text, &format!("{name}_count"), &[]))
            })
            .collect())
    }

    /// An admin route's JSON answer.
    pub async fn admin_get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self.http.get(format!("{}{path}", self.base)).bearer_auth(&self.admin).send().await?;
        anyhow::ensure!(response.status().is_success(), "GET {path}: {}", response.text().await?);
        Ok(response.json().await?)
    }

    /// An API key of a new tenant, made through the admin API.
    pub async fn tenant(&self, tenant: &str) -> anyhow::Result<String> {
        let response = self
            .http
            .post(format!("{}/admin/api-keys", self.base))
            .bearer_auth(&self.admin)
            .json(&json!({"tenant_id": tenant, "name": "bench"}))
            .send()
            .await?;
        anyhow::ensure!(response.status().is_success(), "creating a key: {}", response.text().await?);
        let key: Value = response.json().await?;
        Ok(key["key"].as_str().context("no key in the answer")?.to_owned())
    }

    /// Creates a subscription to every event and waits until it is active; returns its id.
    pub async fn subscribe(&self, key: &str, sink: Value) -> anyhow::Result<String> {
        self.subscribe_with(key, json!({"name": "bench", "event_types": ["*.*"], "sink": sink})).await
    }

    /// Creates a subscription from a whole request body (filters, ordering) and waits until it is
    /// active; returns its id.
    pub async fn subscribe_with(&self, key: &str, request: Value) -> anyhow::Result<String> {
        let response =
            self.http.post(format!("{}/v1/subscriptions", self.base)).bearer_auth(key).json(&request).send().await?;
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

    /// Deletes a subscription (its waiting jobs are cancelled).
    pub async fn unsubscribe(&self, key: &str, id: &str) -> anyhow::Result<()> {
        let response = self.http.delete(format!("{}/v1/subscriptions/{id}", self.base)).bearer_auth(key).send().await?;
        anyhow::ensure!(response.status().is_success(), "deleting subscription {id}: {}", response.status());
        Ok(())
    }

    /// Posts `n` events of each `(key, tenant)` in turn, from `producers` concurrent producers;
    /// returns how long it took.
    pub async fn post_many(&self, who: &[(String, String)], n: usize, producers: usize) -> anyhow::Result<Duration> {
        self.post_many_keyed(who, n, producers, 0).await
    }

    /// As [`Self::post_many`], the `i`-th event with `ce-partitionkey: key-<i % keys>` (none
    /// when `keys` is 0).
    pub async fn post_many_keyed(
        &self,
        who: &[(String, String)],
        n: usize,
        producers: usize,
        keys: usize,
    ) -> anyhow::Result<Duration> {
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
                    let partition = (keys > 0).then(|| format!("key-{}", i % keys));
                    this.post_keyed(key, tenant, partition.as_deref()).await?;
                }
            }));
        }
        for t in tasks {
            t.await??;
        }
        Ok(started.elapsed())
    }

    pub(crate) fn clone_client(&self) -> Poster {
        Poster { base: self.base.clone(), http: self.http.clone() }
    }

    /// How many events the inbox holds (exactly).
    pub async fn inbox_count(&self) -> anyhow::Result<i64> {
        Ok(match &self.db {
            Db::Postgres { pool, schema } => {
                sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.events")).fetch_one(pool).await?
            }
            Db::Sqlite { path } => {
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
                let mut conn = sqlx::ConnectOptions::connect(&options).await?;
                sqlx::query_scalar("SELECT count(*) FROM events").fetch_one(&mut conn).await?
            }
        })
    }

    /// What the ledger takes on disk per delivery entry (PostgreSQL: its tables and their indexes,
    /// checkpoints and inner nodes included), once the sealer has caught up; `None` on SQLite.
    pub async fn ledger_bytes_per_delivery(&self) -> anyhow::Result<Option<f64>> {
        let Db::Postgres { pool, schema } = &self.db else {
            return Ok(None);
        };
        // Sealed to the head (a checkpoint every 2 s), so the inner nodes are counted too.
        let deadline = Instant::now() + Duration::from_secs(20);
        while self
            .count("SELECT count(*) FROM ledger_heads h JOIN ledger_trees t USING (log) WHERE t.size < h.size")
            .await?
            > 0
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        sqlx::query(&format!("ANALYZE {schema}.ledger_entries")).execute(pool).await?;
        // Entries, nodes and checkpoints are partitioned (by month): each partition counted.
        let bytes: i64 = sqlx::query_scalar(&format!(
            "SELECT ((SELECT COALESCE(sum(pg_total_relation_size(p.relid)), 0) FROM unnest(ARRAY[
                        '{schema}.ledger_entries'::regclass, '{schema}.ledger_nodes'::regclass,
                        '{schema}.ledger_checkpoints'::regclass]) AS t(rel),
                    LATERAL pg_partition_tree(t.rel) AS p
                 WHERE p.isleaf)
                + pg_total_relation_size('{schema}.ledger_heads') + pg_total_relation_size('{schema}.ledger_trees'))::bigint"
        ))
        .fetch_one(pool)
        .await?;
        let entries = self.count("SELECT count(*) FROM ledger_entries WHERE kind = 'delivery'").await?;
        Ok((entries > 0).then(|| bytes as f64 / entries as f64))
    }

    /// A count the hub's database answers (`sql` names its tables unqualified).
    pub async fn count(&self, sql: &str) -> anyhow::Result<i64> {
        Ok(match &self.db {
            Db::Postgres { pool, schema } => {
                let mut conn = pool.acquire().await?;
                sqlx::query(&format!("SET search_path TO {schema}")).execute(&mut *conn).await?;
                sqlx::query_scalar(sql).fetch_one(&mut *conn).await?
            }
            Db::Sqlite { path } => {
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
                let mut conn = sqlx::ConnectOptions::connect(&options).await?;
                sqlx::query_scalar(sql).fetch_one(&mut conn).await?
            }
        })
    }

    /// How many events the store has numbered: the sum of its tenants' last seqs, which every
    /// committed new event moves by one. A read of a row per tenant, where counting the inbox
    /// reads every event: polled while the hub ingests, a count took PostgreSQL's CPU from the
    /// ingest it timed, more the more events there were.
    pub async fn numbered(&self) -> anyhow::Result<i64> {
        self.count("SELECT CAST(COALESCE(SUM(last_seq), 0) AS BIGINT) FROM tenant_sequences").await
    }

    /// Waits until the inbox holds `n` events; returns when it first held any and when it held all.
    /// Progress is read from the store's numbering ([`Self::numbered`]); the inbox is counted once
    /// at the end, untimed, and must agree.
    pub async fn wait_inbox(&self, n: i64, within: Duration) -> anyhow::Result<(Instant, Instant)> {
        let deadline = Instant::now() + within;
        let mut first = None;
        loop {
            let count = self.numbered().await?;
            let now = Instant::now();
            if count > 0 {
                first.get_or_insert(now);
            }
            if count >= n {
                let stored = self.inbox_count().await?;
                anyhow::ensure!(stored >= n, "{count} events numbered but {stored} in the inbox");
                return Ok((first.unwrap_or(now), now));
            }
            anyhow::ensure!(now < deadline, "the inbox holds {count} of {n} events after {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The HTTP side of a bench hub, shareable with producer tasks.
#[derive(Debug, Clone)]
pub(crate) struct Poster {
    base: String,
    http: reqwest::Client,
}

impl Poster {
    pub(crate) async fn post(&self, key: &str, tenant: &str) -> anyhow::Result<()> {
        self.post_keyed(key, tenant, None).await
    }

    pub(crate) async fn post_keyed(&self, key: &str, tenant: &str, partition: Option<&str>) -> anyhow::Result<()> {
        let mut request = self
            .http
            .post(format!("{}/v1/events", self.base))
            .bearer_auth(key)
            .header("content-type", "application/json");
        for (k, v) in ce_headers(tenant) {
            request = request.header(k, v);
        }
        if let Some(p) = partition {
            request = request.header("ce-partitionkey", p).header("ce-subject", format!("payment-{p}"));
        }
        let response = request.body(body(now_us())).send().await?;
        anyhow::ensure!(response.status().as_u16() == 202, "an event was not accepted: {}", response.status());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Reporting

/// Prints a scenario's table and writes its JSON (`figures`, plus what the hub, PostgreSQL and
/// the bench's own process used over the hub's life).
pub fn report(
    title: &str,
    rows: &[(&str, String)],
    mut figures: Value,
    usage: &Usage,
    json_out: &Path,
) -> anyhow::Result<()> {
    figures["usage"] = usage.json();
    figures["cores"] = json!(std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!("{title}");
    for (name, value) in rows {
        println!("  {name:<38} {value:>12}");
    }
    println!("  {:<38} {:>12}", "hub process CPU s (whole run)", f1(usage.hub_cpu_s));
    println!("  {:<38} {:>12}", "hub process peak RSS MiB", f1(usage.hub_peak_rss_mib));
    println!("  {:<38} {:>12}", "PostgreSQL CPU s (whole run)", f1(usage.postgres_cpu_s));
    println!("  {:<38} {:>12}", "bench process CPU s (load + receiver)", f1(usage.bench_cpu_s));
    write_json(&figures, json_out)
}

/// Writes a scenario's figures to `json_out` (its folder made if need be) and says where.
pub fn write_json(figures: &Value, json_out: &Path) -> anyhow::Result<()> {
    if let Some(parent) = json_out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(json_out, serde_json::to_string_pretty(figures)?)?;
    println!("  written to {}", json_out.display());
    Ok(())
}

pub fn f0(x: f64) -> String {
    format!("{x:.0}")
}

pub fn f1(x: f64) -> String {
    format!("{x:.1}")
}

pub fn f2(x: f64) -> String {
    format!("{x:.2}")
}

/// The sum of every series of metric `name` in a Prometheus text exposition that carries all of
/// `labels` (`key="value"` each).
/// Waits until `first` and `others`, replicas on one database, each see all of them live and
/// share every destination bucket between them (their `streaming_hub_destination_buckets_owned`
/// add up to 1024, each pacing some).
pub async fn settled(first: &BenchHub, others: &[BenchHub]) -> anyhow::Result<()> {
    let all: Vec<&BenchHub> = std::iter::once(first).chain(others).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut owned = Vec::new();
        let mut live = Vec::new();
        for hub in &all {
            let m = hub.http.get(format!("{}/metrics", hub.base)).send().await?.text().await?;
            owned.push(metric_sum(&m, "streaming_hub_destination_buckets_owned", &[]));
            live.push(metric_sum(&m, "streaming_hub_replicas_live", &["role=\"delivery\"".to_owned()]));
        }
        let n = all.len() as f64;
        if owned.iter().sum::<f64>() == 1024.0 && owned.iter().all(|o| *o > 0.0) && live.iter().all(|l| *l == n) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the replicas did not share the destinations within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn metric_sum(metrics: &str, name: &str, labels: &[String]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name) && labels.iter().all(|label| l.contains(label.as_str())))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
