//! Portal sessions and people's console sessions.

use super::{DateTime, PgRow, PgStore, Sessions, StoreResult, Utc, Uuid, async_trait};
use crate::sql;
use sqlx::Row;

use crate::{NewPortalSession, PersonSession, PortalSession};

fn session_from_row(r: &PgRow) -> StoreResult<PortalSession> {
    Ok(PortalSession {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        scope: r.try_get("scope")?,
        created_at: r.try_get("created_at")?,
        expires_at: r.try_get("expires_at")?,
        exchanged_at: r.try_get("exchanged_at")?,
        revoked_at: r.try_get("revoked_at")?,
    })
}

#[async_trait]
impl Sessions for PgStore {
    async fn create_portal_session(&self, new: &NewPortalSession) -> StoreResult<()> {
        let s = &new.session;
        sqlx::query(sql::CREATE_PORTAL_SESSION)
            .bind(s.id)
            .bind(&s.tenant_id)
            .bind(&s.scope)
            .bind(&new.grant_hash)
            .bind(s.created_at)
            .bind(s.expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn exchange_portal_grant(
        &self,
        grant_hash: &[u8],
        session_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<PortalSession>> {
        let row = sqlx::query(sql::EXCHANGE_PORTAL_GRANT)
            .bind(grant_hash)
            .bind(session_hash)
            .bind(now)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn portal_session(&self, session_hash: &[u8], now: DateTime<Utc>) -> StoreResult<Option<PortalSession>> {
        let row = sqlx::query(sql::PORTAL_SESSION).bind(session_hash).bind(now).fetch_optional(&self.pool).await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn revoke_portal_session(&self, id: Uuid, now: DateTime<Utc>) -> StoreResult<bool> {
        let n = sqlx::query(sql::REVOKE_PORTAL_SESSION).bind(id).bind(now).execute(&self.pool).await?.rows_affected();
        Ok(n == 1)
    }

    async fn create_person_session(&self, session: &PersonSession, session_hash: &[u8]) -> StoreResult<()> {
        sqlx::query(sql::CREATE_PERSON_SESSION)
            .bind(session.id)
            .bind(session_hash)
            .bind(&session.issuer)
            .bind(&session.subject)
            .bind(serde_json::Value::from(session.roles.clone()).to_string())
            .bind(session.created_at)
            .bind(session.expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn person_session(&self, session_hash: &[u8], now: DateTime<Utc>) -> StoreResult<Option<PersonSession>> {
        let row = sqlx::query(sql::PERSON_SESSION).bind(session_hash).bind(now).fetch_optional(&self.pool).await?;
        row.map(|r| {
            Ok(PersonSession {
                id: r.try_get("id")?,
                issuer: r.try_get("issuer")?,
                subject: r.try_get("subject")?,
                roles: serde_json::from_str(&r.try_get::<String, _>("roles")?)
                    .map_err(|_| crate::StoreError::Corrupt("a person session's roles are not a JSON list".into()))?,
                created_at: r.try_get("created_at")?,
                expires_at: r.try_get("expires_at")?,
            })
        })
        .transpose()
    }

    async fn end_person_session(&self, session_hash: &[u8]) -> StoreResult<bool> {
        let n = sqlx::query(sql::END_PERSON_SESSION).bind(session_hash).execute(&self.pool).await?.rows_affected();
        Ok(n == 1)
    }
}
