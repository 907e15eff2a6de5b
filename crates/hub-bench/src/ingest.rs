//! The `ingest` scenario: Kafka into the inbox, against PostgreSQL's own batched INSERT.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use streaming_hub::telemetry::metric;

use crate::harness::{self, BenchHub, BenchTopic, Broker, Db, f0, report};
use crate::scenarios::{PATIENCE, tenant_names};

/// `ingest`: events from Kafka into the inbox, against a plain batched `INSERT` of the same rows
/// into an identical table.
pub async fn ingest(events: usize, tenants: usize, partitions: i32, json_out: &Path) -> anyhow::Result<()> {
    let broker = Broker::start().await?;
    broker.create_topic(partitions).await?;
    let names = tenant_names("ingest", tenants);
    let produce = broker.produce(&names, partitions, events).await?;
    let broker_rate = events as f64 / broker.read_all(events).await?.as_secs_f64().max(1e-9);
    let hub = BenchHub::start(Some(&broker)).await?;
    let (first, last) = hub.wait_inbox(events as i64, PATIENCE).await?;
    // From the first stored event to the last: the consumer's group join is not ingest.
    let hub_rate = events as f64 / (last - first).as_secs_f64().max(1e-9);
    // The hub's own account of its writes: how long each took, and how much of the time between
    // the first event and the last the partitions spent writing.
    let (write_s, writes) = hub.histograms(&[metric::INGEST_WRITE_SECONDS]).await?[0];
    let write_ms = 1000.0 * write_s / writes.max(1.0);
    let busy = write_s / (last - first).as_secs_f64().max(1e-9) / f64::from(partitions.max(1));
    let batch = std::env::var("STREAMING_HUB_KAFKA_BATCH_SIZE").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let write_path = write_path(&hub, &names, partitions, events, batch).await?;
    let reference = reference_insert(&hub.db, &names, partitions, events, batch).await?;
    let ratio = hub_rate / reference;
    let store = hub.store_name();
    let figures = json!({
        "scenario": "ingest", "store": store, "events": events, "tenants": tenants, "partitions": partitions,
        "payload_bytes": harness::body(0).len(), "produce_s": produce.as_secs_f64(),
        "hub_events_per_s": hub_rate, "plain_insert_rows_per_s": reference, "ratio": ratio,
        "reference_batch": batch, "broker_read_per_s": broker_rate,
        "write_path_events_per_s": write_path, "write_path_ratio": write_path / reference,
        "hub_timing": json!({ "writes": writes, "write_mean_ms": write_ms, "partitions_writing": busy }),
    });
    let usage = hub.finish().await?;
    report(
        &format!("ingest ({store}, {events} events of ~1 KiB, {tenants} tenants, {partitions} partitions, Kafka)"),
        &[
            ("hub ingest events/s", f0(hub_rate)),
            ("plain batched INSERT rows/s", f0(reference)),
            ("ratio", format!("{:.0} %", ratio * 100.0)),
            ("broker read events/s (plain consumer)", f0(broker_rate)),
            ("hub write path events/s", f0(write_path)),
            ("write path / plain INSERT", format!("{:.0} %", write_path / reference * 100.0)),
            ("hub: writes, mean ms", format!("{writes}, {}", harness::f1(write_ms))),
            ("hub: share of the time each partition was writing", format!("{:.0} %", busy * 100.0)),
        ],
        figures,
        &usage,
        json_out,
    )
}

/// The consumer's write path without the broker: records like the produced ones, judged and
/// written by the Kafka writer in batches of `batch`, one writer per partition at once (as the
/// consumer runs them); returns events per second.
async fn write_path(
    hub: &BenchHub,
    tenants: &[String],
    partitions: i32,
    n: usize,
    batch: usize,
) -> anyhow::Result<f64> {
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};
    use streaming_hub::testing::kafka::BatchWriter;
    // The write path runs here, on the hub's database, while the hub process is idle.
    let store = streaming_hub::open_store(&hub.config, false).await?;
    let writer = streaming_hub::testing::KafkaEvents {
        catalog: Arc::new(streaming_hub::testing::EventCatalog::new(Arc::clone(&store), hub.config.validate_payloads)),
        store,
        policy: Arc::new(hub_core::IngestPolicy::default()),
        clock: Arc::new(streaming_hub::testing::SystemClock),
        wake: Arc::new(tokio::sync::Notify::new()),
        fast: None,
    };
    let mut per_partition: Vec<Vec<OwnedMessage>> = vec![Vec::new(); partitions.max(1) as usize];
    let count = per_partition.len();
    for i in 0..n {
        let partition = i % count;
        let mut headers = OwnedHeaders::new();
        for (k, v) in &harness::ce_headers(&tenants[i % tenants.len()]) {
            headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        per_partition[partition].push(OwnedMessage::new(
            Some(harness::body(harness::now_us()).into_bytes()),
            None,
            harness::TOPIC.to_owned(),
            Timestamp::NotAvailable,
            partition as i32,
            (i / count) as i64,
            Some(headers),
        ));
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for records in per_partition {
        let writer = writer.clone();
        tasks.spawn(async move {
            for chunk in records.chunks(batch.max(1)) {
                writer.write(chunk).await.map_err(anyhow::Error::msg)?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let secs = started.elapsed().as_secs_f64();
    let stored = hub.inbox_count().await?;
    anyhow::ensure!(stored >= 2 * n as i64, "the write path stored {} of {n} events", stored - n as i64);
    Ok(n as f64 / secs)
}

/// Inserts rows shaped like the ingested events into a copy of the events table, `batch` rows
/// per statement and transaction, from one connection; returns rows per second.
async fn reference_insert(db: &Db, tenants: &[String], partitions: i32, n: usize, batch: usize) -> anyhow::Result<f64> {
    let mut seqs = vec![0i64; tenants.len()];
    let rows: Vec<(String, i64, uuid::Uuid, Vec<u8>, i32, i64)> = (0..n)
        .map(|i| {
            let t = i % tenants.len();
            seqs[t] += 1;
            let partition = (i % partitions.max(1) as usize) as i32;
            (
                tenants[t].clone(),
                seqs[t],
                uuid::Uuid::now_v7(),
                harness::body(harness::now_us()).into_bytes(),
                partition,
                i as i64,
            )
        })
        .collect();
    let now = chrono::Utc::now();
    let time = now.to_rfc3339();
    match db {
        Db::Postgres { pool, schema } => {
            sqlx::query(&format!("CREATE TABLE {schema}.bench_reference (LIKE {schema}.events_default INCLUDING ALL)"))
                .execute(pool)
                .await?;
            let sql = format!(
                "INSERT INTO {schema}.bench_reference (tenant_id, seq, ce_id, source, ce_type, resource_type,
                    event_type, event_time, schema_version, extensions, payload, origin, kafka_topic,
                    kafka_partition, kafka_offset, received_at)
                 SELECT t.tenant_id, t.seq, t.ce_id, 'bench', 'studio.lerian.bench.payment.settled', 'payment',
                    'settled', $4, '1.0.0', '{{}}'::jsonb, t.payload, 'kafka', $5, t.kafka_partition,
                    t.kafka_offset, $6
                 FROM UNNEST($1::text[], $2::bigint[], $3::uuid[], $7::bytea[], $8::int[], $9::bigint[])
                 AS t(tenant_id, seq, ce_id, payload, kafka_partition, kafka_offset)"
            );
            let started = Instant::now();
            for chunk in rows.chunks(batch.max(1)) {
                sqlx::query(&sql)
                    .bind(chunk.iter().map(|r| r.0.clone()).collect::<Vec<_>>())
                    .bind(chunk.iter().map(|r| r.1).collect::<Vec<_>>())
                    .bind(chunk.iter().map(|r| r.2).collect::<Vec<_>>())
                    .bind(&time)
                    .bind(harness::TOPIC)
                    .bind(now)
                    .bind(chunk.iter().map(|r| r.3.clone()).collect::<Vec<_>>())
                    .bind(chunk.iter().map(|r| r.4).collect::<Vec<_>>())
                    .bind(chunk.iter().map(|r| r.5).collect::<Vec<_>>())
                    .execute(pool)
                    .await?;
            }
            Ok(n as f64 / started.elapsed().as_secs_f64())
        }
        Db::Sqlite { path } => {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(30));
            let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
            let ddl: Vec<String> = sqlx::query_scalar(
                "SELECT sql FROM sqlite_master WHERE tbl_name = 'events' AND sql IS NOT NULL ORDER BY type DESC",
            )
            .fetch_all(&pool)
            .await?;
            for statement in ddl {
                let statement = statement
                    .replacen("CREATE TABLE events", "CREATE TABLE bench_reference", 1)
                    .replacen("INDEX events_", "INDEX bench_reference_", 1)
                    .replacen(" ON events ", " ON bench_reference ", 1);
                sqlx::query(&statement).execute(&pool).await?;
            }
            let received = now.timestamp_micros();
            let started = Instant::now();
            for chunk in rows.chunks(batch.max(1)) {
                let mut tx = pool.begin().await?;
                for r in chunk {
                    sqlx::query(
                        "INSERT INTO bench_reference (tenant_id, seq, ce_id, source, ce_type, resource_type,
                            event_type, event_time, schema_version, extensions, payload, origin, kafka_topic,
                            kafka_partition, kafka_offset, received_at)
                         VALUES (?1, ?2, ?3, 'bench', 'studio.lerian.bench.payment.settled', 'payment', 'settled',
                            ?4, '1.0.0', '{}', ?5, 'kafka', ?6, ?7, ?8, ?9)",
                    )
                    .bind(&r.0)
                    .bind(r.1)
                    .bind(r.2.to_string())
                    .bind(&time)
                    .bind(&r.3)
                    .bind(harness::TOPIC)
                    .bind(r.4)
                    .bind(r.5)
                    .bind(received)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
            }
            Ok(n as f64 / started.elapsed().as_secs_f64())
        }
    }
}
