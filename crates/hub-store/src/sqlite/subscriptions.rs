//! Subscriptions: creation, reads, and the intent-level changes that each write only their own columns.

use super::{
    SUBSCRIPTION_COLUMNS, SqliteStore, StoreError, StoreResult, SubscriptionRecord, Subscriptions, Utc, Uuid,
    async_trait, bind_subscription, micros, subscription_from_row, text, to_json,
};

use crate::model::PatchColumns;
use crate::sql;
use crate::{SecretRotation, SubscriptionPatch, VerificationResult};

#[async_trait]
impl Subscriptions for SqliteStore {
    async fn create_subscription(&self, sub: &SubscriptionRecord) -> StoreResult<()> {
        self.create_subscription_within(sub, u32::MAX).await.map(|_| ())
    }

    async fn create_subscription_within(&self, sub: &SubscriptionRecord, max: u32) -> StoreResult<bool> {
        // The write transaction is the database's one writer: the count is the one the insert
        // lands on.
        let mut tx = self.begin_write().await?;
        let count: i64 =
            sqlx::query_scalar(sql::CREATE_SUBSCRIPTION_WITHIN).bind(&sub.tenant_id).fetch_one(&mut *tx).await?;
        if count >= i64::from(max) {
            return Ok(false);
        }
        let insert = sqlx::query(
            "INSERT INTO subscriptions (tenant_id, id, name, event_types, origin, sink_type, sink_config,
                signing_secret, previous_secret, previous_secret_expires_at, credentials, enabled,
                verification_state, verification_error, disabled_reason, updated_at, failing_since,
                last_failure_at, pull_cursor, created_at, disabled_at, filters, ordering, limits, allowed_rate, transform, pace_bucket)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27)",
        );
        bind_subscription(insert, sub)?
            .bind(sub.pull_cursor)
            .bind(micros(sub.created_at))
            .bind(sub.disabled_at.map(micros))
            .bind(sub.filters.to_string())
            .bind(sub.ordering.as_str())
            .bind(sub.limits.to_json().to_string())
            .bind(sub.allowed_rate)
            .bind(sub.transform.as_ref().map(serde_json::Value::to_string))
            .bind(sub.pace_bucket)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn subscription(&self, tenant: &str, id: Uuid) -> StoreResult<Option<SubscriptionRecord>> {
        let sql = format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE tenant_id = ?1 AND id = ?2");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(id.hyphenated().to_string())
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(subscription_from_row)
            .transpose()
    }

    async fn count_subscriptions(&self, tenant: &str) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::CREATE_SUBSCRIPTION_WITHIN).bind(tenant).fetch_one(&self.reader).await?)
    }

    async fn list_subscriptions(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions
             WHERE tenant_id = ?1 AND (?2 IS NULL OR id > ?2) ORDER BY id LIMIT ?3"
        );
        sqlx::query(&sql)
            .bind(tenant)
            .bind(after.map(|u| u.hyphenated().to_string()))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn subscriptions_for_event(
        &self,
        tenant: &str,
        patterns: &[String],
        ids: &[Uuid],
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions
             WHERE tenant_id = ?1
               AND (EXISTS (SELECT 1 FROM json_each(subscriptions.event_types) AS t
                            WHERE t.value IN (SELECT value FROM json_each(?2)))
                    OR id IN (SELECT value FROM json_each(?3)))
             ORDER BY id"
        );
        let ids: Vec<String> = ids.iter().map(|u| u.hyphenated().to_string()).collect();
        sqlx::query(&sql)
            .bind(tenant)
            .bind(to_json(&patterns)?)
            .bind(to_json(&ids)?)
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn list_all_subscriptions(
        &self,
        tenant: Option<&str>,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        // One tenant's is the tenant listing (its own index); only every tenant's is a walk by id.
        if let Some(tenant) = tenant {
            return self.list_subscriptions(tenant, after, limit).await;
        }
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE (?1 IS NULL OR id > ?1) ORDER BY id LIMIT ?2"
        );
        sqlx::query(&sql)
            .bind(after.map(|u| u.hyphenated().to_string()))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn patch_subscription(
        &self,
        tenant: &str,
        id: Uuid,
        patch: &SubscriptionPatch,
    ) -> StoreResult<Option<SubscriptionRecord>> {
        // Each column is written only when the patch names it; `enabled` in the CASE is the value
        // before this update, so only a subscription that was enabled takes the new reason.
        let sql = format!(
            "UPDATE subscriptions SET
                name = COALESCE(?3, name),
                event_types = COALESCE(?4, event_types),
                filters = COALESCE(?14, filters),
                ordering = COALESCE(?15, ordering),
                limits = COALESCE(?16, limits),
                transform = CASE WHEN ?17 THEN ?18 ELSE transform END,
                origin = CASE WHEN ?5 THEN ?6 ELSE origin END,
                sink_config = COALESCE(?7, sink_config),
                pace_bucket = CASE WHEN ?7 IS NULL THEN pace_bucket ELSE ?19 END,
                credentials = CASE WHEN ?8 THEN ?9 ELSE credentials END,
                verification_state = CASE WHEN ?10 THEN 'pending' ELSE verification_state END,
                verification_error = CASE WHEN ?10 THEN NULL ELSE verification_error END,
                enabled = COALESCE(?11, enabled),
                disabled_reason = CASE WHEN ?11 = 1 THEN NULL
                                       WHEN ?11 = 0 AND enabled = 1 THEN ?12
                                       ELSE disabled_reason END,
                disabled_at = CASE WHEN ?11 = 0 AND enabled = 1 THEN ?13 ELSE disabled_at END,
                updated_at = ?13
             WHERE tenant_id = ?1 AND id = ?2
             RETURNING {SUBSCRIPTION_COLUMNS}"
        );
        let p = PatchColumns::of(patch)?;
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(&sql)
            .bind(tenant)
            .bind(text(id))
            .bind(patch.name.as_deref())
            .bind(p.event_types)
            .bind(patch.origin.is_some())
            .bind(patch.origin.clone().flatten())
            .bind(p.sink_config)
            .bind(p.credentials_set)
            .bind(p.credentials)
            .bind(p.reverify)
            .bind(patch.enabled)
            .bind(patch.disabled_reason.as_deref())
            .bind(micros(patch.now))
            .bind(p.filters)
            .bind(p.ordering)
            .bind(p.limits)
            .bind(p.transform_set)
            .bind(p.transform)
            .bind(p.pace_bucket)
            .fetch_optional(&mut *tx)
            .await?;
        Self::changed(tx, row, id).await
    }

    async fn rotate_secret(
        &self,
        tenant: &str,
        id: Uuid,
        rotation: &SecretRotation,
    ) -> StoreResult<Option<SubscriptionRecord>> {
        let sql = format!(
            "UPDATE subscriptions SET signing_secret = ?3, previous_secret = ?4, previous_secret_expires_at = ?5,
                updated_at = ?6
             WHERE tenant_id = ?1 AND id = ?2 AND signing_secret = ?7
             RETURNING {SUBSCRIPTION_COLUMNS}"
        );
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(&sql)
            .bind(tenant)
            .bind(text(id))
            .bind(&rotation.signing_secret)
            .bind(&rotation.previous_secret)
            .bind(micros(rotation.previous_expires_at))
            .bind(micros(rotation.now))
            .bind(&rotation.replaces)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        row.as_ref().map(subscription_from_row).transpose()
    }

    async fn set_verification(
        &self,
        tenant: &str,
        id: Uuid,
        result: &VerificationResult,
    ) -> StoreResult<Option<SubscriptionRecord>> {
        // `?3` is the failure (NULL on success), `?4` whether a success re-enables.
        let sql = format!(
            "UPDATE subscriptions SET
                verification_state = CASE WHEN ?3 IS NULL THEN 'active' ELSE 'failed' END,
                verification_error = ?3,
                enabled = CASE WHEN ?3 IS NULL AND ?4 THEN 1 ELSE enabled END,
                disabled_reason = CASE WHEN ?3 IS NULL AND ?4 THEN NULL ELSE disabled_reason END,
                failing_since = CASE WHEN ?3 IS NULL AND ?4 THEN NULL ELSE failing_since END,
                last_failure_at = CASE WHEN ?3 IS NULL AND ?4 THEN NULL ELSE last_failure_at END,
                verified_at = CASE WHEN ?3 IS NULL THEN ?5 ELSE verified_at END,
                allowed_rate = CASE WHEN ?3 IS NULL THEN ?8 ELSE allowed_rate END,
                updated_at = ?5
             WHERE tenant_id = ?1 AND id = ?2 AND sink_config = ?6 AND credentials IS ?7
             RETURNING {SUBSCRIPTION_COLUMNS}"
        );
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(&sql)
            .bind(tenant)
            .bind(text(id))
            .bind(result.error.as_deref())
            .bind(result.reenable)
            .bind(micros(result.now))
            .bind(result.probed_config.to_string())
            .bind(result.probed_credentials.as_deref())
            .bind(result.allowed_rate)
            .fetch_optional(&mut *tx)
            .await?;
        Self::changed(tx, row, id).await
    }

    async fn delete_subscription(&self, tenant: &str, id: Uuid) -> StoreResult<bool> {
        let id_text = id.hyphenated().to_string();
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(sql::DELETE_SUBSCRIPTION).bind(tenant).bind(&id_text).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE delivery_jobs SET state = 'cancelled', lease_expires_at = NULL, updated_at = ?2
             WHERE subscription_id = ?1 AND state IN ('pending', 'held', 'leased')",
        )
        .bind(&id_text)
        .bind(micros(Utc::now()))
        .execute(&mut *tx)
        .await?;
        sqlx::query(sql::DELETE_PULL_ENTRIES).bind(&id_text).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn subscriptions_by_ids(&self, ids: &[Uuid]) -> StoreResult<Vec<SubscriptionRecord>> {
        let ids = serde_json::to_string(&ids.iter().map(|u| text(*u)).collect::<Vec<_>>())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let sql =
            format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE id IN (SELECT value FROM json_each(?1))");
        sqlx::query(&sql).bind(ids).fetch_all(&self.reader).await?.iter().map(subscription_from_row).collect()
    }
}
