//! The hub's OIDC signing keys.

use super::{DateTime, IssuerKeys, PgStore, StoreResult, Utc, async_trait};
use sqlx::Row;

use crate::IssuerKeyRecord;

#[async_trait]
impl IssuerKeys for PgStore {
    async fn issuer_keys(&self) -> StoreResult<Vec<IssuerKeyRecord>> {
        let rows =
            sqlx::query("SELECT kid, sealed_key, created_at, retired_at FROM issuer_keys ORDER BY created_at, kid")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(IssuerKeyRecord {
                    kid: r.try_get("kid")?,
                    sealed_key: r.try_get("sealed_key")?,
                    created_at: r.try_get("created_at")?,
                    retired_at: r.try_get("retired_at")?,
                })
            })
            .collect()
    }

    async fn add_issuer_key(&self, key: &IssuerKeyRecord, retire_others: Option<DateTime<Utc>>) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        if let Some(at) = retire_others {
            sqlx::query("UPDATE issuer_keys SET retired_at = $1 WHERE retired_at IS NULL")
                .bind(at)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("INSERT INTO issuer_keys (kid, sealed_key, created_at, retired_at) VALUES ($1, $2, $3, $4)")
            .bind(key.kid)
            .bind(&key.sealed_key)
            .bind(key.created_at)
            .bind(key.retired_at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn drop_issuer_keys(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let n = sqlx::query("DELETE FROM issuer_keys WHERE retired_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n)
    }
}
