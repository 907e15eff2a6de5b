//! Portal sessions and people's console sessions.

use super::{
    DateTime, Sessions, SqliteRow, SqliteStore, StoreResult, Utc, Uuid, async_trait, from_micros, micros, text,
    uuid_from_text,
};
use crate::sql;
use sqlx::Row;

use crate::{NewPortalSession, PersonSession, PortalSession};

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
        sqlx::query(sql::CREATE_PORTAL_SESSION)
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
        let row = sqlx::query(sql::EXCHANGE_PORTAL_GRANT)
            .bind(grant_hash)
            .bind(session_hash)
            .bind(micros(now))
            .fetch_optional(&self.writer)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn portal_session(&self, session_hash: &[u8], now: DateTime<Utc>) -> StoreResult<Option<PortalSession>> {
        let row =
            sqlx::query(sql::PORTAL_SESSION).bind(session_hash).bind(micros(now)).fetch_optional(&self.reader).await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn revoke_portal_session(&self, id: Uuid, now: DateTime<Utc>) -> StoreResult<bool> {
        let n = sqlx::query(sql::REVOKE_PORTAL_SESSION)
            .bind(text(id))
            .bind(micros(now))
            .execute(&self.writer)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    async fn create_person_session(&self, session: &PersonSession, session_hash: &[u8]) -> StoreResult<()> {
        sqlx::query(sql::CREATE_PERSON_SESSION)
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
        let row =
            sqlx::query(sql::PERSON_SESSION).bind(session_hash).bind(micros(now)).fetch_optional(&self.reader).await?;
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
        let n = sqlx::query(sql::END_PERSON_SESSION).bind(session_hash).execute(&self.writer).await?.rows_affected();
        Ok(n == 1)
    }
}
