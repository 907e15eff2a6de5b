//! `TestHub`: one running hub per test, and helpers to talk to it.

use std::collections::HashMap;
use std::sync::Arc;

use hub_store::{PgStore, Store};
use reqwest::StatusCode;
use serde_json::Value;
use streaming_hub::config::Config;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub use hub_testkit::{fresh_schema, postgres_dsn};

/// An HTTP client for tests (with the process's TLS provider installed).
pub fn http_client() -> reqwest::Client {
    hub_sinks::install_crypto_provider();
    reqwest::Client::new()
}

pub fn temp_sqlite_path() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("streaming-hub-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(format!("{}.db", Uuid::now_v7()))
}

/// Variables for a hub on `backend` listening on a free port.
pub async fn base_vars(backend: Backend) -> HashMap<String, String> {
    let mut vars = HashMap::from([
        ("STREAMING_HUB_ENV".to_owned(), "local".to_owned()),
        ("STREAMING_HUB_HTTP_LISTEN_ADDR".to_owned(), "127.0.0.1:0".to_owned()),
        ("STREAMING_HUB_ADMIN_TOKEN".to_owned(), format!("admin-{}", Uuid::now_v7().simple())),
        // 32 bytes, hex: tests never write a generated key into the working directory.
        ("STREAMING_HUB_DEV_KEK".to_owned(), "4b".repeat(32)),
        // Test receivers listen on loopback.
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS".to_owned(), "true".to_owned()),
        // The hub runs in this test process: its transform workers are the hub's executable.
        ("STREAMING_HUB_TRANSFORM_WORKER".to_owned(), env!("CARGO_BIN_EXE_streaming-hub").to_owned()),
    ]);
    match backend {
        Backend::Sqlite => {
            vars.insert("STREAMING_HUB_SQLITE_PATH".into(), temp_sqlite_path().display().to_string());
        }
        Backend::Postgres => {
            vars.insert("STREAMING_HUB_POSTGRES_DSN".into(), postgres_dsn());
            vars.insert("STREAMING_HUB_POSTGRES_SCHEMA".into(), fresh_schema().await);
            vars.insert("STREAMING_HUB_POSTGRES_MAX_CONNECTIONS".into(), "8".into());
        }
    }
    vars
}

pub struct TestHub {
    /// The variables the hub was started with.
    pub vars: HashMap<String, String>,
    pub base: String,
    pub admin: String,
    pub client: reqwest::Client,
    pub store: Arc<dyn Store>,
    /// The hub's clock: real time plus whatever a test advanced it by.
    pub clock: Arc<streaming_hub::testing::ShiftedClock>,
    shutdown: CancellationToken,
}

impl Drop for TestHub {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestHub {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, &[]).await
    }

    pub async fn start_with(backend: Backend, extra: &[(&str, &str)]) -> Self {
        let mut vars = base_vars(backend).await;
        for (k, v) in extra {
            vars.insert((*k).to_owned(), (*v).to_owned());
        }
        Self::start_vars(vars).await
    }

    /// Starts a hub with exactly these variables (e.g. a second hub on the same database).
    pub async fn start_vars(vars: HashMap<String, String>) -> Self {
        let config = Config::from_vars(vars.clone()).expect("test configuration is valid");
        if !config.env.is_local() {
            // Outside local the schema is migrated explicitly, as an operator would.
            streaming_hub::open_store(&config, true).await.expect("migrate");
        }
        let shutdown = CancellationToken::new();
        let clock = Arc::new(streaming_hub::testing::ShiftedClock::default());
        let hub = streaming_hub::start_with_clock(config, shutdown.clone(), Arc::clone(&clock) as _)
            .await
            .expect("hub starts");
        Self {
            vars,
            base: format!("http://{}", hub.addr),
            admin: hub.admin_token.as_ref().expect("test hubs have an admin token").expose().to_owned(),
            client: http_client(),
            store: Arc::clone(&hub.store),
            clock,
            shutdown,
        }
    }

    /// Every byte the database holds for `table`: the SQLite files, or the table's rows from
    /// PostgreSQL (text columns as text, binary columns raw).
    pub async fn raw_table_bytes(&self, table: &str) -> Vec<u8> {
        match self.vars.get("STREAMING_HUB_POSTGRES_SCHEMA") {
            None => {
                let path = &self.vars["STREAMING_HUB_SQLITE_PATH"];
                let mut bytes = Vec::new();
                for suffix in ["", "-wal"] {
                    bytes.extend(std::fs::read(format!("{path}{suffix}")).unwrap_or_default());
                }
                bytes
            }
            Some(schema) => {
                let pg = PgStore::connect(&postgres_dsn(), Some(schema), 1).await.expect("connect");
                let rows: Vec<(String,)> = sqlx::query_as(&format!("SELECT row_to_json(t)::text FROM {table} t"))
                    .fetch_all(pg.pool())
                    .await
                    .expect("rows");
                let mut bytes: Vec<u8> = rows.into_iter().flat_map(|(r,)| r.into_bytes()).collect();
                let blobs: Vec<(Option<Vec<u8>>, Option<Vec<u8>>, Option<Vec<u8>>)> =
                    sqlx::query_as(&format!("SELECT signing_secret, previous_secret, credentials FROM {table}"))
                        .fetch_all(pg.pool())
                        .await
                        .unwrap_or_default();
                for (a, b, c) in blobs {
                    bytes.extend(a.unwrap_or_default());
                    bytes.extend(b.unwrap_or_default());
                    bytes.extend(c.unwrap_or_default());
                }
                bytes
            }
        }
    }

    /// Runs one SQL statement on the hub's database behind its back (to plant data that the hub
    /// itself would no longer write). `$1`/`?1` takes `bytes`.
    pub async fn execute_raw(&self, sql_postgres: &str, sql_sqlite: &str, bytes: &[u8]) {
        match self.vars.get("STREAMING_HUB_POSTGRES_SCHEMA") {
            None => {
                let path = std::path::PathBuf::from(&self.vars["STREAMING_HUB_SQLITE_PATH"]);
                let store = hub_store::SqliteStore::open(&path).await.expect("open");
                sqlx::query(sql_sqlite).bind(bytes).execute(store.writer_pool()).await.expect("raw sql");
            }
            Some(schema) => {
                let pg = PgStore::connect(&postgres_dsn(), Some(schema), 1).await.expect("connect");
                sqlx::query(sql_postgres).bind(bytes).execute(pg.pool()).await.expect("raw sql");
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Creates an API key for `tenant` through the admin API.
    pub async fn tenant_key(&self, tenant: &str) -> String {
        let (status, body) = self
            .send(self.client.post(self.url("/admin/api-keys")).bearer_auth(&self.admin).json(&serde_json::json!({
                "tenant_id": tenant, "name": "test"
            })))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["key"].as_str().expect("key").to_owned()
    }

    /// Sends a request and reads its JSON body (`Null` when empty).
    pub async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = request.send().await.expect("request");
        let status = response.status();
        let bytes = response.bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
        };
        (status, body)
    }

    /// Posts an event in binary mode.
    pub async fn post_event(&self, token: &str, event: &Event) -> (StatusCode, Value) {
        let mut request = self.client.post(self.url("/v1/events")).bearer_auth(token);
        for (k, v) in &event.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        self.send(request.body(event.body.clone())).await
    }

    pub async fn admin_get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.get(self.url(path)).bearer_auth(&self.admin)).await
    }

    pub async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.send(self.client.get(self.url(path)).bearer_auth(key)).await
    }

    pub async fn post_json(&self, key: &str, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(self.client.post(self.url(path)).bearer_auth(key).json(body)).await
    }

    pub async fn patch_json(&self, key: &str, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(self.client.patch(self.url(path)).bearer_auth(key).json(body)).await
    }

    pub async fn delete(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.send(self.client.delete(self.url(path)).bearer_auth(key)).await
    }

    /// Creates a subscription and returns its JSON (asserting 201).
    pub async fn subscribe(&self, key: &str, body: Value) -> Value {
        let (status, answer) = self.post_json(key, "/v1/subscriptions", &body).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        answer
    }

    /// Waits (with a deadline) until the subscription's background probe made it active.
    pub async fn wait_until_active(&self, key: &str, id: &str) -> Value {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (_, sub) = self.get(key, &format!("/v1/subscriptions/{id}")).await;
            if sub["verification_state"] == "active" {
                return sub;
            }
            assert!(tokio::time::Instant::now() < deadline, "never verified: {sub}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// An event in HTTP binary mode.
#[derive(Debug, Clone)]
pub struct Event {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Event {
    pub fn new(tenant: &str) -> Self {
        Self::of(tenant, "loan_application", "approved")
    }

    pub fn of(tenant: &str, resource: &str, event: &str) -> Self {
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        headers.extend(hub_testkit::event_headers(tenant, Uuid::now_v7(), resource, event));
        Self { headers, body: br#"{"amount":100}"#.to_vec() }
    }

    pub fn id(&self) -> Uuid {
        Uuid::parse_str(self.get("ce-id").expect("ce-id")).expect("uuid")
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        hub_testkit::header(&self.headers, key)
    }

    pub fn set(mut self, key: &str, value: &str) -> Self {
        hub_testkit::set_header(&mut self.headers, key, value);
        self
    }

    pub fn without(mut self, key: &str) -> Self {
        self.headers.retain(|(k, _)| k != key);
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }
}

const BIN: &str = env!("CARGO_BIN_EXE_streaming-hub");

/// The hub binary, with none of the test process's own `STREAMING_HUB_*` variables.
pub fn hub_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(BIN);
    for (key, _) in std::env::vars() {
        if key.starts_with("STREAMING_HUB_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("STREAMING_HUB_LOG", "warn");
    cmd
}

/// Posts `event` in binary mode to the hub at `base` with `key`, waiting at most `timeout`:
/// whether it was accepted (202). Any other answer, or none, is a refusal the caller counts.
pub async fn post_accepted(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    event: &Event,
    timeout: std::time::Duration,
) -> bool {
    let mut request = client.post(format!("{base}/v1/events")).bearer_auth(key).timeout(timeout);
    for (k, v) in &event.headers {
        request = request.header(k.as_str(), v.as_str());
    }
    matches!(request.body(event.body.clone()).send().await, Ok(r) if r.status() == StatusCode::ACCEPTED)
}

/// Polls `probe` until it answers something, failing the test after `within`.
pub async fn until<T>(what: &str, within: std::time::Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let end = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A webhook URL on a loopback port nothing listens on (its listener bound, then closed).
pub fn closed_url() -> String {
    format!("http://127.0.0.1:{}/hook", free_port())
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port()
}

/// A hub process; killed when dropped.
pub struct HubProcess {
    pub child: std::process::Child,
    pub base: String,
    /// Where the process's logs go.
    pub log: std::path::PathBuf,
}

impl HubProcess {
    /// Starts `streaming-hub serve` with these variables and waits until it is ready.
    pub async fn start(vars: &[(&str, String)]) -> Self {
        let port = free_port();
        let mut cmd = hub_command();
        // Logs of hub processes go to a file a failing test can point to.
        let log_dir = std::env::temp_dir().join("streaming-hub-tests");
        std::fs::create_dir_all(&log_dir).expect("log dir");
        let log_path = log_dir.join(format!("hub-{port}.log"));
        let log = std::fs::File::create(&log_path).expect("log file");
        cmd.arg("serve")
            .env("STREAMING_HUB_HTTP_LISTEN_ADDR", format!("127.0.0.1:{port}"))
            .env("STREAMING_HUB_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(log);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn the hub");
        eprintln!("hub process on port {port} logs to {}", log_path.display());
        let base = format!("http://127.0.0.1:{port}");
        let client = http_client();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{base}/readyz")).send().await {
                if r.status() == StatusCode::OK {
                    break;
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "the hub process did not become ready");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Self { child, base, log: log_path }
    }

    /// A key of tenant `t1` and a verified webhook subscription to `receiver` (which then trusts
    /// its secret), through this process's API: `(key, subscription id, signing secret)`.
    pub async fn verified_webhook(
        &self,
        admin: &str,
        receiver: &crate::receiver::Receiver,
    ) -> (String, String, String) {
        let client = http_client();
        let json = async |request: reqwest::RequestBuilder| -> Value {
            request.send().await.expect("request").json().await.expect("json")
        };
        let key =
            json(client.post(format!("{}/admin/api-keys", self.base)).bearer_auth(admin).json(&serde_json::json!({
                "tenant_id": "t1"
            })))
            .await;
        let key = key["key"].as_str().expect("key").to_owned();
        let sub =
            json(client.post(format!("{}/v1/subscriptions", self.base)).bearer_auth(&key).json(&serde_json::json!({
                "name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}
            })))
            .await;
        let secret = sub["signing_secret"].as_str().expect("secret").to_owned();
        receiver.trust(&secret);
        let id = sub["id"].as_str().expect("id").to_owned();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let read = json(client.get(format!("{}/v1/subscriptions/{id}", self.base)).bearer_auth(&key)).await;
            if read["verification_state"] == "active" {
                return (key, id, secret);
            }
            assert!(tokio::time::Instant::now() < deadline, "never verified: {read}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Posts an event in binary mode and expects it accepted.
    pub async fn post_event(&self, key: &str, event: &Event) {
        let mut request = http_client().post(format!("{}/v1/events", self.base)).bearer_auth(key);
        for (k, v) in &event.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let status = request.body(event.body.clone()).send().await.expect("post").status();
        assert_eq!(status, StatusCode::ACCEPTED);
    }

    /// SIGKILL: no shutdown, no final write.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
