-- 0001: the jobs table, its states, and the audit trail of exceptional transitions.
--
-- Written without a schema prefix: the migrator runs it with SET LOCAL search_path set to the
-- configured schema. Column names follow the reference article (queue_name, available_at,
-- attempt_count, max_attempts, lease_owner, lease_token, lease_expires_at, last_error_code).

-- Every state exists from the first migration: PostgreSQL cannot use an enum value added in the
-- same transaction, so adding one later would split a deploy in two.
-- 'scheduled' holds jobs that are not yet due (delayed enqueues, retries with backoff). Keeping
-- them out of 'pending' keeps them out of the claimable index, so a large delayed backlog costs a
-- claim nothing; the scheduler promotes due rows to 'pending' in bounded batches.
CREATE TYPE job_status AS ENUM ('scheduled', 'pending', 'running', 'succeeded', 'dead', 'cancelled');

-- Queues are declared (by a worker that handles them, or by a producer) before jobs are enqueued
-- to them, so a mistyped queue name is an error at enqueue instead of a job nobody ever claims.
CREATE TABLE queues (
  name       text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
  id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue_name         text        NOT NULL CHECK (queue_name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
  payload            jsonb       NOT NULL,
  status             job_status  NOT NULL DEFAULT 'pending',
  priority           integer     NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
  available_at       timestamptz NOT NULL DEFAULT now(),
  attempt_count      integer     NOT NULL DEFAULT 0,
  -- Policy columns: NULL at enqueue unless the producer set them; the claim fills the effective
  -- value from the handler's configuration, so the reaper can decide from the row alone.
  max_attempts       integer     CHECK (max_attempts >= 1),
  max_runtime_ms     integer     CHECK (max_runtime_ms >= 1),
  backoff_base_ms    integer     CHECK (backoff_base_ms >= 0),
  backoff_max_ms     integer     CHECK (backoff_max_ms >= 0),
  -- The lease. lease_token only ever grows: every claim increments it and nothing resets it.
  lease_owner        text,
  lease_token        bigint      NOT NULL DEFAULT 0,
  lease_expires_at   timestamptz,
  -- Hard bound of the current attempt: no heartbeat can extend the lease past it.
  deadline_at        timestamptz,
  claimed_at         timestamptz,
  heartbeat_at       timestamptz,
  -- Shutdown releases give the attempt back; after a bounded number they stop doing so.
  release_count      integer     NOT NULL DEFAULT 0,
  last_error_code    text        CHECK (char_length(last_error_code) <= 64),
  last_error_message text        CHECK (char_length(last_error_message) <= 1000),
  created_at         timestamptz NOT NULL DEFAULT now(),
  finished_at        timestamptz,
  CONSTRAINT jobs_running_has_lease CHECK (
    status <> 'running' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL AND deadline_at IS NOT NULL)
  )
);

-- The claim walks this index in claim order. Only due work is 'pending', so the range it reads
-- is claimable work, whatever the size of the delayed backlog.
CREATE INDEX jobs_claimable_idx ON jobs (queue_name, priority DESC, available_at, id)
  WHERE status = 'pending';

-- The reaper's scan: running jobs by lease expiry.
CREATE INDEX jobs_expired_lease_idx ON jobs (lease_expires_at)
  WHERE status = 'running';

-- The scheduler's scan: not-yet-due jobs by due time.
CREATE INDEX jobs_scheduled_idx ON jobs (available_at)
  WHERE status = 'scheduled';

-- Dead jobs are an operational state: listed by queue and age.
CREATE INDEX jobs_dead_idx ON jobs (queue_name, finished_at, id)
  WHERE status = 'dead';

-- One row per exceptional transition (retry scheduled, lease expired, lost fence, dead, replayed,
-- cancelled, released), written by the same statement as the transition so that history can
-- never disagree with state. The happy path (claim, success) writes nothing here.
CREATE TABLE job_events (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id        bigint      NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  at            timestamptz NOT NULL DEFAULT now(),
  kind          text        NOT NULL,
  from_status   job_status,
  to_status     job_status,
  attempt       integer,
  lease_token   bigint,
  worker        text,
  error_code    text        CHECK (char_length(error_code) <= 64),
  message       text        CHECK (char_length(message) <= 1000)
);

CREATE INDEX job_events_job_idx ON job_events (job_id, id);
