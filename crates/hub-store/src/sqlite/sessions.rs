//! Portal sessions.

use super::{
    DateTime, Sessions, SqliteRow, SqliteStore, StoreResult, Utc, Uuid, async_trait, from_micros, micros, text,
    uuid_from_text,
};
use sqlx::Row;

use crate::{NewPortalSession, PortalSession};

const COLUMNS: &str = "id, tenant_id, scope, created_at, expires_at, exchanged_at, revoked_at";

fn session_from_row(r: &SqliteRow) -> StoreResult<PortalSession> {
    let at = |column: &str| -> StoreResult<Option<DateTime<Utc>>> {
        r.try_get::<Option<i64>, _>(column)?.map(from_micros).transpose()
    };
    Ok(PortalSession {
        id: uuid_from_text(&r.try_get::<String, _>("id")?)?,
        tenant_id: r.try_get("tenant_id")?,
        scope: r.try_get("scope")?,
        created_at: from_micros(r.try_get("created_at")?)?,
        expires_at: from_micros(r.try_get("expires_at")?)?,
        exchanged_at: at("exchanged_at")?,
        revoked_at: at("revoked_at")?,
    })
}

#[async_trait]
impl Sessions for SqliteStore {
    async fn create_portal_session(&self, new: &NewPortalSession) -> StoreResult<()> {
        let s = &new.session;
        sqlx::query(
            "INSERT INTO portal_sessions (id, tenant_id, scope, grant_hash, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .bind(text(s.id))
        .bind(&s.tenant_id)
        .bind(&s.scope)
        .bind(&new.grant_hash)
        .bind(micros(s.created_at))
        .bind(micros(s.expires_at))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn exchange_portal_grant(
        &self,
        grant_hash: &[u8],
        session_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<PortalSession>> {
        let row = sqlx::query(&format!(
            "UPDATE portal_sessions SET exchanged_at = ?3, session_hash = ?2
             WHERE grant_hash = ?1 AND exchanged_at IS NULL AND revoked_at IS NULL AND expires_at > ?3
             RETURNING {COLUMNS}"
        ))
        .bind(grant_hash)
        .bind(session_hash)
        .bind(micros(now))
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn portal_session(&self, session_hash: &[u8], now: DateTime<Utc>) -> StoreResult<Option<PortalSession>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM portal_sessions
             WHERE session_hash = ?1 AND revoked_at IS NULL AND expires_at > ?2"
        ))
        .bind(session_hash)
        .bind(micros(now))
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn revoke_portal_session(&self, id: Uuid, now: DateTime<Utc>) -> StoreResult<bool> {
        let n = sqlx::query(
            "UPDATE portal_sessions SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL AND expires_at > ?2",
        )
        .bind(text(id))
        .bind(micros(now))
        .execute(&self.writer)
        .await?
        .rows_affected();
        Ok(n == 1)
    }
}
