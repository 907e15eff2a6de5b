-- Transformations (SPEC §10): a push subscription's JavaScript handler, as written
-- (`{"language", "code"}`, JSON text; NULL: none), and the deliveries it skipped, counted per
-- minute.
ALTER TABLE subscriptions ADD COLUMN transform TEXT;
ALTER TABLE subscription_minutes ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;
