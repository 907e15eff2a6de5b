//! The hub's signing keys: the OIDC issuer's, and (the same shape) the ledger's.

use super::{DateTime, IssuerKeys, PgStore, StoreResult, Utc, async_trait};
use crate::sql;
use sqlx::Row;

use crate::IssuerKeyRecord;

/// The signing keys kept in `table` (`issuer_keys`, `ledger_keys`: the same shape), oldest first.
pub(super) async fn keys_in(store: &PgStore, table: &'static str) -> StoreResult<Vec<IssuerKeyRecord>> {
    let rows =
        sqlx::query(&format!("SELECT kid, sealed_key, created_at, retired_at FROM {table} ORDER BY created_at, kid"))
            .fetch_all(&store.pool)
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

/// Adds a key to `table`; with `retire_others`, the ones signing until now are retired then, in
/// the same transaction.
pub(super) async fn add_key_to(
    store: &PgStore,
    table: &'static str,
    key: &IssuerKeyRecord,
    retire_others: Option<DateTime<Utc>>,
) -> StoreResult<()> {
    let mut tx = store.pool.begin().await?;
    if let Some(at) = retire_others {
        sqlx::query(&format!("UPDATE {table} SET retired_at = $1 WHERE retired_at IS NULL"))
            .bind(at)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query(&format!("INSERT INTO {table} (kid, sealed_key, created_at, retired_at) VALUES ($1, $2, $3, $4)"))
        .bind(key.kid)
        .bind(&key.sealed_key)
        .bind(key.created_at)
        .bind(key.retired_at)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

#[async_trait]
impl IssuerKeys for PgStore {
    async fn issuer_keys(&self) -> StoreResult<Vec<IssuerKeyRecord>> {
        keys_in(self, "issuer_keys").await
    }

    async fn add_issuer_key(&self, key: &IssuerKeyRecord, retire_others: Option<DateTime<Utc>>) -> StoreResult<()> {
        add_key_to(self, "issuer_keys", key, retire_others).await
    }

    async fn drop_issuer_keys(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let n = sqlx::query(sql::DROP_ISSUER_KEYS).bind(before).execute(&self.pool).await?.rows_affected();
        Ok(n)
    }
}
