//! The event catalog end to end: producers' manifests served over HTTP (and read from a file),
//! types learned from traffic, a source going down, and payload checks in each mode, on both
//! stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{Backend, Event, TestHub, until};

crate::on_both_backends!(
    two_producers_and_the_traffic_make_the_catalog_and_a_source_down_keeps_it,
    payloads_are_checked_against_declared_schemas_in_each_mode,
);

/// The ledger's manifest, in the producer library's shape with fields the hub does not read.
fn ledger_manifest(schema_url: &str) -> Value {
    json!({
        "version": "1.0",
        "publisher": {"serviceName": "ledger-api", "source": "ledger", "routePath": "/streaming",
                      "outboxSupported": true, "appVersion": "3.4.1", "libVersion": "1.2.0",
                      "producerId": "ledger-1", "team": "core"},
        "topic": "lerian.streaming.ledger", "dlqTopic": "lerian.streaming.ledger.dlq",
        "events": [
            {"key": "account.created.v1", "resourceType": "account", "eventType": "created",
             "eventKey": "account.created", "schemaVersion": "1.0.0", "dataContentType": "application/json",
             "dataSchema": schema_url, "systemEvent": false, "description": "An account was opened.",
             "class": "fact", "defaultPolicy": {"retries": 8}},
            {"resourceType": "account", "eventType": "frozen", "schemaVersion": "1.0.0",
             "description": "An account was frozen.", "class": "fact",
             "dataSchema": {"type": "object", "required": ["reason"],
                            "properties": {"reason": {"type": "string", "minLength": 3}}}}
        ],
        "routes": [{"path": "/streaming", "method": "GET"}]
    })
}

fn lender_manifest() -> Value {
    json!({
        "version": "1.0",
        "publisher": {"serviceName": "lender-api", "source": "lender"},
        "topic": "lerian.streaming.lender",
        "commandsTopic": "lerian.streaming.lender.commands",
        "events": [
            {"resourceType": "loan_application", "eventType": "approved", "schemaVersion": "1.0.0",
             "description": "A loan application was approved.", "class": "fact"},
            {"resourceType": "loan", "eventType": "disburse", "schemaVersion": "2.0.0",
             "description": "Disburse an approved loan.", "class": "command"}
        ]
    })
}

/// A schema of about 2 KiB for `account.created`.
fn account_schema() -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("amount".into(), json!({"type": "integer", "minimum": 0}));
    properties.insert("currency".into(), json!({"type": "string", "pattern": "^[A-Z]{3}$"}));
    for i in 0..30 {
        properties.insert(format!("field_{i}"), json!({"type": "string", "maxLength": 64}));
    }
    json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
           "required": ["amount", "currency"], "properties": properties})
}

/// Producers serving their manifests: `/ledger/streaming`, `/lender/streaming`,
/// `/broken/streaming` (a manifest with a wrong field) and `/schemas/account.json`. While `down`
/// is set the ledger answers 503.
struct Producers {
    base: String,
    down: Arc<AtomicBool>,
    /// Requests for the ledger's manifest.
    ledger_fetches: Arc<AtomicUsize>,
}

impl Producers {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let down = Arc::new(AtomicBool::new(false));
        let ledger_fetches = Arc::new(AtomicUsize::new(0));
        let ledger = ledger_manifest(&format!("{base}/schemas/account.json"));
        let app = axum::Router::new()
            .route(
                "/ledger/streaming",
                axum::routing::get({
                    let (down, fetches) = (Arc::clone(&down), Arc::clone(&ledger_fetches));
                    move || async move {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        if down.load(Ordering::SeqCst) {
                            Err(StatusCode::SERVICE_UNAVAILABLE)
                        } else {
                            Ok(axum::Json(ledger))
                        }
                    }
                }),
            )
            .route("/lender/streaming", axum::routing::get(|| async { axum::Json(lender_manifest()) }))
            .route(
                "/broken/streaming",
                axum::routing::get(|| async {
                    axum::Json(json!({"publisher": {"source": "cards"},
                                      "events": [{"resourceType": "card", "eventType": "issued", "class": "event"}]}))
                }),
            )
            .route("/schemas/account.json", axum::routing::get(|| async { axum::Json(account_schema()) }));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base, down, ledger_fetches }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

fn event(tenant: &str, source: &str, resource: &str, kind: &str, body: &str) -> Event {
    Event::of(tenant, resource, kind)
        .set("ce-source", source)
        .set("ce-type", &format!("studio.lerian.{source}.{resource}.{kind}"))
        .body(body.as_bytes().to_vec())
}

fn find<'a>(list: &'a Value, key: &str) -> Option<&'a Value> {
    list["items"].as_array().expect("items").iter().find(|t| t["type"] == key)
}

async fn two_producers_and_the_traffic_make_the_catalog_and_a_source_down_keeps_it(backend: Backend) {
    let producers = Producers::start().await;
    let sources =
        [producers.url("/ledger/streaming"), producers.url("/lender/streaming"), producers.url("/broken/streaming")]
            .join(",");
    let hub = TestHub::start_with(
        backend,
        &[("STREAMING_HUB_MANIFEST_SOURCES", &sources), ("STREAMING_HUB_MANIFEST_REFRESH_INTERVAL", "1s")],
    )
    .await;
    let (k1, k2) = (hub.tenant_key("t1").await, hub.tenant_key("t2").await);
    // A type no manifest declares, seen only in t1's traffic (twice; the duplicate not counted).
    let card = event("t1", "cards", "card", "issued", r#"{"last4":"4242"}"#);
    assert_eq!(hub.post_event(&k1, &card).await.0, StatusCode::ACCEPTED);
    assert_eq!(hub.post_event(&k1, &card).await.1["verdict"], "duplicate");
    assert_eq!(hub.post_event(&k1, &event("t1", "cards", "card", "issued", "{}")).await.0, StatusCode::ACCEPTED);

    let list = until("both manifests and the learned type in t1's catalog", Duration::from_secs(20), async || {
        let (status, list) = hub.get(&k1, "/v1/event-types").await;
        assert_eq!(status, StatusCode::OK, "{list}");
        (find(&list, "account.created").is_some() && find(&list, "card.issued").is_some()).then_some(list)
    })
    .await;
    let keys: Vec<&str> =
        list["items"].as_array().expect("items").iter().map(|t| t["type"].as_str().expect("type")).collect();
    assert_eq!(
        keys,
        ["account.created", "account.frozen", "card.issued", "loan.disburse", "loan_application.approved"],
        "in key order; the broken manifest declares nothing"
    );
    let created = find(&list, "account.created").expect("declared");
    assert_eq!(created["description"], "An account was opened.");
    assert_eq!((created["declared"].as_bool(), created["seen"].as_bool()), (Some(true), Some(false)));
    assert_eq!(created["class"], "fact");
    assert_eq!(created["sources"], json!(["ledger"]));
    let version = &created["versions"][0];
    assert_eq!(version["schema_version"], "1.0.0");
    assert_eq!(version["service_name"], "ledger-api");
    assert_eq!(version["data_schema"], producers.url("/schemas/account.json"));
    assert_eq!(
        find(&list, "account.frozen").expect("inline")["versions"][0]["data_schema"]["required"],
        json!(["reason"])
    );
    assert_eq!(find(&list, "loan.disburse").expect("command")["class"], "command");
    let learned = find(&list, "card.issued").expect("learned");
    assert_eq!((learned["declared"].as_bool(), learned["seen"].as_bool()), (Some(false), Some(true)));
    assert_eq!(learned["sources"], json!(["cards"]));
    assert_eq!(learned["versions"][0]["schema_version"], "1.0.0");
    assert!(learned["last_seen"].is_string() && learned["first_seen"].is_string(), "{learned}");
    until("both of t1's card events counted", Duration::from_secs(10), async || {
        let (_, list) = hub.get(&k1, "/v1/event-types?pattern=card.*").await;
        (find(&list, "card.issued")?["events"] == 2).then_some(())
    })
    .await;

    // t2 sees what producers declare, never what t1's inbox received.
    let (_, t2) = hub.get(&k2, "/v1/event-types").await;
    assert!(find(&t2, "account.created").is_some() && find(&t2, "card.issued").is_none(), "{t2}");
    // Filters: a pattern and a producer.
    let (_, only) = hub.get(&k1, "/v1/event-types?pattern=account.*&source=ledger").await;
    assert_eq!(only["items"].as_array().expect("items").len(), 2, "{only}");
    let (status, bad) = hub.get(&k1, "/v1/event-types?pattern=account").await;
    assert_eq!((status, bad["title"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_query")));

    // The operator sees every tenant's learned types and each source's state, the broken
    // manifest with the field at fault.
    let (status, all) = hub.admin_get("/admin/event-types").await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(find(&all, "card.issued").expect("learned")["tenants"], 1);
    let manifests = all["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 3);
    let broken = manifests.iter().find(|m| m["location"] == producers.url("/broken/streaming")).expect("broken");
    assert!(broken["error"].as_str().expect("error").contains("events[0].class"), "{broken}");
    let ledger = manifests.iter().find(|m| m["location"] == producers.url("/ledger/streaming")).expect("ledger");
    assert_eq!(
        (ledger["error"].is_null(), ledger["events"].as_u64(), ledger["source"].as_str()),
        (true, Some(2), Some("ledger"))
    );

    // A subscription naming a type nobody produces is created, with a warning on that pattern.
    let (status, sub) = hub
        .post_json(
            &k1,
            "/v1/subscriptions",
            &json!({"name": "typo", "event_types": ["account.created", "acount.created"],
                                                    "sink": {"type": "pull"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{sub}");
    assert_eq!(sub["warnings"].as_array().map(Vec::len), Some(1), "{sub}");
    assert_eq!(sub["warnings"][0]["field"], "event_types[1]");
    // Known types (declared, learned, the hub's own) warn of nothing; an origin that does not
    // produce the type does.
    let (_, fine) = hub
        .post_json(
            &k1,
            "/v1/subscriptions",
            &json!({"name": "fine", "sink": {"type": "pull"},
                   "event_types": ["account.*", "card.issued", "streaming_hub.*"]}),
        )
        .await;
    assert!(fine.get("warnings").is_none(), "{fine}");
    let id = fine["id"].as_str().expect("id");
    let (status, changed) = hub
        .patch_json(&k1, &format!("/v1/subscriptions/{id}"), &json!({"origin": "lender", "event_types": ["account.*"]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["warnings"][0]["field"], "event_types[0]", "{changed}");
    // t2 has not received card.issued: a warning for t2.
    let (_, t2_sub) = hub
        .post_json(
            &k2,
            "/v1/subscriptions",
            &json!({"name": "cards", "event_types": ["card.issued"], "sink": {"type": "pull"}}),
        )
        .await;
    assert_eq!(t2_sub["warnings"][0]["field"], "event_types[0]", "{t2_sub}");

    // The ledger goes down: its last good manifest stays, with the error shown.
    producers.down.store(true, Ordering::SeqCst);
    let ledger = until("the ledger's failure shown", Duration::from_secs(20), async || {
        let (_, all) = hub.admin_get("/admin/event-types").await;
        let m =
            all["manifests"].as_array()?.iter().find(|m| m["location"] == producers.url("/ledger/streaming"))?.clone();
        m["error"].is_string().then_some((m, all))
    })
    .await;
    let (m, all) = ledger;
    assert!(m["error"].as_str().expect("error").contains("503"), "{m}");
    assert!(m["fetched_at"].is_string() && m["events"] == 2, "{m}");
    assert!(find(&all, "account.created").expect("kept")["declared"].as_bool().expect("declared"));
    let metrics = hub.client.get(hub.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    assert!(metrics.contains("streaming_hub_manifest_fetches_total{result=\"failed\"}"), "metrics");
    // Back up: the error clears.
    producers.down.store(false, Ordering::SeqCst);
    until("the ledger back", Duration::from_secs(20), async || {
        let (_, all) = hub.admin_get("/admin/event-types").await;
        let m =
            all["manifests"].as_array()?.iter().find(|m| m["location"] == producers.url("/ledger/streaming"))?.clone();
        m["error"].is_null().then_some(())
    })
    .await;
}

async fn payloads_are_checked_against_declared_schemas_in_each_mode(backend: Backend) {
    let producers = Producers::start().await;
    // The lender's manifest from a file, the ledger's over HTTP with its schema at a URL.
    let file = std::env::temp_dir().join(format!("lender-manifest-{}.json", uuid::Uuid::now_v7()));
    let mut lender = lender_manifest();
    lender["events"][0]["dataSchema"] = json!({"type": "object", "required": ["amount"]});
    std::fs::write(&file, lender.to_string()).expect("write manifest");
    let sources = format!("{},file:{}", producers.url("/ledger/streaming"), file.display());
    let bad_amount = r#"{"amount": -5, "currency": "BRL"}"#;
    let good = r#"{"amount": 5, "currency": "BRL"}"#;
    for mode in ["off", "warn", "quarantine"] {
        let hub = TestHub::start_with(
            backend,
            &[
                ("STREAMING_HUB_MANIFEST_SOURCES", &sources),
                ("STREAMING_HUB_MANIFEST_REFRESH_INTERVAL", "1s"),
                ("STREAMING_HUB_VALIDATE_PAYLOADS", mode),
            ],
        )
        .await;
        let key = hub.tenant_key("t1").await;
        until("both manifests read", Duration::from_secs(20), async || {
            let (_, all) = hub.admin_get("/admin/event-types").await;
            let m = all["manifests"].as_array()?;
            (m.len() == 2 && m.iter().all(|m| m["fetched_at"].is_string())).then_some(())
        })
        .await;
        // The admin view shows this process's catalog: read, so its schemas are in force.
        let mismatches = || async {
            let metrics =
                hub.client.get(hub.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
            metrics
                .lines()
                .find(|l| l.starts_with(&format!("streaming_hub_payload_schema_mismatches_total{{mode=\"{mode}\"}}")))
                .map_or(0.0, |l| l.rsplit(' ').next().expect("value").parse::<f64>().expect("number"))
        };
        let before = mismatches().await;
        let post = |e: Event| {
            let (hub, key) = (&hub, &key);
            async move { hub.post_event(key, &e).await }
        };
        let (s_good, _) = post(event("t1", "ledger", "account", "created", good)).await;
        assert_eq!(s_good, StatusCode::ACCEPTED, "{mode}: a valid body");
        let (s_bad, bad) = post(event("t1", "ledger", "account", "created", bad_amount)).await;
        let (s_missing, missing) = post(event("t1", "lender", "loan_application", "approved", r#"{"id": 1}"#)).await;
        let (s_text, _) =
            post(event("t1", "ledger", "account", "created", "not json").set("content-type", "text/plain")).await;
        // A version the manifest does not declare, and a type without a schema, are not checked.
        let (s_other, _) =
            post(event("t1", "ledger", "account", "created", bad_amount).set("ce-schemaversion", "2.0.0")).await;
        let (s_free, _) =
            post(event("t1", "lender", "loan", "disburse", "not json").set("content-type", "text/plain")).await;
        assert_eq!((s_other, s_free), (StatusCode::ACCEPTED, StatusCode::ACCEPTED), "{mode}");
        match mode {
            "quarantine" => {
                assert_eq!(s_bad, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
                assert_eq!(bad["title"], "quarantined");
                assert!(bad["message"].as_str().expect("message").starts_with("body/amount: "), "{bad}");
                assert_eq!(s_missing, StatusCode::UNPROCESSABLE_ENTITY, "{missing}");
                assert!(missing["message"].as_str().expect("message").starts_with("body: "), "{missing}");
                assert_eq!(s_text, StatusCode::UNPROCESSABLE_ENTITY);
                let (_, q) = hub.admin_get("/admin/quarantine?reason=schema_mismatch").await;
                let fields: Vec<&str> =
                    q["items"].as_array().expect("items").iter().filter_map(|e| e["reason_field"].as_str()).collect();
                assert!(fields.contains(&"body/amount"), "{q}");
            }
            _ => {
                assert_eq!(
                    (s_bad, s_missing, s_text),
                    (StatusCode::ACCEPTED, StatusCode::ACCEPTED, StatusCode::ACCEPTED),
                    "{mode}"
                );
            }
        }
        // The registry is the process's, shared with tests running beside this one: the count
        // grew by this hub's three at least (`off` never counts).
        let counted = mismatches().await - before;
        match mode {
            "off" => assert_eq!(counted, 0.0),
            _ => assert!(counted >= 3.0, "{mode}: {counted}"),
        }
    }
    let _ = std::fs::remove_file(file);
}

/// From Kafka too: a record whose body breaks its declared schema is quarantined (and its offset
/// committed with the rest), and the types of accepted records are learned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_records_are_checked_and_their_types_learned() {
    use crate::kafka_support::{Broker, KafkaPeer, Record, ends, produce};
    let peer = KafkaPeer::start(Broker::Kafka).await;
    peer.create_topic("lerian.streaming.lender", 2).await;
    let file = std::env::temp_dir().join(format!("kafka-manifest-{}.json", uuid::Uuid::now_v7()));
    let mut lender = lender_manifest();
    lender["events"][0]["dataSchema"] =
        json!({"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer", "minimum": 0}}});
    std::fs::write(&file, lender.to_string()).expect("write manifest");
    let sources = format!("file:{}", file.display());
    let hub = TestHub::start_with(
        Backend::Postgres,
        &[
            ("STREAMING_HUB_KAFKA_BROKERS", &peer.brokers),
            ("STREAMING_HUB_KAFKA_TOPIC_REFRESH", "1s"),
            ("STREAMING_HUB_KAFKA_BATCH_WAIT", "20ms"),
            ("STREAMING_HUB_MANIFEST_SOURCES", &sources),
            ("STREAMING_HUB_VALIDATE_PAYLOADS", "quarantine"),
        ],
    )
    .await;
    until("the manifest read", Duration::from_secs(20), async || {
        let (_, all) = hub.admin_get("/admin/event-types").await;
        all["manifests"][0]["fetched_at"].is_string().then_some(())
    })
    .await;
    // `Record::event` bodies are `{"amount":100}`: valid.
    let good: Vec<Record> = (0..4).map(|i| Record::event("lender", i % 2, "t1")).collect();
    let bad = Record::event("lender", 1, "t1").body(br#"{"amount": "100"}"#);
    let mut all = good.clone();
    all.push(bad.clone());
    produce(&peer.producer(), &all).await;

    let quarantined = until("the bad record quarantined", Duration::from_secs(60), async || {
        let (_, q) = hub.admin_get("/admin/quarantine?reason=schema_mismatch").await;
        q["items"].as_array().filter(|items| !items.is_empty()).cloned()
    })
    .await;
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0]["reason_field"], "body/amount", "{quarantined:?}");
    assert!(quarantined[0]["origin"].to_string().contains("kafka"), "{quarantined:?}");
    let key = hub.tenant_key("t1").await;
    until("the four good records learned", Duration::from_secs(60), async || {
        let (_, list) = hub.get(&key, "/v1/event-types?pattern=loan_application.approved").await;
        (find(&list, "loan_application.approved")?["events"] == 4).then_some(())
    })
    .await;
    assert_eq!(hub.store.events_after("t1", 0, 100).await.expect("read").len(), 4);
    peer.wait_committed(
        "streaming-hub.local",
        "lerian.streaming.lender",
        &ends(&all, "lerian.streaming.lender", 2),
        Duration::from_secs(60),
    )
    .await;
    let _ = std::fs::remove_file(file);
}

/// Two replicas on one database: one fetches the manifests per interval, both serve the catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_fetches_the_manifests_and_every_replica_reads_them() {
    let producers = Producers::start().await;
    let mut vars = crate::support::base_vars(Backend::Postgres).await;
    vars.insert("STREAMING_HUB_MANIFEST_SOURCES".into(), producers.url("/ledger/streaming"));
    let first = TestHub::start_vars(vars.clone()).await;
    let second = TestHub::start_vars(vars).await;
    for hub in [&first, &second] {
        until("the ledger's types in this replica's catalog", Duration::from_secs(30), async || {
            let (_, all) = hub.admin_get("/admin/event-types").await;
            find(&all, "account.created").map(|_| ())
        })
        .await;
    }
    // The default interval (300 s) has not passed: the one fetch is the one replica's turn.
    assert_eq!(producers.ledger_fetches.load(Ordering::SeqCst), 1);
}

/// A manifest source goes through the sinks' address guard: a private address is refused unless
/// private sinks are allowed, written as an address or as `localhost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_manifest_source_is_refused_unless_private_sinks_are_allowed() {
    let producers = Producers::start().await;
    let port = producers.base.rsplit(':').next().expect("port").to_owned();
    let by_name = format!("http://localhost:{port}/lender/streaming");
    let sources = format!("{},{by_name}", producers.url("/lender/streaming"));
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[("STREAMING_HUB_MANIFEST_SOURCES", &sources), ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "false")],
    )
    .await;
    let manifests = until("both sources tried", Duration::from_secs(20), async || {
        let (_, all) = hub.admin_get("/admin/event-types").await;
        let m = all["manifests"].as_array()?.clone();
        (m.len() == 2).then_some(m)
    })
    .await;
    for m in &manifests {
        let error = m["error"].as_str().unwrap_or_else(|| panic!("refused: {m}"));
        assert!(error.contains("private destinations are not allowed"), "{m}");
        assert!(m["fetched_at"].is_null(), "{m}");
    }
    let (_, all) = hub.admin_get("/admin/event-types").await;
    assert!(find(&all, "loan.disburse").is_none(), "nothing from a refused source");
}

/// A producer whose schema server never answers: its schemas are fetched eight at a time under one
/// deadline, each location once (30 events name 15), instead of one after another; the healthy source is stored as soon as it is read, a remote manifest naming a
/// local file gets a problem (and the file's content appears nowhere), and shutdown during the
/// refresh stops the hub at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_producer_holds_up_nobody_and_a_remote_manifest_reads_no_file() {
    let secret_file = std::env::temp_dir().join(format!("streaming-hub-secret-{}.json", uuid::Uuid::now_v7()));
    std::fs::write(&secret_file, br#"{"marker": "local-file-content-7f3a"}"#).expect("write");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let hangs = Arc::new(AtomicUsize::new(0));
    let mut events: Vec<Value> = (0..30)
        .map(|i| {
            json!({"resourceType": "slow", "eventType": format!("e{i}"), "schemaVersion": "1.0.0", "class": "fact",
                   "dataSchema": format!("{base}/hang/{}.json", i % 15)})
        })
        .collect();
    events.push(json!({"resourceType": "slow", "eventType": "local", "schemaVersion": "1.0.0", "class": "fact",
                       "dataSchema": format!("file://{}", secret_file.display())}));
    let slow = json!({"version": "1.0", "publisher": {"serviceName": "slow-api", "source": "slow"},
                      "topic": "lerian.streaming.slow", "events": events});
    let app = axum::Router::new()
        .route("/slow/streaming", axum::routing::get(move || async move { axum::Json(slow) }))
        .route("/lender/streaming", axum::routing::get(|| async { axum::Json(lender_manifest()) }))
        .route(
            "/hang/{name}",
            axum::routing::get({
                let hangs = Arc::clone(&hangs);
                move || async move {
                    hangs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    axum::Json(json!({}))
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let sources = format!("{base}/slow/streaming,{base}/lender/streaming");
    let mut vars = crate::support::base_vars(Backend::Sqlite).await;
    vars.insert("STREAMING_HUB_MANIFEST_SOURCES".into(), sources);
    vars.insert("STREAMING_HUB_DRAIN_DELAY".into(), "0s".into());
    let hub = TestHub::start_vars(vars).await;

    // The healthy source is in the catalog while the slow one's schemas are still out.
    until("the lender's types", Duration::from_secs(15), async || {
        let (_, all) = hub.admin_get("/admin/event-types").await;
        find(&all, "loan_application.approved").map(|_| ())
    })
    .await;
    assert!(hangs.load(Ordering::SeqCst) <= 15, "each location fetched once: {}", hangs.load(Ordering::SeqCst));

    // The slow one is stored once its schemas' one deadline passed.
    let manifest = until("the slow manifest, with its problems", Duration::from_secs(60), async || {
        let (_, all) = hub.admin_get("/admin/event-types").await;
        all["manifests"]
            .as_array()?
            .iter()
            .find(|m| {
                m["location"].as_str().is_some_and(|l| l.ends_with("/slow/streaming")) && m["fetched_at"].is_string()
            })
            .cloned()
    })
    .await;
    let text = manifest.to_string();
    assert!(!text.contains("local-file-content-7f3a"), "no byte of the local file: {text}");
    let problems = manifest["problems"].as_array().expect("problems");
    assert!(
        problems.iter().any(|p| p["field"] == "events[30].dataSchema"
            && p["message"].as_str().is_some_and(|m| m.contains("names a local file"))),
        "{text}"
    );
    let late = problems.iter().filter(|p| p["message"].as_str().is_some_and(|m| m.contains("/hang/"))).count();
    assert_eq!(late, 15, "each hanging location reported once, not once per event naming it: {text}");
    let (_, all) = hub.admin_get("/admin/event-types").await;
    assert!(!all.to_string().contains("local-file-content-7f3a"));
    let _ = std::fs::remove_file(&secret_file);
}

/// Shutdown while a refresh waits on a producer that never answers: the hub stops at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_a_refresh() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let asked = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/never/streaming",
        axum::routing::get({
            let asked = Arc::clone(&asked);
            move || async move {
                asked.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                axum::Json(json!({}))
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut vars = crate::support::base_vars(Backend::Sqlite).await;
    vars.insert("STREAMING_HUB_MANIFEST_SOURCES".into(), format!("{base}/never/streaming"));
    vars.insert("STREAMING_HUB_DRAIN_DELAY".into(), "0s".into());
    let config = streaming_hub::config::Config::from_vars(vars).expect("config");
    let stop = tokio_util::sync::CancellationToken::new();
    let hub = streaming_hub::start(config, stop.clone()).await.expect("start");
    until("the refresh is under way", Duration::from_secs(15), async || {
        (asked.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    stop.cancel();
    // The fetch alone would hold the refresh for its 10 s timeout.
    tokio::time::timeout(Duration::from_secs(8), hub.wait())
        .await
        .expect("the hub stopped while the refresh waited")
        .expect("a clean stop");
}
