-- 0014: succeeded jobs move out of `jobs` into `jobs_succeeded` at completion (issue 15).
--
-- Why: completing a job by UPDATE (status 'succeeded') is not a HOT update (status is in the
-- predicates of the partial indexes), so every index of jobs took a new entry per completion, and
-- claims walked the dead versions and the retained history. Completion is now one fenced
-- `DELETE FROM jobs … RETURNING` feeding an `INSERT INTO jobs_succeeded` in the same statement:
-- jobs only holds unfinished, dead and cancelled jobs, and the history table has two indexes.
--
-- What stays in jobs (completed by UPDATE as before; see stays_in_jobs in lib/engine/store/finish.ts):
--   - a job with a unique key of scope 'ever': the key is held while the row exists, and only the
--     unique index on jobs enforces it (0012);
--   - a flow child (parent_id set): the flow code reads children from jobs (their results, the
--     parent's settlement, the pruner's "parent finished?" test).
-- Rows of those kinds already succeeded stay where they are; every other succeeded row moves.
--
-- `job_rows` is every job, whichever table holds it: the reads that must see finished jobs (a job
-- by id, browse, stats, the fence's loss reporting, operators) read it. Its column list is that of
-- jobs: a later migration that adds a column to jobs adds it to jobs_succeeded and recreates the view.
--
-- The foreign keys of job_events and job_effects onto jobs(id) are dropped: a moved job's rows in
-- them point at a row of jobs_succeeded, which a key onto jobs(id) would refuse (and ON DELETE
-- CASCADE would delete them at completion). Whatever deletes a job now deletes its events and
-- effects itself, in the same statement (the pruner, an operator's delete and purge).
--
-- Compatible with the previous version (docs/migrations.md, 0014): an older process completes by
-- UPDATE and leaves succeeded rows in jobs, which job_rows shows and the new pruner prunes from
-- both tables. An older process does not see moved jobs in its own reads (get, stats), and its
-- pruner no longer cascades to events and effects: it leaves those rows behind (small, harmless;
-- no pruner of this version looks for them).
-- Moving the existing succeeded rows rewrites them under the statement's locks: on a very large
-- history, prune it first (or take the upgrade at a quiet time).

CREATE TABLE jobs_succeeded (LIKE jobs INCLUDING DEFAULTS, PRIMARY KEY (id));

-- The pruner's retention delete (oldest first) and the recent-throughput and stats reads (a range
-- of finished_at). One index beside the primary key: each one costs every completion an entry.
CREATE INDEX jobs_succeeded_finished_idx ON jobs_succeeded (finished_at);

ALTER TABLE job_events DROP CONSTRAINT IF EXISTS job_events_job_id_fkey;
ALTER TABLE job_effects DROP CONSTRAINT IF EXISTS job_effects_job_id_fkey;

WITH moved AS (
  DELETE FROM jobs
  WHERE status = 'succeeded'
    AND parent_id IS NULL
    AND NOT (unique_key IS NOT NULL AND unique_scope = 'ever')
  RETURNING *
)
INSERT INTO jobs_succeeded SELECT * FROM moved;

CREATE VIEW job_rows AS
  SELECT * FROM jobs
  UNION ALL
  SELECT * FROM jobs_succeeded;
