-- People signed in to the console through an identity provider (SPEC §11, "Single sign-on and
-- roles"): who, the roles their ID token granted at sign-in, until when. Only the hash of the
-- session cookie is kept; a session ends at sign-out (its row is deleted) or when it expires.
CREATE TABLE person_sessions (
    id             UUID        PRIMARY KEY,
    session_hash   BYTEA       NOT NULL UNIQUE,
    issuer         TEXT        NOT NULL,
    subject        TEXT        NOT NULL,
    -- The roles claim's values, a JSON array of strings.
    roles          TEXT        NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX person_sessions_expires_at ON person_sessions (expires_at);
