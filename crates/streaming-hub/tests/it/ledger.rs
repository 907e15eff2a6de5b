//! The ledger end to end, on both stores: deliveries and changes land in their tenant's log with
//! who made them; the log's checkpoints are signed, its proofs verify against them, and its
//! export verifies offline with `streaming-hub ledger verify` (with the keys it lists, or pinned
//! from `/.well-known/ledger-keys.json`); a tenant sees only its own; no secret is in it; a row
//! edited behind the hub's back is named by the verifier; erasure leaves the entries and takes
//! their digest keys.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hub_core::ledger::proof::{verify_consistency, verify_inclusion};
use hub_core::ledger::{Hash, leaf_hash};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, TestHub, hub_command, until};

const WAIT: Duration = Duration::from_secs(30);

fn hash(b64: &Value) -> Hash {
    STANDARD.decode(b64.as_str().expect("base64 text")).expect("base64").try_into().expect("32 bytes")
}

async fn export(hub: &TestHub, key: &str) -> String {
    let response = hub.client.get(hub.url("/v1/ledger/export")).bearer_auth(key).send().await.expect("export");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/jsonl");
    response.text().await.expect("text")
}

/// `streaming-hub ledger verify` on `text`: its exit code and what it printed.
fn verify_cli(text: &str, keys: Option<&Value>) -> (i32, String) {
    let dir = std::env::temp_dir().join("streaming-hub-tests");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join(format!("ledger-{}.jsonl", uuid::Uuid::now_v7()));
    std::fs::write(&file, text).expect("write export");
    let mut cmd = hub_command();
    cmd.args(["ledger", "verify"]).arg(&file);
    let keys_file = keys.map(|k| {
        let path = file.with_extension("keys.json");
        std::fs::write(&path, k.to_string()).expect("write keys");
        path
    });
    if let Some(path) = &keys_file {
        cmd.arg("--keys").arg(path);
    }
    let out = cmd.output().expect("run ledger verify");
    let _ = std::fs::remove_file(&file);
    if let Some(path) = keys_file {
        let _ = std::fs::remove_file(path);
    }
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

/// Until the latest checkpoint covers every entry appended so far: the entries.
async fn sealed(hub: &TestHub, key: &str, at_least: usize) -> Vec<Value> {
    until("the ledger sealed", WAIT, async || {
        let (_, page) = hub.get(key, "/v1/ledger/entries?limit=1000").await;
        let entries = page["items"].as_array().cloned().unwrap_or_default();
        let (_, latest) = hub.get(key, "/v1/ledger/checkpoints").await;
        let size = latest["items"][0]["size"].as_u64().unwrap_or(0);
        (entries.len() >= at_least && size == entries.len() as u64).then_some(entries)
    })
    .await
}

/// Runs the Python receiver package's ledger check (sdk/python) on an inclusion proof, the hub's
/// keys and a received request: `{"ok", "entry" | "error", "sent"}`.
fn python_check(proof: &Value, keys: &Value, request: &Value) -> Value {
    let script = r#"
import base64, json, sys
from streaming_hub_receiver import ledger
proof, keys, request = (json.loads(a) for a in sys.argv[1:4])
out = {}
try:
    out["entry"] = ledger.verify_inclusion_proof(proof, keys)
    out["ok"] = True
except ledger.InvalidProof as e:
    out["ok"] = False
    out["error"] = str(e)
pairs = [(n, v) for n, v in request["headers"]]
out["sent"] = ledger.sent_digest(base64.b64decode(request["digest_key"]), pairs, base64.b64decode(request["body"]))
print(json.dumps(out))
"#;
    let out = std::process::Command::new("python3")
        .env("PYTHONPATH", crate::sdk::repo().join("sdk/python/src"))
        .arg("-c")
        .arg(script)
        .arg(proof.to_string())
        .arg(keys.to_string())
        .arg(request.to_string())
        .output()
        .expect("python3 runs (the machine's Python)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the script prints JSON")
}

crate::on_both_backends!(deliveries_and_changes_are_recorded_proved_and_verified_offline);

async fn deliveries_and_changes_are_recorded_proved_and_verified_offline(backend: Backend) {
    let receiver = Receiver::start(Script::Ok).await;
    let hub = TestHub::start_with(
        backend,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_LEDGER_CHECKPOINT_INTERVAL", "200ms")],
    )
    .await;
    let key = hub.tenant_key("acme").await;
    let other = hub.tenant_key("other").await;
    let sub = hub
        .subscribe(&key, json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    let secret = sub["signing_secret"].as_str().expect("secret").to_owned();
    receiver.trust(&secret);
    let id = sub["id"].as_str().expect("id").to_owned();
    hub.wait_until_active(&key, &id).await;
    for i in 0..5 {
        hub.post_event(&key, &Event::new("acme").body(json!({"n": i}).to_string())).await;
    }
    let received = receiver.wait_for(5, WAIT).await;
    // Sealed once before the changes below, so the log has two checkpoints to prove between.
    sealed(&hub, &key, 7).await;
    let (status, _) = hub.patch_json(&key, &format!("/v1/subscriptions/{id}"), &json!({"enabled": false})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, rotated) = hub.post_json(&key, &format!("/v1/subscriptions/{id}/rotate-secret"), &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new_secret = rotated["signing_secret"].as_str().expect("new secret").to_owned();

    // Five deliveries and four changes: the key made for the tenant, the subscription created,
    // disabled, its secret rotated.
    let entries = sealed(&hub, &key, 9).await;
    let deliveries: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "delivery").collect();
    let changes: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "change").collect();
    assert_eq!((deliveries.len(), changes.len()), (5, 4));
    for e in &entries {
        let index = e["index"].as_u64().expect("index");
        assert_eq!(hash(&e["leaf_hash"]), leaf_hash(index, e["data"].as_str().expect("data").as_bytes()));
        assert_eq!(e["entry"], serde_json::from_str::<Value>(e["data"].as_str().unwrap()).unwrap());
    }
    let d = &deliveries[0]["entry"];
    assert_eq!(d["outcome"], "delivered");
    assert_eq!(d["job"], "succeeded");
    assert_eq!(d["subscription_id"], id.as_str());
    assert!(d["destination"].as_str().unwrap().starts_with("sha256:"));
    assert!(!deliveries[0]["data"].as_str().unwrap().contains(&receiver.url), "the destination is a digest");

    // The digest of what was sent is checked with the entry's key and what the receiver got.
    let delivery_id = d["delivery_id"].as_str().expect("delivery id");
    let got = received.iter().find(|r| r.header("x-lerian-delivery-id") == delivery_id).expect("received it");
    let index = deliveries[0]["index"].as_u64().unwrap();
    // The attempt names its entry.
    let (_, listed) = hub.get(&key, &format!("/v1/subscriptions/{id}/deliveries?limit=100")).await;
    let attempt = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|job| job["attempt_log"].as_array().cloned().unwrap_or_default())
        .find(|a| a["delivery_id"] == delivery_id)
        .expect("the attempt is listed");
    assert_eq!(attempt["ledger_index"], index);
    let (_, detail) = hub.get(&key, &format!("/v1/ledger/entries/{index}")).await;
    let digest_key = STANDARD.decode(detail["digest_key"].as_str().expect("digest key kept")).expect("base64");
    let headers: Vec<(String, String)> =
        got.headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned())).collect();
    assert_eq!(
        d["sent"].as_str(),
        Some(hub_core::ledger::entry::sent_digest(&digest_key, &headers, &got.body).as_str())
    );
    let mut forged = got.body.clone();
    forged.push(b' ');
    assert_ne!(d["sent"].as_str(), Some(hub_core::ledger::entry::sent_digest(&digest_key, &headers, &forged).as_str()));

    // The audit view: newest first, with the actor (the API key).
    let (_, audit) = hub.get(&key, "/v1/audit").await;
    let actions: Vec<&str> =
        audit["items"].as_array().unwrap().iter().map(|c| c["change"]["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        vec!["subscription.secret_rotated", "subscription.disabled", "subscription.created", "api_key.created"]
    );
    let created = &audit["items"][2];
    assert_eq!(created["change"]["actor"]["type"], "api_key");
    assert!(created["actor_label"].as_str().unwrap().starts_with("api key "), "{created}");
    assert_eq!(audit["items"][3]["actor_label"], "admin token");
    assert_eq!(audit["items"][3]["change"]["after"]["tenant_id"], "acme");
    assert_eq!(audit["items"][1]["change"]["before"]["enabled"], true);
    assert_eq!(audit["items"][1]["change"]["after"]["enabled"], false);

    // An inclusion proof of a delivery, and a consistency proof between two checkpoints.
    let (_, latest) = hub.get(&key, "/v1/ledger/checkpoints").await;
    let checkpoint = &latest["items"][0];
    let size = checkpoint["size"].as_u64().unwrap();
    let (status, proof) = hub.get(&key, &format!("/v1/ledger/proof/inclusion?entry={index}")).await;
    assert_eq!(status, StatusCode::OK, "{proof}");
    assert_eq!(proof["size"], size);
    assert_eq!(proof["checkpoint"]["root"], checkpoint["root"]);
    let hashes: Vec<Hash> = proof["proof"].as_array().unwrap().iter().map(hash).collect();
    let leaf = hash(&proof["entry"]["leaf_hash"]);
    assert_eq!(verify_inclusion(index, size, &leaf, &hashes, &hash(&checkpoint["root"])), Ok(()));
    let (_, all) = hub.get(&key, "/v1/ledger/checkpoints?from=0").await;
    let sizes: Vec<u64> = all["items"].as_array().unwrap().iter().map(|c| c["size"].as_u64().unwrap()).collect();
    assert!(sizes.len() >= 2 && sizes.windows(2).all(|w| w[0] < w[1]), "{sizes:?}");
    let (status, consistent) =
        hub.get(&key, &format!("/v1/ledger/proof/consistency?from={}&to={size}", sizes[0])).await;
    assert_eq!(status, StatusCode::OK, "{consistent}");
    let hashes: Vec<Hash> = consistent["proof"].as_array().unwrap().iter().map(hash).collect();
    let from_root = hash(&consistent["from_checkpoint"]["root"]);
    assert_eq!(verify_consistency(sizes[0], size, &from_root, &hash(&checkpoint["root"]), &hashes), Ok(()));

    // The receiver's side: the Python receiver package checks the proof of the delivery it got
    // with the published keys, and that the request it holds is the one recorded; a proof of
    // another entry, or a changed body, does not pass.
    let (_, keys) = hub.get(&key, "/.well-known/ledger-keys.json").await;
    let request = json!({
        "headers": headers,
        "body": STANDARD.encode(&got.body),
        "digest_key": detail["digest_key"],
    });
    let checked = python_check(&proof, &keys, &request);
    assert_eq!(checked["ok"], true, "{checked}");
    assert_eq!(checked["entry"]["delivery_id"], delivery_id);
    assert_eq!(checked["sent"], d["sent"], "the same digest in both languages");
    let mut forged = proof.clone();
    forged["entry"]["data"] = json!(proof["entry"]["data"].as_str().unwrap().replace("delivered", "failed"));
    assert_eq!(python_check(&forged, &keys, &request)["ok"], false);
    let mut other_body = request.clone();
    other_body["body"] = json!(STANDARD.encode(b"{}"));
    assert_ne!(python_check(&proof, &keys, &other_body)["sent"], d["sent"]);

    // Bad parameters are named.
    let (status, bad) = hub.get(&key, "/v1/ledger/proof/inclusion?entry=x").await;
    assert_eq!(
        (status, bad["message"].as_str().unwrap_or_default().contains("entry")),
        (StatusCode::BAD_REQUEST, true),
        "{bad}"
    );
    let (status, bad) = hub.get(&key, &format!("/v1/ledger/proof/inclusion?entry=0&size={}", size + 1)).await;
    assert_eq!(
        (status, bad["message"].as_str().unwrap_or_default().contains("size")),
        (StatusCode::BAD_REQUEST, true),
        "{bad}"
    );

    // Another tenant sees its own log only: the making of its key.
    let (_, theirs) = hub.get(&other, "/v1/ledger/entries").await;
    let theirs = theirs["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0]["entry"]["after"]["tenant_id"], "other");
    let (_, audit) = hub.get(&other, "/v1/audit").await;
    assert_eq!(audit["items"].as_array().map(Vec::len), Some(1));
    assert!(!audit.to_string().contains(&id), "nothing of acme's");
    let (status, _) = hub.get(&other, &format!("/v1/ledger/entries/{index}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The export verifies offline, with its own keys or the published ones; no secret is in it.
    let text = export(&hub, &key).await;
    for s in [&secret, &new_secret, &key] {
        assert!(!text.contains(s.as_str()), "a secret is in the export");
    }
    let (code, said) = verify_cli(&text, None);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("tenant acme: 9 entries"), "{said}");
    let (_, published) = hub.get(&key, "/.well-known/ledger-keys.json").await;
    assert_eq!(published["keys"][0]["crv"], "Ed25519");
    let (code, said) = verify_cli(&text, Some(&published));
    assert_eq!(code, 0, "{said}");
    // Keys that did not sign it: refused.
    let stranger = hub_core::ledger::checkpoint::LedgerKey::from_pkcs8(
        published["keys"][0]["kid"].as_str().unwrap(),
        &hub_core::ledger::checkpoint::LedgerKey::generate().unwrap(),
    )
    .unwrap();
    let (code, said) = verify_cli(&text, Some(&json!({"keys": [stranger.jwk()]})));
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("signature"), "{said}");

    // An entry edited in the database behind the hub's back is named.
    let edit = format!(
        "UPDATE ledger_entries SET data = replace(data, '\"delivered\"', '\"failed\"') WHERE log = 'acme' AND idx = {index}"
    );
    hub.execute_raw(&format!("{edit} AND $1::bytea IS NOT NULL"), &format!("{edit} AND ?1 IS NOT NULL"), b"x").await;
    let (code, said) = verify_cli(&export(&hub, &key).await, None);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains(&format!("entry {index} ")), "{said}");
}

crate::on_both_backends!(an_erasure_leaves_the_entries_and_takes_their_digest_keys);

async fn an_erasure_leaves_the_entries_and_takes_their_digest_keys(backend: Backend) {
    let marker = format!("MARKER{}", uuid::Uuid::now_v7().simple());
    let receiver = Receiver::start(Script::Ok).await;
    let hub = TestHub::start_with(
        backend,
        &[("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"), ("STREAMING_HUB_LEDGER_CHECKPOINT_INTERVAL", "200ms")],
    )
    .await;
    let key = hub.tenant_key("acme").await;
    let sub = hub
        .subscribe(&key, json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    receiver.trust(sub["signing_secret"].as_str().unwrap());
    hub.wait_until_active(&key, sub["id"].as_str().unwrap()).await;
    let theirs =
        Event::new("acme").set("ce-subject", &format!("customer:{marker}")).body(json!({"name": marker}).to_string());
    hub.post_event(&key, &theirs).await;
    hub.post_event(&key, &Event::new("acme").set("ce-subject", "customer:other").body("{}")).await;
    receiver.wait_for(2, WAIT).await;
    let before = sealed(&hub, &key, 3).await;
    let index_of = |entries: &[Value], event: uuid::Uuid| {
        entries
            .iter()
            .find(|e| e["entry"]["event_id"] == event.to_string())
            .map(|e| e["index"].as_u64().unwrap())
            .expect("an entry")
    };
    let erased_entry = index_of(&before, theirs.id());
    let (_, detail) = hub.get(&key, &format!("/v1/ledger/entries/{erased_entry}")).await;
    assert!(detail["digest_key"].is_string(), "kept until the erasure");

    let (status, erasure) = hub
        .send(hub.client.post(hub.url("/admin/erasures")).bearer_auth(&hub.admin).json(&json!({
            "tenant_id": "acme", "match": {"subject": format!("customer:{marker}")}, "reason": "test"
        })))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{erasure}");
    let erasure_id = erasure["id"].as_str().unwrap().to_owned();
    until("the erasure done", WAIT, async || {
        let (_, e) = hub.admin_get(&format!("/admin/erasures/{erasure_id}")).await;
        (e["state"] == "done").then_some(())
    })
    .await;
    let (_, detail) = hub.get(&key, &format!("/v1/ledger/entries/{erased_entry}")).await;
    assert!(detail.get("digest_key").is_none(), "the key is gone: {detail}");
    let after = sealed(&hub, &key, before.len() + 1).await;
    // The entries stay as they were (and the erasure's request is one more change).
    assert_eq!(&after[..before.len()], &before[..]);
    assert!(after.iter().any(|e| e["entry"]["action"] == "erasure.requested"));
    let completed = until("the erasure's completion in the ledger", WAIT, async || {
        let (_, audit) = hub.get(&key, "/v1/audit").await;
        audit["items"].as_array()?.iter().find(|c| c["change"]["action"] == "erasure.completed").cloned()
    })
    .await;
    assert_eq!(completed["actor_label"], "the hub");
    assert_eq!(completed["change"]["after"]["events"], 1, "{completed}");
    let text = export(&hub, &key).await;
    assert!(!text.contains(&marker), "the subject is not in the ledger");
    let (code, said) = verify_cli(&text, None);
    assert_eq!(code, 0, "{said}");
}

crate::on_both_backends!(a_hub_killed_mid_burst_leaves_a_log_that_verifies_and_goes_on);

/// SIGKILL in the middle of a burst: after the restart the log verifies, holds exactly one
/// delivery entry per recorded attempt, and its checkpoints go on from the last one signed.
async fn a_hub_killed_mid_burst_leaves_a_log_that_verifies_and_goes_on(backend: Backend) {
    use crate::support::{HubProcess, fresh_schema, http_client, postgres_dsn, temp_sqlite_path};
    use hub_store::prelude::*;
    use std::collections::HashSet;

    let admin = format!("admin-{}", uuid::Uuid::now_v7().simple());
    let (mut vars, store): (Vec<(&str, String)>, std::sync::Arc<dyn hub_store::Store>) = match backend {
        Backend::Sqlite => {
            let db = temp_sqlite_path();
            let store = hub_store::SqliteStore::open(&db).await.expect("open the database");
            store.migrate().await.expect("migrate");
            (vec![("STREAMING_HUB_SQLITE_PATH", db.display().to_string())], std::sync::Arc::new(store))
        }
        Backend::Postgres => {
            let schema = fresh_schema().await;
            let store = hub_store::PgStore::connect(&postgres_dsn(), Some(&schema), 2).await.expect("connect");
            store.migrate().await.expect("migrate");
            let vars = vec![("STREAMING_HUB_POSTGRES_DSN", postgres_dsn()), ("STREAMING_HUB_POSTGRES_SCHEMA", schema)];
            (vars, std::sync::Arc::new(store))
        }
    };
    vars.extend([
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20".to_owned()),
        ("STREAMING_HUB_DISPATCH_LEASE", "3s".to_owned()),
        ("STREAMING_HUB_LEDGER_CHECKPOINT_INTERVAL", "100ms".to_owned()),
        ("STREAMING_HUB_RETRY_CURVE", "100ms,200ms,400ms,800ms,1s,1s,1s,1s,1s,1s".to_owned()),
    ]);
    // A receiver that takes ten at a time, 50 ms each, and refuses the rest: the burst is still
    // being delivered, failures and all, when the hub is killed.
    let receiver = Receiver::start(Script::Capacity(10, Duration::from_millis(50))).await;
    let hub = HubProcess::start(&vars).await;
    let (key, sub_id, _) = hub.verified_webhook(&admin, &receiver).await;
    const EVENTS: usize = 300;
    let mut ids = HashSet::new();
    for i in 0..EVENTS {
        let event = Event::new("t1").body(json!({"n": i}).to_string());
        ids.insert(event.id().to_string());
        hub.post_event(&key, &event).await;
    }
    // Mid-burst: some delivered, and some checkpoints signed.
    until("a third delivered", WAIT, async || (receiver.accepted_len() >= EVENTS / 3).then_some(())).await;
    until("a checkpoint of the burst", WAIT, async || {
        let c = store.latest_ledger_checkpoint("t1").await.expect("read").map_or(0, |c| c.size);
        (c > 3).then_some(())
    })
    .await;
    hub.kill();
    let signed_before = store.latest_ledger_checkpoint("t1").await.expect("read").expect("one").size;

    assert!(receiver.accepted_len() < EVENTS, "killed mid-burst");
    let hub = HubProcess::start(&vars).await;
    until("every event delivered after the restart", WAIT, async || {
        let got: HashSet<String> = receiver.accepted().iter().map(|d| d.header("x-lerian-event-id")).collect();
        ids.is_subset(&got).then_some(())
    })
    .await;
    // Jobs the killed hub had sent but not recorded are tried again once their leases expire:
    // the record is complete when no job is left open.
    let sub: uuid::Uuid = sub_id.parse().expect("uuid");
    until("every job finished", WAIT, async || {
        let jobs = store.list_jobs("t1", sub, None, None, 10_000).await.ok()?;
        jobs.iter().all(|j| j.state == hub_store::JobState::Succeeded).then_some(())
    })
    .await;
    // Sealed up to the head: what the restart recorded is covered too.
    let client = http_client();
    let export = until("the log sealed to its end", WAIT, async || {
        let text = client
            .get(format!("{}/v1/ledger/export", hub.base))
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let (code, said) = verify_cli(&text, None);
        (code == 0 && !said.contains("not covered")).then_some((text, said))
    })
    .await;
    let (text, said) = export;
    // One delivery entry per recorded attempt, none twice.
    let jobs = store.list_jobs("t1", sub, None, None, 10_000).await.expect("jobs");
    let attempts =
        store.attempts_for_jobs("t1", &jobs.iter().map(|j| j.id).collect::<Vec<_>>()).await.expect("attempts");
    let recorded: HashSet<String> = attempts.iter().map(|a| a.id.to_string()).collect();
    let mut entered = Vec::new();
    for line in text.lines() {
        let line: Value = serde_json::from_str(line).expect("a JSON line");
        if line["type"] == "entry" {
            let entry: Value = serde_json::from_str(line["data"].as_str().expect("data")).expect("entry");
            if entry["kind"] == "delivery" {
                entered.push(entry["delivery_id"].as_str().expect("id").to_owned());
            }
        }
    }
    assert_eq!(entered.len(), recorded.len(), "{said}");
    assert_eq!(entered.iter().cloned().collect::<HashSet<_>>(), recorded);
    // The checkpoints go on from the last one signed before the kill.
    let sizes: Vec<u64> = store
        .ledger_checkpoints("t1", 0, u64::MAX, 1_000_000)
        .await
        .expect("checkpoints")
        .iter()
        .map(|c| c.size)
        .collect();
    assert!(sizes.contains(&signed_before), "{signed_before} not in {sizes:?}");
    assert!(sizes.last().is_some_and(|last| *last > signed_before), "{sizes:?}");
    assert!(sizes.windows(2).all(|w| w[0] < w[1]));
    hub.kill();
}

crate::on_both_backends!(the_platform_log_and_a_key_rotation);

/// Changes no tenant owns go to the platform log, read by the admin only; a rotation of the
/// ledger key is itself recorded, both keys stay published, and an export signed by both verifies.
async fn the_platform_log_and_a_key_rotation(backend: Backend) {
    let hub = TestHub::start_with(backend, &[("STREAMING_HUB_LEDGER_CHECKPOINT_INTERVAL", "100ms")]).await;
    let key = hub.tenant_key("acme").await;
    let admin = |path: &str| hub.client.get(hub.url(path)).bearer_auth(&hub.admin);
    // An admin key made and revoked: platform changes.
    let (status, made) = hub
        .send(
            hub.client
                .post(hub.url("/admin/api-keys"))
                .bearer_auth(&hub.admin)
                .json(&json!({"admin": true, "name": "ops"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let made_id = made["id"].as_str().expect("id").to_owned();
    let (status, _) =
        hub.send(hub.client.delete(hub.url(&format!("/admin/api-keys/{made_id}"))).bearer_auth(&hub.admin)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // A checkpoint signed with the first key, then a rotation.
    until("a platform checkpoint", WAIT, async || {
        let (_, c) = hub.send(admin("/admin/ledger/checkpoints")).await;
        (c["items"][0]["size"].as_u64().unwrap_or(0) >= 2).then_some(())
    })
    .await;
    let (status, rotated) = hub.send(hub.client.post(hub.url("/admin/ledger/keys")).bearer_auth(&hub.admin)).await;
    assert_eq!(status, StatusCode::CREATED, "{rotated}");
    let keys = rotated["keys"].as_array().expect("keys").clone();
    assert_eq!(keys.len(), 2);
    assert!(keys[0]["retired_at"].is_string() && keys[1].get("retired_at").is_none(), "{rotated}");
    let (_, published) = hub.get(&key, "/.well-known/ledger-keys.json").await;
    assert_eq!(published["keys"].as_array().map(Vec::len), Some(2), "both keys stay published");

    // The platform's audit: newest first, with the admin as actor; the rotation is in it.
    let (_, audit) = hub.send(admin("/admin/audit")).await;
    let actions: Vec<&str> =
        audit["items"].as_array().unwrap().iter().map(|c| c["change"]["action"].as_str().unwrap()).collect();
    assert_eq!(&actions[..3], &["ledger_key.rotated", "api_key.revoked", "admin_key.created"], "{audit}");
    assert_eq!(audit["log"], "platform");
    assert_eq!(audit["items"][0]["actor_label"], "admin token");
    // A tenant reads neither the platform's log nor its audit.
    for path in ["/admin/ledger/entries", "/admin/audit", "/admin/ledger/export"] {
        let (status, _) = hub.get(&key, path).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }

    // Sealed again with the new key: the export holds checkpoints signed by each, and verifies.
    let text = until("a checkpoint signed with the new key", WAIT, async || {
        let text = admin("/admin/ledger/export").send().await.ok()?.text().await.ok()?;
        let new_kid = keys[1]["kid"].as_str().unwrap_or_default();
        text.contains(&format!("\"kid\":\"{new_kid}\"")).then_some(text)
    })
    .await;
    assert!(text.contains(&format!("\"kid\":\"{}\"", keys[0]["kid"].as_str().unwrap())));
    let (code, said) = verify_cli(&text, Some(&published));
    assert_eq!(code, 0, "{said}");
    assert!(said.starts_with("ok: platform:"), "{said}");
}

/// Retention (SQLite: row by row; PostgreSQL's whole months are the store suite's): once a log's
/// first entries are older than `STREAMING_HUB_LEDGER_RETENTION` they are gone, the entries page
/// says where the kept ones begin, asking for an entry or a tree below it answers 410 naming the
/// start, kept entries still prove against the signed tree, and the export (which begins with
/// the start's peaks) verifies offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_past_retention_go_and_the_rest_still_proves() {
    let hub = TestHub::start_with(
        Backend::Sqlite,
        &[
            ("STREAMING_HUB_LEDGER_CHECKPOINT_INTERVAL", "100ms"),
            ("STREAMING_HUB_LEDGER_RETENTION", "8s"),
            ("STREAMING_HUB_JOB_RETENTION", "1s"),
            ("STREAMING_HUB_EVENT_RETENTION", "1s"),
            ("STREAMING_HUB_PRUNE_INTERVAL", "200ms"),
        ],
    )
    .await;
    let key = hub.tenant_key("acme").await;
    let sub = hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/subscriptions/{id}");
    for n in 0..4 {
        let (status, _) = hub.patch_json(&key, &path, &json!({"name": format!("old {n}")})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let old = sealed(&hub, &key, 6).await;
    let dropped = old.len() as u64;

    // Past retention: the page begins after them.
    let start = until("the old entries past retention", WAIT, async || {
        let (_, page) = hub.get(&key, "/v1/ledger/entries").await;
        let start = page["start"].as_u64().unwrap_or(0);
        (start >= dropped).then_some(start)
    })
    .await;
    for n in 0..3 {
        let (status, _) = hub.patch_json(&key, &path, &json!({"name": format!("new {n}")})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (_, page) = hub.get(&key, "/v1/ledger/entries?from=0").await;
    let kept = page["items"].as_array().expect("items").clone();
    assert_eq!(kept[0]["index"].as_u64(), Some(start), "{page}");

    let (status, gone) = hub.get(&key, "/v1/ledger/entries/0").await;
    assert_eq!(status, StatusCode::GONE, "{gone}");
    assert!(gone["message"].as_str().unwrap_or_default().contains(&format!("begin at {start}")), "{gone}");
    let (status, gone) = hub.get(&key, "/v1/ledger/proof/inclusion?entry=1").await;
    assert_eq!(status, StatusCode::GONE, "{gone}");
    let (status, gone) = hub.get(&key, "/v1/ledger/proof/consistency?from=2").await;
    assert_eq!(status, StatusCode::GONE, "{gone}");

    // The newest kept entry proves in the signed tree.
    let text = until("the new changes sealed", WAIT, async || {
        let (_, latest) = hub.get(&key, "/v1/ledger/checkpoints").await;
        let size = latest["items"][0]["size"].as_u64().unwrap_or(0);
        (size >= start + 3).then_some(size)
    })
    .await;
    let last = text - 1;
    let (status, proof) = hub.get(&key, &format!("/v1/ledger/proof/inclusion?entry={last}&size={text}")).await;
    assert_eq!(status, StatusCode::OK, "{proof}");
    let root = hash(&proof["checkpoint"]["root"]);
    let leaf = leaf_hash(last, proof["entry"]["data"].as_str().expect("data").as_bytes());
    let path: Vec<Hash> = proof["proof"].as_array().expect("proof").iter().map(hash).collect();
    verify_inclusion(last, text, &leaf, &path, &root).expect("the kept entry proves");

    let exported = export(&hub, &key).await;
    let first: Value = exported
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .find(|l| l["type"] != "ledger" && l["type"] != "key")
        .expect("a line after the keys");
    assert_eq!(first["type"], "start", "{exported}");
    assert!(first["size"].as_u64().expect("size") >= start);
    let (code, said) = verify_cli(&exported, None);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("past retention"), "{said}");
}
