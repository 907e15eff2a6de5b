-- Each tenant API key has a role: see the PostgreSQL migration of the same name.
ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
