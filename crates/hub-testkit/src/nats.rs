//! NATS for the tests: a real `nats-server` with JetStream, started per test on a port of its own
//! (`scripts/services nats` installs it; `STREAMING_HUB_NATS_SERVER` names another binary), and a
//! small client of the test's own, speaking the protocol by hand, that creates streams and reads
//! back what the sink published: the sink's code is never used to check the sink.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The `nats-server` version `scripts/services nats` installs.
pub const NATS_VERSION: &str = "v2.12.2";

/// The `nats-server` binary.
pub fn nats_server_binary() -> PathBuf {
    if let Ok(path) = std::env::var("STREAMING_HUB_NATS_SERVER") {
        return PathBuf::from(path);
    }
    crate::kafka::cache_dir().join("tools").join(format!("nats-server-{NATS_VERSION}")).join("nats-server")
}

/// How the server's clients log in.
#[derive(Debug, Clone)]
pub enum Auth {
    None,
    Token(String),
    /// Users with passwords, and users known by an nkey's public key.
    Users {
        passwords: Vec<(String, String)>,
        nkeys: Vec<String>,
    },
}

/// A running `nats-server` with JetStream; stopped when dropped.
#[derive(Debug)]
pub struct NatsServer {
    child: Child,
    pub port: u16,
    config: PathBuf,
    _dir: tempfile_dir::Dir,
}

/// A temporary directory removed when dropped.
mod tempfile_dir {
    #[derive(Debug)]
    pub struct Dir(pub std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(config: &std::path::Path) -> anyhow::Result<Child> {
    let binary = nats_server_binary();
    Command::new(&binary)
        .arg("-c")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

impl NatsServer {
    /// Starts a server with JetStream and `auth`; fails (never skips) when `nats-server` is missing.
    pub async fn start(auth: Auth) -> anyhow::Result<Self> {
        let binary = nats_server_binary();
        anyhow::ensure!(
            binary.exists(),
            "no nats-server at {} (`scripts/services nats` installs it; STREAMING_HUB_NATS_SERVER names another)",
            binary.display()
        );
        let dir = std::env::temp_dir().join(format!("streaming-hub-nats-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir)?;
        let dir = tempfile_dir::Dir(dir);
        let port = free_port();
        let authorization = match &auth {
            Auth::None => String::new(),
            Auth::Token(token) => format!("authorization {{ token: {} }}", json!(token)),
            Auth::Users { passwords, nkeys } => {
                let mut users: Vec<String> = passwords
                    .iter()
                    .map(|(u, p)| format!("{{ user: {}, password: {} }}", json!(u), json!(p)))
                    .collect();
                users.extend(nkeys.iter().map(|k| format!("{{ nkey: {} }}", json!(k))));
                format!("authorization {{ users: [ {} ] }}", users.join(", "))
            }
        };
        let config = format!(
            "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {} }}\n{authorization}\n",
            json!(dir.0.join("js").display().to_string())
        );
        let config_path = dir.0.join("nats.conf");
        std::fs::write(&config_path, config)?;
        let child = spawn(&config_path)?;
        let server = Self { child, port, config: config_path, _dir: dir };
        server.listening().await?;
        Ok(server)
    }

    async fn listening(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "nats-server did not listen within 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Stops the server (every client's connection drops) and starts it again on the same port
    /// with the same data.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        self.child = spawn(&self.config)?;
        self.listening().await
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A client of the test's own, logged in with `connect` fields (`user`/`pass`, `auth_token`).
    pub async fn client(&self, login: Value) -> anyhow::Result<Client> {
        Client::connect(self.port, login).await
    }
}

/// A message as JetStream stored it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub subject: String,
    pub headers: Vec<(String, String)>,
    pub data: Vec<u8>,
}

impl Stored {
    /// The first value of a header (names compared without case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// The test's own NATS client: requests and plain subscriptions, one at a time.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
    next: u64,
}

impl Client {
    async fn connect(port: u16, login: Value) -> anyhow::Result<Self> {
        let (read, writer) = TcpStream::connect(("127.0.0.1", port)).await?.into_split();
        let mut client = Self { reader: BufReader::new(read), writer, next: 0 };
        let info = client.line().await?;
        anyhow::ensure!(info.starts_with("INFO"), "not a NATS server: {info}");
        let mut connect =
            json!({"verbose": false, "pedantic": false, "headers": true, "no_responders": true, "protocol": 1});
        if let Value::Object(extra) = login {
            for (k, v) in extra {
                connect[k] = v;
            }
        }
        client.writer.write_all(format!("CONNECT {connect}\r\nPING\r\n").as_bytes()).await?;
        loop {
            let line = client.line().await?;
            if line.starts_with("PONG") {
                return Ok(client);
            }
            if line.starts_with("-ERR") {
                bail!("the server refused the test client: {line}");
            }
        }
    }

    async fn line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(10), self.reader.read_line(&mut line)).await??;
        anyhow::ensure!(n > 0, "the server closed the connection");
        Ok(line.trim_end().to_owned())
    }

    /// Subscribes to `subject` (sid `sid`).
    pub async fn subscribe(&mut self, subject: &str, sid: u32) -> anyhow::Result<()> {
        self.writer.write_all(format!("SUB {subject} {sid}\r\nPING\r\n").as_bytes()).await?;
        while !self.line().await?.starts_with("PONG") {}
        Ok(())
    }

    /// The next message of a subscription: its subject, headers and payload.
    pub async fn next_message(&mut self) -> anyhow::Result<Stored> {
        loop {
            let line = self.line().await?;
            let words: Vec<&str> = line.split_ascii_whitespace().collect();
            match words.first().copied() {
                Some("PING") => self.writer.write_all(b"PONG\r\n").await?,
                Some("MSG") => {
                    let total: usize = words.last().context("size")?.parse()?;
                    let body = self.body(total).await?;
                    return Ok(Stored { subject: words[1].to_owned(), headers: Vec::new(), data: body });
                }
                Some("HMSG") => {
                    let header: usize = words[words.len() - 2].parse()?;
                    let total: usize = words[words.len() - 1].parse()?;
                    let body = self.body(total).await?;
                    let headers = parse_headers(&body[..header]);
                    return Ok(Stored { subject: words[1].to_owned(), headers, data: body[header..].to_vec() });
                }
                _ => {}
            }
        }
    }

    async fn body(&mut self, total: usize) -> anyhow::Result<Vec<u8>> {
        let mut body = vec![0; total + 2];
        self.reader.read_exact(&mut body).await?;
        body.truncate(total);
        Ok(body)
    }

    /// Sends `payload` to `subject` and returns the one reply.
    pub async fn request(&mut self, subject: &str, payload: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.next += 1;
        let inbox = format!("_INBOX.test.{}", self.next);
        let sid = 1000 + self.next;
        self.writer
            .write_all(
                format!("SUB {inbox} {sid}\r\nUNSUB {sid} 1\r\nPUB {subject} {inbox} {}\r\n", payload.len()).as_bytes(),
            )
            .await?;
        self.writer.write_all(payload).await?;
        self.writer.write_all(b"\r\n").await?;
        Ok(self.next_message().await?.data)
    }

    /// A JetStream API call (`$JS.API.<api>`).
    pub async fn js(&mut self, api: &str, body: Value) -> anyhow::Result<Value> {
        let reply = self.request(&format!("$JS.API.{api}"), body.to_string().as_bytes()).await?;
        let v: Value = serde_json::from_slice(&reply)?;
        if let Some(error) = v.get("error") {
            bail!("JetStream refused {api}: {error}");
        }
        Ok(v)
    }

    /// Creates a stream capturing `subjects`, kept on disk (it outlives a restart).
    pub async fn create_stream(&mut self, name: &str, subjects: &[&str]) -> anyhow::Result<()> {
        self.js(&format!("STREAM.CREATE.{name}"), json!({"name": name, "subjects": subjects, "storage": "file"}))
            .await?;
        Ok(())
    }

    /// How many messages a stream holds.
    pub async fn stream_messages(&mut self, name: &str) -> anyhow::Result<u64> {
        let v = self.js(&format!("STREAM.INFO.{name}"), json!({})).await?;
        Ok(v["state"]["messages"].as_u64().unwrap_or(0))
    }

    /// The message of a stream at `seq`.
    pub async fn stored(&mut self, name: &str, seq: u64) -> anyhow::Result<Stored> {
        let v = self.js(&format!("STREAM.MSG.GET.{name}"), json!({"seq": seq})).await?;
        let m = &v["message"];
        let b64 = |key: &str| -> anyhow::Result<Vec<u8>> {
            Ok(base64::engine::general_purpose::STANDARD.decode(m[key].as_str().unwrap_or_default())?)
        };
        let headers = parse_headers(&b64("hdrs")?);
        Ok(Stored { subject: m["subject"].as_str().unwrap_or_default().to_owned(), headers, data: b64("data")? })
    }

    /// Every message of a stream, in order, once `expected` are there (or after 10 s).
    pub async fn all_stored(&mut self, name: &str, expected: u64) -> anyhow::Result<Vec<Stored>> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.stream_messages(name).await? < expected && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let count = self.stream_messages(name).await?;
        let mut out = Vec::new();
        for seq in 1..=count {
            out.push(self.stored(name, seq).await?);
        }
        Ok(out)
    }
}

/// `NATS/1.0\r\nName: value\r\n…` as pairs.
fn parse_headers(block: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(block)
        .split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}
