-- 0009: flow control across the cluster: groups, global and per-group concurrency, rate limits,
-- throttling reported by handlers, and fairness between groups.
--
-- Limits live in the database, so every process obeys them without a coordinator. A queue with
-- none keeps the plain claim of 0003 (queues.flow is false): the new columns cost it nothing but
-- the read of two more columns of its queue row, which that claim reads anyway (paused_at).
--
-- Compatible with the previous version: every change adds a column, a table or an index that
-- older statements never name, and jobs_expired_lease_idx is replaced by jobs_running_idx, which
-- serves the same predicate (older reapers use it the same way). An older process ignores limits,
-- though: they hold across the cluster once every process runs this version (docs/flow-control.md).
--
-- Building the two new indexes scans jobs under a SHARE lock (writes wait). On a large table an
-- operator can build them first with CREATE INDEX CONCURRENTLY (same names and definitions): this
-- migration then only drops the old index.

-- A job's group (a tenant, an account): NULL for a job without one. No CHECK (PostgreSQL evaluates
-- every CHECK on every UPDATE of the row, each claim and completion): the engine validates it.
ALTER TABLE jobs ADD COLUMN group_key text;
-- Claims given back because the handler reported a rate limit without charging the attempt
-- (RateLimitedError); past the bound, attempts count again.
ALTER TABLE jobs ADD COLUMN rate_limited_count integer NOT NULL DEFAULT 0;

-- The queue's limits (NULL: none), declared by handlers at start and changeable at run time, and
-- the claim's state: `flow` says whether any limit, fairness or group setting is on (the plain claim
-- refuses such a queue and its worker switches to the flow claim); fair_cursor is where the
-- round-robin over groups goes on (fair_cursor_set false: from the first group).
ALTER TABLE queues
  ADD COLUMN global_concurrency integer CHECK (global_concurrency >= 1),
  ADD COLUMN group_concurrency integer CHECK (group_concurrency >= 1),
  ADD COLUMN rate_limit integer CHECK (rate_limit >= 1),
  ADD COLUMN rate_window_ms integer CHECK (rate_window_ms >= 1),
  ADD COLUMN group_rate_limit integer CHECK (group_rate_limit >= 1),
  ADD COLUMN group_rate_window_ms integer CHECK (group_rate_window_ms >= 1),
  ADD COLUMN group_fairness boolean NOT NULL DEFAULT false,
  ADD COLUMN throttled_until timestamptz,
  ADD COLUMN flow boolean NOT NULL DEFAULT false,
  ADD COLUMN fair_cursor text,
  ADD COLUMN fair_cursor_set boolean NOT NULL DEFAULT false,
  ADD CONSTRAINT queues_rate_window CHECK ((rate_limit IS NULL) = (rate_window_ms IS NULL)),
  ADD CONSTRAINT queues_group_rate_window CHECK ((group_rate_limit IS NULL) = (group_rate_window_ms IS NULL));

-- Per-group settings, only for groups that have one (a group without a row has the queue's
-- defaults and weight 1): changeable at run time. throttled_until: a handler reported the group's
-- own rate limit (RateLimitedError).
CREATE TABLE job_groups (
  queue_name      text        NOT NULL,
  group_key       text        NOT NULL,
  concurrency     integer     CHECK (concurrency >= 0),
  weight          integer     NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
  rate_limit      integer     CHECK (rate_limit >= 0),
  rate_window_ms  integer     CHECK (rate_window_ms >= 1),
  throttled_until timestamptz,
  PRIMARY KEY (queue_name, group_key),
  CHECK ((rate_limit IS NULL) = (rate_window_ms IS NULL))
);

-- Claim times of rate-limited queues, by database time, kept for the longest window only (the
-- flow claim deletes older rows): the sliding window counts them. Every claim counts, retries and
-- attempts that later lose their lease included.
CREATE TABLE claim_log (
  queue_name text        NOT NULL,
  group_key  text,
  claimed_at timestamptz NOT NULL
);
CREATE INDEX claim_log_queue_idx ON claim_log (queue_name, claimed_at);
CREATE INDEX claim_log_group_idx ON claim_log (queue_name, group_key, claimed_at) WHERE group_key IS NOT NULL;

-- Claimable jobs of groups, by group: the flow claim walks it group by group (a skip scan), and
-- takes each group's jobs in the claim's usual order. Grouped jobs only: a job without a group
-- pays no entry.
CREATE INDEX IF NOT EXISTS jobs_claimable_group_idx ON jobs (queue_name, group_key, priority DESC, available_at, id)
  WHERE status = 'pending' AND NOT key_waiting AND group_key IS NOT NULL;

-- Running jobs by queue and group: the slots in use against each limit are counted here (a slot is
-- a running row, prefetched jobs included). It replaces jobs_expired_lease_idx: the reaper's scan
-- of expired leases reads the same set of rows (every running job), and a job still gets one entry.
CREATE INDEX IF NOT EXISTS jobs_running_idx ON jobs (queue_name, group_key, lease_expires_at)
  WHERE status = 'running';
DROP INDEX IF EXISTS jobs_expired_lease_idx;
