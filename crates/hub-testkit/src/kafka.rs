//! Apache Kafka for the tests and the benches: a single-node KRaft broker started from the jars
//! `scripts/services kafka` installs, which a test can kill and start again.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// A Kafka broker for the tests and the benches: `STREAMING_HUB_BENCH_KAFKA_BROKERS` when set; otherwise an Apache Kafka
/// broker started here from the jars `scripts/services kafka` installs
/// (`STREAMING_HUB_KAFKA_HOME`, default `~/.cache/streaming-hub/kafka/<version>`); only when those
/// are missing, and said so, the `tansu` broker (`STREAMING_HUB_BENCH_TANSU`).
#[derive(Debug)]
pub struct Broker {
    pub brokers: String,
    /// A second listener of an Apache Kafka broker started here, `SASL_PLAINTEXT`, taking
    /// `PLAIN`, `SCRAM-SHA-256` and `SCRAM-SHA-512` logins of [`SASL_USER`] with
    /// [`SASL_PASSWORD`].
    pub sasl_brokers: Option<String>,
    /// A third listener, `SASL_SSL` (the same logins), its certificate for `127.0.0.1` issued by
    /// the test CA at [`Self::tls_ca`].
    pub tls_brokers: Option<String>,
    /// The PEM file of the CA that issued the TLS listener's certificate.
    pub tls_ca: Option<PathBuf>,
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

/// The user the SASL listener knows, with every mechanism.
pub const SASL_USER: &str = "hub";
/// That user's password.
pub const SASL_PASSWORD: &str = "hub-sasl-secret";

/// Makes a test CA (`ca.pem`) and a certificate it issues for `127.0.0.1` and `localhost`, with
/// `openssl`; returns the PEM key store (the unencrypted PKCS#8 key, then the certificate) a Kafka
/// listener reads.
fn test_certificates(dir: &Path) -> anyhow::Result<PathBuf> {
    let openssl = |args: &[&str]| -> anyhow::Result<()> {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .context("running openssl (the TLS listener's certificates are made with it)")?;
        anyhow::ensure!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=streaming-hub test CA",
    ])?;
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ])?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ])?;
    let keystore = dir.join("keystore.pem");
    let mut pem = std::fs::read(dir.join("server.key"))?;
    pem.extend(std::fs::read(dir.join("server.pem"))?);
    std::fs::write(&keystore, pem)?;
    Ok(keystore)
}

/// A new KRaft cluster id: a UUID in unpadded URL-safe base64.
fn cluster_id() -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::now_v7().as_bytes())
}

/// Formats a KRaft node's storage for `cluster` with `properties` (and `extra` arguments of the
/// storage tool), logging under `dir`.
async fn format_storage(
    classpath: &str,
    cluster: &str,
    properties: &Path,
    dir: &Path,
    extra: &[&str],
) -> anyhow::Result<()> {
    let log = |name: &str| std::fs::File::create(dir.join(name));
    let format = std::process::Command::new("java")
        .args(["-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", classpath, "kafka.tools.StorageTool", "format"])
        .args(["-t", cluster, "-c"])
        .arg(properties)
        .args(extra)
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
    Ok(())
}

/// A local port nothing listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Broker {
    pub async fn start() -> anyhow::Result<Self> {
        if let Ok(brokers) = std::env::var("STREAMING_HUB_BENCH_KAFKA_BROKERS") {
            return Ok(Self { brokers, sasl_brokers: None, tls_brokers: None, tls_ca: None, process: None });
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
        let (port, controller, sasl, tls) = (free_port()?, free_port()?, free_port()?, free_port()?);
        let dir = std::env::temp_dir().join(format!("streaming-hub-kafka-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(dir.join("data"))?;
        let keystore = test_certificates(&dir)?;
        let properties = dir.join("server.properties");
        std::fs::write(
            &properties,
            format!(
                "process.roles=broker,controller\n\
                 node.id=1\n\
                 controller.quorum.voters=1@127.0.0.1:{controller}\n\
                 listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl},SASL_SSL://127.0.0.1:{tls},CONTROLLER://127.0.0.1:{controller}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl},SASL_SSL://127.0.0.1:{tls}\n\
                 controller.listener.names=CONTROLLER\n\
                 inter.broker.listener.name=PLAINTEXT\n\
                 listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n\
                 listener.name.sasl_ssl.ssl.keystore.type=PEM\n\
                 listener.name.sasl_ssl.ssl.keystore.location={keystore}\n\
                 listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_{user}=\"{password}\";\n\
                 listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
                 listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
                 sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n\
                 listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_{user}=\"{password}\";\n\
                 listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
                 listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
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
                data = dir.join("data").display(),
                keystore = keystore.display(),
                user = SASL_USER,
                password = SASL_PASSWORD,
            ),
        )?;
        let classpath = format!("{}/*", lib.display());
        let cluster = cluster_id();
        let scram =
            ["SCRAM-SHA-256", "SCRAM-SHA-512"].map(|m| format!("{m}=[name={SASL_USER},password={SASL_PASSWORD}]"));
        format_storage(&classpath, &cluster, &properties, &dir, &["--add-scram", &scram[0], "--add-scram", &scram[1]])
            .await?;
        let child = spawn_kafka(&dir, home, quick)?;
        let broker = Self {
            brokers: format!("127.0.0.1:{port}"),
            sasl_brokers: Some(format!("127.0.0.1:{sasl}")),
            tls_brokers: Some(format!("127.0.0.1:{tls}")),
            tls_ca: Some(dir.join("ca.pem")),
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
        serving(&self.brokers, 1, Duration::from_secs(90), "the Kafka broker", dir).await
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
        let broker = Self {
            brokers: format!("127.0.0.1:{port}"),
            sasl_brokers: None,
            tls_brokers: None,
            tls_ca: None,
            process: Some(BrokerProcess::Tansu(child)),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            anyhow::ensure!(Instant::now() < deadline, "tansu did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(broker)
    }
}

/// One record read back from a topic.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub partition: i32,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Header values as text.
    pub headers: std::collections::HashMap<String, String>,
}

/// Reads `topic` from the start of every partition with librdkafka's consumer (a client
/// independent of the hub's) until `expected` records arrived or `within` passed.
pub async fn read_topic(brokers: &str, topic: &str, expected: usize, within: Duration) -> Vec<ReadRecord> {
    use rdkafka::message::{Headers, Message};
    use rdkafka::{Offset, TopicPartitionList};
    let (brokers, topic) = (brokers.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", format!("reader-{}", uuid::Uuid::now_v7().simple()))
            .set("enable.auto.commit", "false")
            .create()
            .expect("a consumer");
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10)).expect("the topic's metadata");
        let mut assignment = TopicPartitionList::new();
        for p in metadata.topics()[0].partitions() {
            assignment.add_partition_offset(&topic, p.id(), Offset::Beginning).expect("assign");
        }
        consumer.assign(&assignment).expect("assign");
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        while got.len() < expected && Instant::now() < deadline {
            let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) else { continue };
            let headers = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_owned(), String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned()))
                        .collect()
                })
                .unwrap_or_default();
            got.push(ReadRecord {
                partition: m.partition(),
                key: m.key().unwrap_or_default().to_vec(),
                value: m.payload().unwrap_or_default().to_vec(),
                headers,
            });
        }
        got
    })
    .await
    .expect("the reader's thread")
}

/// A cluster of Apache Kafka nodes on this machine, each a KRaft broker and controller in one
/// process (one voter each), with the internal topics replicated to every node: what a
/// production cluster of three brokers is, for the broker-loss drill. Nodes can be killed and
/// started again on their data; every process stops and the folder goes when dropped.
#[derive(Debug)]
pub struct Cluster {
    /// The bootstrap list: every node's listener.
    pub brokers: String,
    nodes: Vec<Node>,
    dir: PathBuf,
    home: PathBuf,
}

#[derive(Debug)]
struct Node {
    id: i32,
    port: u16,
    dir: PathBuf,
    child: Option<std::process::Child>,
}

impl Cluster {
    /// Starts `n` nodes from the jars under `home/lib` and waits until each serves metadata
    /// naming all of them.
    pub async fn apache(home: &Path, n: i32) -> anyhow::Result<Self> {
        let lib = home.join("lib");
        anyhow::ensure!(lib.is_dir(), "no Apache Kafka jars under {} (`scripts/services kafka`)", lib.display());
        let dir = std::env::temp_dir().join(format!("streaming-hub-kafka-cluster-{}", uuid::Uuid::now_v7().simple()));
        let ports: Vec<(u16, u16)> = (0..n).map(|_| Ok((free_port()?, free_port()?))).collect::<anyhow::Result<_>>()?;
        let voters: Vec<String> =
            ports.iter().enumerate().map(|(i, (_, controller))| format!("{}@127.0.0.1:{controller}", i + 1)).collect();
        let cluster = cluster_id();
        let classpath = format!("{}/*", lib.display());
        let replicas = n.min(3);
        let mut nodes = Vec::new();
        for (i, (port, controller)) in ports.iter().enumerate() {
            let id = i as i32 + 1;
            let node_dir = dir.join(format!("node-{id}"));
            std::fs::create_dir_all(node_dir.join("data"))?;
            let properties = node_dir.join("server.properties");
            std::fs::write(
                &properties,
                format!(
                    "process.roles=broker,controller\n\
                     node.id={id}\n\
                     controller.quorum.voters={voters}\n\
                     listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
                     advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
                     controller.listener.names=CONTROLLER\n\
                     inter.broker.listener.name=PLAINTEXT\n\
                     listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
                     log.dirs={data}\n\
                     default.replication.factor={replicas}\n\
                     min.insync.replicas={min_isr}\n\
                     offsets.topic.replication.factor={replicas}\n\
                     offsets.topic.num.partitions=4\n\
                     transaction.state.log.replication.factor={replicas}\n\
                     transaction.state.log.min.isr={min_isr}\n\
                     share.coordinator.state.topic.replication.factor={replicas}\n\
                     share.coordinator.state.topic.min.isr={min_isr}\n\
                     group.initial.rebalance.delay.ms=0\n\
                     auto.create.topics.enable=false\n\
                     num.network.threads=2\n\
                     num.io.threads=2\n",
                    voters = voters.join(","),
                    data = node_dir.join("data").display(),
                    min_isr = (replicas - 1).max(1),
                ),
            )?;
            format_storage(&classpath, &cluster, &properties, &node_dir, &[]).await?;
            nodes.push(Node { id, port: *port, dir: node_dir, child: None });
        }
        let brokers = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect::<Vec<_>>().join(",");
        let mut cluster = Self { brokers, nodes, dir, home: home.to_owned() };
        for node in &mut cluster.nodes {
            node.child = Some(spawn_kafka(&node.dir, &cluster.home, true)?);
        }
        for id in 1..=n {
            cluster.ready(id).await?;
        }
        Ok(cluster)
    }

    /// Kills node `id` (a crash), keeping its data and ports.
    pub fn kill(&mut self, id: i32) {
        if let Some(child) = self.nodes.iter_mut().find(|n| n.id == id).and_then(|n| n.child.as_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts killed node `id` again and waits until it serves metadata naming every node.
    pub async fn start_again(&mut self, id: i32) -> anyhow::Result<()> {
        let node = self.nodes.iter_mut().find(|n| n.id == id).context("no such node")?;
        node.child = Some(spawn_kafka(&node.dir, &self.home, true)?);
        self.ready(id).await
    }

    /// Waits until node `id` answers a metadata request naming every node of the cluster.
    async fn ready(&self, id: i32) -> anyhow::Result<()> {
        let node = self.nodes.iter().find(|n| n.id == id).context("no such node")?;
        let address = format!("127.0.0.1:{}", node.port);
        serving(&address, self.nodes.len(), Duration::from_secs(120), &format!("Kafka node {id}"), &node.dir).await
    }
}

/// Waits until `address` answers a metadata request naming at least `brokers` brokers, for at
/// most `within`; `what` and the `broker.err` under `dir` are named when it does not.
async fn serving(address: &str, brokers: usize, within: Duration, what: &str, dir: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let address = address.to_owned();
        let ready = tokio::task::spawn_blocking(move || {
            let consumer: Result<BaseConsumer, _> = ClientConfig::new().set("bootstrap.servers", &address).create();
            consumer.is_ok_and(|c| {
                c.fetch_metadata(None, Duration::from_secs(2)).is_ok_and(|m| m.brokers().len() >= brokers)
            })
        })
        .await?;
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            // The folder goes with the cluster or broker when the test ends: the error carries
            // the end of what the JVM wrote.
            let tail = |name: &str| {
                let said = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
                let lines: Vec<&str> = said.lines().collect();
                format!("{name}:\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
            };
            anyhow::bail!(
                "{what} did not serve within {} s\n{}\n{}",
                within.as_secs(),
                tail("broker.log"),
                tail("broker.err")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
