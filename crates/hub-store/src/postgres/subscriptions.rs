//! Subscriptions: creation, reads, and the intent-level changes that each write only their own columns.

use super::{
    PgStore, SUBSCRIPTION_COLUMNS, StoreResult, SubscriptionRecord, Subscriptions, Uuid, async_trait,
    bind_subscription, subscription_from_row,
};

use crate::model::PatchColumns;
use crate::sql;
use crate::{SecretRotation, SubscriptionPatch, VerificationResult};

#[async_trait]
impl Subscriptions for PgStore {
    async fn create_subscription(&self, sub: &SubscriptionRecord) -> StoreResult<()> {
        self.create_subscription_within(sub, u32::MAX).await.map(|_| ())
    }

    async fn create_subscription_within(&self, sub: &SubscriptionRecord, max: u32) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        // Creates for one tenant take turns on a lock of their own (the tenant's row may not
        // exist yet), so the count below is the one the insert lands on.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('streaming-hub subscriptions ' || $1))")
            .bind(&sub.tenant_id)
            .execute(&mut *tx)
            .await?;
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
             VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::jsonb, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22::jsonb, $23, $24::jsonb, $25, $26::jsonb, $27)",
        );
        bind_subscription(insert, sub)?
            .bind(sub.pull_cursor)
            .bind(sub.created_at)
            .bind(sub.disabled_at)
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
        let sql = format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE tenant_id = $1 AND id = $2");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(subscription_from_row)
            .transpose()
    }

    async fn count_subscriptions(&self, tenant: &str) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::CREATE_SUBSCRIPTION_WITHIN).bind(tenant).fetch_one(&self.pool).await?)
    }

    async fn list_subscriptions(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions
             WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3"
        );
        sqlx::query(&sql)
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
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
        // `?|` is served by the GIN index on `event_types`, `id = ANY` by the primary key.
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions
             WHERE tenant_id = $1 AND (event_types ?| $2::text[] OR id = ANY($3::uuid[])) ORDER BY id"
        );
        sqlx::query(&sql)
            .bind(tenant)
            .bind(patterns)
            .bind(ids)
            .fetch_all(&self.pool)
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
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE ($1::uuid IS NULL OR id > $1) ORDER BY id LIMIT $2"
        );
        sqlx::query(&sql)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
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
                name = COALESCE($3, name),
                event_types = COALESCE($4::jsonb, event_types),
                filters = COALESCE($14::jsonb, filters),
                ordering = COALESCE($15, ordering),
                limits = COALESCE($16::jsonb, limits),
                transform = CASE WHEN $17 THEN $18::jsonb ELSE transform END,
                origin = CASE WHEN $5 THEN $6 ELSE origin END,
                sink_config = COALESCE($7::jsonb, sink_config),
                pace_bucket = CASE WHEN $7 IS NULL THEN pace_bucket ELSE $19 END,
                credentials = CASE WHEN $8 THEN $9 ELSE credentials END,
                verification_state = CASE WHEN $10 THEN 'pending' ELSE verification_state END,
                verification_error = CASE WHEN $10 THEN NULL ELSE verification_error END,
                enabled = COALESCE($11, enabled),
                disabled_reason = CASE WHEN $11 IS TRUE THEN NULL
                                       WHEN $11 IS FALSE AND enabled THEN $12
                                       ELSE disabled_reason END,
                disabled_at = CASE WHEN $11 IS FALSE AND enabled THEN $13 ELSE disabled_at END,
                updated_at = $13
             WHERE tenant_id = $1 AND id = $2
             RETURNING {SUBSCRIPTION_COLUMNS}"
        );
        let p = PatchColumns::of(patch)?;
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&sql)
            .bind(tenant)
            .bind(id)
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
            .bind(patch.now)
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
            "UPDATE subscriptions SET signing_secret = $3, previous_secret = $4, previous_secret_expires_at = $5,
                updated_at = $6
             WHERE tenant_id = $1 AND id = $2 AND signing_secret = $7
             RETURNING {SUBSCRIPTION_COLUMNS}"
        );
        sqlx::query(&sql)
            .bind(tenant)
            .bind(id)
            .bind(&rotation.signing_secret)
            .bind(&rotation.previous_secret)
            .bind(rotation.previous_expires_at)
            .bind(rotation.now)
            .bind(&rotation.replaces)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(subscription_from_row)
            .transpose()
    }

    async fn set_verification(
        &self,
        tenant: &str,
        id: Uuid,
        result: &VerificationResult,
    ) -> StoreResult<Option<SubscriptionRecord>> {
        // `$3` is the failure (NULL on success), `$4` whether a success re-enables.
        let sql = format!(
            "UPDATE subscriptions SET
                verification_state = CASE WHEN $3::text IS NULL THEN 'active' ELSE 'failed' END,
                verification_error = $3,
                enabled = CASE WHEN $3::text IS NULL AND $4 THEN true ELSE enabled END,
                disabled_reason = CASE WHEN $3::text IS NULL AND $4 THEN NULL ELSE disabled_reason END,
                failing_since = CASE WHEN $3::text IS NULL AND $4 THEN NULL ELSE failing_since END,
                last_failure_at = CASE WHEN $3::text IS NULL AND $4 THEN NULL ELSE last_failure_at END,
                verified_at = CASE WHEN $3::text IS NULL THEN $5 ELSE verified_at END,
                allowed_rate = CASE WHEN $3::text IS NULL THEN $8 ELSE allowed_rate END,
                updated_at = $5
             WHERE tenant_id = $1 AND id = $2 AND sink_config = $6::jsonb AND credentials IS NOT DISTINCT FROM $7
             RETURNING {SUBSCRIPTION_COLUMNS}"
        );
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&sql)
            .bind(tenant)
            .bind(id)
            .bind(result.error.as_deref())
            .bind(result.reenable)
            .bind(result.now)
            .bind(result.probed_config.to_string())
            .bind(result.probed_credentials.as_deref())
            .bind(result.allowed_rate)
            .fetch_optional(&mut *tx)
            .await?;
        Self::changed(tx, row, id).await
    }

    async fn delete_subscription(&self, tenant: &str, id: Uuid) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(sql::DELETE_SUBSCRIPTION).bind(tenant).bind(id).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE delivery_jobs SET state = 'cancelled', lease_expires_at = NULL, updated_at = now()
             WHERE subscription_id = $1 AND state IN ('pending', 'held', 'leased')",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(sql::DELETE_PULL_ENTRIES).bind(id).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn subscriptions_by_ids(&self, ids: &[Uuid]) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE id = ANY($1)");
        // A claim's load: on a kept connection, like the claim.
        let mut taken = self.kept.take(&self.pool).await?;
        let rows = sqlx::query(&sql).bind(ids).fetch_all(&mut *taken.conn).await?;
        self.kept.give_back(taken);
        rows.iter().map(subscription_from_row).collect()
    }
}
