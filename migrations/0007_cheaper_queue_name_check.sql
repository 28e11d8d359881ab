-- 0007: the queue-name rule of jobs, as a CHECK that costs what a CHECK should.
--
-- PostgreSQL evaluates every CHECK constraint of a table on every UPDATE of a row, whatever
-- columns the UPDATE sets: the queue-name rule of 0001 ran on each claim and each completion of
-- every job, although nothing ever changes a job's queue_name. Its regular expression,
-- '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$', was the costly part: PostgreSQL's regex engine expands
-- the bounded repetition {0,127} into 127 copies of its class, and a match took 3.5 µs for a
-- 5-character name and 16 µs for a 24-character one (bench/probes/check-costs.mjs), a sixth of the
-- claim's server time and as much again at each completion and enqueue. The same rule, as a length
-- test and an unbounded repetition, takes 0.1-0.7 µs.
--
-- Why a cheaper CHECK rather than moving the rule off the UPDATE path: a trigger that runs only
-- when queue_name is written costs a PL/pgSQL call (~1-2 µs) per enqueued job, more than this CHECK
-- costs over a job's three writes. A domain would change the column's type, and with it the result
-- type of every statement that returns queue_name: a statement an older process prepared before
-- this migration would then fail on each call ("cached plan must not change result type", 0A000).
-- A foreign key to queues would cost a lookup and a KEY SHARE lock of the queue's row per job.
-- The other CHECKs of jobs stay: each costs 0.1-0.3 µs per update, and
-- jobs_running_has_lease guards the state machine.
--
-- The engine validates queue names before any SQL runs (INVALID_QUEUE_NAME), so its callers never
-- see this constraint's error; it guards writes that bypass the engine, with the same name and code
-- (23514, jobs_queue_name_check) as before.
--
-- Compatible with the previous version: the rule and the constraint's name are the same, and no
-- result type changes. NOT VALID: every existing row passed the equivalent rule on the way in, so
-- the table is not scanned (the brief ACCESS EXCLUSIVE lock of jobs is all this costs); new and
-- updated rows are checked. The queues table is small: its constraint is replaced and validated.

ALTER TABLE jobs DROP CONSTRAINT jobs_queue_name_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_queue_name_check
  CHECK (char_length(queue_name) <= 128 AND queue_name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$') NOT VALID;

ALTER TABLE queues DROP CONSTRAINT queues_name_check;
ALTER TABLE queues ADD CONSTRAINT queues_name_check
  CHECK (char_length(name) <= 128 AND name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$');
