//! The binary itself: configuration errors, `migrate`, `api-key create`, and `serve`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::support::{Event, free_port, fresh_schema, hub_command, postgres_dsn, temp_sqlite_path};

/// The lines a child process writes to its piped standard error, as they come.
fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits until a hub started as a process answers `/readyz` with 200.
async fn wait_ready(client: &reqwest::Client, base: &str, failure: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = client.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status() == StatusCode::OK);
        if ready {
            return;
        }
        assert!(Instant::now() < deadline, "{failure}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `serve` on the SQLite file `db`, ready: the process, a client and its base URL.
async fn serve_sqlite(db: &std::path::Path) -> (std::process::Child, reqwest::Client, String) {
    let mut serve = hub_command();
    serve.arg("serve");
    spawn_ready(serve, db).await
}

/// Spawns `command` (a hub's `serve`, however started) on the SQLite file `db` and a free port,
/// and waits until it is ready: the process, a client and its base URL.
async fn spawn_ready(
    mut command: std::process::Command,
    db: &std::path::Path,
) -> (std::process::Child, reqwest::Client, String) {
    let port = free_port();
    let child = command
        .env("STREAMING_HUB_SQLITE_PATH", db)
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let client = crate::support::http_client();
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&client, &base, "the hub did not become ready").await;
    (child, client, base)
}

#[test]
fn invalid_configuration_fails_at_start_naming_each_variable() {
    let out = hub_command()
        .arg("serve")
        .env("STREAMING_HUB_DISPATCH_WORKERS", "many")
        .env("STREAMING_HUB_ROLE", "both")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("STREAMING_HUB_DISPATCH_WORKERS"), "{stderr}");
    assert!(stderr.contains("STREAMING_HUB_ROLE"), "{stderr}");
}

#[test]
fn unsafe_or_oversized_settings_stop_the_start_briefly() {
    // An empty environment is not `local`.
    let out = hub_command().arg("serve").env("STREAMING_HUB_ENV", "").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("STREAMING_HUB_ENV") && stderr.contains("empty"), "{stderr}");

    // A repeated sslmode in production, through the environment and through --config.
    let weak = "postgres://hub:pw@127.0.0.1:1/hub?sslmode=require&sslmode=disable";
    let production = |cmd: &mut std::process::Command| {
        cmd.env("STREAMING_HUB_ENV", "production")
            .env("STREAMING_HUB_ADMIN_TOKEN", "a-long-enough-admin-token")
            .env("STREAMING_HUB_KEK_REF", "HUB_KEK")
            .env("HUB_KEK", "k".repeat(32));
    };
    let mut cmd = hub_command();
    production(&mut cmd);
    let out = cmd.arg("serve").env("STREAMING_HUB_POSTGRES_DSN", weak).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("STREAMING_HUB_POSTGRES_DSN") && !stderr.contains("pw@"), "{stderr}");

    let dir = std::env::temp_dir().join(format!("sh-cli-config-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("hub.toml");
    std::fs::write(&file, format!("postgres_dsn = {weak:?}\n")).expect("write");
    let mut cmd = hub_command();
    production(&mut cmd);
    let out = cmd.arg("--config").arg(&file).arg("serve").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("STREAMING_HUB_POSTGRES_DSN"));

    // A 5 MB value and a 5 MB key name in a file: a short refusal, not the value again.
    std::fs::write(&file, format!("role = \"{}\"\n", "r".repeat(5_000_000))).expect("write");
    let out = hub_command().arg("--config").arg(&file).arg("serve").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stderr.len() < 1000, "{} bytes of error", out.stderr.len());
    std::fs::write(&file, format!("{} = 1\n", "k".repeat(900_000))).expect("write");
    let out = hub_command().arg("--config").arg(&file).arg("serve").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stderr.len() < 1000, "{} bytes of error", out.stderr.len());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn version_names_the_revision_and_the_build_date() {
    let out = hub_command().arg("--version").output().expect("run");
    assert!(out.status.success());
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (prefix, rest) = line.split_once(" (revision ").unwrap_or_else(|| panic!("{line}"));
    assert_eq!(prefix, format!("streaming-hub {}", env!("CARGO_PKG_VERSION")));
    let (revision, date) = rest.trim_end_matches(')').split_once(", built ").unwrap_or_else(|| panic!("{line}"));
    assert!(!revision.is_empty(), "{line}");
    assert!(chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_ok(), "{line}");
}

#[test]
fn check_config_names_problems_and_unknown_variables() {
    let ok = hub_command().arg("check-config").env("STREAMING_HUB_ROLE", "delivery").output().expect("run");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("configuration is valid"));
    let unknown = hub_command().arg("check-config").env("STREAMING_HUB_DISPATCH_WROKERS", "4").output().expect("run");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("STREAMING_HUB_DISPATCH_WROKERS"));
    let bad = hub_command().arg("check-config").env("STREAMING_HUB_ROLE", "both").output().expect("run");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("STREAMING_HUB_ROLE"));
}

#[test]
fn api_key_create_checks_its_arguments() {
    let out = hub_command()
        .args(["api-key", "create", "--tenant", ""])
        .env("STREAMING_HUB_SQLITE_PATH", temp_sqlite_path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tenant"), "{}", String::from_utf8_lossy(&out.stderr));

    let db = temp_sqlite_path();
    for bad in ["soon", "10s", "20y"] {
        let out = hub_command()
            .args(["api-key", "create", "--tenant", "t1", "--expires-in", bad])
            .env("STREAMING_HUB_SQLITE_PATH", &db)
            .output()
            .expect("run");
        assert!(!out.status.success(), "{bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--expires-in"), "{bad}: {stderr}");
    }
    let out = hub_command()
        .args(["api-key", "create", "--tenant", "t1", "--expires-in", "90d"])
        .env("STREAMING_HUB_SQLITE_PATH", &db)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The first start in `local`, as `cargo run -- serve` makes it (with the variables the build
/// script hands to `cargo run`), warns of no variable the build itself set.
#[tokio::test]
async fn a_first_start_warns_of_nothing_the_build_itself_set() {
    let build = include_str!("../../build.rs");
    let from_build: Vec<&str> =
        build.split("cargo:rustc-env=").skip(1).filter_map(|rest| rest.split('=').next()).collect();
    assert!(from_build.len() >= 2, "the build script names its variables: {from_build:?}");
    let dir = std::env::temp_dir().join(format!("streaming-hub-first-start-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("dir");
    let port = free_port();
    let mut command = hub_command();
    command
        .arg("serve")
        .current_dir(&dir)
        .env("STREAMING_HUB_SQLITE_PATH", dir.join("streaming-hub.db"))
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("STREAMING_HUB_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for name in &from_build {
        command.env(name, "as-cargo-run-sets-it");
    }
    let mut child = command.spawn().expect("spawn");
    let lines = stderr_lines(&mut child);
    // Everything said up to the line that says the hub started (and what came with it).
    let mut said = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !said.iter().any(|l: &String| l.contains("streaming hub started")) {
        let left = deadline.saturating_duration_since(Instant::now());
        said.push(lines.recv_timeout(left).unwrap_or_else(|_| panic!("the hub never said it started: {said:#?}")));
    }
    let client = crate::support::http_client();
    wait_ready(&client, &format!("http://127.0.0.1:{port}"), "the hub did not become ready").await;
    let _ = child.kill();
    let _ = child.wait();
    said.extend(lines.try_iter());
    for line in &said {
        assert!(!line.contains("not used by this hub"), "a variable the build set is reported: {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_key_made_by_the_cli_ingests_through_serve() {
    let db = temp_sqlite_path();
    let out = hub_command()
        .args(["api-key", "create", "--tenant", "t1"])
        .env("STREAMING_HUB_SQLITE_PATH", &db)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key = String::from_utf8(out.stdout).expect("utf-8").trim().to_owned();
    assert!(key.starts_with("shk_"), "{key}");

    let (mut child, client, base) = serve_sqlite(&db).await;
    let event = Event::new("t1");
    let mut request = client.post(format!("{base}/v1/events")).bearer_auth(&key);
    for (k, v) in &event.headers {
        request = request.header(k.as_str(), v.as_str());
    }
    let response = request.body(event.body.clone()).send().await.expect("post");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn database_problems_are_said_once_naming_the_variable() {
    // A database that answers and refuses: one error, naming the variable, the cause once.
    let mut dsn = url::Url::parse(&postgres_dsn()).expect("dsn");
    dsn.set_path("/no_such_database_here");
    let out = hub_command()
        .arg("serve")
        .env("STREAMING_HUB_POSTGRES_DSN", dsn.as_str())
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", "127.0.0.1:0")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("STREAMING_HUB_POSTGRES_DSN: cannot open the database"), "{stderr}");
    assert_eq!(stderr.matches("does not exist").count(), 1, "{stderr}");

    // Nothing listening: the hub waits and says so, naming the variable and where it looks.
    let port = free_port();
    let mut child = hub_command()
        .arg("serve")
        .env("STREAMING_HUB_POSTGRES_DSN", format!("postgres://hub:secret-pass@127.0.0.1:{port}/hub"))
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", "127.0.0.1:0")
        .env("STREAMING_HUB_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let rx = stderr_lines(&mut child);
    let mut waiting = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while waiting.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("the hub said nothing about the missing database");
        if line.contains("unreachable") {
            waiting.push(line);
        }
    }
    assert!(child.try_wait().expect("status").is_none(), "still waiting, not exited");
    let _ = child.kill();
    let _ = child.wait();
    for line in &waiting {
        assert!(line.contains("STREAMING_HUB_POSTGRES_DSN") && line.contains(&format!("127.0.0.1:{port}")), "{line}");
        assert!(!line.contains("secret-pass"), "never the password: {line}");
    }
}

/// The first scrape of a fresh process (no traffic yet) holds every family the dashboard and the
/// alert rules read, so no panel is blank and no `absent()` alert fires after a restart; but
/// Kafka's lag (labelled by topic, so only once partitions are assigned) and retention's
/// last-pass time (only a finished pass has one).
#[tokio::test]
async fn the_first_scrape_holds_every_family_the_dashboard_and_alerts_read() {
    let used: std::collections::BTreeSet<String> = [
        include_str!("../../../../deploy/grafana/streaming-hub.json"),
        include_str!("../../../../deploy/prometheus/streaming-hub-rules.yaml"),
    ]
    .iter()
    .flat_map(|text| text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
    .filter(|w| w.starts_with("streaming_hub_"))
    .map(|w| w.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count").to_owned())
    .filter(|w| {
        !["streaming_hub_kafka_consumer_lag", "streaming_hub_retention_last_pass_timestamp_seconds"]
            .contains(&w.as_str())
    })
    .collect();
    assert!(used.len() >= 15, "{used:?}");
    let db = temp_sqlite_path();
    let (mut child, client, base) = serve_sqlite(&db).await;
    let scrape = client.get(format!("{base}/metrics")).send().await.expect("scrape").text().await.expect("text");
    let _ = child.kill();
    let _ = child.wait();
    let missing: Vec<&String> =
        used.iter().filter(|family| !scrape.lines().any(|l| l.starts_with(&format!("# TYPE {family} ")))).collect();
    assert!(missing.is_empty(), "missing from the first scrape: {missing:?}");
    // With their label values: every push sink's attempt histogram, every job state.
    assert!(scrape.contains("streaming_hub_delivery_attempt_duration_seconds_count{sink=\"webhook\"} 0"), "{scrape}");
    assert!(scrape.contains("streaming_hub_delivery_jobs{state=\"dead\"}"), "{scrape}");
}

/// A server with no connection to give (53300, "too many connections", as in a storm during a
/// rolling restart) is waited for like one that is down, never a crash loop: the hub says so,
/// naming the variable, and starts once a connection is to be had.
#[tokio::test]
async fn a_full_database_is_waited_for_at_start() {
    let schema = fresh_schema().await;
    let admin = hub_store::PgStore::connect(&postgres_dsn(), Some(&schema), 1).await.expect("connect");
    let role = format!("hub_full_{}", uuid::Uuid::now_v7().simple());
    let setup = format!(
        "CREATE ROLE {role} LOGIN PASSWORD 'full-pass' CONNECTION LIMIT 0; GRANT ALL ON SCHEMA {schema} TO {role}"
    );
    sqlx::raw_sql(&setup).execute(admin.pool()).await.expect("a role with no connection to give");
    let mut dsn = url::Url::parse(&postgres_dsn()).expect("dsn");
    dsn.set_username(&role).expect("user");
    dsn.set_password(Some("full-pass")).expect("password");
    let port = free_port();
    let mut child = hub_command()
        .arg("serve")
        .env("STREAMING_HUB_POSTGRES_DSN", dsn.as_str())
        .env("STREAMING_HUB_POSTGRES_SCHEMA", &schema)
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("STREAMING_HUB_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let rx = stderr_lines(&mut child);
    let deadline = Instant::now() + Duration::from_secs(30);
    let said = loop {
        let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("the hub said nothing");
        if line.contains("unreachable") {
            break line;
        }
    };
    assert!(said.contains("STREAMING_HUB_POSTGRES_DSN") && said.contains("too many connections"), "{said}");
    assert!(!said.contains("full-pass"), "never the password: {said}");
    assert!(child.try_wait().expect("status").is_none(), "waiting, not exited");
    sqlx::query(&format!("ALTER ROLE {role} CONNECTION LIMIT -1")).execute(admin.pool()).await.expect("room again");
    let client = crate::support::http_client();
    wait_ready(&client, &format!("http://127.0.0.1:{port}"), "the hub did not start once there was room").await;
    let _ = child.kill();
    let _ = child.wait();
    let cleanup = format!("DROP OWNED BY {role}; DROP ROLE {role}");
    sqlx::raw_sql(&cleanup).execute(admin.pool()).await.ok();
}

/// While Kafka is out of reach the log says so once per consumer, then a summary at the
/// configured interval, not a line per failed connection (SPEC §6.3: the metrics and `/readyz`
/// carry the state).
#[tokio::test]
async fn a_kafka_outage_is_logged_once_then_summarized() {
    let (kafka_port, http_port) = (free_port(), free_port());
    let mut child = hub_command()
        .arg("serve")
        .env("STREAMING_HUB_SQLITE_PATH", temp_sqlite_path())
        .env("STREAMING_HUB_KAFKA_BROKERS", format!("127.0.0.1:{kafka_port}"))
        .env("STREAMING_HUB_KAFKA_OUTAGE_LOG_INTERVAL", "4s")
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", format!("127.0.0.1:{http_port}"))
        .env("STREAMING_HUB_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let rx = stderr_lines(&mut child);
    // Readiness is asked often meanwhile, as a load balancer would.
    let base = format!("http://127.0.0.1:{http_port}");
    let asking = tokio::spawn(async move {
        let client = reqwest::Client::new();
        for _ in 0..40 {
            let _ = client.get(format!("{base}/readyz")).send().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // Until the first summary (the proof that the interval passed), count what was logged.
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("the hub never summarized the outage");
        if line.contains("still unreachable") {
            break;
        }
        lines.push(line);
    }
    asking.abort();
    let _ = child.kill();
    let _ = child.wait();
    let loud: Vec<&String> = lines.iter().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    let started = loud.iter().filter(|l| l.contains("is unreachable")).count();
    assert!(started >= 1, "the outage was said: {loud:#?}");
    assert!(loud.len() <= 4, "{} lines before the first summary: {loud:#?}", loud.len());
}

#[tokio::test]
async fn local_mode_migrates_no_other_applications_database() {
    let schema = fresh_schema().await;
    let admin = hub_store::PgStore::connect(&postgres_dsn(), Some(&schema), 1).await.expect("connect");
    sqlx::query("CREATE TABLE invoices (id BIGINT PRIMARY KEY)").execute(admin.pool()).await.expect("create");
    let out = hub_command()
        .arg("serve")
        .env("STREAMING_HUB_POSTGRES_DSN", postgres_dsn())
        .env("STREAMING_HUB_POSTGRES_SCHEMA", &schema)
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", "127.0.0.1:0")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("STREAMING_HUB_POSTGRES_DSN") && stderr.contains("invoices"), "{stderr}");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1",
    )
    .fetch_all(admin.pool())
    .await
    .expect("tables");
    assert_eq!(tables, vec!["invoices".to_owned()], "nothing was migrated into it");
}

#[tokio::test]
async fn outside_local_admin_keys_can_stand_in_for_the_admin_token() {
    // A migrated database with no admin key: no way to administer it, so no start.
    let empty = temp_sqlite_path();
    let out = hub_command().arg("migrate").env("STREAMING_HUB_SQLITE_PATH", &empty).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = hub_command()
        .arg("serve")
        .env("STREAMING_HUB_ENV", "staging")
        .env("STREAMING_HUB_SQLITE_PATH", &empty)
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", "127.0.0.1:0")
        .env_remove("STREAMING_HUB_ADMIN_TOKEN")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("STREAMING_HUB_ADMIN_TOKEN") && stderr.contains("--admin"), "{stderr}");

    // The CLI refuses a key that is both, or neither.
    let both = hub_command().args(["api-key", "create", "--admin", "--tenant", "t1"]).output().expect("run");
    assert!(!both.status.success());
    let neither = hub_command().args(["api-key", "create"]).output().expect("run");
    assert!(!neither.status.success());
    assert!(
        String::from_utf8_lossy(&neither.stderr).contains("--tenant"),
        "{}",
        String::from_utf8_lossy(&neither.stderr)
    );

    // With an admin key it starts, and the key opens the admin routes.
    let db = temp_sqlite_path();
    let make = |args: &[&str]| {
        let out = hub_command().args(args).env("STREAMING_HUB_SQLITE_PATH", &db).output().expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
    };
    let admin_key = make(&["api-key", "create", "--admin", "--name", "ops-alice"]);
    let tenant_key = make(&["api-key", "create", "--tenant", "t1"]);
    let port = free_port();
    let mut child = hub_command()
        .arg("serve")
        .env("STREAMING_HUB_ENV", "staging")
        .env("STREAMING_HUB_SQLITE_PATH", &db)
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env_remove("STREAMING_HUB_ADMIN_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let client = crate::support::http_client();
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&client, &base, "the hub did not start with an admin key").await;
    let get = |key: &str| client.get(format!("{base}/admin/api-keys")).bearer_auth(key.to_owned()).send();
    let listed = get(&admin_key).await.expect("get");
    assert_eq!(listed.status(), StatusCode::OK);
    let listed: serde_json::Value = listed.json().await.expect("json");
    let ops =
        listed["items"].as_array().expect("items").iter().find(|k| k["name"] == "ops-alice").expect("listed").clone();
    assert_eq!((ops["admin"].clone(), ops["tenant_id"].clone()), (serde_json::json!(true), serde_json::Value::Null));
    assert_eq!(get(&tenant_key).await.expect("get").status(), StatusCode::FORBIDDEN);
    // Revoked, it opens nothing.
    let revoke = client
        .delete(format!("{base}/admin/api-keys/{}", ops["id"].as_str().expect("id")))
        .bearer_auth(&admin_key)
        .send()
        .await
        .expect("delete");
    assert_eq!(revoke.status(), StatusCode::NO_CONTENT);
    assert_eq!(get(&admin_key).await.expect("get").status(), StatusCode::UNAUTHORIZED);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn a_config_file_drives_serve_and_the_environment_overrides_it() {
    let db = temp_sqlite_path();
    let port = free_port();
    let file = db.with_extension("toml");
    let toml = format!(
        "admin_token = \"token-from-the-file\"\nsqlite_path = {:?}\n\n[http]\nlisten_addr = \"127.0.0.1:1\"\n\n[dispatch]\nworkers = 2\n",
        db.display().to_string()
    );
    std::fs::write(&file, toml).expect("write");

    // A key the hub does not read is refused, naming the file and the key.
    let bad = db.with_extension("bad.toml");
    std::fs::write(&bad, "[dispatch]\nwrokers = 2\n").expect("write");
    let out = hub_command().arg("serve").arg("--config").arg(&bad).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dispatch.wrokers") && stderr.contains(&*bad.to_string_lossy()), "{stderr}");

    let mut child = hub_command()
        .args(["serve", "--config"])
        .arg(&file)
        .env("STREAMING_HUB_HTTP_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env_remove("STREAMING_HUB_ADMIN_TOKEN")
        .env_remove("STREAMING_HUB_SQLITE_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let client = crate::support::http_client();
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&client, &base, "the hub did not listen on the environment's address").await;
    let keys =
        client.get(format!("{base}/admin/api-keys")).bearer_auth("token-from-the-file").send().await.expect("get");
    assert_eq!(keys.status(), StatusCode::OK, "the file's admin token");
    let _ = child.kill();
    let _ = child.wait();
    assert!(db.exists(), "the file's SQLite path was used");
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&bad);
}

#[tokio::test]
async fn outside_local_the_schema_must_be_migrated_explicitly() {
    let schema = fresh_schema().await;
    let run = |args: &[&str]| {
        hub_command()
            .args(args)
            .env("STREAMING_HUB_ENV", "staging")
            .env("STREAMING_HUB_ADMIN_TOKEN", "a-long-enough-admin-token")
            .env("STREAMING_HUB_POSTGRES_DSN", postgres_dsn())
            .env("STREAMING_HUB_POSTGRES_SCHEMA", &schema)
            .env("STREAMING_HUB_HTTP_LISTEN_ADDR", "127.0.0.1:0")
            .output()
            .expect("run")
    };
    let refused = run(&["api-key", "create", "--tenant", "t1"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("streaming-hub migrate"), "{stderr}");

    // `migrate` needs only the database: no admin token, and Kafka settings it does not use
    // (here an unreadable CA) do not stop it. It says what it applied.
    let migrated = hub_command()
        .arg("migrate")
        .env("STREAMING_HUB_ENV", "staging")
        .env_remove("STREAMING_HUB_ADMIN_TOKEN")
        .env("STREAMING_HUB_POSTGRES_DSN", postgres_dsn())
        .env("STREAMING_HUB_POSTGRES_SCHEMA", &schema)
        .env("STREAMING_HUB_KAFKA_BROKERS", "127.0.0.1:1")
        .env("STREAMING_HUB_KAFKA_CA_CERT", "/nonexistent/ca.pem")
        .env("STREAMING_HUB_LOG", "info")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&migrated.stderr);
    assert!(migrated.status.success(), "{stderr}");
    assert!(stderr.contains("database migrations applied"), "{stderr}");
    assert!(String::from_utf8_lossy(&migrated.stdout).contains("up to date"));
    let created = run(&["api-key", "create", "--tenant", "t1"]);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
}

#[test]
fn the_demo_shows_the_whole_product() {
    let out = hub_command().arg("demo").env_remove("STREAMING_HUB_LOG").output().expect("run the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // The event's seq: the inbox may already hold the hub's own notices (a verified webhook).
    let seq = stdout
        .split("accepted (seq ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no accepted event in:\n{stdout}"))
        .to_owned();
    for expected in [
        format!("duplicate  → 202 duplicate (seq {seq})").as_str(),
        "malformed  → 422 quarantined — ce-id:",
        "webhook: 3 deliveries received, 3 signatures verified",
        "pull:    3 events read",
        "quarantine: 1 record(s)",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }
    assert!(
        out.stderr.is_empty(),
        "the demo logs nothing at its default level: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The soft limit of open files of a process, and its hard limit (`None`: unlimited).
fn open_files(pid: u32) -> (Option<u64>, Option<u64>) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("the open files line");
    let mut values = line["Max open files".len()..].split_whitespace().map(|v| v.parse::<u64>().ok());
    (values.next().flatten(), values.next().flatten())
}

/// A hub started under a low soft limit of open files raises it to its hard limit: each attempt
/// out and each connection kept to a receiver is a descriptor.
#[tokio::test]
async fn serve_raises_its_soft_limit_of_open_files_to_the_hard_one() {
    let (_, hard) = open_files(std::process::id());
    let hard = hard.expect("a finite hard limit of open files here");
    assert!(hard > 256, "the hard limit ({hard}) leaves nothing to raise");
    let db = temp_sqlite_path();
    let program = hub_command().get_program().to_owned();
    let mut shell = std::process::Command::new("sh");
    shell.arg("-c").arg("ulimit -Sn 256 && exec \"$0\" serve").arg(program);
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("STREAMING_HUB_")) {
        shell.env_remove(key);
    }
    shell.env("STREAMING_HUB_LOG", "warn");
    let (mut child, _, _) = spawn_ready(shell, &db).await;
    let limits = open_files(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(limits, (Some(hard), Some(hard)), "started with a soft limit of 256");
}
