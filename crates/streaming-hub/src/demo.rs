//! `streaming-hub demo`: the whole product in one command on the embedded default.
//!
//! It starts a hub on a fresh SQLite file, a local webhook receiver that verifies every
//! signature, creates a webhook and a pull subscription through the API, ingests sample events
//! (one duplicate, one malformed), and reports what happened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

#[derive(Default)]
struct Received {
    secret: Option<String>,
    deliveries: usize,
    verified: usize,
}

type Shared = Arc<Mutex<Received>>;

async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    if header("x-lerian-event-type") == "streaming_hub.verification" {
        // Prove control of the URL: echo the challenge.
        return (StatusCode::OK, body).into_response();
    }
    let mut r = shared.lock().unwrap_or_else(|p| p.into_inner());
    r.deliveries += 1;
    let ts: i64 = header("x-webhook-timestamp").parse().unwrap_or_default();
    let ok = r.secret.as_deref().is_some_and(|secret| {
        headers
            .get_all("x-webhook-signature")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|sig| hub_core::signature::verify(secret, ts, &body, sig))
    });
    if ok {
        r.verified += 1;
        StatusCode::NO_CONTENT.into_response()
    } else {
        StatusCode::UNAUTHORIZED.into_response()
    }
}

fn event(id: &str, kind: &str, body: Value) -> (Vec<(String, String)>, Vec<u8>) {
    let headers = [
        ("content-type", "application/json"),
        ("ce-specversion", "1.0"),
        ("ce-id", id),
        ("ce-source", "lender"),
        ("ce-type", &format!("studio.lerian.lender.loan_application.{kind}")),
        ("ce-time", &chrono::Utc::now().to_rfc3339()),
        ("ce-schemaversion", "1.0.0"),
        ("ce-resourcetype", "loan_application"),
        ("ce-eventtype", kind),
        ("ce-tenantid", "acme"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    (headers, body.to_string().into_bytes())
}

/// Runs the demo and prints its report.
pub async fn run() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("streaming-hub-demo-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("demo.db");
    let kek = crate::keys::generate("");
    let vars: HashMap<String, String> = [
        ("STREAMING_HUB_DEV_KEK", kek.as_str()),
        ("STREAMING_HUB_ENV", "local"),
        ("STREAMING_HUB_SQLITE_PATH", db.to_str().unwrap_or("demo.db")),
        ("STREAMING_HUB_HTTP_LISTEN_ADDR", "127.0.0.1:0"),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true"),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "50"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let config = Config::from_vars(vars).map_err(|e| anyhow::anyhow!("{e}"))?;
    let shutdown = CancellationToken::new();
    let hub = crate::start(config, shutdown.clone()).await?;
    let base = format!("http://{}", hub.addr);
    let admin = hub
        .admin_token
        .as_ref()
        .map(|t| t.expose().to_owned())
        .context("the demo runs in local mode, with an admin token")?;

    let shared: Shared = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let receiver_url = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new().fallback(receive).with_state(Arc::clone(&shared));
    tokio::spawn(async move { axum::serve(listener, app).await });

    hub_sinks::install_crypto_provider();
    let http = reqwest::Client::new();
    let json_of = async |r: reqwest::RequestBuilder| -> anyhow::Result<(u16, Value)> {
        let response = r.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text)? }))
    };
    let (_, created) = json_of(
        http.post(format!("{base}/admin/api-keys"))
            .bearer_auth(&admin)
            .json(&json!({"tenant_id": "acme", "name": "demo"})),
    )
    .await?;
    let key = created["key"].as_str().context("no API key")?.to_owned();
    let (_, hook) = json_of(http.post(format!("{base}/v1/subscriptions")).bearer_auth(&key).json(&json!({
        "name": "loan webhooks", "event_types": ["loan_application.*"], "sink": {"type": "webhook", "url": receiver_url}
    })))
    .await?;
    shared.lock().unwrap_or_else(|p| p.into_inner()).secret = hook["signing_secret"].as_str().map(str::to_owned);
    let hook_id = hook["id"].as_str().context("no subscription id")?.to_owned();
    let (_, pull) = json_of(http.post(format!("{base}/v1/subscriptions")).bearer_auth(&key).json(&json!({
        "name": "loan feed", "event_types": ["loan_application.*"], "sink": {"type": "pull"}
    })))
    .await?;
    let pull_id = pull["id"].as_str().context("no subscription id")?.to_owned();
    for _ in 0..100 {
        let (_, s) = json_of(http.get(format!("{base}/v1/subscriptions/{hook_id}")).bearer_auth(&key)).await?;
        if s["verification_state"] == "active" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let ids: Vec<String> = (0..3).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    let mut samples: Vec<(&str, (Vec<(String, String)>, Vec<u8>))> = vec![
        ("approved", event(&ids[0], "approved", json!({"application_id": "la-1", "amount": "1500.00"}))),
        ("rejected", event(&ids[1], "rejected", json!({"application_id": "la-2", "reason": "score"}))),
        ("approved", event(&ids[2], "approved", json!({"application_id": "la-3", "amount": "9000.00"}))),
        ("duplicate", event(&ids[0], "approved", json!({"application_id": "la-1", "amount": "1500.00"}))),
    ];
    samples.push((
        "malformed",
        event("9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a", "approved", json!({"application_id": "la-9"})),
    ));
    let mut verdicts: Vec<String> = Vec::new();
    for (label, (headers, body)) in samples {
        let mut request = http.post(format!("{base}/v1/events")).bearer_auth(&key).body(body);
        for (k, v) in headers {
            request = request.header(k, v);
        }
        let (status, answer) = json_of(request).await?;
        let verdict = match status {
            202 => format!("{} (seq {})", answer["verdict"].as_str().unwrap_or("?"), answer["seq"]),
            _ => format!("{} — {}", answer["title"].as_str().unwrap_or("?"), answer["message"].as_str().unwrap_or("")),
        };
        verdicts.push(format!("    {label:<10} → {status} {verdict}"));
    }

    for _ in 0..200 {
        if shared.lock().unwrap_or_else(|p| p.into_inner()).deliveries >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (_, page) =
        json_of(http.get(format!("{base}/v1/subscriptions/{pull_id}/events?limit=10")).bearer_auth(&key)).await?;
    let pulled: Vec<String> = page["items"]
        .as_array()
        .map(|items| items.iter().map(|i| format!("seq {} {}", i["seq"], i["type"].as_str().unwrap_or("?"))).collect())
        .unwrap_or_default();
    let (_, quarantine) = json_of(http.get(format!("{base}/admin/quarantine")).bearer_auth(&admin)).await?;
    let quarantined = quarantine["items"].as_array().map_or(0, Vec::len);
    let received = shared.lock().unwrap_or_else(|p| p.into_inner());

    println!("Streaming Hub demo — embedded SQLite at {}", db.display());
    println!("  ingest (HTTP, tenant acme):");
    for line in &verdicts {
        println!("{line}");
    }
    println!("  webhook: {} deliveries received, {} signatures verified", received.deliveries, received.verified);
    println!("  pull:    {} events read ({}); the cursor moved past them", pulled.len(), pulled.join(", "));
    println!("  quarantine: {quarantined} record(s), listed by GET /admin/quarantine");
    drop(received);
    shutdown.cancel();
    hub.wait().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
