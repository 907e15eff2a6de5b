//! Failover drills (docs/RELIABILITY.md): the hub on a highly available PostgreSQL — a primary
//! and a synchronous streaming-replication standby made with `pg_basebackup`, reached through one
//! address that moves (the test kit's forwarder, standing in for a cloud endpoint or a virtual
//! IP) — while a producer posts and a webhook receives. The primary is stopped hard, the address
//! moves to the standby while it is still read-only, then the standby is promoted. Every event
//! answered 202 must be delivered; duplicates and the seconds until deliveries resumed are
//! printed on one line.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hub_testkit::forwarder::Forwarder;

use crate::receiver::{Receiver, Script};
use crate::support::{Event, HubProcess, free_port, http_client, post_accepted};

/// One PostgreSQL server of the drill, in a directory of its own; stopped hard and removed when
/// dropped.
struct Server {
    data: PathBuf,
    port: u16,
    bin: PathBuf,
}

/// The newest installed PostgreSQL's programs (Debian's layout).
fn pg_bin() -> PathBuf {
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed (scripts/services postgres)")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    let version = versions.last().expect("a PostgreSQL version");
    PathBuf::from(format!("/usr/lib/postgresql/{version}/bin"))
}

/// Runs a PostgreSQL program; as root, as the `postgres` user (the server refuses root).
fn run(bin: &Path, program: &str, args: &[&str]) {
    let path = bin.join(program);
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&path);
        c
    } else {
        Command::new(&path)
    };
    let out = cmd.args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// A directory the `postgres` user owns.
fn owned_dir(path: &Path) {
    std::fs::create_dir_all(path).expect("dir");
    if is_root() {
        let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(path).status().expect("chown");
        assert!(status.success());
    }
}

fn append(file: &Path, lines: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(file).expect("conf");
    f.write_all(lines.as_bytes()).expect("write conf");
}

impl Server {
    /// A primary that commits only once its standby named `standby1` has the commit.
    fn primary(root: &Path) -> Self {
        let (bin, port) = (pg_bin(), free_port());
        let data = root.join("primary");
        owned_dir(root);
        run(&bin, "initdb", &["-D", data.to_str().expect("path"), "-U", "postgres", "--auth=trust", "-E", "UTF8"]);
        append(
            &data.join("postgresql.conf"),
            &format!(
                "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 wal_level = replica\nmax_wal_senders = 4\nsynchronous_commit = on\n\
                 synchronous_standby_names = 'standby1'\nfsync = off\nmax_connections = 60\n",
                root.display()
            ),
        );
        let server = Self { data, port, bin };
        server.start();
        server
    }

    /// A streaming-replication standby of `primary`, named `standby1`, copied with
    /// `pg_basebackup`. Once promoted it waits for no standby of its own.
    fn standby_of(primary: &Server, root: &Path) -> Self {
        let port = free_port();
        let data = root.join("standby");
        let bin = primary.bin.clone();
        run(
            &bin,
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                data.to_str().expect("path"),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        append(
            &data.join("postgresql.conf"),
            &format!("port = {port}\ncluster_name = 'standby1'\nsynchronous_standby_names = ''\n"),
        );
        let server = Self { data, port, bin };
        server.start();
        server
    }

    fn start(&self) {
        let log = self.data.with_extension("log");
        run(
            &self.bin,
            "pg_ctl",
            &["-D", self.data.to_str().expect("path"), "-l", log.to_str().expect("path"), "-w", "start"],
        );
    }

    /// Stops the server at once, as a crash: no checkpoint, connections cut.
    fn stop_hard(&self) {
        run(&self.bin, "pg_ctl", &["-D", self.data.to_str().expect("path"), "-m", "immediate", "-w", "stop"]);
    }

    fn promote(&self) {
        run(&self.bin, "pg_ctl", &["-D", self.data.to_str().expect("path"), "-w", "promote"]);
    }

    fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn dsn(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let path = self.bin.join("pg_ctl");
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let _ = cmd.args(["-D", self.data.to_str().unwrap_or_default(), "-m", "immediate", "stop"]).output();
    }
}

/// Waits until the primary reports its standby streaming synchronously.
async fn wait_for_sync_standby(primary: &Server) {
    let client =
        sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&primary.dsn()).await.expect("connect");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1' AND state = 'streaming'",
        )
        .fetch_optional(&client)
        .await
        .expect("pg_stat_replication");
        if row.is_some_and(|(s,)| s == "sync") {
            break;
        }
        assert!(Instant::now() < deadline, "the standby never became synchronous");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_failover_to_a_synchronous_standby_loses_no_accepted_event() {
    let root = std::env::temp_dir().join(format!("streaming-hub-failover-{}", uuid::Uuid::now_v7().simple()));
    let primary = Server::primary(&root);
    let standby = Server::standby_of(&primary, &root);
    wait_for_sync_standby(&primary).await;

    let address = Forwarder::start(primary.addr()).await.expect("forwarder");
    let admin = format!("admin-{}", uuid::Uuid::now_v7().simple());
    let vars: Vec<(&str, String)> = vec![
        ("STREAMING_HUB_POSTGRES_DSN", format!("postgres://postgres@{}/postgres?sslmode=disable", address.addr)),
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_DISPATCH_LEASE", "5s".to_owned()),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "50".to_owned()),
        ("STREAMING_HUB_RETRY_CURVE", "100ms,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s".to_owned()),
    ];
    let receiver = Receiver::start(Script::Ok).await;
    let hub = HubProcess::start(&vars).await;
    let (key, _, _) = hub.verified_webhook(&admin, &receiver).await;

    // The producer: 900 events at about 60 a second; the failover starts after the 300th.
    let client = http_client();
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let failed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let failover = tokio::sync::Notify::new();
    let producer = async {
        let (mut accepted, mut refused) = (Vec::new(), 0usize);
        for i in 0..900 {
            if i == 300 {
                failover.notify_one();
            }
            let event = Event::new("t1");
            started.lock().expect("lock").insert(event.id().to_string(), Instant::now());
            match post_accepted(&client, &hub.base, &key, &event, Duration::from_secs(30)).await {
                true => accepted.push(event.id().to_string()),
                false => refused += 1,
            }
            tokio::time::sleep(Duration::from_millis(16)).await;
        }
        (accepted, refused)
    };
    let operator = async {
        failover.notified().await;
        *failed_at.lock().expect("lock") = Some(Instant::now());
        primary.stop_hard();
        // The address moves before the standby is promoted: for two seconds it leads to a server
        // that only reads (what a cloud endpoint does while it flips).
        address.retarget(standby.addr());
        tokio::time::sleep(Duration::from_secs(2)).await;
        standby.promote();
    };
    let ((accepted, refused), ()) = tokio::join!(producer, operator);
    let failed_at = failed_at.lock().expect("lock").expect("the failover happened");

    // Every accepted event is delivered (within 90 s), each once.
    let count = crate::chaos::delivered_to(&receiver, &accepted, refused).await;
    // Deliveries resumed when the first event posted after the primary stopped arrived.
    let started = started.lock().expect("lock");
    let resumed = receiver
        .deliveries()
        .iter()
        .filter_map(|d| {
            let posted = *started.get(&d.header("x-lerian-event-id"))?;
            (posted > failed_at).then(|| d.received_at.saturating_duration_since(failed_at))
        })
        .min();
    println!(
        "drill postgresql-failover: accepted {}, refused {refused}, delivered {}, lost {}, duplicates {}, recovery {:.1} s",
        count.accepted,
        count.delivered,
        count.lost,
        count.duplicated,
        resumed.map_or(f64::NAN, |d| d.as_secs_f64()),
    );
    assert_eq!(count.lost, 0, "accepted events were lost; hub log: {}", hub.log.display());
    // A post waits out the failover, read-only window included: the hub reconnects instead of
    // failing writes on a server that only reads.
    assert_eq!(refused, 0, "posts were refused during the failover; hub log: {}", hub.log.display());
    assert!(resumed.is_some(), "no event posted after the failover was delivered; hub log: {}", hub.log.display());
    drop(hub);
    drop((standby, primary));
    let _ = std::fs::remove_dir_all(&root);
}

/// Broker loss: a three-node Apache Kafka cluster (KRaft, replication factor 3,
/// `min.insync.replicas = 2`), an ingest topic of 6 partitions, a producer with `acks=all` sending
/// 2 400 events at ~160/s. A third of the way in, the node leading the most partitions is killed;
/// two thirds in, it starts again. Every record the cluster acknowledged is in the inbox once,
/// and ingest resumed (the first record produced after the kill stored) within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_broker_lost_under_load_loses_no_acknowledged_record() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let home = hub_testkit::kafka::kafka_home();
    assert!(home.join("lib").is_dir(), "Apache Kafka is required ({}); scripts/test installs it", home.display());
    let mut cluster = hub_testkit::kafka::Cluster::apache(&home, 3).await.expect("a three-node Kafka cluster");
    // A topic of its own: the consumer-lag gauges are the test process's, shared by every test.
    let topic = "lerian.streaming.drill";
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &cluster.brokers).create().expect("admin");
    let new = NewTopic::new(topic, 6, TopicReplication::Fixed(3)).set("min.insync.replicas", "2");
    for r in admin.create_topics(&[new], &AdminOptions::new()).await.expect("create") {
        r.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
    }
    let hub = crate::support::TestHub::start_with(
        crate::support::Backend::Postgres,
        &[
            ("STREAMING_HUB_KAFKA_BROKERS", cluster.brokers.as_str()),
            ("STREAMING_HUB_KAFKA_TOPIC_REFRESH", "1s"),
            ("STREAMING_HUB_KAFKA_BATCH_WAIT", "20ms"),
            ("STREAMING_HUB_KAFKA_SESSION_TIMEOUT", "6s"),
        ],
    )
    .await;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &cluster.brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "60000")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let brokers = cluster.brokers.clone();
    let leaders = || -> HashMap<i32, usize> {
        let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", &brokers).create().expect("client");
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
        let mut count = HashMap::new();
        for p in metadata.topics()[0].partitions() {
            *count.entry(p.leader()).or_default() += 1;
        }
        count
    };

    const N: usize = 2400;
    let (mut acked, mut failed) = (Vec::new(), 0usize);
    let mut sent_at: HashMap<String, chrono::DateTime<chrono::Utc>> = HashMap::new();
    let mut pending = Vec::new();
    let mut killed: Option<(i32, chrono::DateTime<chrono::Utc>)> = None;
    for i in 0..N {
        if i == N / 3 {
            let count = leaders();
            let (&victim, _) = count.iter().max_by_key(|(_, n)| **n).expect("a leader");
            cluster.kill(victim);
            killed = Some((victim, chrono::Utc::now()));
        }
        if i == 2 * N / 3 {
            let (victim, _) = killed.expect("killed");
            cluster.start_again(victim).await.expect("the node starts again");
        }
        let event =
            Event::new("t1").set("ce-source", "drill").set("ce-type", "studio.lerian.drill.loan_application.approved");
        let id = event.id().to_string();
        let mut headers = OwnedHeaders::new();
        for (k, v) in event.headers.iter().filter(|(k, _)| k != "content-type") {
            headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        let mut record = FutureRecord::<str, [u8]>::to(topic).key(&id).payload(&event.body).headers(headers);
        sent_at.insert(id.clone(), chrono::Utc::now());
        let delivery = loop {
            match producer.send_result(record) {
                Ok(delivery) => break delivery,
                // The local queue is full: let deliveries drain, then enqueue again.
                Err((_, back)) => {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        pending.push((id.clone(), delivery));
        if pending.len() >= 32 {
            for (id, delivery) in pending.drain(..) {
                match delivery.await {
                    Ok(Ok(_)) => acked.push(id),
                    _ => failed += 1,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(6)).await;
    }
    for (id, delivery) in pending.drain(..) {
        match delivery.await {
            Ok(Ok(_)) => acked.push(id),
            _ => failed += 1,
        }
    }
    let (victim, killed_at) = killed.expect("a node was killed");

    let deadline = Instant::now() + Duration::from_secs(120);
    let stored = loop {
        let mut stored = Vec::new();
        let mut after = 0;
        loop {
            let page = hub.store.events_after("t1", after, 1000).await.expect("read");
            let Some(last) = page.last() else { break };
            after = last.seq;
            stored.extend(page);
        }
        let ids: HashSet<String> = stored.iter().map(|e| e.ce_id.to_string()).collect();
        if acked.iter().all(|id| ids.contains(id)) || Instant::now() >= deadline {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let ids: Vec<String> = stored.iter().map(|e| e.ce_id.to_string()).collect();
    let distinct: HashSet<&String> = ids.iter().collect();
    let lost = acked.iter().filter(|id| !distinct.contains(id)).count();
    let duplicates = ids.len() - distinct.len();
    let resumed = stored
        .iter()
        .filter(|e| sent_at.get(&e.ce_id.to_string()).is_some_and(|t| *t > killed_at))
        .map(|e| e.received_at)
        .min()
        .map(|t| (t - killed_at).to_std().unwrap_or_default());
    println!(
        "drill kafka-broker-loss: node {victim} of 3 killed; acknowledged {}, unacknowledged {failed}, stored {}, lost {lost}, duplicates {duplicates}, recovery {:.1} s",
        acked.len(),
        distinct.len(),
        resumed.map_or(f64::NAN, |d| d.as_secs_f64()),
    );
    if lost > 0 {
        let missing: Vec<&String> = acked.iter().filter(|id| !distinct.contains(id)).collect();
        let quarantined = hub
            .store
            .list_quarantine(&hub_store::QuarantineFilter { limit: 100, ..Default::default() })
            .await
            .expect("quarantine");
        let peer = crate::kafka_support::KafkaPeer::on(cluster.brokers.clone());
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &cluster.brokers).create().expect("client");
        let ends: Vec<_> = (0..6).map(|p| consumer.fetch_watermarks(topic, p, Duration::from_secs(5)).ok()).collect();
        let records = hub_testkit::kafka::read_topic(&cluster.brokers, topic, N, Duration::from_secs(30)).await;
        let where_: Vec<(i32, usize)> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| missing.iter().any(|m| r.headers.get("ce-id") == Some(*m)))
            .map(|(i, r)| (r.partition, i))
            .collect();
        panic!(
            "acknowledged records were lost: {missing:?} (partition, index read: {where_:?}; {} records on the topic); \
             quarantined {:?}; committed {:?}; watermarks {ends:?}",
            records.len(),
            quarantined.iter().map(|q| (&q.ce_id, &q.reason_field, &q.reason)).collect::<Vec<_>>(),
            peer.committed("streaming-hub.local", topic, 6),
        );
    }
    assert_eq!(duplicates, 0, "the inbox holds each event once");
    assert!(resumed.is_some(), "nothing produced after the kill was stored");
}

/// Replicas: three hub processes (`ingest`, `delivery`, `all`) on one PostgreSQL schema and one
/// Apache Kafka broker; for two minutes a random one is killed (SIGKILL) every 3 to 5 s and
/// started again, while a producer posts over HTTP to whichever replicas are up and another
/// produces to Kafka. Every event accepted (202) or acknowledged by Kafka is delivered;
/// duplicates are reported; afterwards no job stays leased past its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_killed_at_random_under_load_lose_no_event() {
    use rand::{Rng, SeedableRng};
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;

    let peer = crate::kafka_support::KafkaPeer::start(crate::kafka_support::Broker::Kafka).await;
    let topic = "lerian.streaming.replicas";
    peer.create_topic(topic, 4).await;
    let schema = crate::support::fresh_schema().await;
    let admin = format!("admin-{}", uuid::Uuid::now_v7().simple());
    let common: Vec<(&str, String)> = vec![
        ("STREAMING_HUB_POSTGRES_DSN", crate::support::postgres_dsn()),
        ("STREAMING_HUB_POSTGRES_SCHEMA", schema.clone()),
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_DISPATCH_LEASE", "5s".to_owned()),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "50".to_owned()),
        ("STREAMING_HUB_RETRY_CURVE", "100ms,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s".to_owned()),
        ("STREAMING_HUB_KAFKA_BROKERS", peer.brokers.clone()),
        ("STREAMING_HUB_KAFKA_TOPIC_REFRESH", "1s".to_owned()),
        ("STREAMING_HUB_KAFKA_BATCH_WAIT", "20ms".to_owned()),
        ("STREAMING_HUB_KAFKA_SESSION_TIMEOUT", "6s".to_owned()),
    ];
    let roles = ["ingest", "delivery", "all"];
    let vars_of = |role: &str| -> Vec<(&str, String)> {
        let mut v = common.clone();
        v.push(("STREAMING_HUB_ROLE", role.to_owned()));
        v
    };
    let mut replicas = Vec::new();
    for role in roles {
        replicas.push(Some(HubProcess::start(&vars_of(role)).await));
    }
    let receiver = Receiver::start(Script::Ok).await;
    let (key, _, _) = replicas[2].as_ref().expect("all").verified_webhook(&admin, &receiver).await;
    let up: Arc<Mutex<Vec<Option<String>>>> =
        Arc::new(Mutex::new(replicas.iter().map(|r| r.as_ref().map(|p| p.base.clone())).collect()));
    let stop = tokio_util::sync::CancellationToken::new();
    let logs: Arc<Mutex<Vec<String>>> = Arc::default();

    let killer = async {
        let mut rng = rand::rngs::StdRng::seed_from_u64(35);
        let end = Instant::now() + Duration::from_secs(120);
        let mut kills = 0;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(rng.random_range(3000..5000))).await;
            let i = rng.random_range(0..replicas.len());
            up.lock().expect("lock")[i] = None;
            if let Some(process) = replicas[i].take() {
                logs.lock().expect("lock").push(process.log.display().to_string());
                process.kill();
                kills += 1;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let process = HubProcess::start(&vars_of(roles[i])).await;
            up.lock().expect("lock")[i] = Some(process.base.clone());
            replicas[i] = Some(process);
        }
        stop.cancel();
        kills
    };
    let poster = async {
        let client = http_client();
        let (mut accepted, mut refused) = (Vec::new(), 0usize);
        let mut n = 0usize;
        while !stop.is_cancelled() {
            n += 1;
            let base = {
                let up = up.lock().expect("lock");
                let live: Vec<&String> = up.iter().flatten().collect();
                live.get(n % live.len().max(1)).map(|b| (*b).clone())
            };
            if let Some(base) = base {
                let event = Event::new("t1");
                match post_accepted(&client, &base, &key, &event, Duration::from_secs(15)).await {
                    true => accepted.push(event.id().to_string()),
                    false => refused += 1,
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (accepted, refused)
    };
    let producer = async {
        let producer = peer.producer();
        let mut acked = Vec::new();
        while !stop.is_cancelled() {
            let event = Event::new("t1")
                .set("ce-source", "replicas")
                .set("ce-type", "studio.lerian.replicas.loan_application.approved");
            let mut headers = OwnedHeaders::new();
            for (k, v) in event.headers.iter().filter(|(k, _)| k != "content-type") {
                headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
            }
            let id = event.id().to_string();
            let record = FutureRecord::<str, [u8]>::to(topic).key(&id).payload(&event.body).headers(headers);
            if let Ok(Ok(_)) = producer.send_result(record).map_err(|(e, _)| e).expect("enqueued").await {
                acked.push(id);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        acked
    };
    let (kills, (accepted, refused), acked) = tokio::join!(killer, poster, producer);

    let wanted: Vec<String> = accepted.iter().chain(&acked).cloned().collect();
    let count = crate::chaos::delivered_to(&receiver, &wanted, refused).await;
    // Leases taken by killed replicas expire and are recovered by the live ones.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&crate::support::postgres_dsn())
        .await
        .expect("db");
    let overdue_sql =
        format!("SELECT count(*) FROM \"{schema}\".delivery_jobs WHERE state = 'leased' AND lease_expires_at < now()");
    let overdue = crate::support::until("no lease past its expiry", Duration::from_secs(60), async || {
        let (n,): (i64,) = sqlx::query_as(&overdue_sql).fetch_one(&pool).await.ok()?;
        (n == 0).then_some(n)
    })
    .await;
    println!(
        "drill replica-kills: {kills} kills in 120 s; accepted {} over HTTP (refused {refused}) and {} over Kafka, delivered {}, lost {}, duplicates {}, overdue leases {overdue}",
        accepted.len(),
        acked.len(),
        count.delivered,
        count.lost,
        count.duplicated,
    );
    assert!(kills >= 10, "the drill killed only {kills} replicas");
    assert_eq!(count.lost, 0, "accepted events were lost; hub logs: {:?}", logs.lock().expect("lock"));
}
