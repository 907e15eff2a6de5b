//! The hub's signing keys: the OIDC issuer's, and (the same shape) the ledger's.

use super::{DateTime, IssuerKeys, SqliteStore, StoreResult, Utc, async_trait, from_micros, micros, uuid_from_text};
use crate::sql;
use sqlx::Row;

use crate::IssuerKeyRecord;

/// The signing keys kept in `table` (`issuer_keys`, `ledger_keys`: the same shape), oldest first.
pub(super) async fn keys_in(store: &SqliteStore, table: &'static str) -> StoreResult<Vec<IssuerKeyRecord>> {
    let rows =
        sqlx::query(&format!("SELECT kid, sealed_key, created_at, retired_at FROM {table} ORDER BY created_at, kid"))
            .fetch_all(&store.reader)
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

/// Adds a key to `table`; with `retire_others`, the ones signing until now are retired then, in
/// the same transaction.
pub(super) async fn add_key_to(
    store: &SqliteStore,
    table: &'static str,
    key: &IssuerKeyRecord,
    retire_others: Option<DateTime<Utc>>,
) -> StoreResult<()> {
    let mut tx = store.begin_write().await?;
    if let Some(at) = retire_others {
        sqlx::query(&format!("UPDATE {table} SET retired_at = ?1 WHERE retired_at IS NULL"))
            .bind(micros(at))
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query(&format!("INSERT INTO {table} (kid, sealed_key, created_at, retired_at) VALUES (?1, ?2, ?3, ?4)"))
        .bind(key.kid.to_string())
        .bind(&key.sealed_key)
        .bind(micros(key.created_at))
        .bind(key.retired_at.map(micros))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

#[async_trait]
impl IssuerKeys for SqliteStore {
    async fn issuer_keys(&self) -> StoreResult<Vec<IssuerKeyRecord>> {
        keys_in(self, "issuer_keys").await
    }

    async fn add_issuer_key(&self, key: &IssuerKeyRecord, retire_others: Option<DateTime<Utc>>) -> StoreResult<()> {
        add_key_to(self, "issuer_keys", key, retire_others).await
    }

    async fn drop_issuer_keys(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let n = sqlx::query(sql::DROP_ISSUER_KEYS).bind(micros(before)).execute(&self.writer).await?.rows_affected();
        Ok(n)
    }
}
