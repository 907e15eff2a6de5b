-- Transformations (SPEC §10): a push subscription's JavaScript handler, as written
-- (`{"language", "code"}`; NULL: none), and the deliveries it skipped, counted per minute. The
-- transform bears on every attempt, so a change of it moves the tenant's subscription version, as
-- every column that matching or an attempt reads does (ingest hands its remembered subscriptions
-- to the dispatcher).
ALTER TABLE subscriptions ADD COLUMN transform JSONB;
ALTER TABLE subscription_minutes ADD COLUMN skipped BIGINT NOT NULL DEFAULT 0;

DROP TRIGGER subscriptions_version_columns ON subscriptions;
CREATE TRIGGER subscriptions_version_columns AFTER UPDATE ON subscriptions
    FOR EACH ROW
    WHEN ((OLD.name, OLD.event_types, OLD.origin, OLD.filters, OLD.ordering, OLD.sink_type, OLD.sink_config,
           OLD.signing_secret, OLD.previous_secret, OLD.previous_secret_expires_at, OLD.credentials,
           OLD.enabled, OLD.verification_state, OLD.verification_error, OLD.disabled_reason,
           OLD.disabled_at, OLD.failing_since, OLD.verified_at, OLD.created_at, OLD.limits, OLD.allowed_rate,
           OLD.transform)
          IS DISTINCT FROM
          (NEW.name, NEW.event_types, NEW.origin, NEW.filters, NEW.ordering, NEW.sink_type, NEW.sink_config,
           NEW.signing_secret, NEW.previous_secret, NEW.previous_secret_expires_at, NEW.credentials,
           NEW.enabled, NEW.verification_state, NEW.verification_error, NEW.disabled_reason,
           NEW.disabled_at, NEW.failing_since, NEW.verified_at, NEW.created_at, NEW.limits, NEW.allowed_rate,
           NEW.transform))
    EXECUTE FUNCTION hub_subscriptions_changed();
