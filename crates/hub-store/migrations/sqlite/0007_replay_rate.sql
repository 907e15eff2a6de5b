-- A replay gives at most `rate` wanted events per second (asked for in the request, or the
-- operator's default): a receiver recovering from an outage is not flooded, and the live path
-- keeps the machine.
ALTER TABLE replays ADD COLUMN rate INTEGER NOT NULL DEFAULT 250;
