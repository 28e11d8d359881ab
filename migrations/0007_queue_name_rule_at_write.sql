-- 0007: the queue-name rule of jobs is checked when a job's queue_name is written, not on every
-- update of the job.
--
-- PostgreSQL evaluates every CHECK constraint of a table on every UPDATE of a row, whatever
-- columns the UPDATE sets. The regular expression of jobs_queue_name_check (0001) ran on each
-- claim and each completion of every job, although no statement of the engine ever changes a
-- job's queue_name: about 5 µs of server time per claimed job, a sixth of the claim
-- (docs/performance.md). The same rule is now a trigger that runs when queue_name is written:
-- before each inserted row, and after an UPDATE that sets queue_name (an UPDATE OF trigger is not
-- even queued for the claim, the completion or any other transition). Enqueue pays what it paid.
--
-- Why not a domain over text: changing the column's type changes the result type of every
-- statement that returns queue_name, and a statement an older process prepared before this
-- migration then fails on each call with "cached plan must not change result type" (0A000) until
-- that process restarts. Why not a BEFORE UPDATE trigger: PostgreSQL fetches and locks the old row
-- for a BEFORE UPDATE row trigger on every UPDATE, before it looks at the trigger's column list.
-- Why not a foreign key to queues: a lookup and a KEY SHARE lock of the queue's row per enqueued job.
--
-- The engine validates queue names before any SQL runs (INVALID_QUEUE_NAME, and enqueue refuses an
-- undeclared queue), so its callers never see this error; it guards writes that bypass the engine.
-- The error is the constraint's, as before: check_violation (23514), constraint jobs_queue_name_check.
-- The other CHECKs of jobs stay: together they cost under 2 µs per update, and
-- jobs_running_has_lease guards the state machine.
--
-- Compatible with the previous version: its statements never write queue_name outside an INSERT,
-- and their result types are unchanged. Nothing is rewritten: no row is read, the constraint is
-- dropped and the triggers are created under a brief ACCESS EXCLUSIVE lock of jobs.

CREATE FUNCTION jobs_queue_name_rule() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- The rule of the queues table's CHECK (0001), and of isQueueName in the engine.
  IF NEW.queue_name !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' THEN
    RAISE EXCEPTION 'new row for relation "jobs" violates check constraint "jobs_queue_name_check"'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_queue_name_check', TABLE = 'jobs', COLUMN = 'queue_name',
            DETAIL = format('queue_name %s is not a valid queue name: 1-128 characters, letters, digits, "_", ".", ":" or "-", starting with a letter or digit.',
                            quote_literal(left(NEW.queue_name, 80)));
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER jobs_queue_name_on_insert BEFORE INSERT ON jobs
  FOR EACH ROW EXECUTE FUNCTION jobs_queue_name_rule();

-- AFTER, not BEFORE (see above); the statement fails all the same.
CREATE TRIGGER jobs_queue_name_on_update AFTER UPDATE OF queue_name ON jobs
  FOR EACH ROW EXECUTE FUNCTION jobs_queue_name_rule();

ALTER TABLE jobs DROP CONSTRAINT jobs_queue_name_check;
