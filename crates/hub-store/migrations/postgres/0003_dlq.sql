-- The DLQ plane: records observed on `.dlq` topics, kept for operators only.
CREATE TABLE dlq_records (
    id               BIGSERIAL PRIMARY KEY,
    topic            TEXT        NOT NULL,
    kafka_partition  INTEGER     NOT NULL,
    kafka_offset     BIGINT      NOT NULL,
    source           TEXT        NOT NULL,
    tenant_id        TEXT,
    ce_id            TEXT,
    ce_type          TEXT,
    error_class      TEXT,
    error_message    TEXT,
    headers          JSONB       NOT NULL,
    body             BYTEA       NOT NULL,
    body_bytes       BIGINT      NOT NULL,
    payload_omitted  BOOLEAN     NOT NULL,
    record_timestamp TIMESTAMPTZ,
    received_at      TIMESTAMPTZ NOT NULL,
    UNIQUE (topic, kafka_partition, kafka_offset)
);
CREATE INDEX dlq_records_received_at ON dlq_records (received_at);
