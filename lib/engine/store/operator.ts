import type { JobStatus } from '../types.js';
import type { DeadJobSummary, QueueAuditRecord } from '../records.js';
import { dropTrail, keyRelease, keysOf, RELEASED_KEYS_COLUMNS, releaseKeys, type ReleasedKeysRow } from './finish.js';
import type { StatementContext } from './statement.js';

/** Operators' calls: pause, cancel and discard, replay, dead jobs' pages, deletion and purges. */

export interface DeadPageParams {
  /** The keyset cursor: the last page's last job (NULL for the first page). */
  after: { finishedAt: string; id: string } | null;
  limit: number;
}

export interface PurgeParams {
  olderThan: Date;
  limit: number;
  actor: string | null;
  reason: string | null;
}

export interface DeadPage {
  jobs: DeadJobSummary[];
  /** The cursor of the page's last job (full microsecond precision). */
  lastCursor: string | undefined;
}

type DeadRow = {
  id: string;
  queue_name: string;
  priority: number;
  attempt_count: number;
  max_attempts: number | null;
  last_error_code: string | null;
  last_error_message: string | null;
  created_at: Date;
  finished_at: Date;
  lease_token: string;
  cursor: string;
};

const deadPage = (rows: DeadRow[]): DeadPage => ({
  jobs: rows.map((r) => ({
    id: r.id,
    queue: r.queue_name,
    priority: r.priority,
    attemptCount: r.attempt_count,
    maxAttempts: r.max_attempts,
    lastErrorCode: r.last_error_code,
    lastErrorMessage: r.last_error_message,
    leaseToken: r.lease_token,
    createdAt: r.created_at,
    finishedAt: r.finished_at,
  })),
  lastCursor: rows.at(-1)?.cursor,
});

export interface OperatorCallParams {
  actor: string | null;
  reason: string | null;
}

export function operatorStatements({ define, s, jobs, jobsSucceeded, jobRows, events, status }: StatementContext) {
  /**
   * A page of dead jobs, oldest death first, after a keyset cursor ($1 finished_at, $2 id; NULL
   * for the first page), $3 limit, of the jobs whose `keys` (none, queue_name, last_error_code, or
   * both) are the parameters from $4. Each page reads about what it returns, however many dead
   * jobs are kept (test/serial/flat-reads.spec.ts):
   *
   * - A statement per filter, each with the partial index of dead jobs that starts with its keys
   *   and goes on with (finished_at, id): jobs_dead_age_idx, jobs_dead_idx (queue),
   *   jobs_dead_code_idx (code), jobs_dead_queue_code_idx (both). One statement with
   *   `($4 IS NULL OR queue_name = $4)` has no index condition once it is planned generically:
   *   every page sorted every dead job.
   * - The keys bound a range rather than being equalities, `(keys, finished_at, id) > ($4…,
   *   cursor) AND (keys) <= ($4…)`, ordered by all of them: only the index that starts with the
   *   keys returns that order. With `queue_name = $4`, every index ending in (finished_at, id)
   *   does, and the planner, by its estimates, walked jobs_dead_age_idx filtering by queue: the
   *   first page of a queue whose jobs died last read every older dead job.
   * - Planned per call (planPerCall): a generic plan knows nothing of the keys' frequencies, and
   *   chose jobs_dead_idx and an incremental sort of the queue's every dead job for queue + code.
   *
   * The cursor starts the walk (a row comparison); the first page starts after -infinity (a dead
   * job always has its finished_at).
   */
  const listDeadPage = <P>(name: string, keys: readonly ('queue_name' | 'last_error_code')[], filters: (p: P) => unknown[]) => {
    const columns = keys.map((key) => `j.${key}`);
    const values = keys.map((_, i) => `$${i + 4}`);
    const order = [...columns, 'j.finished_at', 'j.id'].join(', ');
    const after = [...values, `coalesce($1::timestamptz, '-infinity')`, 'coalesce($2::bigint, 0)'].join(', ');
    return define(
      name,
      `SELECT id::text AS id, queue_name, priority, attempt_count, max_attempts, last_error_code, last_error_message,
              created_at, finished_at, lease_token::text AS lease_token,
              -- The cursor keeps the full microsecond precision a JS Date would lose.
              finished_at::text || '|' || id AS cursor
       FROM ${jobs} j
       WHERE j.status = 'dead' AND (${order}) > (${after})
         ${keys.length > 0 ? `AND (${columns.join(', ')}) <= (${values.join(', ')})` : ''}
       -- j.id, not id: a bare name in ORDER BY means the output column (id::text), whose order
       -- ('10' < '9') is not the cursor's bigint order, so pages would skip and repeat jobs that
       -- died together (one reaper batch shares its finished_at).
       ORDER BY ${order}
       LIMIT $3`,
      (p: DeadPageParams & P) => [p.after?.finishedAt ?? null, p.after?.id ?? null, p.limit, ...filters(p)],
      deadPage,
      { planPerCall: true },
    );
  };

  /**
   * An explicit purge of dead jobs that died before $1, of all queues or (`ofQueue`) of queue $5,
   * one bounded batch ($2), oldest first, recorded in purges with the ids it removed. Never run by
   * a timer. $3 actor, $4 reason. A statement per case, written and planned as listDeadPage is
   * and for the same reasons: the batch is the head of jobs_dead_age_idx, or of jobs_dead_idx for
   * a queue (a range, `queue_name >= $5 AND (queue_name, finished_at) < ($5, $1)`, in the index's
   * order). Its rows are deleted by ctid: the batch holds their row locks, so nothing can move them
   * before the delete, and a batch costs the same however large the table (a join may hash the
   * whole table; a probe of the primary key per row costs a level more per row as the table grows).
   */
  const purgeDeadBatch = <P>(name: string, ofQueue: boolean, queue: (p: P) => unknown[]) =>
    define(
      name,
      `WITH doomed AS (
         SELECT ctid FROM ${jobs}
         WHERE status = 'dead'
           AND ${ofQueue ? 'queue_name >= $5 AND (queue_name, finished_at) < ($5, $1)' : 'finished_at < $1'}
         ORDER BY ${ofQueue ? 'queue_name, ' : ''}finished_at, id
         LIMIT $2
         FOR UPDATE SKIP LOCKED
       ), removed AS (
         DELETE FROM ${jobs} AS j WHERE j.ctid = ANY (ARRAY(SELECT ctid FROM doomed)) RETURNING j.id, j.queue_name, j.ordering_key
       ), ${releaseKeys(s, keysOf('removed'))}, ${dropTrail(s, 'removed')}, logged AS (
         INSERT INTO ${s}.purges (actor, reason, status, queue_name, older_than, removed, removed_ids)
         SELECT $3, $4, 'dead', ${ofQueue ? '$5' : 'NULL'}, $1, count(*), array_agg(id ORDER BY id) FROM removed HAVING count(*) > 0
         RETURNING removed
       )
       SELECT coalesce((SELECT removed FROM logged), 0)::int AS removed, ${RELEASED_KEYS_COLUMNS}`,
      (p: PurgeParams & P) => [p.olderThan, p.limit, p.actor, p.reason, ...queue(p)],
      (rows: ({ removed: number } & ReleasedKeysRow)[]) => ({ removed: rows[0]?.removed ?? 0, keys: keyRelease(rows[0]) }),
      { planPerCall: true },
    );

  return {
    /**
     * Pauses ($2 = true) or resumes a queue for every process, and records who asked and why in
     * queue_audit (one row per call, in the same statement, so the trail cannot disagree with
     * paused_at; was_paused tells a change from a repeated request). Resuming wakes its workers.
     * The queue's row is locked first, so concurrent calls are recorded in the order they applied.
     * $1 queue, $2 paused?, $3 channel, $4 actor, $5 reason.
     */
    setQueuePaused: define(
      'set-queue-paused',
      `WITH before AS (
         SELECT name, paused_at FROM ${s}.queues WHERE name = $1 FOR UPDATE
       ), changed AS (
         UPDATE ${s}.queues AS q SET paused_at = CASE WHEN $2::boolean THEN coalesce(q.paused_at, now()) END
         FROM before b WHERE q.name = b.name RETURNING q.name, q.paused_at
       ), audit AS (
         INSERT INTO ${s}.queue_audit (queue_name, kind, was_paused, actor, reason)
         SELECT b.name, CASE WHEN $2::boolean THEN 'paused' ELSE 'resumed' END, b.paused_at IS NOT NULL, $4, $5 FROM before b
       ), woken AS (
         SELECT count(pg_notify($3, name)) AS n FROM changed WHERE paused_at IS NULL
       )
       SELECT c.name, c.paused_at, (SELECT b.paused_at IS NOT NULL FROM before b) AS was_paused FROM changed c CROSS JOIN woken`,
      (p: OperatorCallParams & { queue: string; paused: boolean; channel: string }) => [p.queue, p.paused, p.channel, p.actor, p.reason],
      (rows: { name: string; paused_at: Date | null; was_paused: boolean }[]) => ({ found: rows.length > 0, wasPaused: rows[0]?.was_paused === true }),
    ),

    /**
     * A queue's audit trail (pauses and resumes), newest first: a range of queue_audit_queue_idx
     * (queue_name, id) read backwards from $2 (NULL: the newest), at most $3 rows, so a page costs
     * what it returns however long the trail. $1 queue.
     */
    queueAudit: define(
      'queue-audit',
      `SELECT e.id::text AS id, e.queue_name, e.at, e.kind, e.was_paused, e.actor, e.reason
       FROM ${s}.queue_audit e
       WHERE e.queue_name = $1 AND e.id < coalesce($2::bigint, 9223372036854775807)
       -- e.id, not id: the output column id::text sorts '10' before '9'.
       ORDER BY e.id DESC
       LIMIT $3`,
      (p: { queue: string; before: string | null; limit: number }) => [p.queue, p.before, p.limit],
      (rows: { id: string; queue_name: string; at: Date; kind: 'paused' | 'resumed'; was_paused: boolean; actor: string | null; reason: string | null }[]): QueueAuditRecord[] =>
        rows.map((r) => ({ id: r.id, queue: r.queue_name, at: r.at, kind: r.kind, wasPaused: r.was_paused, actor: r.actor, reason: r.reason })),
    ),

    /**
     * An operator ends a job: cancel (scheduled, pending or running) or discard (dead), as given
     * by $2. It waits for the row lock (no SKIP LOCKED): a transactional completion in progress
     * decides first. A running job is cancelled at once in the table, so its worker's late writes
     * are refused by the fence with the reason "cancelled"; a NOTIFY tells that worker to abort
     * the handler's signal now rather than at its next heartbeat (and its worker checks its leases
     * every poll, in case the NOTIFY is lost).
     *
     * A running job's attempt is not over when it is cancelled: its handler may still be running,
     * so the job keeps its lease (owner, token, expiry) and its ordering key until its worker
     * confirms the attempt ended (endCancelledAttempt) or the lease runs out (the reaper's
     * endExpiredCancels). Its key's next job cannot start beside it.
     * $1 id, $2 allowed statuses, $3 event kind, $4 actor, $5 reason, $6 channel.
     */
    cancel: define(
      'cancel',
      `WITH target AS (
         SELECT id, status, lease_owner, lease_token, attempt_count FROM ${jobs} WHERE id = $1 FOR UPDATE
       ), ended AS (
         UPDATE ${jobs} AS j
         SET status = 'cancelled', finished_at = now(),
             lease_owner = CASE WHEN t.status = 'running' THEN j.lease_owner END,
             lease_expires_at = CASE WHEN t.status = 'running' THEN j.lease_expires_at END,
             deadline_at = CASE WHEN t.status = 'running' THEN j.deadline_at END,
             key_waiting = false
         FROM target t
         WHERE j.id = t.id AND t.status = ANY($2::${status}[])
         RETURNING j.id, j.queue_name, CASE WHEN t.status = 'running' THEN NULL ELSE j.ordering_key END AS ordering_key
       ), ${releaseKeys(s, keysOf('ended'))}, audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, actor, message)
         SELECT t.id, $3, t.status, 'cancelled', t.attempt_count, t.lease_token, t.lease_owner, $4, $5
         FROM target t JOIN ended e ON e.id = t.id
       ), woken AS (
         SELECT count(pg_notify($6, '*cancel:' || t.id)) AS n
         FROM target t JOIN ended e ON e.id = t.id WHERE t.status = 'running'
       )
       -- A job completion moved to jobs_succeeded (migration 0014) is reported as succeeded, not missing.
       SELECT coalesce((SELECT t.status::text FROM target t), (SELECT h.status::text FROM ${jobsSucceeded} h WHERE h.id = $1)) AS previous_status,
              EXISTS (SELECT 1 FROM ended) AS applied, ${RELEASED_KEYS_COLUMNS}
       FROM woken`,
      (p: OperatorCallParams & { id: string; allowed: JobStatus[]; kind: string; channel: string }) => [p.id, p.allowed, p.kind, p.actor, p.reason, p.channel],
      (rows: ({ previous_status: string; applied: boolean } & ReleasedKeysRow)[]) => ({
        /** undefined: no such job. */
        previousStatus: rows[0]?.previous_status ?? undefined,
        applied: rows[0]?.applied === true,
        keys: keyRelease(rows[0]),
      }),
    ),

    /**
     * Replays dead jobs in place: same id, same history (plus a 'replayed' row saying who and
     * why), a fresh attempt budget, and a token that keeps growing (the next claim increments it,
     * so a worker from before the replay can never complete the new attempt). Jobs that are not
     * dead are reported, not touched. $1 ids, $2 actor, $3 reason, $4 channel.
     */
    replay: define(
      'replay',
      `WITH input AS (
         SELECT DISTINCT unnest($1::bigint[]) AS id
       ), target AS (
         SELECT j.id, j.attempt_count, j.lease_token, j.last_error_code
         FROM ${jobs} j JOIN input i ON i.id = j.id
         WHERE j.status = 'dead'
         FOR UPDATE OF j
       ), replayed AS (
         UPDATE ${jobs} AS j
         SET status = 'pending', attempt_count = 0, release_count = 0, available_at = now(), finished_at = NULL
         FROM target t
         WHERE j.id = t.id
         RETURNING j.id, j.queue_name
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, actor, error_code, message)
         SELECT t.id, 'replayed', 'dead', 'pending', t.attempt_count, t.lease_token, $2, t.last_error_code, $3
         FROM target t
       ), woken AS (
         SELECT count(pg_notify($4, d.queue_name)) AS n FROM (SELECT DISTINCT queue_name FROM replayed) d
       )
       SELECT i.id::text AS id, r.id IS NOT NULL AS replayed, j.status::text AS status
       FROM input i
         LEFT JOIN replayed r ON r.id = i.id
         -- job_rows: a succeeded job completion moved (migration 0014) is reported as such, not missing.
         LEFT JOIN ${jobRows} j ON j.id = i.id
         CROSS JOIN woken
       ORDER BY i.id`,
      (p: OperatorCallParams & { ids: string[]; channel: string }) => [p.ids, p.actor, p.reason, p.channel],
      (rows: { id: string; replayed: boolean; status: JobStatus | null }[]) => rows.map((r) => ({ id: r.id, replayed: r.replayed, status: r.status ?? undefined })),
    ),

    // Dead jobs, oldest death first, a page at a time: one statement per filter (see listDeadPage).
    listDead: listDeadPage('list-dead', [], () => []),
    listDeadOfQueue: listDeadPage('list-dead-of-queue', ['queue_name'], (p: { queue: string }) => [p.queue]),
    listDeadWithCode: listDeadPage('list-dead-with-code', ['last_error_code'], (p: { code: string }) => [p.code]),
    listDeadOfQueueWithCode: listDeadPage('list-dead-of-queue-with-code', ['queue_name', 'last_error_code'], (p: { queue: string; code: string }) => [p.queue, p.code]),

    /**
     * Deletes one finished job on an operator's explicit request, and records that it did.
     * $1 id, $2 actor, $3 reason.
     */
    deleteJob: define(
      'delete-job',
      `WITH removed_job AS (
         DELETE FROM ${jobs} WHERE id = $1 AND status IN ('succeeded', 'dead', 'cancelled')
         RETURNING id, status, queue_name, finished_at,
                   -- Only a dead job, or a cancelled one whose attempt is not over, still holds its
                   -- key; succeeded and other cancelled ones released it.
                   CASE WHEN status = 'dead' OR lease_expires_at IS NOT NULL THEN ordering_key END AS ordering_key
       ), removed_history AS (
         -- A succeeded job that completion moved to jobs_succeeded (migration 0014): it holds no key.
         DELETE FROM ${jobsSucceeded} WHERE id = $1
         RETURNING id, status, queue_name, finished_at, NULL::text AS ordering_key
       ), removed AS (
         SELECT * FROM removed_job UNION ALL SELECT * FROM removed_history
       ), ${releaseKeys(s, keysOf('removed'))}, ${dropTrail(s, 'removed')}, logged AS (
         INSERT INTO ${s}.purges (actor, reason, status, queue_name, older_than, removed, removed_ids)
         SELECT $2, $3, status, queue_name, finished_at, 1, ARRAY[id] FROM removed
       )
       SELECT (SELECT count(*) FROM removed)::int AS removed,
              (SELECT status::text FROM ${jobRows} WHERE id = $1) AS status, ${RELEASED_KEYS_COLUMNS}`,
      (p: OperatorCallParams & { id: string }) => [p.id, p.actor, p.reason],
      (rows: ({ removed: number; status: string | null } & ReleasedKeysRow)[]) => ({
        removed: rows[0]?.removed ?? 0,
        /** The job's status when it was not removed (null: no such job). */
        status: rows[0]?.status ?? null,
        keys: keyRelease(rows[0]),
      }),
    ),

    // An explicit purge of dead jobs, a bounded batch at a time (see purgeDeadBatch).
    purgeDead: purgeDeadBatch('purge-dead', false, () => []),
    purgeDeadOfQueue: purgeDeadBatch('purge-dead-of-queue', true, (p: { queue: string }) => [p.queue]),
  };
}
