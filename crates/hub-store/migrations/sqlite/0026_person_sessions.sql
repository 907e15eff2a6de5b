-- People signed in to the console: see the PostgreSQL migration of the same name. Times are
-- microseconds since the epoch.
CREATE TABLE person_sessions (
    id             TEXT    PRIMARY KEY,
    session_hash   BLOB    NOT NULL UNIQUE,
    issuer         TEXT    NOT NULL,
    subject        TEXT    NOT NULL,
    roles          TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL
);
CREATE INDEX person_sessions_expires_at ON person_sessions (expires_at);
