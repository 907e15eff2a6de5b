-- The event catalog (SPEC §9): see the PostgreSQL migration of the same name. Times are
-- microseconds since the epoch.
CREATE TABLE manifests (
    location       TEXT    PRIMARY KEY,
    document       TEXT,
    schemas        TEXT    NOT NULL DEFAULT '{}',
    fetched_at     INTEGER,
    checked_at     INTEGER NOT NULL,
    error          TEXT,
    problems       TEXT    NOT NULL DEFAULT '[]'
);

CREATE TABLE manifest_refresh (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    due_at   INTEGER NOT NULL,
    sources  TEXT    NOT NULL
);
INSERT INTO manifest_refresh (id, due_at, sources) VALUES (1, -9223372036854775808, '');

CREATE TABLE seen_event_types (
    tenant_id       TEXT    NOT NULL,
    source          TEXT    NOT NULL,
    event_key       TEXT    NOT NULL,
    schema_version  TEXT    NOT NULL,
    first_seen      INTEGER NOT NULL,
    last_seen       INTEGER NOT NULL,
    events          INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, source, event_key, schema_version)
) WITHOUT ROWID;
CREATE INDEX seen_event_types_last_seen ON seen_event_types (last_seen);
