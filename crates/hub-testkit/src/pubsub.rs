//! Google Cloud Pub/Sub for the tests: Google's own in-memory server (`pstest`, from the Go client
//! library, the same gRPC API as the service), wrapped in `crates/hub-testkit/pubsub` with a small
//! HTTP side that creates topics and lists what was published. `scripts/services pubsub` builds it
//! (`STREAMING_HUB_PSTEST` names another binary); each test starts its own.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};
use base64::Engine as _;
use serde_json::{Value, json};

/// An HTTP client for the server's HTTP side (the process's TLS provider installed first).
fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The test server's binary.
pub fn pstest_binary() -> PathBuf {
    if let Ok(path) = std::env::var("STREAMING_HUB_PSTEST") {
        return PathBuf::from(path);
    }
    crate::kafka::cache_dir().join("tools").join("pstest")
}

/// A service account key of the test's own for `project` (a fresh RSA key made with openssl),
/// as Google's console hands one out.
pub fn service_account_key(project: &str) -> Value {
    let out = Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        .output()
        .expect("openssl makes an RSA key");
    json!({"type": "service_account", "project_id": project, "private_key_id": "key-1",
           "private_key": String::from_utf8(out.stdout).expect("a PEM key"),
           "client_email": format!("hub@{project}.iam.gserviceaccount.com"),
           "token_uri": "https://oauth2.googleapis.com/token"})
}

/// A running Pub/Sub test server; stopped when dropped.
#[derive(Debug)]
pub struct PubSubServer {
    child: Child,
    /// The gRPC port (what a sink's `endpoint_url` names).
    pub grpc_port: u16,
    http_port: u16,
}

impl Drop for PubSubServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A message as the server stored it.
#[derive(Debug, Clone)]
pub struct Published {
    pub id: String,
    pub data: Vec<u8>,
    pub attributes: std::collections::HashMap<String, String>,
    pub ordering_key: String,
}

impl PubSubServer {
    /// Starts a server; fails (never skips) when it is not built.
    pub async fn start() -> anyhow::Result<Self> {
        let binary = pstest_binary();
        anyhow::ensure!(
            binary.exists(),
            "no Pub/Sub test server at {} (`scripts/services pubsub` builds it; STREAMING_HUB_PSTEST names another)",
            binary.display()
        );
        let mut child = Command::new(&binary)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("the server's output")?;
        let ports = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let mut port = |name: &str| -> anyhow::Result<u16> {
                let line = lines.next().context("the server ended before it listened")??;
                let (label, value) = line.split_once(' ').context("a port line")?;
                anyhow::ensure!(label == name, "expected {name}, got {line}");
                Ok(value.trim().parse()?)
            };
            Ok::<_, anyhow::Error>((port("grpc")?, port("http")?))
        })
        .await??;
        Ok(Self { child, grpc_port: ports.0, http_port: ports.1 })
    }

    /// `http://127.0.0.1:<grpc port>`: what a sink's `endpoint_url` names.
    pub fn endpoint_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    fn http(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    /// Creates `projects/<project>/topics/<topic>`.
    pub async fn create_topic(&self, project: &str, topic: &str) -> anyhow::Result<()> {
        let name = format!("projects/{project}/topics/{topic}");
        let answer = client().post(self.http("/topics")).json(&json!({"name": name})).send().await?;
        if !answer.status().is_success() {
            bail!("creating {name}: {}", answer.text().await.unwrap_or_default());
        }
        Ok(())
    }

    /// Every message published so far, in order.
    pub async fn published(&self) -> anyhow::Result<Vec<Published>> {
        let all: Vec<Value> = client().get(self.http("/messages")).send().await?.json().await?;
        all.into_iter()
            .map(|m| {
                Ok(Published {
                    id: m["id"].as_str().unwrap_or_default().to_owned(),
                    data: base64::engine::general_purpose::STANDARD.decode(m["data"].as_str().unwrap_or_default())?,
                    attributes: serde_json::from_value(m["attributes"].clone()).unwrap_or_default(),
                    ordering_key: m["ordering_key"].as_str().unwrap_or_default().to_owned(),
                })
            })
            .collect()
    }

    /// The messages once at least `expected` are there (or after 10 s).
    pub async fn wait_for(&self, expected: usize) -> anyhow::Result<Vec<Published>> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let got = self.published().await?;
            if got.len() >= expected || tokio::time::Instant::now() > deadline {
                return Ok(got);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}
