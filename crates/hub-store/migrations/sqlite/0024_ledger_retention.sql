-- Ledger retention: see the PostgreSQL migration of the same name. SQLite has no partitions;
-- retention deletes a log's oldest entries, nodes and checkpoints in batches, and keeps where
-- the log now begins (`start_size`) and that tree's peaks (`start_peaks`).
ALTER TABLE ledger_heads ADD COLUMN last_at INTEGER;
ALTER TABLE ledger_trees ADD COLUMN start_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ledger_trees ADD COLUMN start_peaks BLOB NOT NULL DEFAULT x'';
UPDATE ledger_heads SET last_at = (SELECT max(recorded_at) FROM ledger_entries e WHERE e.log = ledger_heads.log);
