import { BACKOFF_MAX_EXPONENT } from '../retry.js';
import { dropTrail, keyRelease, keysOf, RELEASED_KEYS_COLUMNS, releaseKeys, type ReleasedKeysRow } from './finish.js';
import { ms, none, type StatementContext } from './statement.js';

/** The periodic passes: the reaper, the scheduler, the pruner, and the key handoffs. */

/** Backoff with full jitter, in SQL, for the reaper: uniform in [0, min(max, base * 2^(attempt-1))], as in retry.ts. */
export function jitteredBackoffMs(job: string): string {
  return `floor(random() * least(${job}.backoff_max_ms::float8,
    ${job}.backoff_base_ms::float8 * power(2::float8, least(greatest(${job}.attempt_count - 1, 0), ${BACKOFF_MAX_EXPONENT}))))`;
}

/** A job the reaper recovered (back to scheduled, or dead). */
export interface ReapedJob {
  id: string;
  queue: string;
  status: string;
  /** LEASE_EXPIRED, MAX_RUNTIME or REAP_FAILED. */
  code: string;
  attempt: number;
}

type ReapedRow = { id: string; queue_name: string; status: string; last_error_code: string; attempt_count: number };

const reapedJobs = (rows: ReapedRow[]): ReapedJob[] =>
  rows.map((r) => ({ id: r.id, queue: r.queue_name, status: r.status, code: r.last_error_code, attempt: r.attempt_count }));

export function maintenanceStatements({ define, s, jobs, jobsSucceeded, events, status }: StatementContext) {
  return {
    /**
     * The reaper's pass: expired leases go back to 'scheduled' after a jittered backoff (the row
     * carries its policy, filled at claim), or to 'dead' when attempts are exhausted. Bounded ($1)
     * so one pass is a short transaction even after a mass crash, and SKIP LOCKED so concurrent
     * reapers split the work instead of queueing on each other. Database time only.
     * $1 limit, $2 ids to leave alone (rows a pass could not recover, see Reaper), $3 only this id
     * (NULL: any).
     */
    reapExpired: define(
      'reap-expired',
      `WITH expired AS (
         SELECT id, lease_owner, lease_token, lease_expires_at >= deadline_at AS at_deadline
         FROM ${jobs}
         WHERE status = 'running' AND lease_expires_at <= now()
           AND id <> ALL ($2::bigint[]) AND ($3::bigint IS NULL OR id = $3)
         ORDER BY lease_expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
       ), reaped AS (
         UPDATE ${jobs} AS j
         SET status = CASE WHEN j.attempt_count >= j.max_attempts THEN 'dead'::${status} ELSE 'scheduled'::${status} END,
             available_at = CASE WHEN j.attempt_count >= j.max_attempts THEN j.available_at
                                 ELSE now() + ${ms(jitteredBackoffMs('j'))} END,
             finished_at = CASE WHEN j.attempt_count >= j.max_attempts THEN now() END,
             last_error_code = CASE WHEN e.at_deadline THEN 'MAX_RUNTIME' ELSE 'LEASE_EXPIRED' END,
             last_error_message = CASE WHEN e.at_deadline THEN 'the attempt reached its maximum runtime'
                                       ELSE 'the lease expired without a heartbeat' END,
             lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         FROM expired e
         WHERE j.id = e.id
         RETURNING j.id, j.queue_name, j.status, j.attempt_count, j.last_error_code, e.lease_owner, e.lease_token
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code)
         SELECT id, CASE WHEN status = 'dead' THEN 'dead' ELSE 'lease_expired' END, 'running', status,
                attempt_count, lease_token, lease_owner, last_error_code
         FROM reaped
       )
       SELECT id::text AS id, queue_name, status::text AS status, last_error_code, attempt_count FROM reaped`,
      (p: { limit: number; setAside: string[]; only: string | null }) => [p.limit, p.setAside, p.only],
      reapedJobs,
    ),

    /** Expired leases, oldest first, without locking them: what the reaper tries one by one. $1 limit, $2 ids to leave alone. */
    expiredLeaseIds: define(
      'expired-lease-ids',
      `SELECT id::text AS id FROM ${jobs}
       WHERE status = 'running' AND lease_expires_at <= now() AND id <> ALL ($2::bigint[])
       ORDER BY lease_expires_at LIMIT $1`,
      (p: { limit: number; setAside: string[] }) => [p.limit, p.setAside],
      (rows: { id: string }[]) => rows.map((r) => r.id),
    ),

    /**
     * The reaper's last resort for one expired lease whose normal recovery failed (see Reaper):
     * the job goes dead with code REAP_FAILED and the database's error as its message, so it is
     * visible and replayable instead of 'running' forever. Nothing here computes anything that
     * could fail. $1 id, $2 message.
     */
    reapAsDead: define(
      'reap-as-dead',
      `WITH reaped AS (
         UPDATE ${jobs} AS j
         SET status = 'dead', finished_at = now(), last_error_code = 'REAP_FAILED', last_error_message = $2,
             lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         FROM (SELECT id, lease_owner, lease_token FROM ${jobs}
               WHERE id = $1 AND status = 'running' AND lease_expires_at <= now() FOR UPDATE SKIP LOCKED) e
         WHERE j.id = e.id
         RETURNING j.id, j.queue_name, j.attempt_count, e.lease_owner, e.lease_token
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code, message)
         SELECT id, 'dead', 'running', 'dead', attempt_count, lease_token, lease_owner, 'REAP_FAILED', $2 FROM reaped
       )
       SELECT id::text AS id, queue_name, 'dead' AS status, 'REAP_FAILED' AS last_error_code, attempt_count FROM reaped`,
      (p: { id: string; message: string }) => [p.id, p.message],
      reapedJobs,
    ),

    /**
     * The reaper's pass over cancelled attempts whose worker never confirmed them (it crashed, or
     * its handler ignores its signal): once the lease has run out the attempt is over by the
     * fence's own rule, and the job lets go of its key. Bounded, SKIP LOCKED, as reapExpired.
     * $1 limit.
     */
    endExpiredCancels: define(
      'end-expired-cancels',
      `WITH expired AS (
         SELECT id FROM ${jobs}
         WHERE status = 'cancelled' AND lease_expires_at <= now()
         ORDER BY lease_expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
       ), ended AS (
         UPDATE ${jobs} AS j SET lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         FROM expired e WHERE j.id = e.id
         RETURNING j.id, j.queue_name, j.ordering_key
       ), ${releaseKeys(s, keysOf('ended'))}
       SELECT (SELECT count(*) FROM ended)::int AS ended, ${RELEASED_KEYS_COLUMNS}`,
      (p: { limit: number }) => [p.limit],
      (rows: ({ ended: number } & ReleasedKeysRow)[]) => ({ ended: rows[0]?.ended ?? 0, keys: keyRelease(rows[0]) }),
    ),

    /**
     * Makes due scheduled jobs claimable, in bounded batches, and wakes their queues' workers.
     * $1 limit, $2 channel.
     */
    promoteScheduled: define(
      'promote-scheduled',
      `WITH due AS (
         SELECT id FROM ${jobs}
         WHERE status = 'scheduled' AND available_at <= now()
         ORDER BY available_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
       ), promoted AS (
         UPDATE ${jobs} AS j SET status = 'pending' FROM due WHERE j.id = due.id RETURNING j.queue_name
       )
       SELECT g.queue_name, g.promoted, pg_notify($2, g.queue_name)
       FROM (SELECT queue_name, count(*)::int AS promoted FROM promoted GROUP BY queue_name) g`,
      (p: { limit: number; channel: string }) => [p.limit, p.channel],
      (rows: { queue_name: string; promoted: number }[]) => rows.map((r) => ({ queue: r.queue_name, promoted: r.promoted })),
    ),

    /**
     * How long until the next scheduled job falls due (database time; negative: already due), or
     * undefined when none is scheduled. A flow parent waiting for its children is due at
     * 'infinity' (never): it is not a job the scheduler waits for (and infinity - now() is an error).
     */
    nextScheduledInMs: define(
      'next-scheduled',
      `SELECT (extract(epoch FROM available_at - now()) * 1000)::float8 AS ms_left
       FROM ${jobs} WHERE status = 'scheduled' AND available_at < 'infinity' ORDER BY available_at LIMIT 1`,
      none,
      (rows: { ms_left: number }[]) => rows[0]?.ms_left,
    ),

    /**
     * Retention: deletes succeeded jobs that finished more than $1 ms ago, oldest first, one
     * bounded batch ($2) of each table per statement: the history (jobs_succeeded, migration
     * 0014) and the succeeded jobs that stay in jobs (see staysInJobs; and those an older version
     * completed by UPDATE), with their events and effects (no foreign key cascades any more).
     * Dead, running and pending jobs are never touched, nor a flow's child whose parent has not
     * finished.
     */
    pruneSucceeded: define(
      'prune-succeeded',
      `WITH doomed AS (
         SELECT id FROM ${jobs}
         WHERE status = 'succeeded' AND finished_at < now() - ${ms('$1::bigint')}
           -- A flow's child is kept until its parent has finished: the parent's handler reads its result.
           AND (parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM ${jobs} p WHERE p.id = parent_id AND p.status IN ('scheduled', 'pending', 'running')))
         ORDER BY finished_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED
       ), removed_jobs AS (
         DELETE FROM ${jobs} AS j USING doomed d WHERE j.id = d.id RETURNING j.id
       ), doomed_history AS (
         SELECT id FROM ${jobsSucceeded}
         WHERE finished_at < now() - ${ms('$1::bigint')}
         ORDER BY finished_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED
       ), removed_history AS (
         DELETE FROM ${jobsSucceeded} AS h USING doomed_history d WHERE h.id = d.id RETURNING h.id
       ), removed AS (
         SELECT id FROM removed_jobs UNION ALL SELECT id FROM removed_history
       ), ${dropTrail(s, 'removed')}
       -- The larger of the two batches: a full one ($2) tells the pruner there may be more.
       SELECT greatest((SELECT count(*) FROM removed_jobs), (SELECT count(*) FROM removed_history))::int AS largest,
              (SELECT count(*) FROM removed)::int AS removed`,
      (p: { retentionMs: number; limit: number }) => [p.retentionMs, p.limit],
      (rows: { largest: number; removed: number }[]) => ({ removed: rows[0]?.removed ?? 0, largestBatch: rows[0]?.largest ?? 0 }),
    ),

    /**
     * The KeyHandoffs pass: key releases that had to be handed off because a producer held the
     * key's row (see releaseKeys) are applied now, for each key whose row is free; the rest wait
     * for the next pass. Bounded, SKIP LOCKED, safe in every process. A pass walks the table by id
     * ($2: after this id), so keys a long producer transaction still holds never hide the free
     * ones behind them.
     * $1 limit, $2 after id.
     */
    handOffKeys: define(
      'hand-off-keys',
      `WITH pending AS (
         SELECT id, queue_name, ordering_key, n FROM ${s}.key_handoffs WHERE id > $2 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
       ), ${releaseKeys(s, 'SELECT queue_name, ordering_key, sum(n)::int AS n FROM pending GROUP BY 1, 2', false)}, handed AS (
         DELETE FROM ${s}.key_handoffs h
         USING pending p
         WHERE h.id = p.id
           AND EXISTS (SELECT 1 FROM locked_keys l WHERE l.queue_name = p.queue_name AND l.ordering_key = p.ordering_key)
         RETURNING h.id
       )
       SELECT (SELECT count(*) FROM pending)::int AS pending, (SELECT count(*) FROM handed)::int AS handed,
              (SELECT max(id) FROM pending)::text AS last_id, ${RELEASED_KEYS_COLUMNS}`,
      (p: { limit: number; afterId: string }) => [p.limit, p.afterId],
      (rows: ({ pending: number; handed: number; last_id: string | null } & ReleasedKeysRow)[]) => ({
        pending: rows[0]?.pending ?? 0,
        handed: rows[0]?.handed ?? 0,
        lastId: rows[0]?.last_id ?? null,
        keys: keyRelease(rows[0]),
      }),
    ),
  };
}
