-- The event catalog (SPEC §9). Each configured manifest source keeps its last good document (and
-- the payload schemas it points to), so a source that fails never empties the catalog.
CREATE TABLE manifests (
    location       TEXT        PRIMARY KEY,
    document       TEXT,
    -- {"<dataSchema location>": <schema JSON>, ...}: the schemas fetched with the document.
    schemas        JSONB       NOT NULL DEFAULT '{}',
    fetched_at     TIMESTAMPTZ,
    checked_at     TIMESTAMPTZ NOT NULL,
    -- Why the last fetch failed; NULL when it succeeded.
    error          TEXT,
    -- [{"field", "message"}]: declared schemas that could not be used.
    problems       JSONB       NOT NULL DEFAULT '[]'
);

-- One row: when the next refresh is due, and for which set of sources. Whoever moves due_at
-- refreshes; every other replica sees it moved and waits (one replica at a time).
CREATE TABLE manifest_refresh (
    id       INTEGER     PRIMARY KEY CHECK (id = 1),
    due_at   TIMESTAMPTZ NOT NULL,
    sources  TEXT        NOT NULL
);
INSERT INTO manifest_refresh (id, due_at, sources) VALUES (1, '-infinity', '');

-- Types seen in each tenant's inbox, rolled up from accepted events (never one write per event).
CREATE TABLE seen_event_types (
    tenant_id       TEXT        NOT NULL,
    source          TEXT        NOT NULL,
    event_key       TEXT        NOT NULL,
    schema_version  TEXT        NOT NULL,
    first_seen      TIMESTAMPTZ NOT NULL,
    last_seen       TIMESTAMPTZ NOT NULL,
    events          BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, source, event_key, schema_version)
);
CREATE INDEX seen_event_types_last_seen ON seen_event_types (last_seen);
