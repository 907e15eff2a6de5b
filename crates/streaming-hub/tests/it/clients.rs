//! The API clients (sdk/) against a live hub. Each language's live test runs in its own runner
//! (`go test`, pytest, `node --test`) with the hub's address, a tenant key, the admin key and a
//! receiver's URL in its environment; the Rust client's runs here. Each one publishes 100 events
//! in both modes through a tenant rate limit low enough that some are answered 429 and retried,
//! sends one again and sees `duplicate`, reads them all from a pull subscription, replays them,
//! sees a webhook verified and a delivery succeed, pauses and resumes it, gets a typed 422 naming
//! a bad field, and uses the admin routes.

use std::process::Command;
use std::time::Duration;

use streaming_hub_client::apis::{admin_api, subscriptions_api};
use streaming_hub_client::{Client, Error, Event, Typed, models};

use crate::receiver::{Receiver, Script};
use crate::sdk::{cache_dir, compiled_typescript, repo, succeeded};
use crate::support::{Backend, TestHub, until};

/// A hub whose tenants may post 40 events a second (bursts of 20), so 100 events meet 429s.
async fn rate_limited_hub() -> TestHub {
    TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_INGEST_RATE", "40"), ("STREAMING_HUB_INGEST_BURST", "20")])
        .await
}

/// The environment a live test reads.
async fn environment(hub: &TestHub, receiver: &Receiver, tenant: &str) -> Vec<(&'static str, String)> {
    vec![
        ("STREAMING_HUB_URL", hub.base.clone()),
        ("STREAMING_HUB_API_KEY", hub.tenant_key(tenant).await),
        ("STREAMING_HUB_TENANT", tenant.to_owned()),
        ("STREAMING_HUB_ADMIN_KEY", hub.admin.clone()),
        ("STREAMING_HUB_RECEIVER_URL", receiver.url.clone()),
    ]
}

/// Runs a runner (see [`succeeded`]) and asserts it printed `ran`, so a live test that skipped
/// fails here.
async fn run(what: &str, mut command: Command, ran: &str) {
    let out = succeeded(what, &mut command).await;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(ran), "{what} did not run its live test (no {ran:?}):\n{text}");
}

#[tokio::test]
async fn the_go_client_passes_its_live_test() {
    let hub = rate_limited_hub().await;
    let receiver = Receiver::start(Script::Ok).await;
    let mut command = Command::new("go");
    command.args(["test", "-count=1", "-run", "^TestLive$", "-v", "./client/"]).current_dir(repo().join("sdk/go"));
    command.envs(environment(&hub, &receiver, "client-go").await);
    run("the Go client's live test", command, "--- PASS: TestLive").await;
}

#[tokio::test]
async fn the_python_client_passes_its_live_test() {
    let hub = rate_limited_hub().await;
    let receiver = Receiver::start(Script::Ok).await;
    let mut command = Command::new(cache_dir().join("receivers-venv/bin/python"));
    command
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-rA", "tests/test_live.py"])
        .current_dir(repo().join("sdk/python"));
    command.envs(environment(&hub, &receiver, "client-python").await);
    run("the Python client's live test", command, "PASSED tests/test_live.py::test_live").await;
}

#[tokio::test]
async fn the_typescript_client_passes_its_live_test() {
    let hub = rate_limited_hub().await;
    let receiver = Receiver::start(Script::Ok).await;
    let compiled = compiled_typescript();
    let mut command = Command::new("node");
    command.args(["--test", "--test-reporter=tap"]).arg(compiled.join("test/live.test.js"));
    command.envs(environment(&hub, &receiver, "client-typescript").await);
    run("the TypeScript client's live test", command, "# pass 1").await;
}

/// Polls with a deadline.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    until(what, Duration::from_secs(60), async || done().await.then_some(())).await;
}

#[tokio::test]
async fn the_rust_client_passes_its_live_test() {
    let hub = rate_limited_hub().await;
    let receiver = Receiver::start(Script::Ok).await;
    let tenant = "client-rust";
    let client = Client::new(&hub.base, &hub.tenant_key(tenant).await).expect("client");
    let config = client.config();

    let pull_sink = models::Sink::Pull(serde_json::json!({}));
    let pull = subscriptions_api::create_subscription(
        config,
        models::CreateSubscription::new(vec!["loan.*".into()], "rust pull".into(), pull_sink),
    )
    .await
    .typed()
    .expect("a pull subscription");
    let pull_id = pull.id.to_string();

    // 100 events, half in each mode; the hub's rate limit answers some of them 429 on the way.
    let mut published = Vec::new();
    for i in 0..100 {
        let event = Event::new("lender", "loan", "approved", tenant, "1.0.0").json(&serde_json::json!({"n": i}));
        let answer = if i % 2 == 0 { client.publish(&event).await } else { client.publish_structured(&event).await };
        assert_eq!(answer.expect("published").verdict, "accepted", "event {i}");
        published.push(event.id.to_string());
    }
    let mut again = Event::new("lender", "loan", "approved", tenant, "1.0.0").json(&serde_json::json!({"n": 0}));
    again.id = published[0].parse().expect("uuid");
    assert_eq!(client.publish(&again).await.expect("published again").verdict, "duplicate");

    let read = async || {
        let mut ids = Vec::new();
        client.drain(&pull_id, Some(30), |item| ids.push(item.ce_id.to_string())).await.expect("drain");
        ids
    };
    assert_eq!(read().await, published);

    // A replay of the whole inbox gives every event to the subscription again.
    let request =
        models::ReplayRequest { from_seq: Some(Some(1)), include_delivered: Some(true), ..Default::default() };
    let replay = subscriptions_api::replay_subscription(config, &pull_id, Some(request)).await.typed().expect("replay");
    let replay_id = replay.replay_id.to_string();
    eventually("the replay finishes", async || {
        let view = subscriptions_api::get_replay(config, &pull_id, &replay_id).await.typed().expect("replay view");
        view.state == "done"
    })
    .await;
    let mut replayed = read().await;
    replayed.sort();
    let mut sorted = published.clone();
    sorted.sort();
    assert_eq!(replayed, sorted);

    // A webhook: verified by the hub, then a delivery.
    let webhook = models::WebhookSink::new(receiver.url.clone());
    let hook = subscriptions_api::create_subscription(
        config,
        models::CreateSubscription::new(
            vec!["payment.*".into()],
            "rust hook".into(),
            models::Sink::Webhook(Box::new(webhook)),
        ),
    )
    .await
    .typed()
    .expect("a webhook subscription");
    let hook_id = hook.id.to_string();
    assert!(hook.signing_secret.flatten().is_some_and(|s| s.starts_with("whsec_")));
    eventually("the webhook is verified", async || {
        let view = subscriptions_api::get_subscription(config, &hook_id).await.typed().expect("view");
        view.verification_state == "active"
    })
    .await;
    let payment =
        Event::new("ledger", "payment", "settled", tenant, "1.0.0").json(&serde_json::json!({"amount": "10.00"}));
    client.publish(&payment).await.expect("payment");
    eventually("the webhook's delivery", async || {
        let page = subscriptions_api::list_deliveries(config, &hook_id, None, None, None).await.typed().expect("list");
        page.items.iter().any(|d| d.state == "succeeded" && d.ce_id.flatten() == Some(payment.id))
    })
    .await;
    assert!(!client.pause(&hook_id).await.expect("pause").enabled);
    assert!(client.resume(&hook_id).await.expect("resume").enabled);

    // A field the hub refuses: a typed 422 naming it.
    let bad = models::WebhookSink::new("ftp://receiver.example.com/hook".into());
    let refused = subscriptions_api::create_subscription(
        config,
        models::CreateSubscription::new(vec!["loan.*".into()], "bad".into(), models::Sink::Webhook(Box::new(bad))),
    )
    .await
    .typed();
    match refused {
        Err(Error::Hub(e)) => {
            assert_eq!((e.status, e.title.as_str()), (422, "validation_failed"));
            assert!(e.message.contains("url"), "{}", e.message);
        }
        other => panic!("a bad sink url: {other:?}"),
    }

    // The admin routes, with an admin key.
    let admin = Client::new(&hub.base, &hub.admin).expect("admin client");
    let tenants = admin_api::list_tenants(admin.config()).await.typed().expect("tenants");
    assert!(
        tenants.items.iter().any(|t| t.tenant_id == tenant && t.events >= 101),
        "101 events published, and the hub's own operational events: {:?}",
        tenants.items
    );
    let create = models::CreateApiKey {
        tenant_id: Some(Some(tenant.to_owned())),
        name: Some(Some("rust client".to_owned())),
        ..Default::default()
    };
    let key = admin_api::create_api_key(admin.config(), create).await.typed().expect("a key");
    admin_api::revoke_api_key(admin.config(), &key.id.to_string()).await.typed().expect("revoked");

    for id in [&pull_id, &hook_id] {
        subscriptions_api::delete_subscription(config, id).await.typed().expect("deleted");
    }
    match subscriptions_api::get_subscription(config, &hook_id).await.typed() {
        Err(Error::Hub(e)) => assert_eq!(e.status, 404),
        other => panic!("a deleted subscription: {other:?}"),
    }
}
