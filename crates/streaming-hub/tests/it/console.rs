//! The console, end to end in headless Chromium: a hub with two tenants' data, and the browser
//! script `console/test/console.mjs` walking every view and action signed in both ways.
//! Needs `scripts/services console` (Debian's Chromium and playwright-core); fails without it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, TestHub};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_walks_every_view_and_action_and_keeps_tenants_apart() {
    // A producer's manifest, for the catalog views and the form's type picker.
    let manifest = std::env::temp_dir().join(format!("console-manifest-{}.json", uuid::Uuid::now_v7()));
    std::fs::write(
        &manifest,
        json!({"publisher": {"serviceName": "ledger-api", "source": "ledger"}, "topic": "lerian.streaming.ledger",
               "events": [{"resourceType": "account", "eventType": "created", "schemaVersion": "1.0.0",
                           "description": "An account was opened.", "class": "fact"}]})
        .to_string(),
    )
    .expect("manifest");
    let sources = format!("file:{}", manifest.display());
    // A page of another origin that frames a portal session (its address is known once the hub
    // has granted the session); the hub lets that origin frame the console.
    let embedder = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let embed_origin = format!("http://{}", embedder.local_addr().expect("addr"));
    let portal_url = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    {
        let portal_url = std::sync::Arc::clone(&portal_url);
        let page = axum::Router::new().route(
            "/",
            axum::routing::get(move || async move {
                let src = portal_url.lock().expect("url").clone();
                axum::response::Html(format!(
                    "<!doctype html><title>Platform</title><h1>Platform settings</h1>\
                     <iframe id=\"portal\" title=\"Webhooks\" src=\"{src}\" width=\"1200\" height=\"600\"></iframe>"
                ))
            }),
        );
        tokio::spawn(async move { axum::serve(embedder, page).await });
    }
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[
            ("STREAMING_HUB_MANIFEST_SOURCES", &sources),
            ("STREAMING_HUB_PORTAL_FRAME_ANCESTORS", &embed_origin),
            // AWS forms offer a role the hub assumes as an OIDC issuer.
            ("STREAMING_HUB_OIDC_ISSUER", "http://127.0.0.1:9"),
            // Statistics are rolled up and backlogs sampled every second.
            ("STREAMING_HUB_METRICS_INTERVAL", "1s"),
        ],
    )
    .await;
    crate::support::until("the manifest read", Duration::from_secs(20), async || {
        let (_, all) = hub.admin_get("/admin/event-types").await;
        all["manifests"][0]["fetched_at"].is_string().then_some(())
    })
    .await;

    // The page itself: its own script and style only.
    let page = hub.client.get(hub.url("/console")).send().await.expect("console");
    assert_eq!(page.status(), StatusCode::OK);
    let policy = page.headers()["content-security-policy"].to_str().expect("policy").to_owned();
    assert!(
        policy.contains("script-src 'self'") && policy.ends_with(&format!("frame-ancestors {embed_origin}")),
        "{policy}"
    );
    assert!(page.text().await.expect("html").contains("/console/console.js"));

    // The hook's first two attempts fail (retried later): its charts show a burst with failures.
    let receiver = Receiver::start(Script::FailFirst(2)).await;
    let (k1, k2) = (hub.tenant_key("t1").await, hub.tenant_key("t2").await);
    let hook = hub
        .subscribe(
            &k1,
            json!({"name": "hook", "event_types": ["*.*"], "filters": [{"prefix": {"type": "studio.lerian."}}],
                   "sink": {"type": "webhook", "url": receiver.url}}),
        )
        .await;
    receiver.trust(hook["signing_secret"].as_str().expect("secret"));
    let hook_id = hook["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(&k1, &hook_id).await;
    // A Kafka destination with a SASL login: shown with its topic and brokers, never its password.
    let kafka = hub
        .subscribe(
            &k1,
            json!({"name": "stream", "event_types": ["*.*"], "sink": {"type": "kafka",
                   "brokers": "kafka-1.example.com:9093", "topic": "lerian.events", "tls": true,
                   "sasl": {"mechanism": "SCRAM-SHA-512", "username": "hub", "password": "console-kafka-secret"}}}),
        )
        .await;
    let kafka_id = kafka["id"].as_str().expect("id").to_owned();
    let t2_name = format!("t2-private-ledger-{}", uuid::Uuid::now_v7().simple());
    hub.subscribe(&k2, json!({"name": t2_name, "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    // A tenant id with every kind of character the grammar allows (the console always sends it
    // percent-encoded after utf-8'').
    let wide = "Acme.Bank_01-br";
    let k3 = hub.tenant_key(wide).await;
    hub.subscribe(&k3, json!({"name": "wide-tenant-pull", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let mut t1_event = None;
    for _ in 0..3 {
        let e = Event::new("t1");
        assert_eq!(hub.post_event(&k1, &e).await.0, StatusCode::ACCEPTED);
        t1_event = Some(e.id());
    }
    receiver.wait_for(3, Duration::from_secs(20)).await;
    let t2_event = Event::new("t2");
    assert_eq!(hub.post_event(&k2, &t2_event).await.0, StatusCode::ACCEPTED);
    let (status, _) = hub.post_event(&k1, &Event::new("t1").set("ce-type", "not-a-type")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "one record in quarantine");

    // A record of the DLQ plane (its Kafka intake is tested in kafka.rs).
    let dlq = hub_store::NewDlqRecord {
        topic: "lerian.streaming.lender.dlq".to_owned(),
        partition: 0,
        offset: 7,
        source: "lender".to_owned(),
        tenant_id: Some("t1".to_owned()),
        ce_id: Some(uuid::Uuid::now_v7().to_string()),
        ce_type: Some("studio.lerian.lender.loan_application.approved".to_owned()),
        error_class: Some("timeout".to_owned()),
        error_message: Some("the ledger did not answer".to_owned()),
        headers: Default::default(),
        body: b"{}".to_vec(),
        body_bytes: 2,
        payload_omitted: false,
        record_timestamp: None,
        received_at: chrono::Utc::now(),
    };
    assert_eq!(hub.store.write_dlq_records(&[dlq]).await.expect("dlq"), 1);

    // A tenant with more subscriptions than one page holds.
    let k_many = hub.tenant_key("t-many").await;
    for i in 0..150 {
        hub.subscribe(
            &k_many,
            json!({"name": format!("many-{i:03}"), "event_types": ["*.*"], "sink": {"type": "pull"}}),
        )
        .await;
    }

    // A read-only portal of t1, short-lived: the browser walks it first, then sees it end.
    let (status, session) = hub
        .send(hub.client.post(hub.url("/admin/portal-sessions")).bearer_auth(&hub.admin).json(&json!({
            "tenant_id": "t1", "scope": "read", "ttl_seconds": 12})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    *portal_url.lock().expect("url") = session["url"].as_str().expect("url").to_owned();

    let axe = crate::sdk::cache_dir().join("console/node_modules/axe-core/axe.min.js");
    assert!(axe.exists(), "the console test needs axe-core: run scripts/services console");
    let mut vars = vec![
        ("BASE", hub.url("")),
        ("ADMIN", hub.admin.clone()),
        ("T1_KEY", k1.clone()),
        ("T1_HOOK", hook_id.to_string()),
        ("T1_KAFKA", kafka_id.to_string()),
        ("T1_EVENT", t1_event.expect("an event").to_string()),
        ("T2_EVENT", t2_event.id().to_string()),
        ("T2_NAME", t2_name.to_string()),
        ("WIDE_TENANT", wide.to_string()),
        ("EMBED", embed_origin.clone()),
        ("RECEIVER", receiver.url.clone()),
        ("AXE", axe.display().to_string()),
    ];
    if let Ok(dir) = std::env::var("STREAMING_HUB_CONSOLE_SCREENSHOTS") {
        vars.push(("SCREENSHOTS", dir));
    }
    let report = browser_script("console.mjs", &vars).await;
    assert_eq!(report["steps"].as_array().expect("steps").len(), 30, "{report}");
    assert_eq!(report["audited"].as_array().expect("audited").len(), 9, "every view audited: {report}");
    // The test event sent from the console arrived, signed.
    assert!(
        receiver.deliveries().iter().any(|d| d.header("x-lerian-event-type") == "streaming_hub.test" && d.verified),
        "the console's test event reached the receiver"
    );
    let _ = std::fs::remove_file(manifest);
}

/// Runs a browser script of `crates/streaming-hub/console/test/` in headless Chromium with these
/// variables (and `PLAYWRIGHT`, where playwright-core is): the JSON report it prints. Fails when
/// Chromium or playwright-core is missing (`scripts/services console`) or the script fails.
pub async fn browser_script(script: &str, vars: &[(&str, String)]) -> serde_json::Value {
    let playwright = crate::sdk::cache_dir().join("console/node_modules/playwright-core");
    assert!(
        playwright.join("package.json").exists() && Path::new("/usr/bin/chromium").exists(),
        "the console's browser tests need Chromium and playwright-core: run scripts/services console"
    );
    let mut command = Command::new("node");
    command
        .arg(crate::sdk::repo().join("crates/streaming-hub/console/test").join(script))
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .env("PLAYWRIGHT", &playwright);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the browser's thread")
        .expect("node runs the browser script");
    assert!(
        out.status.success(),
        "{script} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}
