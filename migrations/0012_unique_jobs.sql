-- 0012: unique jobs (`unique: { key, while, period }`) and debounced jobs (`debounce: { key, … }`).
--
-- A key is held by a job while the job is in the scope its producer named, and a unique index
-- enforces it: of producers racing one key, exactly one inserts, whatever the number of processes.
-- The scopes are written as conditions on columns the job's own transitions already change
-- (status, lease_token), so no claim, completion or reaper statement has to know about keys:
--   'pending'    while never claimed: scheduled or pending with lease_token = 0. A claim raises the
--                token and nothing lowers it, so a job that left the scope never comes back (a retry
--                or a shutdown release after its claim does not take the key again, and cannot
--                collide with a newer job of the key).
--   'unfinished' scheduled, pending, running or dead: a replay (dead -> pending) stays inside the
--                scope; success, cancel and discard end it, and nothing leads back from those.
--   'ever'       while the row exists: the pruner's deletion of succeeded jobs (or a purge, or
--                discard with delete) ends it.
-- Every job is in every scope when inserted (scheduled or pending, token 0), so the index answers
-- "is the key held?" for a new job of any scope: keys share one namespace per queue and period.
--
-- unique_period is the start of the key's period bucket (`periodMs`, by database time), and
-- '-infinity' for a key without a period: (queue, key, bucket) is then a plain equality, for the
-- index and for the lookups of a key's holder (NULL would need NULLS NOT DISTINCT, and a lookup
-- could not use it as an equality). NULL only for a job without a unique key.
--
-- A debounced job holds its debounce key while it was never claimed (the 'pending' scope): the
-- producers of the key update it (run time, payload) instead of adding one. Its own column and
-- index: a debounce key and a unique key of the same text are different keys.
--
-- No CHECK (PostgreSQL evaluates every CHECK on every UPDATE of the row, each claim and
-- completion: 0007, 0008): the engine validates keys and scopes before they are written. The two
-- indexes are partial on their key being non-null, first in the predicate: a job without a key
-- pays one null test per index when it is written, and no entry.
--
-- Compatible with the previous version: every change adds a nullable column (no rewrite) or an
-- index that older statements never name; an older process's jobs have no keys. Building the
-- indexes reads jobs under a SHARE lock (writes wait), though no existing row has a key, so they
-- come out empty: on a large table, build them first with CREATE INDEX CONCURRENTLY (same names
-- and definitions), and this migration finds them.

ALTER TABLE jobs
  ADD COLUMN unique_key text,
  ADD COLUMN unique_scope text,
  ADD COLUMN unique_period timestamptz,
  ADD COLUMN debounce_key text;

CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique_key_idx ON jobs (queue_name, unique_key, unique_period)
  WHERE unique_key IS NOT NULL
    AND (unique_scope = 'ever'
         OR (status IN ('scheduled', 'pending') AND lease_token = 0)
         OR (unique_scope = 'unfinished' AND status IN ('scheduled', 'pending', 'running', 'dead')));

CREATE UNIQUE INDEX IF NOT EXISTS jobs_debounce_key_idx ON jobs (queue_name, debounce_key)
  WHERE debounce_key IS NOT NULL AND status IN ('scheduled', 'pending') AND lease_token = 0;
