//! Kafka consumption with per-partition durability (SPEC §1.1, §1.4).
//!
//! Records are buffered **per partition** and written in one store transaction per partition
//! batch (bounded by count and time); the partition's offset is committed only after that
//! transaction commits. A failed write pauses and retries that partition alone, keeping its
//! records and committing nothing, while the other partitions go on. When partitions are
//! revoked, their unwritten records are abandoned (never committed): the next owner reads them
//! again, and dedup makes the overlap harmless. The same loop serves the ingest consumer and the
//! DLQ plane; what a batch becomes is the [`BatchWriter`]'s business.
//!
//! **Invariants:** an offset is committed only for records whose transaction committed; a
//! partition's records are written in offset order, one batch at a time, each exactly once per
//! successful batch; partitions write concurrently; at most `MAX_HELD_BATCHES` batches' worth of
//! records (plus what librdkafka prefetches, bounded by its queue settings) are held.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::outage::OutageLog;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::KafkaConfig;

/// The topics the ingest consumer reads: one per application, never `.commands` or `.dlq`.
pub const INGEST_PATTERN: &str = r"^lerian\.streaming\.[a-z0-9][a-z0-9_-]*$";
/// The DLQ plane's topics.
pub const DLQ_PATTERN: &str = r"^lerian\.streaming\.[a-z0-9][a-z0-9_-]*\.dlq$";

/// Writes one partition batch durably; an error leaves the batch to be retried.
pub trait BatchWriter: Send + Sync + 'static {
    fn write(&self, records: &[OwnedMessage]) -> impl Future<Output = Result<(), String>> + Send;
}

/// Remembers revoked partitions for the consumer loop (the callback runs inside `recv`), and
/// tells the log of the brokers' outages once, not once per failed connection.
#[derive(Debug)]
pub struct RebalanceLog {
    /// `ingest`, `dlq` or `readiness`: the metrics label.
    name: &'static str,
    revoked: Mutex<Vec<(String, i32)>>,
    lost_all: Mutex<bool>,
    outage: OutageLog,
}

impl RebalanceLog {
    fn new(name: &'static str, k: &KafkaConfig) -> Self {
        let what = match name {
            "ingest" => "Kafka (ingest consumer)",
            "dlq" => "Kafka (DLQ consumer)",
            _ => "Kafka (readiness check)",
        };
        Self {
            name,
            revoked: Mutex::default(),
            lost_all: Mutex::default(),
            outage: OutageLog::new(what, k.outage_log_interval),
        }
    }

    fn take(&self) -> (Vec<(String, i32)>, bool) {
        let revoked = std::mem::take(&mut *self.revoked.lock().unwrap_or_else(|p| p.into_inner()));
        let lost = std::mem::take(&mut *self.lost_all.lock().unwrap_or_else(|p| p.into_inner()));
        (revoked, lost)
    }
}

impl ClientContext for RebalanceLog {
    fn stats(&self, statistics: rdkafka::Statistics) {
        // A broker of the cluster (not a bootstrap address) is up: any outage is over.
        if statistics.brokers.values().any(|b| b.nodeid >= 0 && b.state == "UP") {
            self.outage.succeeded();
        }
        for (topic, t) in &statistics.topics {
            for (partition, p) in &t.partitions {
                // -1 while unknown; the internal "unassigned" partition is -1 as well.
                if *partition >= 0 && p.consumer_lag >= 0 {
                    metrics::gauge!(
                        crate::telemetry::metric::CONSUMER_LAG,
                        "consumer" => self.name,
                        "topic" => topic.clone(),
                        "partition" => partition.to_string()
                    )
                    .set(p.consumer_lag as f64);
                }
            }
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        // A pattern that matches no topic yet (no `.dlq` topic exists) is normal, not an error.
        if error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition) {
            tracing::debug!(reason, "no topic matches the subscription yet");
        } else {
            self.outage.failed(&format_args!("{error}: {reason}"));
        }
    }

    /// librdkafka's own log: its connection failures are the outage (told once, then
    /// summarized); anything else it warns of is logged as it comes.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error | L::Warning
                if matches!(fac, "FAIL" | "ERROR" | "BROKERFAIL" | "CONNECT") =>
            {
                self.outage.failed(&format_args!("{fac}: {log_message}"));
            }
            L::Emerg | L::Alert | L::Critical | L::Error => {
                tracing::error!(facility = fac, "librdkafka: {log_message}")
            }
            L::Warning => tracing::warn!(facility = fac, "librdkafka: {log_message}"),
            L::Notice | L::Info => tracing::info!(facility = fac, "librdkafka: {log_message}"),
            L::Debug => tracing::debug!(facility = fac, "librdkafka: {log_message}"),
        }
    }
}

impl ConsumerContext for RebalanceLog {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let mut revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
                for e in tpl.elements() {
                    revoked.push((e.topic().to_owned(), e.partition()));
                }
                tracing::info!(partitions = tpl.count(), "partitions revoked");
            }
            Rebalance::Assign(tpl) => tracing::info!(partitions = tpl.count(), "partitions assigned"),
            Rebalance::Error(e) => {
                tracing::warn!(error = %e, "rebalance error: abandoning every unwritten batch");
                *self.lost_all.lock().unwrap_or_else(|p| p.into_inner()) = true;
            }
        }
    }
}

/// The librdkafka settings for a consumer of `group`.
pub fn client_config(k: &KafkaConfig, group: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers)
        .set("group.id", group)
        .set("client.id", &k.client_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", k.session_timeout.as_millis().to_string())
        .set("topic.metadata.refresh.interval.ms", k.topic_refresh.as_millis().max(1000).to_string())
        // What librdkafka prefetches: at most 1 MiB queued for the whole consumer, fetched 256 KiB
        // a partition and 1 MiB a request at a time (a larger record is still fetched whole), and
        // fetched again 10 ms after the queue was full rather than librdkafka's 1 s, which would
        // starve the writers behind so small a queue. The fetch responses stay in memory until
        // their last record is read, so these bound the consumer's memory; its speed is the
        // writes' (docs/DECISIONS.md).
        .set("queued.max.messages.kbytes", "1024")
        .set("fetch.queue.backoff.ms", "10")
        .set("fetch.max.bytes", "1048576")
        .set("max.partition.fetch.bytes", "262144")
        .set("enable.partition.eof", "false")
        .set("statistics.interval.ms", k.stats_interval.as_millis().max(100).to_string());
    let protocol = match (k.tls, k.scram.is_some()) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    c.set("security.protocol", protocol);
    if let Some(scram) = &k.scram {
        c.set("sasl.mechanisms", &scram.mechanism)
            .set("sasl.username", &scram.username)
            .set("sasl.password", scram.password.expose());
    }
    match &k.ca_cert {
        Some(crate::config::CaCert::File(path)) => {
            c.set("ssl.ca.location", path.display().to_string());
        }
        Some(crate::config::CaCert::Pem(pem)) => {
            c.set("ssl.ca.pem", pem);
        }
        None => {}
    }
    c
}

/// Creates a consumer subscribed to `pattern`.
pub fn subscribe(
    k: &KafkaConfig,
    name: &'static str,
    group: &str,
    pattern: &str,
) -> Result<StreamConsumer<RebalanceLog>, String> {
    let consumer: StreamConsumer<RebalanceLog> = client_config(k, group)
        .create_with_context(RebalanceLog::new(name, k))
        .map_err(|e| format!("cannot create the Kafka consumer: {e}"))?;
    consumer.subscribe(&[pattern]).map_err(|e| format!("cannot subscribe to {pattern}: {e}"))?;
    Ok(consumer)
}

/// How partition batches are formed.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    pub size: usize,
    pub wait: Duration,
}

#[derive(Debug)]
struct Partition {
    records: Vec<OwnedMessage>,
    first_at: Instant,
    failures: u32,
    retry_at: Option<Instant>,
    /// A batch of this partition is being written: the next waits for it.
    writing: bool,
}

impl Partition {
    fn new() -> Self {
        Self { records: Vec::new(), first_at: Instant::now(), failures: 0, retry_at: None, writing: false }
    }

    fn due(&self, batching: Batching) -> Instant {
        self.retry_at.unwrap_or(self.first_at + batching.wait)
    }
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(200u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(10))
}

fn tpl_of(topic: &str, partition: i32) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    tpl
}

/// Consumes until `shutdown`, then writes and commits what it still holds (once, best effort).
///
/// Partitions are written concurrently, each at most one batch at a time and in offset order:
/// while a partition's batch is being written the consumer goes on reading, that partition's
/// records wait for the next batch, and other partitions write theirs. Reading stops while
/// [`MAX_HELD_BATCHES`] batches' worth of records wait, so memory stays bounded whatever the
/// broker serves.
pub async fn run<W: BatchWriter>(
    name: &'static str,
    consumer: StreamConsumer<RebalanceLog>,
    writer: W,
    batching: Batching,
    shutdown: CancellationToken,
) {
    let writer = std::sync::Arc::new(writer);
    let mut partitions: HashMap<(String, i32), Partition> = HashMap::new();
    // Each partition's ownership: a revoke starts a new one, and a write begun under an earlier
    // one neither commits nor keeps its records when it ends.
    let mut owned: HashMap<(String, i32), u64> = HashMap::new();
    let mut generation: u64 = 0;
    let mut writing: tokio::task::JoinSet<Written> = tokio::task::JoinSet::new();
    loop {
        forget_revoked(name, &consumer, &mut partitions, &mut owned, &mut generation);
        let next = partitions.values().filter(|p| !p.writing).map(|p| p.due(batching)).min();
        let held: usize = partitions.values().map(|p| p.records.len()).sum();
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            Some(done) = writing.join_next(), if !writing.is_empty() => {
                settle(name, &consumer, &mut partitions, &owned, done);
            }
            () = sleep_until(next) => {
                let now = Instant::now();
                let due: Vec<(String, i32)> = partitions
                    .iter()
                    .filter(|(_, p)| !p.writing && p.due(batching) <= now)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in due {
                    begin(&writer, &mut partitions, &mut owned, generation, batching, &key, &mut writing);
                }
            }
            received = consumer.recv(), if held < MAX_HELD_BATCHES * batching.size => match received {
                Ok(message) => {
                    // A rebalance runs inside `recv`: a revoke it made is applied before this
                    // message is kept, or the message (the first of a partition assigned again,
                    // read from its committed offset) would be dropped with the records held
                    // before the revoke, and its offset committed past by the next batch.
                    forget_revoked(name, &consumer, &mut partitions, &mut owned, &mut generation);
                    consumer.context().outage.succeeded();
                    let key = (message.topic().to_owned(), message.partition());
                    let partition = partitions.entry(key.clone()).or_insert_with(Partition::new);
                    if partition.records.is_empty() {
                        partition.first_at = Instant::now();
                    }
                    partition.records.push(message.detach());
                    if partition.records.len() >= batching.size && partition.retry_at.is_none() && !partition.writing {
                        begin(&writer, &mut partitions, &mut owned, generation, batching, &key, &mut writing);
                    }
                }
                Err(e) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition) => {
                    tracing::debug!(consumer = name, "no topic matches the subscription yet");
                }
                Err(e) => {
                    consumer.context().outage.failed(&e);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            },
        }
    }
    // Shutting down: the writes under way end and commit, then what is held is written and
    // committed, so the next owner starts after it.
    settle_all(name, &consumer, &mut partitions, &owned, &mut writing).await;
    // A batch at a time per partition, until each has written all it holds or failed once.
    let mut failed: std::collections::HashSet<(String, i32)> = std::collections::HashSet::new();
    loop {
        let tried: Vec<((String, i32), u32)> = partitions
            .iter()
            .filter(|(k, p)| !p.records.is_empty() && !failed.contains(*k))
            .map(|(k, p)| (k.clone(), p.failures))
            .collect();
        if tried.is_empty() {
            break;
        }
        for (key, _) in &tried {
            begin(&writer, &mut partitions, &mut owned, generation, batching, key, &mut writing);
        }
        settle_all(name, &consumer, &mut partitions, &owned, &mut writing).await;
        for (key, failures) in tried {
            if partitions.get(&key).is_some_and(|p| p.failures > failures) {
                failed.insert(key);
            }
        }
    }
    // librdkafka's close (run when the consumer is dropped) waits to leave the group, and with
    // the broker gone it can wait for ever: it runs on a thread of its own, waited for a bounded
    // time, so neither a runtime worker nor the process's exit is held by it.
    let (closed, close) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        drop(consumer);
        let _ = closed.send(());
    });
    if tokio::time::timeout(CLOSE_TIMEOUT, close).await.is_err() {
        tracing::warn!(
            consumer = name,
            "closing the Kafka consumer timed out; the group will drop it after its session timeout"
        );
    }
    tracing::info!(consumer = name, "Kafka consumer stopped");
}

/// Applies the revokes (and a lost assignment) the rebalance callbacks recorded since the last
/// call: the records held for those partitions are dropped (the next owner reads them again from
/// the committed offset) and each starts a new ownership, so a write begun before neither
/// commits nor keeps its records.
fn forget_revoked(
    name: &'static str,
    consumer: &StreamConsumer<RebalanceLog>,
    partitions: &mut HashMap<(String, i32), Partition>,
    owned: &mut HashMap<(String, i32), u64>,
    generation: &mut u64,
) {
    let (revoked, lost_all) = consumer.context().take();
    if lost_all {
        partitions.clear();
        owned.clear();
        *generation += 1;
    }
    for key in revoked {
        *generation += 1;
        owned.remove(&key);
        if partitions.remove(&key).is_some_and(|p| !p.records.is_empty()) {
            tracing::info!(consumer = name, topic = %key.0, partition = key.1, "unwritten batch abandoned on revoke");
        }
    }
}

/// How many batches' worth of records the consumer holds at most, over all its partitions,
/// before it stops reading until a write ends: the next batch of each of four partitions being
/// written (8 held 4–7 MiB more at the same speed, 2 lowered it; docs/DECISIONS.md).
const MAX_HELD_BATCHES: usize = 4;

/// How long a stopping consumer waits to leave its group.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A partition batch's write as it ended.
struct Written {
    key: (String, i32),
    /// The ownership it was begun under.
    generation: u64,
    records: Vec<OwnedMessage>,
    result: Result<(), String>,
}

/// Starts writing the oldest records `key` holds, at most a batch of them, unless it holds none.
/// What a partition read while its last batch was written waits for the next: a write is never
/// larger than a batch, so neither is what it holds in memory.
fn begin<W: BatchWriter>(
    writer: &std::sync::Arc<W>,
    partitions: &mut HashMap<(String, i32), Partition>,
    owned: &mut HashMap<(String, i32), u64>,
    generation: u64,
    batching: Batching,
    key: &(String, i32),
    writing: &mut tokio::task::JoinSet<Written>,
) {
    let Some(partition) = partitions.get_mut(key) else { return };
    if partition.records.is_empty() {
        partitions.remove(key);
        return;
    }
    partition.writing = true;
    let rest = partition.records.split_off(partition.records.len().min(batching.size.max(1)));
    let records = std::mem::replace(&mut partition.records, rest);
    let generation = *owned.entry(key.clone()).or_insert(generation);
    let (writer, key) = (std::sync::Arc::clone(writer), key.clone());
    writing.spawn(async move {
        let result = writer.write(&records).await;
        Written { key, generation, records, result }
    });
}

/// Waits for every partition write under way and settles each.
async fn settle_all(
    name: &'static str,
    consumer: &StreamConsumer<RebalanceLog>,
    partitions: &mut HashMap<(String, i32), Partition>,
    owned: &HashMap<(String, i32), u64>,
    writing: &mut tokio::task::JoinSet<Written>,
) {
    while let Some(done) = writing.join_next().await {
        settle(name, consumer, partitions, owned, done);
    }
}

/// Ends a partition batch's write: on success its offset is committed (and a paused partition
/// resumed); on failure its records go back before those read meanwhile and the partition is
/// paused and retried with a backoff. A write begun before the partition was revoked does
/// neither. A writer that panicked ends the consumer with its panic, as it did when writes ran
/// in the consumer's own task (the supervisor then stops the hub), rather than leaving its
/// partition stalled.
fn settle(
    name: &'static str,
    consumer: &StreamConsumer<RebalanceLog>,
    partitions: &mut HashMap<(String, i32), Partition>,
    owned: &HashMap<(String, i32), u64>,
    done: Result<Written, tokio::task::JoinError>,
) {
    let Written { key, generation, mut records, result } = match done {
        Ok(written) => written,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Writes are never aborted; a cancelled one (the runtime shutting down) wrote nothing
        // that this consumer will commit.
        Err(_) => return,
    };
    if owned.get(&key) != Some(&generation) {
        return;
    }
    let partition = partitions.entry(key.clone()).or_insert_with(Partition::new);
    partition.writing = false;
    match result {
        Ok(()) => {
            let last = records.last().map(|m| m.offset()).unwrap_or_default();
            let was_paused = partition.retry_at.take().is_some();
            partition.failures = 0;
            if partition.records.is_empty() {
                partitions.remove(&key);
            }
            let mut tpl = TopicPartitionList::new();
            if tpl.add_partition_offset(&key.0, key.1, Offset::Offset(last + 1)).is_ok() {
                // Asynchronous: a lost commit only means these records are read (and deduplicated) again.
                if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
                    tracing::warn!(consumer = name, topic = %key.0, partition = key.1, error = %e, "offset commit failed");
                }
            }
            if was_paused {
                let _ = consumer.resume(&tpl_of(&key.0, key.1));
                tracing::info!(consumer = name, topic = %key.0, partition = key.1, "partition resumed");
            }
        }
        Err(e) => {
            records.append(&mut partition.records);
            partition.records = records;
            partition.failures += 1;
            let wait = backoff(partition.failures);
            partition.retry_at = Some(Instant::now() + wait);
            if partition.failures == 1 {
                let _ = consumer.pause(&tpl_of(&key.0, key.1));
            }
            tracing::warn!(
                consumer = name,
                topic = %key.0,
                partition = key.1,
                records = partition.records.len(),
                failures = partition.failures,
                retry_in_ms = wait.as_millis() as u64,
                error = %e,
                "writing a partition batch failed; partition paused, nothing committed"
            );
        }
    }
}

/// A header whose key is not UTF-8 text; the record cannot be judged and is quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnreadableHeader {
    /// Its position among the record's headers (0-based).
    pub index: usize,
}

/// A record's headers as `(key, value)` pairs; a header without a value reads as empty.
pub fn headers(message: &OwnedMessage) -> Result<Vec<(&str, &[u8])>, UnreadableHeader> {
    let Some(list) = message.headers() else { return Ok(Vec::new()) };
    let mut pairs = Vec::with_capacity(list.count());
    for index in 0..list.count() {
        // rdkafka 0.39 unwraps the key's UTF-8 conversion inside `try_get`, so a key that is not
        // UTF-8 panics there. The panic is contained to this one header of this one record.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| list.try_get(index))) {
            Ok(Some(header)) => pairs.push((header.key, header.value.unwrap_or_default())),
            Ok(None) => {}
            Err(_) => return Err(UnreadableHeader { index }),
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_settings_follow_tls_and_scram() {
        let base = KafkaConfig {
            brokers: "k:9092".into(),
            group_id: "g".into(),
            dlq_group_id: "d".into(),
            client_id: "c".into(),
            scram: None,
            tls: false,
            ca_cert: None,
            session_timeout: Duration::from_secs(45),
            batch_size: 500,
            batch_wait: Duration::from_millis(20),
            topic_refresh: Duration::from_secs(30),
            dlq_enabled: true,
            stats_interval: Duration::from_secs(15),
            outage_log_interval: Duration::from_secs(60),
        };
        assert_eq!(client_config(&base, "g").get("security.protocol"), Some("plaintext"));
        let scram = KafkaConfig {
            tls: true,
            ca_cert: Some(crate::config::CaCert::File("/etc/ca.pem".into())),
            scram: Some(crate::config::Scram {
                username: "hub".into(),
                password: crate::config::Secret::new("pw".into()),
                mechanism: "SCRAM-SHA-512".into(),
            }),
            ..base
        };
        let c = client_config(&scram, "g");
        assert_eq!(c.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(c.get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
        assert_eq!(c.get("ssl.ca.location"), Some("/etc/ca.pem"));
        assert_eq!(c.get("enable.auto.commit"), Some("false"));
    }
}

/// Checks that the brokers answer, for readiness.
pub struct KafkaProbe {
    client: std::sync::Arc<rdkafka::consumer::BaseConsumer<RebalanceLog>>,
}

impl std::fmt::Debug for KafkaProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KafkaProbe")
    }
}

impl KafkaProbe {
    pub fn new(k: &KafkaConfig) -> Result<Self, String> {
        let mut config = client_config(k, &k.group_id);
        config.set("statistics.interval.ms", "0");
        let client = config
            .create_with_context(RebalanceLog::new("readiness", k))
            .map_err(|e| format!("cannot create the Kafka readiness client: {e}"))?;
        Ok(Self { client: std::sync::Arc::new(client) })
    }

    /// `Ok` when a broker answered a metadata request within `timeout`.
    pub async fn check(&self, timeout: Duration) -> Result<(), String> {
        let client = std::sync::Arc::clone(&self.client);
        let checked = tokio::task::spawn_blocking(move || {
            let answer = client.fetch_metadata(None, timeout).map(|_| ()).map_err(|e| e.to_string());
            match &answer {
                Ok(()) => client.context().outage.succeeded(),
                Err(e) => client.context().outage.failed(e),
            }
            answer
        })
        .await
        .map_err(|e| e.to_string())?;
        checked
    }
}
