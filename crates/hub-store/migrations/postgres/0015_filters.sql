-- Content filters (hub_core::routing::Filters): the JSON array as written, `[]` for none.
-- Matching compiles it; a change of filters moves the tenant's subscription version like every
-- other change that matching reads.
ALTER TABLE subscriptions ADD COLUMN filters JSONB NOT NULL DEFAULT '[]'::jsonb;

DROP TRIGGER subscriptions_version_columns ON subscriptions;
CREATE TRIGGER subscriptions_version_columns AFTER UPDATE ON subscriptions
    FOR EACH ROW
    WHEN ((OLD.name, OLD.event_types, OLD.origin, OLD.filters, OLD.sink_type, OLD.sink_config,
           OLD.signing_secret, OLD.previous_secret, OLD.previous_secret_expires_at, OLD.credentials,
           OLD.enabled, OLD.verification_state, OLD.verification_error, OLD.disabled_reason,
           OLD.disabled_at, OLD.failing_since, OLD.verified_at, OLD.created_at)
          IS DISTINCT FROM
          (NEW.name, NEW.event_types, NEW.origin, NEW.filters, NEW.sink_type, NEW.sink_config,
           NEW.signing_secret, NEW.previous_secret, NEW.previous_secret_expires_at, NEW.credentials,
           NEW.enabled, NEW.verification_state, NEW.verification_error, NEW.disabled_reason,
           NEW.disabled_at, NEW.failing_since, NEW.verified_at, NEW.created_at))
    EXECUTE FUNCTION hub_subscriptions_changed();
