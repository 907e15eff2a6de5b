-- What a replay selects (SPEC §10, "History tools"): only what its subscription had and never
-- got (events with a dead or cancelled job of it and none delivered or waiting), and content
-- filters of its own in place of the subscription's (JSON text; NULL: the subscription's).
ALTER TABLE replays ADD COLUMN only_undelivered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replays ADD COLUMN filters TEXT;
