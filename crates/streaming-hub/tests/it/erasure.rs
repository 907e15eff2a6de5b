//! Erasure end to end, on both stores: a data subject's events, their pending jobs, the response
//! bodies their attempts recorded, a quarantined record and a DLQ-plane record all carry a marker;
//! after `POST /admin/erasures` no API answer and no byte of the database's files holds it
//! (SQLite: the file and its write-ahead log; PostgreSQL: every file of the schema's relations
//! after `VACUUM FULL` and a checkpoint), the other events are untouched, a second identical
//! erasure changes nothing, and a tenant key cannot erase. A hub killed with SIGKILL mid-way
//! finishes the erasure after it starts again, every event judged once.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::receiver::{Receiver, Script};
use hub_testkit::postgres_dsn;

use crate::support::{Backend, Event, HubProcess, TestHub, http_client, temp_sqlite_path, until};

const WAIT: Duration = Duration::from_secs(30);

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

async fn erased(hub_base: &str, admin: &str, id: &str) -> Value {
    let client = http_client();
    until("the erasure done", WAIT, async || {
        let got: Value = client
            .get(format!("{hub_base}/admin/erasures/{id}"))
            .bearer_auth(admin)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        (got["state"] == "done").then_some(got)
    })
    .await
}

/// Every byte PostgreSQL keeps for the schema's relations (tables, their TOAST and indexes),
/// read from the data directory after `VACUUM FULL` and a checkpoint.
async fn postgres_files(schema: &str) -> Vec<u8> {
    let pg = hub_store::PgStore::connect(&postgres_dsn(), Some(schema), 1).await.expect("connect");
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')",
    )
    .bind(schema)
    .fetch_all(pg.pool())
    .await
    .expect("tables");
    for (table,) in &tables {
        sqlx::query(&format!("VACUUM FULL \"{schema}\".\"{table}\"")).execute(pg.pool()).await.expect("vacuum full");
    }
    sqlx::query("CHECKPOINT").execute(pg.pool()).await.expect("checkpoint");
    let files: Vec<(String,)> = sqlx::query_as(
        "SELECT current_setting('data_directory') || '/' || pg_relation_filepath(c.oid)
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE (n.nspname = $1 OR c.oid IN (SELECT reltoastrelid FROM pg_class t JOIN pg_namespace m
                                            ON m.oid = t.relnamespace WHERE m.nspname = $1))
           AND pg_relation_filepath(c.oid) IS NOT NULL",
    )
    .bind(schema)
    .fetch_all(pg.pool())
    .await
    .expect("files");
    let mut bytes = Vec::new();
    for (path,) in files {
        for segment in 0.. {
            let path = if segment == 0 { path.clone() } else { format!("{path}.{segment}") };
            match std::fs::read(&path) {
                Ok(b) => bytes.extend(b),
                Err(_) => break,
            }
        }
    }
    assert!(!bytes.is_empty(), "the test reads PostgreSQL's files (run as the server's user or root)");
    bytes
}

crate::on_both_backends!(an_erasure_leaves_no_byte_of_the_subject_anywhere);

async fn an_erasure_leaves_no_byte_of_the_subject_anywhere(backend: Backend) {
    let marker = format!("MARKER{}", Uuid::now_v7().simple());
    let subject = format!("customer:{marker}");
    let receiver = Receiver::start(Script::FailEcho).await;
    let hub = TestHub::start_with(
        backend,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_RETRY_CURVE", "0s,1h")],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let sub = hub
        .subscribe(&key, json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    receiver.trust(sub["signing_secret"].as_str().expect("secret"));
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(&key, &id).await;

    // Three events of the subject (by subject, and the marker in their bodies), two of others.
    let mut theirs = Vec::new();
    for i in 0..3 {
        let event = Event::new("t1").set("ce-subject", &subject).body(json!({"name": marker, "n": i}).to_string());
        theirs.push(event.id());
        hub.post_event(&key, &event).await;
    }
    let mut others = Vec::new();
    for i in 0..2 {
        let event = Event::new("t1").set("ce-subject", "customer:someone-else").body(json!({"n": i}).to_string());
        others.push(event.id());
        hub.post_event(&key, &event).await;
    }
    // Each delivery failed once (the receiver echoed the body in its answer) and waits an hour.
    until("one failed attempt each", WAIT, async || {
        let (_, page) = hub.get(&key, &format!("/v1/subscriptions/{id}/deliveries")).await;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        (items.len() == 5 && items.iter().all(|j| j["attempts"] == 1 && j["state"] == "pending")).then_some(())
    })
    .await;
    // A quarantined record of the subject, and one of the Kafka DLQ plane.
    let bad = Event::new("t1")
        .set("ce-subject", &subject)
        .set("ce-time", "yesterday")
        .body(json!({"name": marker}).to_string());
    assert_eq!(hub.post_event(&key, &bad).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    let now = chrono::Utc::now();
    hub.store
        .write_dlq_records(&[hub_store::NewDlqRecord {
            topic: "lerian.streaming.lender.dlq".into(),
            partition: 0,
            offset: 1,
            source: "lender".into(),
            tenant_id: Some("t1".into()),
            ce_id: Some(Uuid::now_v7().to_string()),
            ce_type: Some("studio.lerian.lender.loan_application.approved".into()),
            error_class: Some("validation".into()),
            error_message: Some("rejected".into()),
            headers: BTreeMap::from([
                ("ce-subject".to_owned(), subject.clone()),
                ("ce-type".to_owned(), "t".to_owned()),
            ]),
            body: json!({"name": marker}).to_string().into_bytes(),
            body_bytes: 40,
            payload_omitted: false,
            record_timestamp: Some(now),
            received_at: now,
        }])
        .await
        .expect("dlq record");
    assert!(contains(&hub.raw_table_bytes("events").await, &marker), "the marker is stored before");

    let request = json!({"tenant_id": "t1", "match": {"subject": subject}, "reason": "LGPD art. 18 request 1187"});
    let (status, refused) = hub.post_json(&key, "/admin/erasures", &request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a tenant key cannot erase: {refused}");
    let (status, bad_request) = hub
        .send(hub.client.post(hub.url("/admin/erasures")).bearer_auth(&hub.admin).json(&json!({
            "tenant_id": "t1", "match": {"subject": subject, "partitionkey": "k"}, "reason": "r"})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad_request["message"].as_str().unwrap_or_default().starts_with("match:"), "{bad_request}");
    let (status, started) =
        hub.send(hub.client.post(hub.url("/admin/erasures")).bearer_auth(&hub.admin).json(&request)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let erasure = started["id"].as_str().expect("id").to_owned();
    let done = erased(&hub.base, &hub.admin, &erasure).await;
    // The inbox holds the tenant's operational events too (the subscription's verification).
    let (_, inbox) = hub.get(&key, "/v1/events?limit=100").await;
    let inbox = inbox["items"].as_array().map_or(0, Vec::len);
    assert_eq!(
        done["counts"],
        json!({"scanned": inbox, "events": 3, "jobs_cancelled": 3, "responses": 3, "dlq_records": 1, "quarantined": 1}),
        "{done}"
    );
    assert_eq!(
        (done["requested_by"].as_str(), done["reason"].as_str()),
        (Some("admin token"), Some("LGPD art. 18 request 1187"))
    );
    assert!(!done.to_string().contains(&marker), "the record keeps no value: {done}");
    let (_, listed) = hub.admin_get("/admin/erasures?tenant_id=t1").await;
    assert_eq!(listed["items"][0]["id"], erasure.as_str(), "{listed}");
    let (_, none) = hub.admin_get("/admin/erasures?tenant_id=t2").await;
    assert_eq!(none["items"], json!([]));

    // Tombstones keep id, seq, type and time, and name the erasure; the others are untouched.
    for ce_id in &theirs {
        let (status, event) = hub.get(&key, &format!("/v1/events/{ce_id}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(event["event"]["erasure_id"], erasure.as_str(), "{event}");
        assert_eq!(event["event"]["payload"], json!({"erased": {"erasure_id": erasure}}));
        assert_eq!(event["event"]["type"], "loan_application.approved");
        assert!(
            event["event"]["subject"].is_null() && event["event"]["seq"].is_i64() && event["event"]["time"].is_string()
        );
    }
    for ce_id in &others {
        let (_, event) = hub.get(&key, &format!("/v1/events/{ce_id}")).await;
        assert!(event["event"].get("erasure_id").is_none(), "{event}");
        assert_eq!(event["event"]["subject"], "customer:someone-else");
    }
    let (_, page) = hub.get(&key, &format!("/v1/subscriptions/{id}/deliveries")).await;
    let states: Vec<&str> =
        page["items"].as_array().expect("items").iter().filter_map(|j| j["state"].as_str()).collect();
    assert_eq!(states.iter().filter(|s| **s == "cancelled").count(), 3, "{page}");
    assert_eq!(states.iter().filter(|s| **s == "pending").count(), 2, "{page}");

    // No API answer holds the marker…
    for (who, path) in [
        (key.as_str(), "/v1/events?limit=100".to_owned()),
        (key.as_str(), format!("/v1/subscriptions/{id}/deliveries")),
        (hub.admin.as_str(), "/admin/dlq?limit=100".to_owned()),
        (hub.admin.as_str(), "/admin/quarantine?limit=100".to_owned()),
    ] {
        let (status, answer) = hub.get(who, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(!answer.to_string().contains(&marker), "{path}: {answer}");
    }
    // …nor any byte of the database.
    match hub.vars.get("STREAMING_HUB_POSTGRES_SCHEMA") {
        None => assert!(!contains(&hub.raw_table_bytes("events").await, &marker), "the SQLite file or its WAL"),
        Some(schema) => assert!(!contains(&postgres_files(schema).await, &marker), "PostgreSQL's files"),
    }

    // Asked again once done: nothing left to change.
    let (status, again) =
        hub.send(hub.client.post(hub.url("/admin/erasures")).bearer_auth(&hub.admin).json(&request)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let again = erased(&hub.base, &hub.admin, again["id"].as_str().expect("id")).await;
    assert_eq!(
        again["counts"],
        json!({"scanned": inbox, "events": 0, "jobs_cancelled": 0, "responses": 0, "dlq_records": 0, "quarantined": 0})
    );
}

/// SIGKILL in the middle of an erasure (a page of one event, so there is a middle): the next
/// process goes on from the last page written, and every event is judged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_killed_mid_way_completes_after_a_restart() {
    const EVENTS: usize = 300;
    let db = temp_sqlite_path();
    let admin = format!("admin-{}", Uuid::now_v7().simple());
    let vars = vec![
        ("STREAMING_HUB_ENV", "local".to_owned()),
        ("STREAMING_HUB_SQLITE_PATH", db.display().to_string()),
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ERASURE_PAGE", "1".to_owned()),
    ];
    let hub = HubProcess::start(&vars).await;
    let client = http_client();
    let key: Value = client
        .post(format!("{}/admin/api-keys", hub.base))
        .bearer_auth(&admin)
        .json(&json!({"tenant_id": "t1", "name": "k"}))
        .send()
        .await
        .expect("key")
        .json()
        .await
        .expect("json");
    let key = key["key"].as_str().expect("key").to_owned();
    for i in 0..EVENTS {
        let subject = if i % 2 == 0 { "customer:gone" } else { "customer:stays" };
        hub.post_event(&key, &Event::new("t1").set("ce-subject", subject)).await;
    }
    let started: Value = client
        .post(format!("{}/admin/erasures", hub.base))
        .bearer_auth(&admin)
        .json(&json!({"tenant_id": "t1", "match": {"subject": "customer:gone"}, "reason": "request 7"}))
        .send()
        .await
        .expect("post")
        .json()
        .await
        .expect("json");
    let id = started["id"].as_str().expect("id").to_owned();
    let midway = until("the erasure under way", WAIT, async || {
        let got: Value = client
            .get(format!("{}/admin/erasures/{id}", hub.base))
            .bearer_auth(&admin)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (got["counts"]["scanned"].as_i64().unwrap_or(0) > 0).then_some(got)
    })
    .await;
    hub.kill();
    assert_eq!(midway["state"], "running", "killed mid-way: {midway}");

    let hub = HubProcess::start(&vars).await;
    let done = erased(&hub.base, &admin, &id).await;
    assert_eq!(done["counts"]["events"], (EVENTS / 2) as i64, "{done}");
    let page: Value = client
        .get(format!("{}/v1/events?limit=1000", hub.base))
        .bearer_auth(&key)
        .send()
        .await
        .expect("events")
        .json()
        .await
        .expect("json");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), EVENTS);
    assert_eq!(done["counts"]["scanned"], EVENTS as i64, "every event judged once: {done}");
    for e in items {
        assert_eq!(e["subject"] == "customer:stays", e.get("erasure_id").is_none(), "{e}");
    }
    hub.kill();
}

crate::on_both_backends!(a_broad_erasure_runs_only_with_its_count_confirmed);

/// A match that selects every event of the tenant, or more than the unconfirmed bound, is
/// previewed by a dry run and refused with its count until the request confirms that count;
/// nothing is erased by a dry run or a refusal.
async fn a_broad_erasure_runs_only_with_its_count_confirmed(backend: Backend) {
    let hub = TestHub::start_with(backend, &[("STREAMING_HUB_ERASURE_MAX_UNCONFIRMED", "3")]).await;
    let key = hub.tenant_key("t1").await;
    let other_key = hub.tenant_key("t2").await;
    for i in 0..5 {
        let event = Event::new("t1").set("ce-subject", "customer:many").body(json!({"n": i}).to_string());
        hub.post_event(&key, &event).await;
    }
    for i in 0..2 {
        let event = Event::new("t1").set("ce-subject", "customer:few").body(json!({"n": i}).to_string());
        hub.post_event(&key, &event).await;
    }
    hub.post_event(&other_key, &Event::new("t2").set("ce-subject", "customer:many").body("{}")).await;
    let erase = async |body: Value| {
        hub.send(hub.client.post(hub.url("/admin/erasures")).bearer_auth(&hub.admin).json(&body)).await
    };
    let everything = json!({"data": {"nosuchfield": [{"exists": false}]}});
    let request = |m: &Value, extra: Value| {
        let mut r = json!({"tenant_id": "t1", "match": m, "reason": "LGPD request 77"});
        r.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        r
    };

    // A dry run counts and erases nothing; the other tenant's events are not counted.
    let (status, preview) = erase(request(&everything, json!({"dry_run": true}))).await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(
        preview,
        json!({"tenant_id": "t1", "match_kind": "data", "count": 7, "events": 7, "confirmation_required": true})
    );
    // Every event of the tenant, unconfirmed or confirmed wrongly: 409 naming the count.
    let (status, refused) = erase(request(&everything, json!({}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let message = refused["message"].as_str().expect("message");
    assert!(message.starts_with("expected_count:") && message.contains("7 events, every event"), "{message}");
    let (status, refused) = erase(request(&everything, json!({"expected_count": 6}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused["message"].as_str().expect("message").contains("is 6 but"), "{refused}");
    // More than the bound: refused, then run once confirmed.
    let many = json!({"subject": "customer:many"});
    let (status, preview) = erase(request(&many, json!({"dry_run": true}))).await;
    assert_eq!(
        (status, &preview["count"], &preview["confirmation_required"]),
        (StatusCode::OK, &json!(5), &json!(true))
    );
    let (status, refused) = erase(request(&many, json!({}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused["message"].as_str().expect("message").contains("\"expected_count\": 5"), "{refused}");
    // Nothing was erased by any of it.
    let (_, inbox) = hub.get(&key, "/v1/events?limit=100").await;
    let items = inbox["items"].as_array().expect("items");
    assert_eq!(items.len(), 7);
    assert!(items.iter().all(|e| e.get("erasure_id").is_none()), "{inbox}");
    let (_, listed) = hub.admin_get("/admin/erasures?tenant_id=t1").await;
    assert_eq!(listed["items"], json!([]), "no erasure was recorded");

    // A small match needs no confirmation.
    let (status, started) = erase(request(&json!({"subject": "customer:few"}), json!({}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let done = erased(&hub.base, &hub.admin, started["id"].as_str().expect("id")).await;
    assert_eq!(done["counts"]["events"], 2, "{done}");
    // An erased event is not selected again: what is left is every event the tenant has.
    let (_, preview) = erase(request(&json!({"subject": "customer:few"}), json!({"dry_run": true}))).await;
    assert_eq!((&preview["count"], &preview["events"]), (&json!(0), &json!(5)), "{preview}");
    let (status, started) = erase(request(&many, json!({"expected_count": 5}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let done = erased(&hub.base, &hub.admin, started["id"].as_str().expect("id")).await;
    assert_eq!(done["counts"]["events"], 5, "{done}");
    // The other tenant's event is untouched.
    let (_, theirs) = hub.get(&other_key, "/v1/events?limit=10").await;
    assert_eq!(theirs["items"][0]["subject"], "customer:many", "{theirs}");
}

/// What the hub derived from an event goes with it: a transform that throws the body makes the
/// attempts' errors, the jobs' last errors and the dead-letter notices (with their ordering key,
/// the subject) quote it. After the erasure no API answer, no byte of the database and no line of
/// the hub's log holds the marker, and the erased events' replay is skipped, not failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_reaches_what_the_hub_derived_from_the_event() {
    let marker = format!("MARKER{}", Uuid::now_v7().simple());
    let db = temp_sqlite_path();
    let admin = format!("admin-{}", Uuid::now_v7().simple());
    let vars = vec![
        ("STREAMING_HUB_ENV", "local".to_owned()),
        ("STREAMING_HUB_SQLITE_PATH", db.display().to_string()),
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_RETRY_CURVE", "0s".to_owned()),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20".to_owned()),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
    ];
    let hub = HubProcess::start(&vars).await;
    let client = http_client();
    let call = async |request: reqwest::RequestBuilder| -> (StatusCode, Value) {
        let answer = request.send().await.expect("request");
        let status = answer.status();
        (status, answer.json().await.unwrap_or(Value::Null))
    };
    let (_, key) =
        call(client.post(format!("{}/admin/api-keys", hub.base)).bearer_auth(&admin).json(&json!({"tenant_id": "t1"})))
            .await;
    let key = key["key"].as_str().expect("key").to_owned();
    let receiver = Receiver::start(Script::Ok).await;
    let throws = "function handler(e) { throw new Error('refused ' + JSON.stringify(e.data)); }";
    let (status, sub) = call(client.post(format!("{}/v1/subscriptions", hub.base)).bearer_auth(&key).json(&json!({
        "name": "w", "event_types": ["*.*"], "ordering": "key",
        "sink": {"type": "webhook", "url": receiver.url},
        "transform": {"language": "javascript", "code": throws},
    })))
    .await;
    assert_eq!(status, StatusCode::CREATED, "{sub}");
    receiver.trust(sub["signing_secret"].as_str().expect("secret"));
    let id = sub["id"].as_str().expect("id").to_owned();
    until("verified", WAIT, async || {
        let (_, read) = call(client.get(format!("{}/v1/subscriptions/{id}", hub.base)).bearer_auth(&key)).await;
        (read["verification_state"] == "active").then_some(())
    })
    .await;
    let subject = format!("customer:{marker}");
    for _ in 0..2 {
        let event = Event::new("t1").set("ce-subject", &subject).body(json!({"cpf": marker}).to_string());
        hub.post_event(&key, &event).await;
    }
    let events_page =
        async || call(client.get(format!("{}/v1/events?limit=100", hub.base)).bearer_auth(&key)).await.1.to_string();
    until("both dead-lettered, each with its notice", WAIT, async || {
        let (_, page) =
            call(client.get(format!("{}/v1/subscriptions/{id}/deliveries", hub.base)).bearer_auth(&key)).await;
        let dead = page["items"].as_array().map_or(0, |items| items.iter().filter(|j| j["state"] == "dead").count());
        (dead == 2 && events_page().await.matches("job_dead_lettered").count() >= 2).then_some(())
    })
    .await;
    // What the hub derived quotes the marker before the erasure (so the checks below can fail).
    assert!(events_page().await.contains(&marker), "the notices quote the event");
    let (_, deliveries) =
        call(client.get(format!("{}/v1/subscriptions/{id}/deliveries", hub.base)).bearer_auth(&key)).await;
    assert!(deliveries.to_string().contains(&marker), "the jobs' errors quote the event: {deliveries}");

    let (status, started) =
        call(client.post(format!("{}/admin/erasures", hub.base)).bearer_auth(&admin).json(&json!({
            "tenant_id": "t1", "match": {"subject": subject}, "reason": "LGPD request 9"
        })))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let done = erased(&hub.base, &admin, started["id"].as_str().expect("id")).await;
    assert_eq!(done["counts"]["events"], 4, "two events and their two notices: {done}");

    // A replay over the window skips the erased events: nothing fails, nothing is dead-lettered.
    let (status, replay) = call(
        client
            .post(format!("{}/v1/subscriptions/{id}/replay", hub.base))
            .bearer_auth(&key)
            .json(&json!({"from_seq": 1})),
    )
    .await;
    assert!(status.is_success(), "{replay}");
    let replay_id = replay["replay_id"].as_str().expect("replay id").to_owned();
    until("the replay done", WAIT, async || {
        let (_, r) =
            call(client.get(format!("{}/v1/subscriptions/{id}/replays/{replay_id}", hub.base)).bearer_auth(&key)).await;
        (r["state"] == "done").then_some(r)
    })
    .await;

    for path in [
        "/v1/events?limit=100".to_owned(),
        format!("/v1/subscriptions/{id}/deliveries"),
        format!("/v1/subscriptions/{id}"),
    ] {
        let (_, answer) = call(client.get(format!("{}{path}", hub.base)).bearer_auth(&key)).await;
        assert!(!answer.to_string().contains(&marker), "{path}: {answer}");
    }
    let (_, deliveries) =
        call(client.get(format!("{}/v1/subscriptions/{id}/deliveries", hub.base)).bearer_auth(&key)).await;
    let items = deliveries["items"].as_array().expect("items");
    assert_eq!(items.iter().filter(|j| j["state"] == "dead").count(), 2, "no new dead letter: {deliveries}");
    assert!(items.iter().all(|j| j["state"] != "pending" && j["state"] != "leased"), "{deliveries}");
    let hub_log = hub.log.clone();
    hub.kill();
    let mut bytes = std::fs::read(&db).expect("the database file");
    bytes.extend(std::fs::read(format!("{}-wal", db.display())).unwrap_or_default());
    assert!(!contains(&bytes, &marker), "the SQLite file or its WAL");
    let log = std::fs::read(&hub_log).expect("the hub's log");
    assert!(!contains(&log, &marker), "the hub's log never held the event's text");
}
