//! The `catalog` scenario: what the event catalog costs ingest. The same HTTP load runs on a
//! fresh hub with payload checking `off`, `warn` and `quarantine` against a manifest declaring
//! the benchmark event with a JSON Schema of about 2 KiB (every event satisfies it, so each run
//! writes the same rows); learning types runs in every mode. Beside the runs, the in-process
//! cost per event of noting a written event's type and of checking its body.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{self, BenchHub, Usage, f0, report};
use crate::scenarios::{cpu_json, cpu_rows};

/// The benchmark event's schema: about 2 KiB, which the benchmark body satisfies.
pub fn schema() -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("sent_at_us".into(), json!({"type": "integer", "minimum": 0}));
    properties.insert("filler".into(), json!({"type": "string", "minLength": 1, "maxLength": 4096}));
    for i in 0..24 {
        properties.insert(
            format!("optional_{i:02}"),
            json!({"type": "string", "maxLength": 64, "pattern": "^[A-Za-z0-9 _-]*$"}),
        );
    }
    json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
           "required": ["sent_at_us", "filler"], "properties": properties})
}

fn manifest() -> Value {
    json!({"version": "1.0", "publisher": {"serviceName": "bench-api", "source": harness::SOURCE},
           "topic": harness::TOPIC,
           "events": [{"resourceType": "payment", "eventType": "settled", "schemaVersion": "1.0.0",
                       "dataContentType": "application/json", "description": "A payment settled.",
                       "class": "fact", "dataSchema": schema()}]})
}

/// Repetitions of each in-process measurement.
const ROUNDS: u32 = 100_000;

/// In-process cost per event in ns: noting a written event's type (the learner), and checking a
/// body against the compiled schema (JSON parse included).
fn in_process_cost() -> anyhow::Result<(f64, f64)> {
    use hub_store::{AcceptedEvent, IngestRecord, Origin, WriteOutcome};
    let headers = harness::ce_headers("catalog");
    let body = harness::body(harness::now_us());
    let hub_core::Verdict::Accept(envelope) =
        hub_core::judge(headers.iter().map(|(k, v)| (*k, v.as_str())), body.as_bytes(), None, &Default::default())
    else {
        anyhow::bail!("the benchmark event was not accepted");
    };
    let record = IngestRecord::Accepted(AcceptedEvent {
        envelope: (*envelope).clone(),
        payload: body.clone().into_bytes(),
        origin: Origin::Http,
        received_at: chrono::Utc::now(),
        trace: None,
    });
    let learner = streaming_hub::testing::Learner::default();
    let (records, outcomes) = (vec![record], vec![WriteOutcome::Inserted { seq: 1 }]);
    let started = Instant::now();
    for _ in 0..ROUNDS {
        learner.note(std::hint::black_box(&records), &outcomes);
    }
    let note_ns = started.elapsed().as_nanos() as f64 / f64::from(ROUNDS);

    let payloads = streaming_hub::testing::payloads::Payloads::new(streaming_hub::testing::payloads::Mode::Quarantine);
    let validator = payloads.compile(&schema()).map_err(|e| anyhow::anyhow!(e))?;
    let mut table = streaming_hub::testing::payloads::Table::new();
    table.insert(
        (harness::SOURCE.to_owned(), "payment.settled".to_owned()),
        vec![streaming_hub::testing::payloads::Rule { schema_version: Some("1.0.0".into()), validator }],
    );
    payloads.install(table);
    anyhow::ensure!(payloads.check(&envelope, body.as_bytes()).is_none(), "the benchmark body must satisfy its schema");
    let started = Instant::now();
    for _ in 0..ROUNDS {
        std::hint::black_box(payloads.check(&envelope, std::hint::black_box(body.as_bytes())));
    }
    let check_ns = started.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
    Ok((note_ns, check_ns))
}

struct Run {
    accepted_per_s: f64,
    spent: Usage,
    usage: Usage,
}

async fn run(mode: &str, manifest: &Path, events: usize, producers: usize) -> anyhow::Result<Run> {
    let hub = BenchHub::start_with(
        None,
        &[
            ("STREAMING_HUB_MANIFEST_SOURCES", format!("file:{}", manifest.display())),
            ("STREAMING_HUB_VALIDATE_PAYLOADS", mode.to_owned()),
        ],
    )
    .await?;
    // The catalog is read before the load starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = hub.admin_get("/admin/event-types").await?;
        if all["manifests"][0]["fetched_at"].is_string() {
            anyhow::ensure!(all["manifests"][0]["problems"] == json!([]), "the schema is not usable: {all}");
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the manifest was not read within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let key = hub.tenant("catalog").await?;
    let who = [(key, "catalog".to_owned())];
    hub.post_many(&who, 500, producers).await?;
    let before = hub.usage();
    let took = hub.post_many(&who, events, producers).await?;
    let spent = hub.usage().since(&before);
    anyhow::ensure!(hub.inbox_count().await? == (events + 500) as i64, "{mode}: not every event was accepted");
    let usage = hub.finish().await?;
    Ok(Run { accepted_per_s: events as f64 / took.as_secs_f64(), spent, usage })
}

/// `catalog`: HTTP ingest throughput and CPU with payload checking off, warn and quarantine.
pub async fn catalog(events: usize, producers: usize, json_out: &Path) -> anyhow::Result<()> {
    let (note_ns, check_ns) = in_process_cost()?;
    let file = std::env::temp_dir().join(format!("bench-manifest-{}.json", uuid::Uuid::now_v7().simple()));
    std::fs::write(&file, manifest().to_string())?;
    let schema_bytes = schema().to_string().len();
    let off = run("off", &file, events, producers).await?;
    let warn = run("warn", &file, events, producers).await?;
    let quarantine = run("quarantine", &file, events, producers).await?;
    let _ = std::fs::remove_file(&file);
    let store = if off.usage.postgres_cpu_s > 0.0 { "postgres" } else { "sqlite" };
    let run_json = |r: &Run| {
        json!({"accepted_per_s": r.accepted_per_s, "ratio_to_off": r.accepted_per_s / off.accepted_per_s,
               "cpu_ms_per_event": cpu_json(&r.spent, events)})
    };
    let figures = json!({
        "scenario": "catalog", "store": store, "events": events, "producers": producers, "schema_bytes": schema_bytes,
        "off": run_json(&off), "warn": run_json(&warn), "quarantine": run_json(&quarantine),
        "in_process_ns_per_event": {"learn": note_ns, "check": check_ns},
    });
    let [off_hub, _, off_both] = cpu_rows(&off.spent, events);
    let [warn_hub, _, _] = cpu_rows(&warn.spent, events);
    let [quarantine_hub, _, quarantine_both] = cpu_rows(&quarantine.spent, events);
    report(
        &format!(
            "catalog ({store}, {events} events of ~1 KiB over HTTP, a {schema_bytes}-byte schema every event satisfies)"
        ),
        &[
            ("accepted/s, checks off", f0(off.accepted_per_s)),
            ("accepted/s, warn", f0(warn.accepted_per_s)),
            ("accepted/s, quarantine", f0(quarantine.accepted_per_s)),
            ("quarantine / off", format!("{:.1} %", quarantine.accepted_per_s / off.accepted_per_s * 100.0)),
            ("off: hub CPU ms per event", off_hub.1),
            ("warn: hub CPU ms per event", warn_hub.1),
            ("quarantine: hub CPU ms per event", quarantine_hub.1),
            ("off: hub + PostgreSQL CPU ms/event", off_both.1),
            ("quarantine: hub + PostgreSQL CPU ms/event", quarantine_both.1),
            ("learning a type, ns/event (in process)", f0(note_ns)),
            ("checking a body, ns/event (in process)", f0(check_ns)),
        ],
        figures,
        &quarantine.usage,
        json_out,
    )
}
