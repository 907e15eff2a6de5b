-- The DLQ plane: records observed on `.dlq` topics, kept for operators only.
CREATE TABLE dlq_records (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    topic            TEXT    NOT NULL,
    kafka_partition  INTEGER NOT NULL,
    kafka_offset     INTEGER NOT NULL,
    source           TEXT    NOT NULL,
    tenant_id        TEXT,
    ce_id            TEXT,
    ce_type          TEXT,
    error_class      TEXT,
    error_message    TEXT,
    headers          TEXT    NOT NULL,
    body             BLOB    NOT NULL,
    body_bytes       INTEGER NOT NULL,
    payload_omitted  INTEGER NOT NULL,
    record_timestamp INTEGER,
    received_at      INTEGER NOT NULL,
    UNIQUE (topic, kafka_partition, kafka_offset)
);
CREATE INDEX dlq_records_received_at ON dlq_records (received_at);
