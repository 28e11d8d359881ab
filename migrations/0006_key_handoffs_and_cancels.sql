-- 0006: finishing a keyed job never waits for a producer, and a cancelled attempt holds its key
-- until it is over.
--
-- Compatible with the previous version: its statements still work on this schema (they wait for
-- key rows as before and never write the new table), and this version applies what they leave.
-- Until every process runs this version, two guarantees hold only for jobs this version handles:
-- an older process may start the successor of a cancelled head whose attempt is still running
-- (as it always did), and its `discard({ delete: true })` of such a head does not let go of the key
-- (the key then waits for an operator): do not delete cancelled jobs during the rolling deploy.
--
-- The two indexes are built before anything is dropped, with IF NOT EXISTS: on a large table, build
-- them first with CREATE INDEX CONCURRENTLY (same names and definitions), and this migration only
-- drops the index they replace (a brief ACCESS EXCLUSIVE lock).

-- A key whose row another transaction holds (a producer adding to the key, in a transaction that
-- may stay open for long) is not waited for by the statement that finished the key's job: the
-- release is written here instead, in the same transaction as the job's new state, and a
-- maintenance pass applies it once the key's row is free. Completions of other keys and queues
-- never queue behind a producer.
CREATE TABLE key_handoffs (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue_name   text        NOT NULL,
  ordering_key text        NOT NULL,
  -- How many of the key's unfinished jobs finished.
  n            integer     NOT NULL CHECK (n > 0),
  at           timestamptz NOT NULL DEFAULT now()
);

-- A running job that an operator cancels is 'cancelled' at once (its worker's writes are refused),
-- but its attempt may still be running: it keeps lease_owner and lease_expires_at until its worker
-- confirms the attempt is over, or the lease runs out. Until then it still holds its ordering key,
-- so "does this key have a head?" counts it.
CREATE INDEX IF NOT EXISTS jobs_key_holder_idx ON jobs (queue_name, ordering_key)
  WHERE ordering_key IS NOT NULL AND NOT key_waiting
    AND (status IN ('scheduled', 'pending', 'running', 'dead') OR (status = 'cancelled' AND lease_expires_at IS NOT NULL));

-- The reaper ends cancelled attempts whose lease ran out without their worker's confirmation.
CREATE INDEX IF NOT EXISTS jobs_cancelled_lease_idx ON jobs (lease_expires_at)
  WHERE status = 'cancelled' AND lease_expires_at IS NOT NULL;

-- Replaced by jobs_key_holder_idx (the same, plus cancelled attempts that are not over).
DROP INDEX IF EXISTS jobs_key_head_idx;

-- An effect known to have happened is recorded as happened even when its result cannot be stored
-- (not JSON, or too large): confirmed, result NULL, result_stored false. A later attempt never calls
-- the destination again for it.
ALTER TABLE job_effects ADD COLUMN result_stored boolean NOT NULL DEFAULT true;
