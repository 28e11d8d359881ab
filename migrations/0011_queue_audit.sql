-- 0011: who paused or resumed a queue, and why.
--
-- Pausing a queue stops its claims in every process: an operator's act whose author matters as
-- much as a replay's. A job's operator transitions are in job_events; a queue's go here, one row
-- per pause or resume call, written by the same statement that sets queues.paused_at (so the trail
-- can never disagree with the state). was_paused tells a change from a repeated request.
--
-- Compatible with the previous version: its pause and resume never name this table, so they keep
-- working (and write no row); the queues table is unchanged.
CREATE TABLE queue_audit (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue_name  text        NOT NULL REFERENCES queues (name) ON DELETE CASCADE,
  at          timestamptz NOT NULL DEFAULT now(),
  kind        text        NOT NULL CHECK (kind IN ('paused', 'resumed')),
  was_paused  boolean     NOT NULL,
  actor       text        CHECK (char_length(actor) <= 200),
  reason      text        CHECK (char_length(reason) <= 1000)
);

-- A queue's trail, newest first, a page at a time.
CREATE INDEX queue_audit_queue_idx ON queue_audit (queue_name, id);
