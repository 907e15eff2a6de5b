-- Portal sessions (SPEC §9): an operator grants a tenant's portal for a while, as a one-time
-- grant exchanged for a session token. Only hashes of the two tokens are kept.
CREATE TABLE portal_sessions (
    id             UUID        PRIMARY KEY,
    tenant_id      TEXT        NOT NULL,
    scope          TEXT        NOT NULL CHECK (scope IN ('read', 'manage')),
    grant_hash     BYTEA       NOT NULL UNIQUE,
    session_hash   BYTEA       UNIQUE,
    created_at     TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL,
    exchanged_at   TIMESTAMPTZ,
    revoked_at     TIMESTAMPTZ
);
CREATE INDEX portal_sessions_expires_at ON portal_sessions (expires_at);
