-- The hub's OIDC signing keys: see the PostgreSQL migration of the same name. Times are
-- microseconds since the epoch.
CREATE TABLE issuer_keys (
    kid         TEXT    PRIMARY KEY,
    sealed_key  BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    retired_at  INTEGER
);
