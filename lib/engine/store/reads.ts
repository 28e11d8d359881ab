import type { JobEffectRecord, JobEventRecord, JobRecord, QueueStats } from '../records.js';
import type { JobStatus } from '../types.js';
import { ms, none, type StatementContext } from './statement.js';

/** Read-only statements: a job, its history and effects, what is unfinished, and the stats. */

/** A queue's figures from the database (the process adds its slots). */
export type QueueFigures = Omit<QueueStats, 'slots' | 'flow' | 'blockedFlows'>;

export interface UnfinishedGroup {
  queue: string;
  status: JobStatus;
  count: number;
  ids: string[];
}

type JobRow = {
  id: string;
  queue_name: string;
  payload: unknown;
  status: JobStatus;
  priority: number;
  available_at: Date | null;
  attempt_count: number;
  max_attempts: number | null;
  lease_owner: string | null;
  lease_token: string;
  lease_expires_at: Date | null;
  deadline_at: Date | null;
  claimed_at: Date | null;
  heartbeat_at: Date | null;
  release_count: number;
  last_error_code: string | null;
  last_error_message: string | null;
  created_at: Date;
  finished_at: Date | null;
  group_key: string | null;
  parent_id: string | null;
  awaiting_children: boolean;
};

type EventRow = {
  id: string;
  at: Date;
  kind: string;
  from_status: JobStatus | null;
  to_status: JobStatus | null;
  attempt: number | null;
  lease_token: string | null;
  worker: string | null;
  actor: string | null;
  error_code: string | null;
  message: string | null;
  child_id: string | null;
};

type EffectRow = {
  name: string;
  idempotency_key: string;
  status: 'started' | 'confirmed';
  result: unknown;
  result_stored: boolean;
  attempts: number;
  lease_token: string;
  started_at: Date;
  confirmed_at: Date | null;
};

type QueueStatsRow = {
  queue: string;
  paused_at: Date | null;
  scheduled: number;
  pending: number;
  running: number;
  dead: number;
  recent_succeeded: number;
  recent_cancelled: number;
  oldest_claimable_age_ms: number | null;
  oldest_dead_age_ms: number | null;
  running_near_expiry: number;
  blocked_keys: number;
};

export function readStatements({ define, s, jobs, jobsSucceeded, jobRows, events }: StatementContext) {
  return {
    getJob: define(
      'get-job',
      `SELECT id::text AS id, queue_name, payload, status::text AS status, priority,
              -- A waiting flow parent is due at 'infinity' (never): no date says that.
              nullif(available_at, 'infinity') AS available_at, attempt_count, max_attempts, lease_owner, lease_token::text AS lease_token, lease_expires_at,
              deadline_at, claimed_at, heartbeat_at, release_count, last_error_code, last_error_message,
              created_at, finished_at, group_key, parent_id::text AS parent_id, awaiting_children
       -- job_rows: a succeeded job may be in jobs_succeeded (migration 0014).
       FROM ${jobRows} WHERE id = $1`,
      (p: { id: string }) => [p.id],
      (rows: JobRow[]): JobRecord | undefined => {
        const row = rows[0];
        if (!row) return undefined;
        return {
          id: row.id,
          queue: row.queue_name,
          payload: row.payload,
          status: row.status,
          priority: row.priority,
          availableAt: row.available_at,
          attemptCount: row.attempt_count,
          maxAttempts: row.max_attempts,
          leaseOwner: row.lease_owner,
          leaseToken: row.lease_token,
          leaseExpiresAt: row.lease_expires_at,
          deadlineAt: row.deadline_at,
          claimedAt: row.claimed_at,
          heartbeatAt: row.heartbeat_at,
          releaseCount: row.release_count,
          lastErrorCode: row.last_error_code,
          lastErrorMessage: row.last_error_message,
          createdAt: row.created_at,
          finishedAt: row.finished_at,
          group: row.group_key,
          parentId: row.parent_id,
          awaitingChildren: row.awaiting_children,
        };
      },
    ),

    jobEffects: define(
      'job-effects',
      `SELECT name, idempotency_key, status, result, result_stored, attempts, lease_token::text AS lease_token, started_at, confirmed_at
       FROM ${s}.job_effects WHERE job_id = $1 ORDER BY started_at, name`,
      (p: { id: string }) => [p.id],
      (rows: EffectRow[]): JobEffectRecord[] =>
        rows.map((row) => ({
          name: row.name,
          idempotencyKey: row.idempotency_key,
          status: row.status,
          result: row.result,
          resultStored: row.result_stored,
          attempts: row.attempts,
          leaseToken: row.lease_token,
          startedAt: row.started_at,
          confirmedAt: row.confirmed_at,
        })),
    ),

    jobEvents: define(
      'job-events',
      `SELECT e.id::text AS id, e.at, e.kind, e.from_status::text AS from_status, e.to_status::text AS to_status, e.attempt,
              e.lease_token::text AS lease_token, e.worker, e.actor, e.error_code, e.message, NULL::text AS child_id, e.id AS seq
       FROM ${events} e WHERE e.job_id = $1
       UNION ALL
       -- A flow parent's history holds its children's deaths and discards: what blocks it, or resolved it.
       SELECT e.id::text, e.at, e.kind, e.from_status::text, e.to_status::text, e.attempt, e.lease_token::text, e.worker, e.actor,
              e.error_code, e.message, e.job_id::text, e.id
       FROM ${jobs} c JOIN ${events} e ON e.job_id = c.id
       WHERE c.parent_id = $1 AND e.kind IN ('dead', 'discarded', 'cancelled', 'replayed')
       ORDER BY seq`,
      (p: { id: string }) => [p.id],
      (rows: EventRow[]): JobEventRecord[] =>
        rows.map((row) => ({
          id: row.id,
          at: row.at,
          kind: row.kind,
          fromStatus: row.from_status,
          toStatus: row.to_status,
          attempt: row.attempt,
          leaseToken: row.lease_token,
          worker: row.worker,
          actor: row.actor,
          errorCode: row.error_code,
          message: row.message,
          ...(row.child_id === null ? {} : { childId: row.child_id }),
        })),
    ),

    /**
     * What is left to do in some queues: pending and running jobs, and scheduled ones that fall
     * due within $2 ms (database time), per queue and status with the first few ids. For tests
     * and drains; read-only. $1 queues.
     */
    unfinishedJobs: define(
      'unfinished-jobs',
      `SELECT queue_name, status::text AS status, count(*)::int AS n, (array_agg(id::text ORDER BY id))[1:10] AS ids
       FROM ${jobs}
       WHERE queue_name = ANY($1::text[])
         AND (status IN ('pending', 'running') OR (status = 'scheduled' AND available_at <= now() + ${ms('$2::bigint')}))
       GROUP BY queue_name, status ORDER BY queue_name, status`,
      (p: { queues: string[]; withinMs: number }) => [p.queues, p.withinMs],
      (rows: { queue_name: string; status: JobStatus; n: number; ids: string[] }[]): UnfinishedGroup[] =>
        rows.map((r) => ({ queue: r.queue_name, status: r.status, count: r.n, ids: r.ids })),
    ),

    /**
     * Per-queue figures whose cost follows what is live, never what is retained. Succeeded and
     * cancelled jobs are history (kept for days, or forever), so they are counted only when they
     * finished within the last $2 ms: a range of jobs_finished_idx per status, bounded by
     * throughput x window. (One range per status, `status = 'succeeded'`, not `status IN (…)`:
     * that IN is the index's own predicate, so the planner drops it as implied and, with no
     * condition left on the index's first column, walks all of the index, all of the history.)
     * Everything else comes from partial indexes that hold only live or dead rows: pending from
     * two (the claimable heads, and the jobs waiting for their ordering key: no index holds both),
     * each other status from its own. Each part is one row per queue, joined to the declared
     * queues. Ages are by database time. $1 "near expiry" window in ms, $2 the recent window in ms.
     */
    queueStats: define(
      'queue-stats',
      `WITH parts AS (
         SELECT queue_name, 'pending' AS status, count(*) AS n, min(available_at) AS oldest FROM ${jobs}
         WHERE status = 'pending' AND NOT key_waiting GROUP BY 1
         UNION ALL
         SELECT queue_name, 'pending', count(*), min(available_at) FROM ${jobs} WHERE status = 'pending' AND key_waiting GROUP BY 1
         UNION ALL
         SELECT queue_name, 'scheduled', count(*), NULL FROM ${jobs} WHERE status = 'scheduled' GROUP BY 1
         UNION ALL
         SELECT queue_name, 'running', count(*), NULL FROM ${jobs} WHERE status = 'running' GROUP BY 1
         UNION ALL
         SELECT queue_name, 'dead', count(*), min(finished_at) FROM ${jobs} WHERE status = 'dead' GROUP BY 1
         UNION ALL
         SELECT queue_name, 'succeeded', count(*), NULL FROM ${jobs}
         WHERE status = 'succeeded' AND finished_at > now() - ${ms('$2::bigint')} GROUP BY 1
         UNION ALL
         -- The history of 0014 (its finished_at index); the succeeded jobs that stay in jobs are counted above.
         SELECT queue_name, 'succeeded', count(*), NULL FROM ${jobsSucceeded}
         WHERE finished_at > now() - ${ms('$2::bigint')} GROUP BY 1
         UNION ALL
         SELECT queue_name, 'cancelled', count(*), NULL FROM ${jobs}
         WHERE status = 'cancelled' AND finished_at > now() - ${ms('$2::bigint')} GROUP BY 1
       ), counts AS (
         SELECT queue_name,
                sum(n) FILTER (WHERE status = 'scheduled') AS scheduled,
                sum(n) FILTER (WHERE status = 'pending') AS pending,
                sum(n) FILTER (WHERE status = 'running') AS running,
                sum(n) FILTER (WHERE status = 'dead') AS dead,
                sum(n) FILTER (WHERE status = 'succeeded') AS recent_succeeded,
                sum(n) FILTER (WHERE status = 'cancelled') AS recent_cancelled,
                min(oldest) FILTER (WHERE status = 'pending') AS oldest_pending,
                min(oldest) FILTER (WHERE status = 'dead') AS oldest_dead
         FROM parts GROUP BY 1
       ), blocked_keys AS (
         SELECT queue_name, count(DISTINCT ordering_key) AS n FROM ${jobs}
         WHERE status = 'dead' AND ordering_key IS NOT NULL AND NOT key_waiting GROUP BY 1
       ), near_expiry AS (
         SELECT queue_name, count(*) AS n FROM ${jobs}
         WHERE status = 'running' AND lease_expires_at < now() + ${ms('$1::bigint')} GROUP BY 1
       )
       SELECT q.name AS queue, q.paused_at,
              coalesce(c.scheduled, 0)::int AS scheduled, coalesce(c.pending, 0)::int AS pending,
              coalesce(c.running, 0)::int AS running, coalesce(c.dead, 0)::int AS dead,
              coalesce(c.recent_succeeded, 0)::int AS recent_succeeded, coalesce(c.recent_cancelled, 0)::int AS recent_cancelled,
              (extract(epoch FROM now() - c.oldest_pending) * 1000)::float8 AS oldest_claimable_age_ms,
              (extract(epoch FROM now() - c.oldest_dead) * 1000)::float8 AS oldest_dead_age_ms,
              coalesce(ne.n, 0)::int AS running_near_expiry,
              coalesce(bk.n, 0)::int AS blocked_keys
       FROM ${s}.queues q
         LEFT JOIN counts c ON c.queue_name = q.name
         LEFT JOIN near_expiry ne ON ne.queue_name = q.name
         LEFT JOIN blocked_keys bk ON bk.queue_name = q.name
       ORDER BY q.name`,
      (p: { nearExpiryMs: number; recentWindowMs: number }) => [p.nearExpiryMs, p.recentWindowMs],
      (rows: QueueStatsRow[]): QueueFigures[] =>
        rows.map((q) => ({
          queue: q.queue,
          paused: q.paused_at !== null,
          pausedAt: q.paused_at,
          counts: {
            scheduled: q.scheduled,
            pending: q.pending,
            running: q.running,
            dead: q.dead,
            recent: { succeeded: q.recent_succeeded, cancelled: q.recent_cancelled },
          },
          oldestClaimableAgeMs: q.oldest_claimable_age_ms,
          oldestDeadAgeMs: q.oldest_dead_age_ms,
          runningNearExpiry: q.running_near_expiry,
          blockedKeys: q.blocked_keys,
        })),
    ),

    /** Sessions of this database and how many of them wait on a lock right now. */
    databaseStats: define(
      'database-stats',
      `SELECT count(*)::int AS connections,
              count(*) FILTER (WHERE wait_event_type = 'Lock')::int AS lock_waits
       FROM pg_stat_activity WHERE datname = current_database()`,
      none,
      (rows: { connections: number; lock_waits: number }[]) => ({ connections: rows[0]?.connections ?? 0, lockWaits: rows[0]?.lock_waits ?? 0 }),
    ),
  };
}
