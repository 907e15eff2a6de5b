//! A tenant's history loaded straight into PostgreSQL with `COPY`, for the scenarios that need a
//! full inbox (`simulate`, `scale`).

use anyhow::Context;
use chrono::{DateTime, Utc};
use uuid::{NoContext, Timestamp, Uuid};

/// A history to load: `events` events (`payment.settled`) received evenly from `first` to
/// `until`, given to `tenants` in turn, each body JSON of about `payload` bytes (a short one for 0), event `i`'s
/// subject `customer-<i % 1000>`.
pub struct History<'a> {
    pub tenants: &'a [&'a str],
    pub first: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub events: usize,
    pub payload: usize,
    pub origin: &'static str,
}

/// Loads a history with one `COPY` into the schema `schema` (the connection's own when `None`):
/// each tenant's events numbered on from its last seq (the hub's own events, such as a
/// subscription's creation, may be there already), its sequence row locked meanwhile (an ingest
/// of the tenant waits) and set past them.
pub async fn load_history(pool: &sqlx::PgPool, schema: Option<&str>, h: &History<'_>) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut conn = pool.begin().await?;
    if let Some(schema) = schema {
        sqlx::query(&format!("SET LOCAL search_path TO \"{schema}\"")).execute(&mut *conn).await?;
    }
    let mut seqs = Vec::with_capacity(h.tenants.len());
    for tenant in h.tenants {
        let last: i64 = sqlx::query_scalar(
            "INSERT INTO tenant_sequences AS s (tenant_id, last_seq) VALUES ($1, 0)
             ON CONFLICT (tenant_id) DO UPDATE SET last_seq = s.last_seq RETURNING s.last_seq",
        )
        .bind(tenant)
        .fetch_one(&mut *conn)
        .await?;
        seqs.push(last);
    }
    let mut copy = conn
        .copy_in_raw(
            "COPY events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type, event_time, \
             schema_version, subject, extensions, payload, origin, received_at) FROM STDIN",
        )
        .await?;
    let span_us = (h.until - h.first).num_microseconds().context("span")?;
    let pad = "x".repeat(h.payload.saturating_sub(48));
    let mut chunk = String::with_capacity(8 << 20);
    for i in 0..h.events {
        let at = h.first + chrono::Duration::microseconds(span_us * i as i64 / h.events as i64);
        let id = Uuid::new_v7(Timestamp::from_unix(
            NoContext,
            u64::try_from(at.timestamp()).context("before 1970")?,
            at.timestamp_subsec_nanos(),
        ));
        let t = i % h.tenants.len();
        seqs[t] += 1;
        let body = format!(r#"{{"n":{i:>12},"amount":{},"p":"{pad}"}}"#, i % 997);
        let stamp = at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        write!(
            chunk,
            "{}\t{}\t{id}\tbench\tstudio.lerian.bench.payment.settled\tpayment\tsettled\t{stamp}\t1.0.0\tcustomer-{}\t{{}}\t\\\\x",
            h.tenants[t],
            seqs[t],
            i % 1000
        )?;
        for b in body.as_bytes() {
            write!(chunk, "{b:02x}")?;
        }
        writeln!(chunk, "\t{}\t{stamp}", h.origin)?;
        if chunk.len() >= 4 << 20 {
            copy.send(chunk.as_bytes()).await?;
            chunk.clear();
        }
    }
    copy.send(chunk.as_bytes()).await?;
    copy.finish().await?;
    for (tenant, last) in h.tenants.iter().zip(seqs) {
        sqlx::query("UPDATE tenant_sequences SET last_seq = $2 WHERE tenant_id = $1")
            .bind(tenant)
            .bind(last)
            .execute(&mut *conn)
            .await?;
    }
    conn.commit().await?;
    Ok(())
}
