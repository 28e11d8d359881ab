-- 0013: recurring jobs (docs/recurring-jobs.md). A schedule is a row: every process's ticker reads
-- the due ones and, in one statement per batch of them, inserts each tick's job and moves its schedule on
-- (see advanceSchedules in lib/engine/store/schedules.ts).
--
-- Compatible with the previous version: new tables only, which older statements never name. An
-- older process has no ticker, so it neither runs nor harms schedules.

CREATE TABLE schedules (
  name             text        PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 200),
  -- The cheap form of the queue-name rule (see 0007): every tick updates the row, and every CHECK runs then.
  queue_name       text        NOT NULL CHECK (char_length(queue_name) <= 128 AND queue_name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$'),
  -- 'code': declared by a @Recurring decorator (or PgQueue.recurring) and kept by the deploys;
  -- 'runtime': created with schedules.upsert, which no deploy ever touches.
  source           text        NOT NULL CHECK (source IN ('code', 'runtime')),
  cron             text        NOT NULL,
  tz               text        NOT NULL DEFAULT 'UTC',
  payload          jsonb       NOT NULL DEFAULT 'null',
  priority         integer     NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
  max_attempts     integer     CHECK (max_attempts >= 1),
  max_runtime_ms   integer     CHECK (max_runtime_ms >= 1),
  group_key        text,
  -- What a tick found after every process was down does: 'latest' (the latest missed tick runs
  -- once), 'all' (each runs, the latest max_missed_runs), 'none'. A tick is missed once it is more
  -- than missed_after_ms late.
  missed_policy    text        NOT NULL DEFAULT 'latest' CHECK (missed_policy IN ('latest', 'all', 'none')),
  missed_after_ms  integer     NOT NULL CHECK (missed_after_ms >= 0),
  max_missed_runs  integer     NOT NULL CHECK (max_missed_runs >= 1),
  -- false: a tick is skipped (and counted) while the previous tick's job is unfinished.
  overlap          boolean     NOT NULL DEFAULT false,
  -- A code schedule's definition, hashed: what a deploy compares (see schedule_declarations).
  definition_hash  text,
  -- The next tick not handled yet (NULL: the pattern has no tick left), the last one handled,
  -- the job of the last tick that ran, and what every tick so far became.
  next_tick_at     timestamptz,
  last_tick_at     timestamptz,
  last_job_id      bigint,
  ticks_run        bigint      NOT NULL DEFAULT 0,
  ticks_missed     bigint      NOT NULL DEFAULT 0,
  ticks_skipped    bigint      NOT NULL DEFAULT 0,
  -- Paused by an operator ('operator'), or because the code that declared it no longer does ('removed').
  paused_at        timestamptz,
  paused_reason    text        CHECK (paused_reason IN ('operator', 'removed')),
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CHECK ((paused_at IS NULL) = (paused_reason IS NULL)),
  CHECK ((source = 'code') = (definition_hash IS NOT NULL))
);

-- The ticker's scan: active schedules by their next tick.
CREATE INDEX schedules_due_idx ON schedules (next_tick_at) WHERE paused_at IS NULL;
CREATE INDEX schedules_queue_idx ON schedules (queue_name, name);

-- One row per tick handled: the unique (schedule, tick) key that the statement inserting a tick's
-- job claims first (ON CONFLICT DO NOTHING), so a tick can never get a second job, whatever moved
-- the schedule back (an upsert, a resume, a deploy, two processes with different clocks). A table
-- of its own rather than a column of jobs: it outlives the job's retention (a pruned job's tick
-- still counts as run), it records skipped ticks (job_id NULL), and the jobs table, written by
-- every claim and completion, carries nothing for it. Kept for the ticker's tickRetentionMs.
CREATE TABLE schedule_ticks (
  schedule_name text        NOT NULL,
  tick_at       timestamptz NOT NULL,
  job_id        bigint,
  skipped       boolean     NOT NULL DEFAULT false,
  handled_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (schedule_name, tick_at)
);
CREATE INDEX schedule_ticks_handled_idx ON schedule_ticks (handled_at);

-- The code declarations of a queue's schedules seen so far, each once, stamped by the database
-- the first time a process declared it: the newest one is in force, so an older release's process
-- (restarted during a rolling deploy) can never bring its definitions back (docs/recurring-jobs.md#deploys).
CREATE TABLE schedule_declarations (
  queue_name    text        NOT NULL,
  fingerprint   text        NOT NULL,
  first_seen_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (queue_name, fingerprint)
);
