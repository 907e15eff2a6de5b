-- A replay may give again only what its subscription had and never got (SPEC §10, "History
-- tools"): events with a dead or cancelled job of it and none delivered or waiting.
ALTER TABLE replays ADD COLUMN only_undelivered INTEGER NOT NULL DEFAULT 0;
