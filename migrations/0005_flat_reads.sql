-- 0005: reads whose cost does not grow with what the queue keeps.
--
-- Dead jobs stay until an operator resolves them, so there can be many. listDead and purgeDead
-- take them oldest first, a page or a batch at a time, of one queue or of all, optionally of one
-- error code: each case walks an index in that order from its cursor, so a page reads about what
-- it returns. jobs_dead_idx (0001: queue_name, finished_at, id) serves one queue; these serve the
-- others. All are partial on status = 'dead': a job is written to them only when it dies.
--
-- (The stats read nothing new: live statuses have their partial indexes, and the jobs that
-- finished within the recent window are a range of jobs_finished_idx, 0002.)
--
-- IF NOT EXISTS: on a large jobs table, an operator may build these first with CREATE INDEX
-- CONCURRENTLY (same names and definitions), so that the migration does not hold writes while
-- it builds them; it then finds them and does nothing. (A concurrent build that was interrupted
-- leaves an invalid index of that name: drop it and build it again before migrating.)

-- All queues, oldest death first.
CREATE INDEX IF NOT EXISTS jobs_dead_age_idx ON jobs (finished_at, id)
  WHERE status = 'dead';

-- One error code, of all queues.
CREATE INDEX IF NOT EXISTS jobs_dead_code_idx ON jobs (last_error_code, finished_at, id)
  WHERE status = 'dead';

-- One error code of one queue.
CREATE INDEX IF NOT EXISTS jobs_dead_queue_code_idx ON jobs (queue_name, last_error_code, finished_at, id)
  WHERE status = 'dead';
