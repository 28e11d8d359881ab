-- 0002: what operators need: pausing queues, cancellation and replay with who and why, trace
-- context carried from enqueue to handler, retention of succeeded jobs, and a record of purges.

-- A paused queue's jobs are not claimed by any process; running ones finish.
ALTER TABLE queues ADD COLUMN paused_at timestamptz;

-- The W3C trace context active at enqueue ({ traceparent, tracestate }), so the handler's span
-- can link to the producer's. NULL without an OpenTelemetry SDK.
ALTER TABLE jobs ADD COLUMN trace_context jsonb;

-- Who asked for an operator's transition (replay, cancel, discard), beside the worker column that
-- names the process for a worker's transitions.
ALTER TABLE job_events ADD COLUMN actor text CHECK (char_length(actor) <= 200);

-- Retention deletes succeeded jobs oldest first in bounded batches; stats count finished jobs.
CREATE INDEX jobs_finished_idx ON jobs (status, finished_at)
  WHERE status IN ('succeeded', 'cancelled');

-- Dead jobs are never removed by a timer. An explicit purge records what it removed here (the
-- jobs' own history goes with them).
CREATE TABLE purges (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at          timestamptz NOT NULL DEFAULT now(),
  actor       text        CHECK (char_length(actor) <= 200),
  reason      text        CHECK (char_length(reason) <= 1000),
  status      job_status  NOT NULL,
  queue_name  text,
  older_than  timestamptz NOT NULL,
  removed     integer     NOT NULL,
  removed_ids bigint[]    NOT NULL
);
