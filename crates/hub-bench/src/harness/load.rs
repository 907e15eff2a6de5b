//! A tenant's history loaded straight into PostgreSQL with `COPY`, for the scenarios that need a
//! full inbox (`simulate`, `scale`).

use anyhow::Context;
use chrono::{DateTime, Utc};
use uuid::{NoContext, Timestamp, Uuid};

/// Loads `events` events of `tenant` (`payment.settled`, about 40 bytes of JSON each) received
/// evenly from `first` to `until` with one `COPY`, numbered from 1 on (the tenant's sequence set
/// past them), then analyses the inbox; event `i`'s subject is `customer-<i % 1000>`.
pub async fn load_history(
    pool: &sqlx::PgPool,
    schema: &str,
    tenant: &str,
    first: DateTime<Utc>,
    until: DateTime<Utc>,
    events: usize,
) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut conn = pool.acquire().await?;
    sqlx::query(&format!("SET search_path TO \"{schema}\"")).execute(&mut *conn).await?;
    let mut copy = conn
        .copy_in_raw(
            "COPY events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type, event_time, \
             schema_version, subject, extensions, payload, origin, received_at) FROM STDIN",
        )
        .await?;
    let span_us = (until - first).num_microseconds().context("span")?;
    let mut chunk = String::with_capacity(8 << 20);
    for i in 0..events {
        let at = first + chrono::Duration::microseconds(span_us * i as i64 / events as i64);
        let id = Uuid::new_v7(Timestamp::from_unix(
            NoContext,
            u64::try_from(at.timestamp()).context("before 1970")?,
            at.timestamp_subsec_nanos(),
        ));
        let body = format!(r#"{{"n":{i},"amount":{}}}"#, i % 997);
        let stamp = at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        write!(
            chunk,
            "{tenant}\t{}\t{id}\tbench\tstudio.lerian.bench.payment.settled\tpayment\tsettled\t{stamp}\t1.0.0\tcustomer-{}\t{{}}\t\\\\x",
            i + 1,
            i % 1000
        )?;
        for b in body.as_bytes() {
            write!(chunk, "{b:02x}")?;
        }
        writeln!(chunk, "\thttp\t{stamp}")?;
        if chunk.len() >= 4 << 20 {
            copy.send(chunk.as_bytes()).await?;
            chunk.clear();
        }
    }
    copy.send(chunk.as_bytes()).await?;
    copy.finish().await?;
    sqlx::query(
        "INSERT INTO tenant_sequences (tenant_id, last_seq) VALUES ($1, $2)
         ON CONFLICT (tenant_id) DO UPDATE SET last_seq = excluded.last_seq",
    )
    .bind(tenant)
    .bind(i64::try_from(events)?)
    .execute(&mut *conn)
    .await?;
    sqlx::query("ANALYZE events").execute(&mut *conn).await?;
    Ok(())
}

