-- Attempts in flight (SPEC §10): a subscription's own limits (`limits`: max_in_flight and
-- per_second, each JSON null when unset) and the rate its receiver declared when it was last
-- verified (`allowed_rate`, requests per minute, from `WebHook-Allowed-Rate`). Both bear on an
-- attempt, so a change of either moves the tenant's subscription version, as every column that
-- matching or an attempt reads does (ingest hands its remembered subscriptions to the dispatcher).
ALTER TABLE subscriptions ADD COLUMN limits JSONB NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE subscriptions ADD COLUMN allowed_rate DOUBLE PRECISION;

DROP TRIGGER subscriptions_version_columns ON subscriptions;
CREATE TRIGGER subscriptions_version_columns AFTER UPDATE ON subscriptions
    FOR EACH ROW
    WHEN ((OLD.name, OLD.event_types, OLD.origin, OLD.filters, OLD.ordering, OLD.sink_type, OLD.sink_config,
           OLD.signing_secret, OLD.previous_secret, OLD.previous_secret_expires_at, OLD.credentials,
           OLD.enabled, OLD.verification_state, OLD.verification_error, OLD.disabled_reason,
           OLD.disabled_at, OLD.failing_since, OLD.verified_at, OLD.created_at, OLD.limits, OLD.allowed_rate)
          IS DISTINCT FROM
          (NEW.name, NEW.event_types, NEW.origin, NEW.filters, NEW.ordering, NEW.sink_type, NEW.sink_config,
           NEW.signing_secret, NEW.previous_secret, NEW.previous_secret_expires_at, NEW.credentials,
           NEW.enabled, NEW.verification_state, NEW.verification_error, NEW.disabled_reason,
           NEW.disabled_at, NEW.failing_since, NEW.verified_at, NEW.created_at, NEW.limits, NEW.allowed_rate))
    EXECUTE FUNCTION hub_subscriptions_changed();
