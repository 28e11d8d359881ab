import type pg from 'pg';
import { fence, fenceHolds, fenceLossCode, lost, type FencedOutcome, type FenceParams } from './fence.js';
import { ms, transaction, type Queryable, type StatementContext } from './statement.js';

/**
 * Finishing attempts: completion, failure, release at shutdown, the end of a cancelled attempt,
 * and the release of ordering keys with the promotion of each key's next head.
 */

/**
 * CTEs that delete the events and effects of the jobs a CTE (`removed`, with an `id` column)
 * deleted: since migration 0014 no foreign key cascades to them (a moved job's rows point at
 * jobs_succeeded). `= ANY(ARRAY(…))`: a probe of each table's job_id index per job.
 */
export function dropTrail(s: string, removed: string): string {
  return `trail_events AS (
         DELETE FROM ${s}.job_events e WHERE e.job_id = ANY (ARRAY(SELECT id FROM ${removed}))
       ), trail_effects AS (
         DELETE FROM ${s}.job_effects f WHERE f.job_id = ANY (ARRAY(SELECT id FROM ${removed}))
       )`;
}

/** The keys of the jobs a CTE (`finished`) finished, with how many of each: what releaseKeys takes. */
export function keysOf(finished: string): string {
  return `SELECT queue_name, ordering_key, count(*)::int AS n FROM ${finished} WHERE ordering_key IS NOT NULL GROUP BY 1, 2`;
}

/**
 * Statements that finish jobs (succeeded, cancelled, deleted) release their ordering keys: CTEs
 * that decrement each key's count of unfinished jobs (`released_keys`), and the statement reports
 * the keys (`key_queues`, `key_names`) so that `promoteKeyHeads` can run next in the same
 * transaction, with a snapshot that sees every producer that held the key's row before us.
 *
 * A key's row is never waited for. A producer adding to a key holds the row until its transaction
 * commits, which may take as long as the producer likes; waiting for it would stall this
 * statement, and a completer batch carries many queues' jobs. A key whose row is held is handed
 * off instead (`deferred_keys`, into key_handoffs, in this same transaction) and released by the
 * KeyHandoffs pass once the row is free. Key rows are locked in one global order (queue, key), so
 * two statements never lock two keys in opposite orders (a deadlock), and each is probed by its
 * primary key (LATERAL: one probe per key, O(batch) whatever the planner thinks of the table).
 *
 * `finishedKeys` selects (queue_name, ordering_key, n); `defer: false` (the handoff pass itself)
 * leaves what it cannot release where it is instead of handing it off again.
 */
export function releaseKeys(s: string, finishedKeys: string, defer = true): string {
  return `finished_keys AS (
         ${finishedKeys}
       ), locked_keys AS (
         SELECT f.queue_name, f.ordering_key, f.n
         FROM (SELECT * FROM finished_keys ORDER BY queue_name, ordering_key) f
           CROSS JOIN LATERAL (SELECT 1 FROM ${s}.ordering_keys ok
                               WHERE ok.queue_name = f.queue_name AND ok.ordering_key = f.ordering_key
                               FOR UPDATE SKIP LOCKED) o
       ), released_keys AS (
         -- By key, not by the ctid the lock returned: a producer that committed after this
         -- statement's snapshot and before its lock left a row version the snapshot cannot see, so
         -- a ctid match updated nothing (the key's count stayed one too high, and its next job
         -- never became the head). By key, the update finds the version it can see and moves to
         -- the latest one, which this statement already holds.
         UPDATE ${s}.ordering_keys AS ok SET unfinished = ok.unfinished - l.n
         FROM locked_keys l
         WHERE ok.queue_name = l.queue_name AND ok.ordering_key = l.ordering_key
         RETURNING ok.queue_name, ok.ordering_key
       ), deferred_keys AS (
         ${
           defer
             ? `INSERT INTO ${s}.key_handoffs (queue_name, ordering_key, n)
         SELECT f.queue_name, f.ordering_key, f.n FROM finished_keys f
         WHERE NOT EXISTS (SELECT 1 FROM locked_keys l WHERE l.queue_name = f.queue_name AND l.ordering_key = f.ordering_key)
         RETURNING 1`
             : `SELECT 1 FROM finished_keys f
         WHERE NOT EXISTS (SELECT 1 FROM locked_keys l WHERE l.queue_name = f.queue_name AND l.ordering_key = f.ordering_key)`
         }
       )`;
}

export const RELEASED_KEYS_COLUMNS = `(SELECT array_agg(queue_name) FROM released_keys) AS key_queues,
              (SELECT array_agg(ordering_key) FROM released_keys) AS key_names,
              (SELECT count(*) FROM deferred_keys)::int AS keys_deferred`;
/**
 * A cancelled job whose attempt may still be running (see migration 0006): it holds its key until
 * its worker confirms the attempt is over or its lease runs out. The same test as the predicate of
 * jobs_key_holder_idx, so the "has a head" probe can use it.
 */
export function holdsKey(job: string): string {
  return `(${job}.status IN ('scheduled', 'pending', 'running', 'dead') OR (${job}.status = 'cancelled' AND ${job}.lease_expires_at IS NOT NULL))`;
}

/** The columns of RELEASED_KEYS_COLUMNS, as a statement returns them. */
export interface ReleasedKeysRow {
  key_queues: string[] | null;
  key_names: string[] | null;
  keys_deferred: number;
}

/** The ordering keys a statement released (promoteKeyHeads takes them next), and how many it handed off. */
export interface KeyRelease {
  queues: string[];
  names: string[];
  /** Keys whose row a producer held: handed off to the KeyHandoffs pass. */
  deferred: number;
}

export const NO_KEYS: KeyRelease = { queues: [], names: [], deferred: 0 };

export function keyRelease(row: ReleasedKeysRow | undefined): KeyRelease {
  if (!row) return NO_KEYS;
  return { queues: row.key_queues ?? [], names: row.key_names ?? [], deferred: row.keys_deferred ?? 0 };
}

/**
 * The succeeded jobs that stay in jobs (completed by UPDATE) instead of moving to jobs_succeeded
 * (migration 0014), and why:
 *  - a unique key of scope 'ever' is held while the row exists, and only the unique index on jobs
 *    enforces it (migration 0012): moved, the key would be free again;
 *  - a flow child: the flow statements (flows.ts) read a parent's children, their status and
 *    results from jobs, and the pruner keeps a child until its parent finished. (Children complete
 *    through completeChild, an UPDATE; this covers a child completed any other way.)
 */
export function staysInJobs(job: string): string {
  return `(${job}.parent_id IS NOT NULL OR (${job}.unique_key IS NOT NULL AND ${job}.unique_scope = 'ever'))`;
}

/**
 * The columns of jobs, in the order of the table (and of jobs_succeeded, created LIKE jobs): what
 * completion copies into the history. A migration that adds a column to jobs adds it here, to
 * jobs_succeeded and to the job_rows view.
 */
export const JOB_COLUMNS = [
  'id', 'queue_name', 'payload', 'status', 'priority', 'available_at', 'attempt_count', 'max_attempts', 'max_runtime_ms',
  'backoff_base_ms', 'backoff_max_ms', 'lease_owner', 'lease_token', 'lease_expires_at', 'deadline_at', 'claimed_at',
  'heartbeat_at', 'release_count', 'last_error_code', 'last_error_message', 'created_at', 'finished_at', 'trace_context',
  'ordering_key', 'key_waiting', 'payload_version', 'group_key', 'rate_limited_count', 'parent_id', 'awaiting_children',
  'fail_on_dead_child', 'result', 'unique_key', 'unique_scope', 'unique_period', 'debounce_key',
] as const;

/** What completion changes on a moved row (the rest is copied as it was): the same as the UPDATE of a kept one. */
const SUCCEEDED_OVERRIDES: Partial<Record<(typeof JOB_COLUMNS)[number], string>> = {
  status: `'succeeded'`,
  finished_at: 'now()',
  lease_expires_at: 'NULL::timestamptz',
};

/** One row's outcome of a batch completion, by (id, token). */
export type CompletionRow = { id: string; token: string; /** The row's status before the statement. */ status: string | null } & FencedOutcome;

export interface CompleteManyParams {
  ids: string[];
  tokens: string[];
  owner: string;
}

export interface FailParams extends FenceParams {
  dead: boolean;
  delayMs: number;
  code: string;
  message: string;
}

export interface ReleaseParams extends FenceParams {
  /** The handler had started (false: a buffered job, its attempt given back without counting a release). */
  started: boolean;
  maxFreeReleases: number;
}

export function finishStatements({ define, s, jobs, jobsSucceeded, jobRows, events, status }: StatementContext) {
  return {
    /**
     * Completes a batch of jobs in one statement, each row still fenced on its own: a stale row is
     * refused (and recorded as a lost fence) while the others complete. Reports every row's outcome
     * by (id, token): one batch may hold a stale and a current completion of the same job, and only
     * the current one is applied. `status` is the row's status before this statement (a retried
     * write learns from it whether its earlier try committed). The worker's lease_owner stays on
     * the row: it says who finished the job (see fenceLossCode). Rows come applied first, then
     * refused, not in input order.
     * $1 ids, $2 tokens, $3 owner.
     */
    completeMany: define(
      'complete-many',
      `WITH input AS (
         SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
       ), moved AS (
         -- The common case: the row leaves jobs for jobs_succeeded (migration 0014), so no index of
         -- jobs takes a new entry. Fenced exactly as the update below.
         -- = ANY($1): a primary-key probe per id, however the planner sizes unnest(). The token is
         -- matched through a hashed subplan, not a join with the input: the planner made that join
         -- a nested loop, O(batch²) comparisons (35 ms of a 500-row batch). coalesce() keeps the IN
         -- a subplan (a bare IN is turned into the same nested-loop semi-join).
         DELETE FROM ${jobs} AS j
         WHERE j.id = ANY ($1::bigint[]) AND coalesce((j.id, j.lease_token) IN (SELECT id, token FROM input), false)
           AND ${fenceHolds('j', '$3')} AND NOT ${staysInJobs('j')}
         RETURNING j.*
       ), history AS (
         INSERT INTO ${jobsSucceeded} (${JOB_COLUMNS.join(', ')})
         SELECT ${JOB_COLUMNS.map((c) => SUCCEEDED_OVERRIDES[c] ?? `m.${c}`).join(', ')}
         FROM moved m
       ), kept AS (
         -- A job that must stay in jobs (staysInJobs) completes by UPDATE, as before 0014. Only
         -- the ids the DELETE did not take are probed: the common batch (all moved) probes none.
         UPDATE ${jobs} AS j
         SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
         WHERE j.id = ANY (ARRAY(SELECT i.id FROM input i WHERE i.id NOT IN (SELECT id FROM moved)))
           AND coalesce((j.id, j.lease_token) IN (SELECT id, token FROM input), false)
           AND ${fenceHolds('j', '$3')} AND ${staysInJobs('j')}
         RETURNING j.id, j.lease_token AS token, j.queue_name, j.ordering_key
       ), done AS (
         SELECT m.id, m.lease_token AS token, m.queue_name, m.ordering_key FROM moved m
         UNION ALL
         SELECT k.id, k.token, k.queue_name, k.ordering_key FROM kept k
       ), ${releaseKeys(s, keysOf('done'))}, refused AS (
         -- Only the refused rows are read again: an applied row's status before this statement was
         -- 'running' (the fence says so), and the common batch, all applied, reads nothing more.
         -- One primary-key probe per refused row: LIMIT keeps the LATERAL a probe (without it the
         -- subquery is pulled up into a join, which stale statistics can make a scan of jobs).
         SELECT i.id, i.token, j.id AS job_id, j.status, j.attempt_count,
                CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 'i.token', '$3')} END AS loss
         FROM input i
           -- job_rows: a moved row is still reported (FINISHED, by this claim: a retried write's
           -- earlier try committed).
           LEFT JOIN LATERAL (SELECT x.id, x.status, x.attempt_count, x.lease_token, x.lease_owner FROM ${jobRows} x WHERE x.id = i.id LIMIT 1) j ON true
         WHERE (i.id, i.token) NOT IN (SELECT id, token FROM done)
       ), lost AS (
         INSERT INTO ${events} (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT r.job_id, 'lost_fence', r.status, r.attempt_count, r.token, $3, r.loss
         FROM refused r WHERE r.job_id IS NOT NULL
       )
       SELECT d.id::text AS id, d.token::text AS token, true AS applied, NULL AS loss, 'running' AS status,
              ${RELEASED_KEYS_COLUMNS}
       FROM done d
       UNION ALL
       SELECT r.id::text, r.token::text, false, r.loss, r.status::text,
              ${RELEASED_KEYS_COLUMNS}
       FROM refused r`,
      (p: CompleteManyParams) => [p.ids, p.tokens, p.owner],
      (rows: ({ id: string; token: string; applied: boolean; loss: string; status: string | null } & ReleasedKeysRow)[]) => ({
        rows: rows.map((r): CompletionRow => (r.applied ? { id: r.id, token: r.token, status: r.status, ok: true } : { id: r.id, token: r.token, status: r.status, ...lost(r.loss) })),
        keys: keyRelease(rows[0]),
      }),
    ),

    /**
     * After jobs of ordering keys finished: for each key that has no head any more (no unfinished
     * job that is not waiting; a dead head still holds its key), the lowest waiting job becomes
     * the head, and its queue's workers are woken. Keys with nothing unfinished are forgotten.
     * Runs in the transaction of the statement that finished the jobs (see releaseKeys).
     * $1 queue names, $2 ordering keys, $3 channel.
     */
    promoteKeyHeads: define(
      'promote-key-heads',
      `WITH keys AS (
         SELECT DISTINCT q, k FROM unnest($1::text[], $2::text[]) AS t(q, k)
       ), next AS (
         SELECT (SELECT w.id FROM ${jobs} w
                 WHERE w.queue_name = keys.q AND w.ordering_key = keys.k AND w.key_waiting
                   AND w.status IN ('scheduled', 'pending')
                 ORDER BY w.id LIMIT 1) AS id
         FROM keys
         -- "No head left", as a scalar subquery with LIMIT rather than NOT EXISTS: the planner
         -- cannot turn it into an anti-join, which stale statistics make a hash of every head in
         -- the queue. Each key is one probe of the head index.
         WHERE (SELECT 1 FROM ${jobs} h
                WHERE h.queue_name = keys.q AND h.ordering_key = keys.k AND NOT h.key_waiting
                  AND ${holdsKey('h')}
                LIMIT 1) IS NULL
       ), promoted AS (
         -- = ANY(ARRAY(…)), as in the claim, for the same reason: a join can become a walk of
         -- every waiting job.
         UPDATE ${jobs} AS j SET key_waiting = false
         WHERE j.id = ANY (ARRAY(SELECT id FROM next)) AND j.key_waiting
         RETURNING j.queue_name, j.status
       ), forgotten AS (
         -- Each key row is found by its primary key, one probe per key, and deleted by its ctid:
         -- given a join (even with = ANY on both columns) the planner may read every key row of
         -- the queue per batch, O(keys) instead of O(batch). A row a producer updates meanwhile
         -- has a new ctid and unfinished > 0: it is rechecked and kept.
         DELETE FROM ${s}.ordering_keys AS ok
         WHERE ok.ctid = ANY (ARRAY(
                 SELECT (SELECT o.ctid FROM ${s}.ordering_keys o
                         WHERE o.queue_name = keys.q AND o.ordering_key = keys.k AND o.unfinished = 0)
                 FROM keys))
           AND ok.unfinished = 0
       ), woken AS (
         SELECT count(pg_notify($3, d.queue_name)) AS n
         FROM (SELECT DISTINCT queue_name FROM promoted WHERE status = 'pending') d
       )
       SELECT (SELECT count(*) FROM promoted)::int AS promoted, (SELECT n FROM woken) AS woken`,
      (p: { keys: KeyRelease; channel: string }) => [p.keys.queues, p.keys.names, p.channel],
      (rows: { promoted: number; woken: number }[]) => ({ promoted: rows[0]?.promoted ?? 0 }),
    ),

    /**
     * A failed attempt: dead, or back to pending/scheduled after the delay the worker computed.
     * Fenced like a completion; the audit row is written by the same statement.
     * $1 id, $2 owner, $3 token, $4 dead?, $5 delay ms, $6 error code, $7 error message.
     */
    fail: define(
      'fail',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       moved AS (
         UPDATE ${jobs} AS j
         SET status = CASE WHEN $4::boolean THEN 'dead'::${status}
                           WHEN $5::bigint > 0 THEN 'scheduled'::${status}
                           ELSE 'pending'::${status} END,
             available_at = CASE WHEN $4::boolean THEN j.available_at ELSE now() + ${ms('$5::bigint')} END,
             finished_at = CASE WHEN $4::boolean THEN now() END,
             -- A job this worker ends keeps its owner: the record of who finished it.
             lease_owner = CASE WHEN $4::boolean THEN j.lease_owner END, lease_expires_at = NULL, deadline_at = NULL,
             last_error_code = $6, last_error_message = $7
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING j.id, j.status, j.attempt_count
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code, message)
         SELECT m.id, CASE WHEN m.status = 'dead' THEN 'dead' ELSE 'retry_scheduled' END, 'running', m.status,
                m.attempt_count, t.token, t.owner, $6, $7
         FROM moved m CROSS JOIN target t
         UNION ALL
         SELECT j.id, 'lost_fence', j.status, NULL, j.attempt_count, t.token, t.owner, ${fenceLossCode('j', 't.token', 't.owner')}, NULL
         -- job_rows: a job another completion moved to jobs_succeeded is reported as before 0014.
         FROM target t JOIN ${jobRows} j ON j.id = t.id
         WHERE NOT EXISTS (SELECT 1 FROM moved)
       )
       SELECT (SELECT count(*) FROM moved)::int AS applied,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token', 't.owner')} END AS loss,
              -- Refused, but this very failure happened: an earlier try of this write committed
              -- and its reply was lost (a retried write learns it from here). Its retry is in the
              -- history (only this statement writes 'retry_scheduled'), or its death is on the row
              -- (a worker's own 'dead' keeps its owner; the reaper's clears it).
              CASE WHEN NOT EXISTS (SELECT 1 FROM moved) THEN
                coalesce(j.status = 'dead' AND j.lease_token = t.token AND j.lease_owner = t.owner, false)
                OR EXISTS (SELECT 1 FROM ${events} e WHERE e.job_id = t.id AND e.lease_token = t.token AND e.worker = t.owner
                             AND e.kind = 'retry_scheduled') END AS already
       FROM target t LEFT JOIN ${jobRows} j ON j.id = t.id`,
      (p: FailParams) => [p.id, p.owner, p.token, p.dead, p.delayMs, p.code, p.message],
      // `already`: refused, but an earlier try of this very write committed (its reply was lost).
      (rows: { applied: number; loss: string; already: boolean | null }[]): FencedOutcome<{ already: boolean }> => {
        const row = rows[0];
        if (row && (row.applied === 1 || row.already)) return { ok: true, already: row.applied !== 1 };
        return lost(row?.loss);
      },
    ),

    /**
     * Shutdown hands a job back at once instead of leaving it to the reaper. It gives the attempt
     * back, unless the job has already been released $5 times: then the attempt counts (and may be
     * its last), so a crash-looping deploy cannot retry a job forever. Jobs that never started
     * ($4 = false) give their attempt back without counting a release.
     * $1 id, $2 owner, $3 token, $4 started?, $5 max free releases.
     */
    release: define(
      'release',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       released AS (
         UPDATE ${jobs} AS j
         SET status = CASE WHEN $4::boolean AND j.release_count >= $5 AND j.attempt_count >= j.max_attempts
                           THEN 'dead'::${status} ELSE 'pending'::${status} END,
             finished_at = CASE WHEN $4::boolean AND j.release_count >= $5 AND j.attempt_count >= j.max_attempts
                                THEN now() END,
             attempt_count = CASE WHEN $4::boolean AND j.release_count >= $5 THEN j.attempt_count
                                  ELSE j.attempt_count - 1 END,
             release_count = j.release_count + CASE WHEN $4::boolean THEN 1 ELSE 0 END,
             last_error_code = CASE WHEN $4::boolean THEN 'RELEASED' ELSE j.last_error_code END,
             lease_owner = CASE WHEN $4::boolean AND j.release_count >= $5 AND j.attempt_count >= j.max_attempts
                                THEN j.lease_owner END,
             lease_expires_at = NULL, deadline_at = NULL
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING j.id, j.status, j.attempt_count, j.release_count
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code, message)
         SELECT r.id, 'released', 'running', r.status, r.attempt_count, t.token, t.owner, 'RELEASED',
                'released at shutdown (' || r.release_count || ' so far)'
         FROM released r CROSS JOIN target t
       )
       SELECT (SELECT count(*) FROM released)::int AS applied,
              -- As in fail: an earlier try of this release committed and its reply was lost.
              CASE WHEN NOT EXISTS (SELECT 1 FROM released) THEN EXISTS (
                SELECT 1 FROM ${events} e WHERE e.job_id = t.id AND e.lease_token = t.token AND e.worker = t.owner
                  AND e.kind = 'released') END AS already
       FROM target t`,
      (p: ReleaseParams) => [p.id, p.owner, p.token, p.started, p.maxFreeReleases],
      // The release reports no loss code: a refused release is a lost lease.
      (rows: { applied: number; already: boolean | null }[]): FencedOutcome<{ already: boolean }> => {
        const row = rows[0];
        if (row && (row.applied === 1 || row.already)) return { ok: true, already: row.applied !== 1 };
        return lost(undefined);
      },
    ),

    /**
     * The worker of a cancelled job confirms that the job's attempt is over (its handler settled,
     * or it never started): the job lets go of its lease and of its ordering key. Not a fenced
     * write of the job's state (that is final already); matched on this attempt's token and owner.
     * $1 id, $2 owner, $3 token.
     */
    endCancelledAttempt: define(
      'end-cancelled-attempt',
      `WITH ended AS (
         UPDATE ${jobs} AS j SET lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         -- status::text, as in fence(): a test jobs_cancelled_lease_idx cannot serve, so the row is
         -- found by its primary key (after a mass cancel the partial index is large, and stale
         -- statistics made every confirmation walk it).
         WHERE j.id = $1 AND j.status::text = 'cancelled' AND j.lease_owner = $2 AND j.lease_token = $3
           AND j.lease_expires_at IS NOT NULL
         RETURNING j.id, j.queue_name, j.ordering_key
       ), ${releaseKeys(s, keysOf('ended'))}
       SELECT (SELECT count(*) FROM ended)::int AS ended, ${RELEASED_KEYS_COLUMNS}`,
      (p: FenceParams) => [p.id, p.owner, p.token],
      (rows: ({ ended: number } & ReleasedKeysRow)[]) => ({ ended: rows[0]?.ended ?? 0, keys: keyRelease(rows[0]) }),
    ),
  };
}

/** The promoteKeyHeads statement, as releasingKeys and promoteReleasedKeys run it. */
export type PromoteKeyHeads = (db: Queryable, params: { keys: KeyRelease; channel: string }) => Promise<unknown>;

/**
 * The second half of releasingKeys, for a caller that runs the first statement in a transaction
 * of its own. Returns whether some keys were handed off: tell the handoff pass after the commit.
 */
export async function promoteReleasedKeys(db: Queryable, promote: PromoteKeyHeads, channel: string, keys: KeyRelease): Promise<boolean> {
  if (keys.queues.length > 0) await promote(db, { keys, channel });
  return keys.deferred > 0;
}

/**
 * Runs a statement that may finish jobs of ordering keys and, in the same transaction, promotes
 * the next head of each key it released. The second statement's snapshot is taken after the
 * first one held the keys' rows, so it sees every job a producer added to those keys.
 * `onDeferred` is told, once the transaction has committed (so the handoff pass can see them),
 * when some keys were handed off because a producer held their rows.
 */
export async function releasingKeys<R extends { keys: KeyRelease }>(
  pool: pg.Pool,
  promote: PromoteKeyHeads,
  statementTimeoutMs: number,
  channel: string,
  write: (db: Queryable) => Promise<R>,
  onDeferred: () => void = () => {},
): Promise<R> {
  let deferred = false;
  const result = await transaction(
    pool,
    async (client) => {
      const written = await write(client);
      deferred = await promoteReleasedKeys(client, promote, channel, written.keys);
      return written;
    },
    { statementTimeoutMs },
  );
  if (deferred) onDeferred();
  return result;
}
