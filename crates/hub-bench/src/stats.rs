//! The `stats` scenario: what the per-minute statistics behind `GET /v1/subscriptions/{id}/stats`
//! cost delivery. A burst to one webhook, then: the hub's CPU per delivered event, the rows the
//! roll-up left in `subscription_minutes` per event, and, in process, what noting one recorded
//! attempt costs — against the hub's CPU per event.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{BenchHub, Receiver, f0, report};
use crate::scenarios::{PATIENCE, cpu_json, cpu_rows};

/// Notes timed in process.
const ROUNDS: u32 = 200_000;

/// Nanoseconds to note one recorded attempt in the roll-up.
fn note_cost() -> f64 {
    use hub_store::{AttemptRecord, AttemptResult, HealthChange, JobTransition};
    let rollup = streaming_hub::testing::Rollup::default();
    let now = chrono::Utc::now();
    let result = AttemptResult {
        token: uuid::Uuid::now_v7(),
        record: AttemptRecord {
            id: uuid::Uuid::now_v7(),
            job_id: uuid::Uuid::now_v7(),
            tenant_id: "stats".into(),
            subscription_id: uuid::Uuid::now_v7(),
            attempt: 1,
            started_at: now,
            latency_ms: 3,
            outcome: "delivered".into(),
            status_code: Some(204),
            error: None,
            response_body: None,
            ledger_index: None,
        },
        transition: JobTransition::Succeeded,
        health: HealthChange::Success,
        now,
        ledger: None,
    };
    let started = Instant::now();
    for _ in 0..ROUNDS {
        rollup.note(std::hint::black_box(&result), true);
    }
    started.elapsed().as_nanos() as f64 / f64::from(ROUNDS)
}

/// `stats`: a burst of `events` to one webhook; what the statistics add to it.
pub async fn stats(events: usize, producers: usize, json_out: &Path) -> anyhow::Result<()> {
    let note_ns = note_cost();
    let hub = BenchHub::start(None).await?;
    let receiver = Receiver::start().await?;
    let key = hub.tenant("stats").await?;
    let id = hub
        .subscribe_with(&key, json!({"name": "stats", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url("stats", false)}}))
        .await?;
    let who = [(key.clone(), "stats".to_owned())];
    hub.post_many(&who, 100, producers).await?;
    anyhow::ensure!(receiver.wait_for("stats", 100, PATIENCE).await, "the warm-up was not delivered");
    receiver.take("stats");
    let before = hub.usage();
    let started = Instant::now();
    hub.post_many(&who, events, producers).await?;
    anyhow::ensure!(receiver.wait_for("stats", events, PATIENCE).await, "not every event was delivered");
    let took = started.elapsed();
    let spent = hub.usage().since(&before);
    // The roll-up is added every 5 s: wait for the last of it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let counted = loop {
        let n = hub.count("SELECT CAST(COALESCE(SUM(delivered), 0) AS BIGINT) FROM subscription_minutes").await?;
        if n >= (events + 100) as i64 || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let rows = hub.count("SELECT count(*) FROM subscription_minutes").await?;
    let minutes = took.as_secs_f64() / 60.0;
    let usage = hub.finish().await?;
    let (hub_ms, _) = spent.per_event_ms(events);
    let share = note_ns / (hub_ms * 1_000_000.0);
    let store = if usage.postgres_cpu_s > 0.0 { "postgres" } else { "sqlite" };
    let figures = json!({
        "scenario": "stats", "store": store, "events": events, "producers": producers, "subscription": id,
        "delivered_per_s": events as f64 / took.as_secs_f64(),
        "cpu_ms_per_event": cpu_json(&spent, events),
        "note_ns_per_attempt": note_ns, "note_share_of_hub_cpu": share,
        "rows": rows, "rows_per_event": rows as f64 / (events + 100) as f64, "attempts_counted": counted,
        "statements_per_minute_at_most": 60.0 / 5.0 + 60.0 / 15.0, "run_minutes": minutes,
    });
    let [hub_cpu, _, both] = cpu_rows(&spent, events);
    report(
        &format!("stats ({store}, {events} events of ~1 KiB to one webhook)"),
        &[
            ("delivered/s", f0(events as f64 / took.as_secs_f64())),
            ("hub CPU ms per event", hub_cpu.1),
            ("hub + PostgreSQL CPU ms per event", both.1),
            ("noting an attempt, ns (in process)", f0(note_ns)),
            ("… of the hub's CPU per event", format!("{:.3} %", share * 100.0)),
            ("rows in subscription_minutes", rows.to_string()),
            ("rows per event", format!("{:.5}", rows as f64 / (events + 100) as f64)),
            ("attempts counted / delivered", format!("{counted} / {}", events + 100)),
        ],
        figures,
        &usage,
        json_out,
    )
}
