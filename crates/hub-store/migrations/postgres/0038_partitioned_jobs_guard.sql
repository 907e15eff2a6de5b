-- Jobs and their attempts become partitioned by day, in three steps (0038–0040) that never hold a
-- lock that stops writers for longer than a catalog change, as the inbox did (0021–0023; see
-- docs/OPERATIONS.md, "Partitioned jobs").
--
-- A job is partitioned by the day of its id (a UUIDv7 the hub makes when it makes the job), its
-- attempts by the day of their job's id: a day's attempts live beside their jobs, and retention
-- drops the two partitions of a day together once every job of it has finished before the cutoff
-- (postgres/job_partitions.rs). The tables of today's layout become the partitions of every id
-- before the cutover day (two days after the migration, UTC); later days get partitions of their
-- own, and an id of a day without one lands in a default partition.
--
-- Step 1: from now on the tables take only ids before the cutover (NOT VALID: a catalog change,
-- no scan).

CREATE TABLE jobs_cutover (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    day DATE    NOT NULL
);
INSERT INTO jobs_cutover VALUES (1, (now() AT TIME ZONE 'UTC')::date + 2);

DO $$
BEGIN
    EXECUTE format('ALTER TABLE delivery_jobs ADD CONSTRAINT delivery_jobs_before_cutover CHECK (id < %L::uuid) NOT VALID',
        hub_day_uuid((SELECT day FROM jobs_cutover)));
    EXECUTE format('ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_before_cutover
                    CHECK (job_id < %L::uuid) NOT VALID',
        hub_day_uuid((SELECT day FROM jobs_cutover)));
END
$$;

-- Where rows already stored from after the cutover (a replica whose clock ran days ahead) wait
-- during step 2.
CREATE TABLE delivery_jobs_ahead (LIKE delivery_jobs INCLUDING DEFAULTS);
CREATE TABLE delivery_attempts_ahead (LIKE delivery_attempts INCLUDING DEFAULTS);
