-- 0010: flows: a parent job that waits for its children (and theirs), and the children's results.
--
-- A parent waits in 'scheduled' with available_at 'infinity' and awaiting_children: the scheduler
-- never promotes it (it is never due), nothing claims it, and it stays in the six states of 0001.
-- It becomes 'pending' when every child is resolved (succeeded, or discarded/cancelled): the
-- statement that settles it (settleParents) runs after each child's completion has committed,
-- and the flows pass settles what a crash between the two left. No child's completion locks or
-- writes its parent's row (no counter): the fan-in of 10,000 children costs each completion an
-- index probe, and no completion of another queue can wait behind a parent.
--
-- Compatible with the previous version: older statements never name the new columns; an older
-- process does not store children's results, and its pruner may delete a succeeded child before
-- its parent ran (run flows once every process has this version).
--
-- No CHECK constraints (PostgreSQL evaluates every CHECK on every UPDATE of a row): the engine
-- validates results (16 KiB of JSON at most) before they are written.
ALTER TABLE jobs
  ADD COLUMN parent_id bigint,
  ADD COLUMN awaiting_children boolean NOT NULL DEFAULT false,
  ADD COLUMN fail_on_dead_child boolean NOT NULL DEFAULT false,
  ADD COLUMN result jsonb;

-- A parent's children by state: "is any child unresolved?" is one probe of it. Children only.
CREATE INDEX IF NOT EXISTS jobs_flow_children_idx ON jobs (parent_id, status) WHERE parent_id IS NOT NULL;

-- The parents still waiting, for the flows pass.
CREATE INDEX IF NOT EXISTS jobs_flow_waiting_idx ON jobs (id) WHERE awaiting_children;
