//! Operating the hub as processes on PostgreSQL: scaling by role, and draining on SIGTERM.

use std::collections::HashMap;
use std::time::Duration;

use hub_store::prelude::*;
use reqwest::StatusCode;
use serde_json::Value;

use crate::receiver::{Receiver, Script};
use crate::support::{Event, HubProcess, fresh_schema, http_client, postgres_dsn};

async fn shared_database() -> (Vec<(&'static str, String)>, hub_store::PgStore) {
    let schema = fresh_schema().await;
    let store = hub_store::PgStore::connect(&postgres_dsn(), Some(&schema), 2).await.expect("connect");
    store.migrate().await.expect("migrate");
    let vars = vec![
        ("STREAMING_HUB_POSTGRES_DSN", postgres_dsn()),
        ("STREAMING_HUB_POSTGRES_SCHEMA", schema),
        ("STREAMING_HUB_ADMIN_TOKEN", format!("admin-{}", uuid::Uuid::now_v7().simple())),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "50".to_owned()),
    ];
    (vars, store)
}

fn with(vars: &[(&'static str, String)], extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut all = vars.to_vec();
    all.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ingest_and_two_delivery_processes_deliver_every_event_exactly_once() {
    const EVENTS: usize = 300;
    let (vars, store) = shared_database().await;
    let admin = vars.iter().find(|(k, _)| *k == "STREAMING_HUB_ADMIN_TOKEN").expect("admin").1.clone();
    let receiver = Receiver::start(Script::Ok).await;
    let ingest = HubProcess::start(&with(&vars, &[("STREAMING_HUB_ROLE", "ingest")])).await;
    let delivery_a = HubProcess::start(&with(&vars, &[("STREAMING_HUB_ROLE", "delivery")])).await;
    let delivery_b = HubProcess::start(&with(&vars, &[("STREAMING_HUB_ROLE", "delivery")])).await;
    let (key, sub, _) = ingest.verified_webhook(&admin, &receiver).await;
    let sub: uuid::Uuid = sub.parse().expect("uuid");
    let mut ids = Vec::new();
    for _ in 0..EVENTS {
        let event = Event::new("t1");
        ids.push(event.id().to_string());
        ingest.post_event(&key, &event).await;
    }
    receiver.wait_for(EVENTS, Duration::from_secs(60)).await;
    // Every job's outcome is recorded: a double claim would show as a second attempt.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let jobs = loop {
        let jobs = store.list_jobs("t1", sub, None, None, 1000).await.expect("jobs");
        if jobs.len() == EVENTS && jobs.iter().all(|j| j.state == hub_store::JobState::Succeeded) {
            break jobs;
        }
        assert!(tokio::time::Instant::now() < deadline, "outcomes never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(jobs.iter().all(|j| j.attempts == 1), "a job was attempted twice: leases double-claimed");
    let got = receiver.deliveries();
    let mut per_event: HashMap<String, usize> = HashMap::new();
    for d in &got {
        assert!(d.verified, "every delivery is signed");
        *per_event.entry(d.header("x-lerian-event-id")).or_default() += 1;
    }
    assert_eq!(per_event.len(), EVENTS, "every event was delivered");
    assert!(per_event.values().all(|n| *n == 1), "an event was delivered twice: leases double-claimed");
    for id in &ids {
        assert!(per_event.contains_key(id));
    }
    drop((ingest, delivery_a, delivery_b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_readiness_first_and_releases_unfinished_leases() {
    let (vars, store) = shared_database().await;
    let admin = vars.iter().find(|(k, _)| *k == "STREAMING_HUB_ADMIN_TOKEN").expect("admin").1.clone();
    // Every delivery hangs: the attempt is still running when the shutdown timeout ends.
    let receiver = Receiver::start(Script::Hang).await;
    let mut hub = HubProcess::start(&with(
        &vars,
        &[("STREAMING_HUB_DRAIN_DELAY", "1500ms"), ("STREAMING_HUB_SHUTDOWN_TIMEOUT", "1s")],
    ))
    .await;
    let (key, sub, _) = hub.verified_webhook(&admin, &receiver).await;
    hub.post_event(&key, &Event::new("t1")).await;
    receiver.wait_for(1, Duration::from_secs(20)).await;

    let client = http_client();
    let pid = hub.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    // Readiness turns 503 first, while the process still answers (and is alive).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ready = client.get(format!("{}/readyz", hub.base)).send().await.expect("still serving");
        if ready.status() == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "/readyz never turned 503");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let health = client.get(format!("{}/healthz", hub.base)).send().await.expect("still serving");
    assert_eq!(health.status(), StatusCode::OK, "/healthz stays 200 while draining");

    // The process exits on its own; the attempt it could not finish is handed back at once.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = hub.child.try_wait().expect("wait") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the hub did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "a drained hub exits cleanly: {status:?}");
    let jobs = store.list_jobs("t1", sub.parse().expect("uuid"), None, None, 10).await.expect("jobs");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].state, hub_store::JobState::Pending, "the unfinished lease was released: {jobs:?}");
    assert_eq!(jobs[0].attempts, 0, "a released attempt is not counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_json_with_ids_and_never_carry_payloads_or_secrets() {
    let (vars, _store) = shared_database().await;
    let admin = vars.iter().find(|(k, _)| *k == "STREAMING_HUB_ADMIN_TOKEN").expect("admin").1.clone();
    let kek = "6b".repeat(32);
    let receiver = Receiver::start(Script::FailFirst(1)).await;
    let hub = HubProcess::start(&with(
        &vars,
        &[
            ("STREAMING_HUB_ENV", "staging"),
            ("STREAMING_HUB_KEK_REF", "HUB_TEST_KEK"),
            ("HUB_TEST_KEK", kek.as_str()),
            ("STREAMING_HUB_RETRY_CURVE", "0s,20ms"),
        ],
    ))
    .await;
    let (key, id, secret) = hub.verified_webhook(&admin, &receiver).await;
    let marker = format!("PAYLOAD-MARKER-{}", uuid::Uuid::now_v7().simple());
    let body = format!(r#"{{"note":"{marker}"}}"#);
    hub.post_event(&key, &Event::new("t1").body(body.clone().into_bytes())).await;
    receiver.wait_for(2, Duration::from_secs(20)).await;
    let rotated: Value = http_client()
        .post(format!("{}/v1/subscriptions/{id}/rotate-secret", hub.base))
        .bearer_auth(&key)
        .send()
        .await
        .expect("rotate")
        .json()
        .await
        .expect("json");
    let new_secret = rotated["signing_secret"].as_str().expect("secret").to_owned();
    // A malformed event carrying the marker is quarantined (and logged about) too.
    let mut request = http_client().post(format!("{}/v1/events", hub.base)).bearer_auth(&key);
    for (k, v) in &Event::new("t1").set("ce-id", "9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a").headers {
        request = request.header(k.as_str(), v.as_str());
    }
    assert_eq!(request.body(body).send().await.expect("post").status(), StatusCode::UNPROCESSABLE_ENTITY);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = hub.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let log_path = hub.log.clone();
    drop(hub);

    let logs = std::fs::read_to_string(&log_path).expect("logs");
    assert!(!logs.is_empty());
    for forbidden in [marker.as_str(), secret.as_str(), new_secret.as_str(), key.as_str(), admin.as_str(), kek.as_str()]
    {
        assert!(!logs.contains(forbidden), "a log line carries a payload or a secret: {forbidden}");
    }
    let lines: Vec<Value> =
        logs.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not a JSON log line: {l}"))).collect();
    assert!(lines.iter().all(|l| l["level"].is_string() && l["timestamp"].is_string()));
    let failed = lines
        .iter()
        .find(|l| l["message"] == "delivery attempt failed")
        .unwrap_or_else(|| panic!("no failed attempt logged: {logs}"));
    assert_eq!(failed["span"]["tenant"], "t1", "{failed}");
    assert_eq!(failed["span"]["subscription"], id.as_str());
    assert!(failed["span"]["job"].is_string());
    assert_eq!(failed["span"]["attempt"], 1);
}
