-- Each tenant API key has a role in its tenant (SPEC §11, "Single sign-on and roles"): `admin`
-- (what every key could do before), `operator` or `viewer`. Admin keys (no tenant) keep `admin`.
ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
