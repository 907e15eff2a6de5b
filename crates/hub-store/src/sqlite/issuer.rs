//! The hub's OIDC signing keys.

use super::{DateTime, IssuerKeys, SqliteStore, StoreResult, Utc, async_trait, from_micros, micros, uuid_from_text};
use sqlx::Row;

use crate::IssuerKeyRecord;

#[async_trait]
impl IssuerKeys for SqliteStore {
    async fn issuer_keys(&self) -> StoreResult<Vec<IssuerKeyRecord>> {
        let rows =
            sqlx::query("SELECT kid, sealed_key, created_at, retired_at FROM issuer_keys ORDER BY created_at, kid")
                .fetch_all(&self.reader)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(IssuerKeyRecord {
                    kid: uuid_from_text(&r.try_get::<String, _>("kid")?)?,
                    sealed_key: r.try_get("sealed_key")?,
                    created_at: from_micros(r.try_get("created_at")?)?,
                    retired_at: r.try_get::<Option<i64>, _>("retired_at")?.map(from_micros).transpose()?,
                })
            })
            .collect()
    }

    async fn add_issuer_key(&self, key: &IssuerKeyRecord, retire_others: Option<DateTime<Utc>>) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        if let Some(at) = retire_others {
            sqlx::query("UPDATE issuer_keys SET retired_at = ?1 WHERE retired_at IS NULL")
                .bind(micros(at))
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("INSERT INTO issuer_keys (kid, sealed_key, created_at, retired_at) VALUES (?1, ?2, ?3, ?4)")
            .bind(key.kid.to_string())
            .bind(&key.sealed_key)
            .bind(micros(key.created_at))
            .bind(key.retired_at.map(micros))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn drop_issuer_keys(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let n = sqlx::query("DELETE FROM issuer_keys WHERE retired_at < ?1")
            .bind(micros(before))
            .execute(&self.writer)
            .await?
            .rows_affected();
        Ok(n)
    }
}
