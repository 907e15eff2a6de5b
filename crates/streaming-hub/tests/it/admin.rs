//! `/admin` routes, the error shape everywhere, and health endpoints.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::{Backend, Event, TestHub};

#[tokio::test]
async fn api_keys_are_created_listed_paged_and_revoked() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let create =
        |body: serde_json::Value| hub.client.post(hub.url("/admin/api-keys")).bearer_auth(&hub.admin).json(&body);
    let (status, created) = hub.send(create(json!({"tenant_id": "t1", "name": "ci"}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let key = created["key"].as_str().expect("key");
    assert!(key.starts_with("shk_"));
    assert_eq!(created["tenant_id"], "t1");
    assert!(key.starts_with(created["key_prefix"].as_str().expect("prefix")));
    for _ in 0..2 {
        hub.send(create(json!({"tenant_id": "t2"}))).await;
    }

    let (_, page1) = hub.admin_get("/admin/api-keys?limit=2").await;
    let items = page1["items"].as_array().expect("items");
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|k| k.get("key").is_none() && k.get("key_hash").is_none()), "a listing never shows a key");
    let cursor = page1["next_cursor"].as_str().expect("a full page has a cursor");
    let (_, page2) = hub.admin_get(&format!("/admin/api-keys?limit=2&cursor={cursor}")).await;
    assert_eq!(page2["items"].as_array().expect("items").len(), 1);
    assert_eq!(page2["next_cursor"], json!(null));
    assert_eq!(page2["items"][0]["id"], created["id"]);

    // A key in use (so remembered by the process) stops working as soon as it is revoked.
    let use_key = || hub.client.get(hub.url("/v1/subscriptions")).bearer_auth(key);
    assert_eq!(hub.send(use_key()).await.0, StatusCode::OK);
    let id = created["id"].as_str().expect("id");
    let revoke = || hub.client.delete(hub.url(&format!("/admin/api-keys/{id}"))).bearer_auth(&hub.admin);
    assert_eq!(hub.send(revoke()).await.0, StatusCode::NO_CONTENT);
    assert_eq!(hub.send(use_key()).await.0, StatusCode::UNAUTHORIZED, "a revoked key is refused at once");
    let (status, body) = hub.send(revoke()).await;
    assert_eq!((status, body["title"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
    let unknown = hub.client.delete(hub.url("/admin/api-keys/not-a-uuid")).bearer_auth(&hub.admin);
    assert_eq!(hub.send(unknown).await.0, StatusCode::NOT_FOUND);
}

/// The admin token acts for a tenant named in `X-Streaming-Hub-Tenant`: as it is, or
/// percent-encoded after `utf-8''`; an id outside the tenant grammar (a path's dot segments, a
/// slash, non-ASCII) is refused like a broken encoding, a 422 naming the header.
#[tokio::test]
async fn the_admin_acts_for_a_tenant_named_in_a_header() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("acme.bank-01").await;
    let create = hub
        .client
        .post(hub.url("/v1/subscriptions"))
        .bearer_auth(&hub.admin)
        .header("X-Streaming-Hub-Tenant", "utf-8''acme%2Ebank-01")
        .json(&json!({"name": "made-by-the-operator", "event_types": ["*.*"], "sink": {"type": "pull"}}));
    let (status, created) = hub.send(create).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (_, own) = hub.get(&key, "/v1/subscriptions").await;
    assert_eq!(own["items"][0]["name"], "made-by-the-operator", "the tenant's own key sees it: {own}");
    // A plain ASCII id as it is, as before.
    let plain =
        hub.client.get(hub.url("/v1/subscriptions")).bearer_auth(&hub.admin).header("X-Streaming-Hub-Tenant", "t1");
    assert_eq!(hub.send(plain).await.0, StatusCode::OK);
    // A broken encoding, or an id outside the grammar, is a 422 naming the header.
    for bad in ["utf-8''%ff%fe", "../victim", "utf-8''..%2Fvictim", "utf-8''%E7%A7%9F"] {
        let refused =
            hub.client.get(hub.url("/v1/subscriptions")).bearer_auth(&hub.admin).header("X-Streaming-Hub-Tenant", bad);
        let (status, body) = hub.send(refused).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
        assert!(body["message"].as_str().expect("message").starts_with("x-streaming-hub-tenant"), "{body}");
    }
}

/// A tenant id stored before tenant ids had a grammar keeps working with its key, and the
/// operator's listing says it does not follow the grammar.
#[tokio::test]
async fn a_tenant_stored_before_the_grammar_keeps_working_and_is_reported() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = format!("{}old-tenant-key-{}", streaming_hub::testing::API_KEY_PREFIX, uuid::Uuid::now_v7().simple());
    let id = uuid::Uuid::now_v7().to_string();
    hub.execute_raw(
        "",
        &format!(
            "INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, created_at) \
             VALUES ('{id}', 'açaí old', 'before the grammar', ?1, 'shk_old', 0)"
        ),
        &streaming_hub::testing::hash_key(&key),
    )
    .await;
    let (status, listed) = hub.get(&key, "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let (_, tenants) = hub.admin_get("/admin/tenants").await;
    let old =
        tenants["items"].as_array().expect("items").iter().find(|t| t["tenant_id"] == "açaí old").expect("listed");
    assert_eq!(old["id_follows_grammar"], false, "{old}");
    // A new key cannot name it.
    let (status, _) = hub.post_json(&hub.admin, "/admin/api-keys", &json!({"tenant_id": "açaí old"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

/// A key with an expiry works until then, and after it is refused like a revoked key on every
/// route it could reach (remembered by the process or not); an expiry in the past is refused.
#[tokio::test]
async fn expired_keys_are_refused_on_every_route() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let create =
        |body: serde_json::Value| hub.client.post(hub.url("/admin/api-keys")).bearer_auth(&hub.admin).json(&body);
    let in_an_hour = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let (status, tenant) = hub.send(create(json!({"tenant_id": "t1", "expires_at": in_an_hour}))).await;
    assert_eq!(status, StatusCode::CREATED, "{tenant}");
    assert!(tenant["expires_at"].is_string(), "{tenant}");
    let (status, admin) = hub.send(create(json!({"admin": true, "name": "ops", "expires_at": in_an_hour}))).await;
    assert_eq!(status, StatusCode::CREATED, "{admin}");
    let (_, listed) = hub.admin_get("/admin/api-keys").await;
    assert!(listed["items"].as_array().expect("items").iter().all(|k| k.get("expires_at").is_some()), "{listed}");
    let tenant_key = tenant["key"].as_str().expect("key").to_owned();
    let admin_key = admin["key"].as_str().expect("key").to_owned();

    let pull = hub.subscribe(&tenant_key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let pull_path = format!("/v1/subscriptions/{}/events", pull["id"].as_str().expect("id"));
    let tenant_routes = ["/v1/subscriptions", "/v1/events", pull_path.as_str()];
    for path in tenant_routes {
        assert_eq!(hub.send(hub.client.get(hub.url(path)).bearer_auth(&tenant_key)).await.0, StatusCode::OK, "{path}");
    }
    assert_eq!(hub.post_event(&tenant_key, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
    assert_eq!(hub.send(hub.client.get(hub.url("/admin/api-keys")).bearer_auth(&admin_key)).await.0, StatusCode::OK);

    hub.clock.advance(std::time::Duration::from_secs(2 * 3600));
    for path in tenant_routes {
        let (status, body) = hub.send(hub.client.get(hub.url(path)).bearer_auth(&tenant_key)).await;
        assert_eq!(
            (status, body["title"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized")),
            "{path}: {body}"
        );
    }
    assert_eq!(hub.post_event(&tenant_key, &Event::new("t1")).await.0, StatusCode::UNAUTHORIZED);
    for path in ["/admin/api-keys", "/admin/tenants"] {
        assert_eq!(hub.send(hub.client.get(hub.url(path)).bearer_auth(&admin_key)).await.0, StatusCode::UNAUTHORIZED);
    }

    let past = (chrono::Utc::now() - chrono::Duration::minutes(1)).to_rfc3339();
    let (status, body) = hub.send(create(json!({"tenant_id": "t1", "expires_at": past}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"].as_str().expect("message").starts_with("expires_at"), "{body}");
    let (status, body) = hub.send(create(json!({"tenant_id": "t1", "expires_at": "next week"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

#[tokio::test]
async fn api_key_validation_names_the_field() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let create = |body: &str| {
        hub.client
            .post(hub.url("/admin/api-keys"))
            .bearer_auth(&hub.admin)
            .header("content-type", "application/json")
            .body(body.to_owned())
    };
    let cases = [
        (r#"{"tenant_id": ""}"#, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", "tenant_id"),
        (
            &format!(r#"{{"tenant_id": "{}"}}"#, "t".repeat(257)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            "tenant_id",
        ),
        (r#"{"tenant_id": "../victim"}"#, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", "tenant_id"),
        (r#"{"tenant_id": "a/../../b"}"#, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", "tenant_id"),
        (r#"{"tenant_id": "租户"}"#, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", "tenant_id"),
        (r#"{"tenant_id": "t1", "name": ""}"#, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", "name"),
        (r#"{"name": "x"}"#, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", "tenant_id"),
        (r#"{"tenant_id": 5}"#, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", "tenant_id"),
        (r#"{"tenant_id": "t1", "extra": 1}"#, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", "extra"),
        (r#"{"tenant_id": "#, StatusCode::BAD_REQUEST, "invalid_json", ""),
    ];
    for (body, status, title, field) in cases {
        let (got, answer) = hub.send(create(body)).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert_eq!(answer["title"], title, "{body}");
        assert_eq!(answer["code"], status.as_u16(), "{body}");
        assert!(answer["message"].as_str().expect("message").contains(field), "{body}: {answer}");
    }
    let (_, keys) = hub.admin_get("/admin/api-keys").await;
    assert!(keys["items"].as_array().expect("items").is_empty(), "nothing invalid was stored");
}

#[tokio::test]
async fn admin_routes_refuse_tenant_keys_and_missing_tokens() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let key = hub.tenant_key("t1").await;
    for path in ["/admin/api-keys", "/admin/quarantine"] {
        let (status, body) = hub.send(hub.client.get(hub.url(path)).bearer_auth(&key)).await;
        assert_eq!((status, body["title"].as_str()), (StatusCode::FORBIDDEN, Some("forbidden")), "{path}");
        let (status, body) = hub.send(hub.client.get(hub.url(path))).await;
        assert_eq!((status, body["title"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")), "{path}");
        let (status, _) = hub.send(hub.client.get(hub.url(path)).bearer_auth("wrong-admin-token")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
}

#[tokio::test]
async fn quarantine_listing_filters_and_pages() {
    let hub = TestHub::start(Backend::Sqlite).await;
    for tenant in ["t1", "t1", "t2"] {
        hub.post_event(&hub.admin, &Event::new(tenant).set("ce-id", "not-a-uuid")).await;
    }
    hub.post_event(&hub.admin, &Event::new("t2").body(b"{".to_vec())).await;

    let count = |path: String| {
        let hub = &hub;
        async move {
            let (status, body) = hub.admin_get(&path).await;
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            body["items"].as_array().expect("items").len()
        }
    };
    assert_eq!(count("/admin/quarantine".into()).await, 4);
    assert_eq!(count("/admin/quarantine?tenant=t1".into()).await, 2);
    assert_eq!(count("/admin/quarantine?tenant=t2&reason=invalid_body".into()).await, 1);
    assert_eq!(count("/admin/quarantine?source=lender&origin=http".into()).await, 4);
    assert_eq!(count("/admin/quarantine?origin=kafka".into()).await, 0);
    assert_eq!(count("/admin/quarantine?since=2000-01-01T00:00:00Z".into()).await, 4);
    assert_eq!(count("/admin/quarantine?until=2000-01-01T00:00:00Z".into()).await, 0);

    let (_, first) = hub.admin_get("/admin/quarantine?limit=3").await;
    let cursor = first["next_cursor"].as_str().expect("cursor").to_owned();
    let (_, second) = hub.admin_get(&format!("/admin/quarantine?limit=3&cursor={cursor}")).await;
    assert_eq!(second["items"].as_array().expect("items").len(), 1);
    assert_eq!(second["next_cursor"], json!(null));

    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=x", "limit"),
        ("since=yesterday", "since"),
        ("until=1", "until"),
        ("reason=bad", "reason"),
        ("origin=ftp", "origin"),
        ("cursor=abc", "cursor"),
        ("color=blue", "color"),
    ] {
        let (status, body) = hub.admin_get(&format!("/admin/quarantine?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["title"], "invalid_query", "{query}");
        assert!(body["message"].as_str().expect("message").contains(param), "{query}: {body}");
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_error_shape() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let (status, body) = hub.send(hub.client.get(hub.url("/v1/nothing"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({"code": 404, "title": "not_found", "message": "no route for GET /v1/nothing"}));
    let (status, body) = hub.send(hub.client.delete(hub.url("/v1/events"))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["title"], "method_not_allowed");
    assert_eq!(body["code"], 405);
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let hub = TestHub::start(Backend::Postgres).await;
    let (status, body) = hub.send(hub.client.get(hub.url("/healthz"))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, body) = hub.send(hub.client.get(hub.url("/readyz"))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ready"})));
    let metrics = hub.client.get(hub.url("/metrics")).send().await.expect("metrics");
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().await.expect("text");
    assert!(text.contains("streaming_hub_ingest_records_total{verdict=\"accepted\"}"), "{text}");
    // Every series an alert needs exists from start.
    for series in [
        "streaming_hub_build_info{version=",
        "streaming_hub_oldest_pending_job_age_seconds ",
        "streaming_hub_breakers{state=\"open\"}",
        "streaming_hub_delivery_failures_total{sink=\"webhook\",kind=\"timeout\"}",
        "streaming_hub_delivery_failures_total{sink=\"sqs\",kind=\"5xx\"}",
        "streaming_hub_delivery_dead_letters_total{sink=\"rabbitmq\"}",
        "streaming_hub_subscriptions_auto_disabled_total ",
    ] {
        assert!(text.contains(series), "{series} is missing: {text}");
    }
    assert!(!text.contains("tenant"), "no tenant label in metrics");
}

#[tokio::test]
async fn retention_prunes_old_quarantined_records() {
    let hub = TestHub::start_with(
        Backend::Postgres,
        &[("STREAMING_HUB_QUARANTINE_RETENTION", "1h"), ("STREAMING_HUB_PRUNE_INTERVAL", "100ms")],
    )
    .await;
    hub.post_event(&hub.admin, &Event::new("t1").set("ce-id", "old")).await;
    let count = async || hub.admin_get("/admin/quarantine").await.1["items"].as_array().map_or(0, Vec::len);
    assert_eq!(count().await, 1);
    hub.clock.advance(std::time::Duration::from_secs(2 * 3600));
    hub.post_event(&hub.admin, &Event::new("t1").set("ce-id", "new")).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while count().await != 1 {
        assert!(tokio::time::Instant::now() < deadline, "the old record was never pruned");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, page) = hub.admin_get("/admin/quarantine").await;
    assert_eq!(page["items"][0]["ce_id"], "new", "the recent record stays");
}

/// A TCP proxy to PostgreSQL that a test can cut, so the database becomes unreachable.
async fn cuttable_proxy() -> (u16, tokio_util::sync::CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let cut = tokio_util::sync::CancellationToken::new();
    let stop = cut.clone();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = tokio::select! {
                accepted = listener.accept() => accepted.expect("accept"),
                () = stop.cancelled() => return,
            };
            let stop = stop.clone();
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", 5432)).await else { return };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    () = stop.cancelled() => {}
                }
            });
        }
    });
    (port, cut)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_turns_503_while_the_database_is_unreachable() {
    let (port, cut) = cuttable_proxy().await;
    let schema = crate::support::fresh_schema().await;
    let dsn = format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres?sslmode=disable");
    let mut vars = crate::support::base_vars(Backend::Sqlite).await;
    vars.remove("STREAMING_HUB_SQLITE_PATH");
    vars.insert("STREAMING_HUB_POSTGRES_DSN".into(), dsn);
    vars.insert("STREAMING_HUB_POSTGRES_SCHEMA".into(), schema);
    let hub = TestHub::start_vars(vars).await;
    let ready = async || hub.client.get(hub.url("/readyz")).send().await.expect("readyz").status();
    assert_eq!(ready().await, StatusCode::OK);
    cut.cancel();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while ready().await != StatusCode::SERVICE_UNAVAILABLE {
        assert!(tokio::time::Instant::now() < deadline, "/readyz never turned 503");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, body) = hub.send(hub.client.get(hub.url("/readyz"))).await;
    assert_eq!(body["status"], "database unreachable");
    // Liveness is not readiness: the process is alive.
    assert_eq!(hub.client.get(hub.url("/healthz")).send().await.expect("healthz").status(), StatusCode::OK);
}

crate::on_both_backends!(the_operator_lists_tenants_and_subscriptions_and_acts_for_one);

async fn the_operator_lists_tenants_and_subscriptions_and_acts_for_one(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let (k1, k2) = (hub.tenant_key("t1").await, hub.tenant_key("t2").await);
    let pull = hub.subscribe(&k1, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    // Paused: its jobs are held.
    let hook = hub
        .subscribe(
            &k1,
            json!({"name": "h", "event_types": ["*.*"], "enabled": false, "sink": {"type": "webhook", "url": "https://example.com/hook"}}),
        )
        .await;
    hub.subscribe(&k2, json!({"name": "q", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    for _ in 0..3 {
        assert_eq!(hub.post_event(&k1, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
    }
    assert_eq!(hub.post_event(&k2, &Event::new("t2")).await.0, StatusCode::ACCEPTED);
    // A replay into the paused subscription gives it held jobs.
    let hook_id = hook["id"].as_str().expect("id");
    let (status, replay) = hub
        .post_json(&k1, &format!("/v1/subscriptions/{hook_id}/replay"), &json!({"from_seq": 1, "rate": 100_000}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{replay}");
    let progress = format!("/v1/subscriptions/{hook_id}/replays/{}", replay["replay_id"].as_str().expect("replay_id"));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while hub.get(&k1, &progress).await.1["state"] != "done" {
        assert!(tokio::time::Instant::now() < deadline, "the replay never finished");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, log) = hub.get(&k1, "/v1/events?limit=1000").await;
    let inbox = log["items"].as_array().expect("items").len() as i64;
    assert!(inbox >= 3, "{log}");

    let (status, tenants) = hub.admin_get("/admin/tenants").await;
    assert_eq!(status, StatusCode::OK, "{tenants}");
    let t1 = tenants["items"].as_array().expect("items").iter().find(|t| t["tenant_id"] == "t1").expect("t1").clone();
    assert_eq!(
        (t1["events"].as_i64(), t1["subscriptions"].as_i64(), t1["api_keys"].as_i64()),
        (Some(inbox), Some(2), Some(1)),
        "{t1}"
    );
    assert_eq!(t1["jobs"]["held"], 3, "{t1}");

    let (_, only) = hub.admin_get("/admin/subscriptions?tenant=t1").await;
    let items = only["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{only}");
    assert!(items.iter().all(|s| s["tenant_id"] == "t1"));
    let h = items.iter().find(|s| s["id"] == hook["id"]).expect("the webhook");
    assert_eq!(
        (h["health"]["jobs"]["held"].as_i64(), h["health"]["breaker"].as_str()),
        (Some(3), Some("closed")),
        "{h}"
    );
    assert!(items.iter().any(|s| s["id"] == pull["id"]));
    let (_, all) = hub.admin_get("/admin/subscriptions?limit=2").await;
    assert_eq!(all["items"].as_array().expect("items").len(), 2);
    assert!(all["next_cursor"].is_string(), "{all}");
    let (status, bad) = hub.admin_get(&format!("/admin/subscriptions?tenant={}", "t".repeat(300))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    // Tenants see neither listing.
    let (status, _) = hub.get(&k1, "/admin/tenants").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The admin token acts for one tenant by naming it, and sees only that tenant's.
    let act = |tenant: &str, path: &str| {
        hub.client.get(hub.url(path)).bearer_auth(&hub.admin).header("x-streaming-hub-tenant", tenant)
    };
    let (status, mine) = hub.send(act("t2", "/v1/subscriptions")).await;
    assert_eq!(status, StatusCode::OK, "{mine}");
    assert_eq!(mine["items"].as_array().expect("items").len(), 1);
    assert_eq!(mine["items"][0]["name"], "q");
    let (status, _) = hub.send(act("t2", &format!("/v1/subscriptions/{}", hook["id"].as_str().expect("id")))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "t1's subscription is not t2's");
    let (status, _) = hub.admin_get("/v1/subscriptions").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "without naming a tenant");
    let (status, _) = hub.send(act(&"t".repeat(300), "/v1/subscriptions")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // A tenant key naming another tenant still reads its own.
    let (_, own) = hub
        .send(hub.client.get(hub.url("/v1/subscriptions")).bearer_auth(&k1).header("x-streaming-hub-tenant", "t2"))
        .await;
    assert_eq!(own["items"].as_array().expect("items").len(), 2);
}

#[tokio::test]
async fn admin_keys_are_made_through_the_api_and_act_as_the_admin() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let create =
        |body: serde_json::Value| hub.client.post(hub.url("/admin/api-keys")).bearer_auth(&hub.admin).json(&body);
    for (body, field) in [
        (json!({"tenant_id": "t1", "admin": true}), "admin"),
        (json!({"name": "nobody"}), "tenant_id"),
        (json!({"admin": "yes"}), "admin"),
    ] {
        let (status, answer) = hub.send(create(body.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert!(answer["message"].as_str().expect("message").contains(field), "{body}: {answer}");
    }
    let (status, made) = hub.send(create(json!({"admin": true, "name": "ops-bob"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!((made["admin"].clone(), made["tenant_id"].clone()), (json!(true), serde_json::Value::Null));
    let key = made["key"].as_str().expect("key").to_owned();
    let (status, _) = hub.get(&key, "/admin/tenants").await;
    assert_eq!(status, StatusCode::OK, "an admin key opens the admin routes");
    // Like the admin token, it reaches a tenant's routes only by naming the tenant.
    let (status, _) = hub.get(&key, "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, tenants) = hub.admin_get("/admin/tenants").await;
    assert_eq!(status, StatusCode::OK);
    assert!(tenants["items"].as_array().expect("items").iter().all(|t| t["tenant_id"] != ""), "{tenants}");
}
