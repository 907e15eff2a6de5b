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
use reqwest::StatusCode;

use crate::receiver::{Receiver, Script};
use crate::support::{Event, HubProcess, free_port, http_client};

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
            let mut request =
                client.post(format!("{}/v1/events", hub.base)).bearer_auth(&key).timeout(Duration::from_secs(30));
            for (k, v) in &event.headers {
                request = request.header(k.as_str(), v.as_str());
            }
            started.lock().expect("lock").insert(event.id().to_string(), Instant::now());
            match request.body(event.body.clone()).send().await {
                Ok(r) if r.status() == StatusCode::ACCEPTED => accepted.push(event.id().to_string()),
                _ => refused += 1,
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
    let deadline = Instant::now() + Duration::from_secs(90);
    let (got, delivered) = loop {
        let got: Vec<String> = receiver.deliveries().iter().map(|d| d.header("x-lerian-event-id")).collect();
        let distinct: HashSet<&String> = got.iter().collect();
        let delivered = accepted.iter().filter(|id| distinct.contains(id)).count();
        if delivered == accepted.len() || Instant::now() >= deadline {
            break (got.clone(), delivered);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let distinct: HashSet<&String> = got.iter().collect();
    let duplicates = got.len() - distinct.len();
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
        "drill postgresql-failover: accepted {}, refused {refused}, delivered {delivered}, lost {}, duplicates {duplicates}, recovery {:.1} s",
        accepted.len(),
        accepted.len() - delivered,
        resumed.map_or(f64::NAN, |d| d.as_secs_f64()),
    );
    assert_eq!(delivered, accepted.len(), "accepted events were lost; hub log: {}", hub.log.display());
    // A post waits out the failover, read-only window included: the hub reconnects instead of
    // failing writes on a server that only reads.
    assert_eq!(refused, 0, "posts were refused during the failover; hub log: {}", hub.log.display());
    assert!(resumed.is_some(), "no event posted after the failover was delivered; hub log: {}", hub.log.display());
    drop(hub);
    drop((standby, primary));
    let _ = std::fs::remove_dir_all(&root);
}
