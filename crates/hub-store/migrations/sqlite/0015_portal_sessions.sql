-- Portal sessions: see the PostgreSQL migration of the same name. Times are microseconds since
-- the epoch.
CREATE TABLE portal_sessions (
    id             TEXT    PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    scope          TEXT    NOT NULL CHECK (scope IN ('read', 'manage')),
    grant_hash     BLOB    NOT NULL UNIQUE,
    session_hash   BLOB    UNIQUE,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    exchanged_at   INTEGER,
    revoked_at     INTEGER
);
CREATE INDEX portal_sessions_expires_at ON portal_sessions (expires_at);
