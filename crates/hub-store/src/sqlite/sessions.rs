//! Portal sessions and people's console sessions.

use super::{
    DateTime, Sessions, SqliteRow, SqliteStore, StoreResult, Utc, Uuid, async_trait, from_micros, micros, text,
    uuid_from_text,
};
use sqlx::Row;

use crate::{NewPortalSession, PersonSession, PortalSession};

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

    async fn create_person_session(&self, session: &PersonSession, session_hash: &[u8]) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO person_sessions (id, session_hash, issuer, subject, roles, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .bind(text(session.id))
        .bind(session_hash)
        .bind(&session.issuer)
        .bind(&session.subject)
        .bind(serde_json::Value::from(session.roles.clone()).to_string())
        .bind(micros(session.created_at))
        .bind(micros(session.expires_at))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn person_session(&self, session_hash: &[u8], now: DateTime<Utc>) -> StoreResult<Option<PersonSession>> {
        let row = sqlx::query(
            "SELECT id, issuer, subject, roles, created_at, expires_at FROM person_sessions
             WHERE session_hash = ?1 AND expires_at > ?2",
        )
        .bind(session_hash)
        .bind(micros(now))
        .fetch_optional(&self.reader)
        .await?;
        row.map(|r| {
            Ok(PersonSession {
                id: uuid_from_text(&r.try_get::<String, _>("id")?)?,
                issuer: r.try_get("issuer")?,
                subject: r.try_get("subject")?,
                roles: serde_json::from_str(&r.try_get::<String, _>("roles")?)
                    .map_err(|_| crate::StoreError::Corrupt("a person session's roles are not a JSON list".into()))?,
                created_at: from_micros(r.try_get("created_at")?)?,
                expires_at: from_micros(r.try_get("expires_at")?)?,
            })
        })
        .transpose()
    }

    async fn end_person_session(&self, session_hash: &[u8]) -> StoreResult<bool> {
        let n = sqlx::query("DELETE FROM person_sessions WHERE session_hash = ?1")
            .bind(session_hash)
            .execute(&self.writer)
            .await?
            .rows_affected();
        Ok(n == 1)
    }
}
