-- Partitioned jobs, step 2 (see 0038): rows already stored from after the cutover step aside, and
-- the tables are proven to hold only ids before it. Both are scans that let writers go on (row
-- locks; VALIDATE takes SHARE UPDATE EXCLUSIVE).
WITH moved AS (
    DELETE FROM delivery_jobs WHERE id >= hub_day_uuid((SELECT day FROM jobs_cutover)) RETURNING *
)
INSERT INTO delivery_jobs_ahead SELECT * FROM moved;
WITH moved AS (
    DELETE FROM delivery_attempts WHERE job_id >= hub_day_uuid((SELECT day FROM jobs_cutover)) RETURNING *
)
INSERT INTO delivery_attempts_ahead SELECT * FROM moved;

ALTER TABLE delivery_jobs VALIDATE CONSTRAINT delivery_jobs_before_cutover;
ALTER TABLE delivery_attempts VALIDATE CONSTRAINT delivery_attempts_before_cutover;
