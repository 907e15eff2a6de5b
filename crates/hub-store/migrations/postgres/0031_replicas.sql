-- Destinations paced by one replica at a time (SPEC §3, docs/SCALING.md). Replicas register with
-- heartbeats; `pacing` is what the replica paces now (destinations with limits, allowances,
-- pauses), for the listing and the console. A subscription's `pace_bucket` is its destination
-- key's bucket (`hub_core::delivery::owners::bucket_of`, computed by the hub; NULL until it is);
-- the live replica that owns a bucket alone claims its jobs. A lease token begins with the first
-- eight bytes of its replica's id (`hub_store::lease_token`), so the jobs a replica that died
-- held are found by a range of tokens and given back at once instead of when their leases expire.
CREATE TABLE replicas (
    id UUID PRIMARY KEY,
    name TEXT NOT NULL,
    delivers BOOLEAN NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL,
    pacing JSONB NOT NULL DEFAULT '[]'
);

ALTER TABLE subscriptions ADD COLUMN pace_bucket INTEGER;
CREATE INDEX subscriptions_unbucketed ON subscriptions (id) WHERE pace_bucket IS NULL;

-- The bucket bears on which replica leases a job at ingest, so a change of it moves the tenant's
-- subscription version as every column ingest reads does.
DROP TRIGGER subscriptions_version_columns ON subscriptions;
CREATE TRIGGER subscriptions_version_columns AFTER UPDATE ON subscriptions
    FOR EACH ROW
    WHEN ((OLD.name, OLD.event_types, OLD.origin, OLD.filters, OLD.ordering, OLD.sink_type, OLD.sink_config,
           OLD.signing_secret, OLD.previous_secret, OLD.previous_secret_expires_at, OLD.credentials,
           OLD.enabled, OLD.verification_state, OLD.verification_error, OLD.disabled_reason,
           OLD.disabled_at, OLD.failing_since, OLD.verified_at, OLD.created_at, OLD.limits, OLD.allowed_rate,
           OLD.transform, OLD.pace_bucket)
          IS DISTINCT FROM
          (NEW.name, NEW.event_types, NEW.origin, NEW.filters, NEW.ordering, NEW.sink_type, NEW.sink_config,
           NEW.signing_secret, NEW.previous_secret, NEW.previous_secret_expires_at, NEW.credentials,
           NEW.enabled, NEW.verification_state, NEW.verification_error, NEW.disabled_reason,
           NEW.disabled_at, NEW.failing_since, NEW.verified_at, NEW.created_at, NEW.limits, NEW.allowed_rate,
           NEW.transform, NEW.pace_bucket))
    EXECUTE FUNCTION hub_subscriptions_changed();
