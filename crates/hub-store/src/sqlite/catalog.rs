//! The event catalog: manifest sources and the types seen in each inbox.

use super::{Catalog, DateTime, SqliteStore, StoreResult, Utc, async_trait, from_micros, json, micros, to_json};
use crate::sql;
use sqlx::Row;

use crate::{ManifestFetch, ManifestRecord, SeenType};

#[async_trait]
impl Catalog for SqliteStore {
    async fn claim_manifest_refresh(
        &self,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
        sources: &str,
    ) -> StoreResult<bool> {
        let moved = sqlx::query(sql::CLAIM_MANIFEST_REFRESH)
            .bind(micros(now))
            .bind(micros(next))
            .bind(sources)
            .execute(&self.writer)
            .await?
            .rows_affected();
        Ok(moved == 1)
    }

    async fn save_manifest(&self, location: &str, fetch: &ManifestFetch, at: DateTime<Utc>) -> StoreResult<()> {
        match fetch {
            ManifestFetch::Fetched { document, schemas, problems } => {
                sqlx::query(sql::SAVE_MANIFEST)
                    .bind(location)
                    .bind(document)
                    .bind(to_json(schemas)?)
                    .bind(micros(at))
                    .bind(to_json(problems)?)
                    .execute(&self.writer)
                    .await?;
            }
            ManifestFetch::Failed { error } => {
                sqlx::query(sql::MANIFEST_FAILED)
                    .bind(location)
                    .bind(micros(at))
                    .bind(error)
                    .execute(&self.writer)
                    .await?;
            }
        }
        Ok(())
    }

    async fn forget_manifests_except(&self, locations: &[String]) -> StoreResult<u64> {
        let keep = to_json(&locations)?;
        Ok(sqlx::query("DELETE FROM manifests WHERE location NOT IN (SELECT value FROM json_each(?1))")
            .bind(keep)
            .execute(&self.writer)
            .await?
            .rows_affected())
    }

    async fn manifests(&self) -> StoreResult<Vec<ManifestRecord>> {
        let rows = sqlx::query(sql::MANIFESTS).fetch_all(&self.reader).await?;
        rows.iter()
            .map(|r| {
                Ok(ManifestRecord {
                    location: r.try_get("location")?,
                    document: r.try_get("document")?,
                    schemas: json("schemas", &r.try_get::<String, _>("schemas")?)?,
                    fetched_at: r.try_get::<Option<i64>, _>("fetched_at")?.map(from_micros).transpose()?,
                    checked_at: from_micros(r.try_get("checked_at")?)?,
                    error: r.try_get("error")?,
                    problems: json("problems", &r.try_get::<String, _>("problems")?)?,
                })
            })
            .collect()
    }

    async fn record_seen_types(&self, seen: &[SeenType]) -> StoreResult<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for s in seen {
            sqlx::query(
                "INSERT INTO seen_event_types
                     (tenant_id, source, event_key, schema_version, first_seen, last_seen, events)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (tenant_id, source, event_key, schema_version) DO UPDATE SET
                     first_seen = min(first_seen, excluded.first_seen),
                     last_seen = max(last_seen, excluded.last_seen),
                     events = events + excluded.events",
            )
            .bind(&s.tenant_id)
            .bind(&s.source)
            .bind(&s.event_key)
            .bind(&s.schema_version)
            .bind(micros(s.first_seen))
            .bind(micros(s.last_seen))
            .bind(s.events)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn seen_types(&self, tenant: Option<&str>) -> StoreResult<Vec<SeenType>> {
        let rows = sqlx::query(
            "SELECT tenant_id, source, event_key, schema_version, first_seen, last_seen, events
             FROM seen_event_types WHERE ?1 IS NULL OR tenant_id = ?1
             ORDER BY event_key, source, schema_version, tenant_id",
        )
        .bind(tenant)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SeenType {
                    tenant_id: r.try_get("tenant_id")?,
                    source: r.try_get("source")?,
                    event_key: r.try_get("event_key")?,
                    schema_version: r.try_get("schema_version")?,
                    first_seen: from_micros(r.try_get("first_seen")?)?,
                    last_seen: from_micros(r.try_get("last_seen")?)?,
                    events: r.try_get("events")?,
                })
            })
            .collect()
    }
}
