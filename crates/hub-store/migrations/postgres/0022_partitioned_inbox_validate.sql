-- The partitioned inbox, step 2 (see 0021): ids already stored from after the cutover (a producer
-- whose clock runs days ahead) step aside, and the table is proven to hold only ids before it.
-- Both are scans that let writers go on (row locks; VALIDATE takes SHARE UPDATE EXCLUSIVE).
WITH moved AS (
    DELETE FROM events WHERE ce_id >= hub_day_uuid((SELECT day FROM inbox_cutover)) RETURNING *
)
INSERT INTO events_ahead SELECT * FROM moved;

ALTER TABLE events VALIDATE CONSTRAINT events_before_cutover;
