-- An operator's admin key: the admin routes with a named, revocable key instead of (or beside)
-- the one admin token. Its tenant_id is empty: it belongs to no tenant.
ALTER TABLE api_keys ADD COLUMN admin BOOLEAN NOT NULL DEFAULT FALSE;
