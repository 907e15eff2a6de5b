-- Attempts in flight (SPEC §10): a subscription's own limits (JSON: max_in_flight, per_second) and
-- the rate its receiver declared at its last verification (requests per minute).
ALTER TABLE subscriptions ADD COLUMN limits TEXT NOT NULL DEFAULT '{}';
ALTER TABLE subscriptions ADD COLUMN allowed_rate REAL;
