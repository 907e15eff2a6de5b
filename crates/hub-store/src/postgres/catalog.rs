//! The event catalog: manifest sources and the types seen in each inbox.

use super::{Catalog, DateTime, PgStore, StoreResult, Utc, async_trait};
use crate::sql;
use sqlx::Row;

use crate::{ManifestFetch, ManifestRecord, SeenType};

#[async_trait]
impl Catalog for PgStore {
    async fn claim_manifest_refresh(
        &self,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
        sources: &str,
    ) -> StoreResult<bool> {
        let moved = sqlx::query(sql::CLAIM_MANIFEST_REFRESH)
            .bind(now)
            .bind(next)
            .bind(sources)
            .execute(&self.pool)
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
                    .bind(sqlx::types::Json(schemas))
                    .bind(at)
                    .bind(sqlx::types::Json(problems))
                    .execute(&self.pool)
                    .await?;
            }
            ManifestFetch::Failed { error } => {
                sqlx::query(sql::MANIFEST_FAILED).bind(location).bind(at).bind(error).execute(&self.pool).await?;
            }
        }
        Ok(())
    }

    async fn forget_manifests_except(&self, locations: &[String]) -> StoreResult<u64> {
        Ok(sqlx::query("DELETE FROM manifests WHERE location <> ALL($1)")
            .bind(locations)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn manifests(&self) -> StoreResult<Vec<ManifestRecord>> {
        let rows = sqlx::query(sql::MANIFESTS).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                let schemas: sqlx::types::Json<serde_json::Map<String, serde_json::Value>> = r.try_get("schemas")?;
                let problems: sqlx::types::Json<Vec<serde_json::Value>> = r.try_get("problems")?;
                Ok(ManifestRecord {
                    location: r.try_get("location")?,
                    document: r.try_get("document")?,
                    schemas: schemas.0,
                    fetched_at: r.try_get("fetched_at")?,
                    checked_at: r.try_get("checked_at")?,
                    error: r.try_get("error")?,
                    problems: problems.0,
                })
            })
            .collect()
    }

    async fn record_seen_types(&self, seen: &[SeenType]) -> StoreResult<()> {
        if seen.is_empty() {
            return Ok(());
        }
        // Rows in key order, so that two replicas adding at once never wait on each other in a
        // circle.
        let mut seen = seen.to_vec();
        seen.sort_by(|a, b| {
            (&a.tenant_id, &a.source, &a.event_key, &a.schema_version).cmp(&(
                &b.tenant_id,
                &b.source,
                &b.event_key,
                &b.schema_version,
            ))
        });
        let seen = &seen;
        let text = |f: fn(&SeenType) -> &str| seen.iter().map(|s| f(s).to_owned()).collect::<Vec<String>>();
        sqlx::query(
            "INSERT INTO seen_event_types AS s
                 (tenant_id, source, event_key, schema_version, first_seen, last_seen, events)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[],
                                  $6::timestamptz[], $7::bigint[])
             ON CONFLICT (tenant_id, source, event_key, schema_version) DO UPDATE SET
                 first_seen = LEAST(s.first_seen, excluded.first_seen),
                 last_seen = GREATEST(s.last_seen, excluded.last_seen),
                 events = s.events + excluded.events",
        )
        .bind(text(|s| &s.tenant_id))
        .bind(text(|s| &s.source))
        .bind(text(|s| &s.event_key))
        .bind(text(|s| &s.schema_version))
        .bind(seen.iter().map(|s| s.first_seen).collect::<Vec<_>>())
        .bind(seen.iter().map(|s| s.last_seen).collect::<Vec<_>>())
        .bind(seen.iter().map(|s| s.events).collect::<Vec<_>>())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn seen_types(&self, tenant: Option<&str>) -> StoreResult<Vec<SeenType>> {
        let rows = sqlx::query(
            "SELECT tenant_id, source, event_key, schema_version, first_seen, last_seen, events
             FROM seen_event_types WHERE $1::text IS NULL OR tenant_id = $1
             ORDER BY event_key, source, schema_version, tenant_id",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SeenType {
                    tenant_id: r.try_get("tenant_id")?,
                    source: r.try_get("source")?,
                    event_key: r.try_get("event_key")?,
                    schema_version: r.try_get("schema_version")?,
                    first_seen: r.try_get("first_seen")?,
                    last_seen: r.try_get("last_seen")?,
                    events: r.try_get("events")?,
                })
            })
            .collect()
    }
}
