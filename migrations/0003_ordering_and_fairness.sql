-- pg-queue: incompatible-with-older-versions
--
-- 0003: per-key ordering and fair claims.
--
-- Incompatible with older code: their claim does not know key_waiting, so it would run a keyed
-- job ahead of its predecessor, and it would no longer match the claimable index's predicate.

-- Jobs of one ordering key run one at a time in id order. Only the key's head (its lowest
-- unfinished job) is claimable; the others wait with key_waiting = true, outside the claimable
-- indexes, so a claim never checks "is there an earlier unfinished job" per candidate.
ALTER TABLE jobs ADD COLUMN ordering_key text CHECK (char_length(ordering_key) BETWEEN 1 AND 256);
ALTER TABLE jobs ADD COLUMN key_waiting boolean NOT NULL DEFAULT false;

-- One row per key with unfinished jobs: the producers of a key serialise on it (so ids within a
-- key follow commit order) and the statements that finish a job maintain it.
CREATE TABLE ordering_keys (
  queue_name   text    NOT NULL,
  ordering_key text    NOT NULL,
  unfinished   integer NOT NULL CHECK (unfinished >= 0),
  PRIMARY KEY (queue_name, ordering_key)
);

-- The claimable index now leaves out waiting jobs.
DROP INDEX jobs_claimable_idx;
CREATE INDEX jobs_claimable_idx ON jobs (queue_name, priority DESC, available_at, id)
  WHERE status = 'pending' AND NOT key_waiting;

-- Fair claims take a share of each batch oldest-first, whatever the priority.
CREATE INDEX jobs_claimable_age_idx ON jobs (queue_name, available_at, id)
  WHERE status = 'pending' AND NOT key_waiting;

-- The next head of a key, found when its current head finishes.
CREATE INDEX jobs_key_waiting_idx ON jobs (queue_name, ordering_key, id)
  WHERE key_waiting;

-- "Does this key have a head?": its unfinished job that is not waiting (a dead head still holds
-- the key: ordering is only safe if an operator replays or discards it first).
CREATE INDEX jobs_key_head_idx ON jobs (queue_name, ordering_key)
  WHERE ordering_key IS NOT NULL AND NOT key_waiting AND status IN ('scheduled', 'pending', 'running', 'dead');
