import type { DeadErrorGroup, JobSummary, ThroughputBucket } from '../records.js';
import type { JobStatus } from '../types.js';
import { ms, type StatementContext } from './statement.js';

/**
 * Reads for an operator's pages (the dashboard): a queue's jobs by status a page at a time, its
 * dead jobs grouped by error code, and the throughput of the last minutes. Each one's cost is
 * bounded by its parameters, never by the history the queue keeps (see each statement).
 */

/** How many index entries one page of `browse` may walk, at most (the page may then be short). */
export const BROWSE_WALK_MAX = 2_000;

export interface BrowseParams {
  queue: string;
  /** The keyset cursor (the last page's last walked job), NULL for the first page. */
  after: { sortAt: string; id: string } | null;
  /** Only jobs whose last error has this code (NULL: all). */
  code: string | null;
  limit: number;
  /** How many entries of the status's index the page walks at most (BROWSE_WALK_MAX). */
  walk: number;
}

export interface BrowsePage {
  jobs: JobSummary[];
  /** How many entries the walk read, and the cursor of its last one (full microsecond precision). */
  walked: number;
  lastWalked: string | undefined;
  /** The cursor of the page's last job. */
  lastCursor: string | undefined;
}

type SummaryJson = {
  id: string;
  status: JobStatus;
  priority: number;
  attempt_count: number;
  max_attempts: number | null;
  last_error_code: string | null;
  last_error_message: string | null;
  ordering_key: string | null;
  lease_owner: string | null;
  lease_expires_at: string | null;
  available_at: string;
  created_at: string;
  finished_at: string | null;
  cursor: string;
};

const date = (value: string | null): Date | null => (value === null ? null : new Date(value));

const browsePage = (rows: { jobs: SummaryJson[]; walked: number; last_walked: string | null }[]): BrowsePage => {
  const row = rows[0];
  const jobs = (row?.jobs ?? []).map(
    (j): JobSummary => ({
      id: j.id,
      status: j.status,
      priority: j.priority,
      attemptCount: j.attempt_count,
      maxAttempts: j.max_attempts,
      lastErrorCode: j.last_error_code,
      lastErrorMessage: j.last_error_message,
      orderingKey: j.ordering_key,
      leaseOwner: j.lease_owner,
      leaseExpiresAt: date(j.lease_expires_at),
      // A waiting flow parent is due at 'infinity' (never).
      availableAt: j.available_at === 'infinity' ? null : new Date(j.available_at),
      createdAt: new Date(j.created_at),
      finishedAt: date(j.finished_at),
    }),
  );
  return { jobs, walked: row?.walked ?? 0, lastWalked: row?.last_walked ?? undefined, lastCursor: row?.jobs.at(-1)?.cursor };
};

/** What each status's page walks: its partial index's predicate, its order, and whether the index starts with the queue. */
interface BrowseShape {
  where: string;
  sortColumn: 'available_at' | 'lease_expires_at' | 'finished_at';
  descending: boolean;
  /** The index starts with queue_name: the walk is the queue's own jobs. Otherwise the queue is a filter of the walk. */
  queueLed: boolean;
  /** What is walked: jobs unless given (job_rows for succeeded jobs). */
  table?: string;
}

export function browseStatements({ define, s, jobs, jobRows }: StatementContext) {
  /**
   * A page of a queue's jobs of one status, by the status's own partial index, after a keyset
   * cursor ($2 sort value, $3 id), $6 jobs at most, optionally of one error code ($5). The walk
   * reads at most $4 index entries (and their rows), and the page is filtered from them: a page
   * costs at most $4 rows however many jobs are kept and however rare the filter, and when the
   * walk ends before the page is full, its last entry is the next page's cursor.
   *
   * - pending: jobs_claimable_age_idx (queue_name, available_at, id), oldest due first: the
   *   queue's own claimable jobs (jobs waiting for their ordering key are not claimable and not in it).
   * - dead: jobs_dead_idx (queue_name, finished_at, id), newest death first.
   * - scheduled: jobs_scheduled_idx (available_at), soonest first; running: jobs_expired_lease_idx
   *   (lease_expires_at), soonest expiry first; succeeded and cancelled: a range of
   *   jobs_finished_idx (status, finished_at), newest first. These indexes hold every queue, so the
   *   queue is a filter of the walk, and a page of a quiet queue beside a busy one may come back
   *   short, with a cursor to walk on.
   *
   * Ties of the sort column (a batch of completions shares its finished_at) are ordered by id: an
   * incremental sort of each tie, so a page also reads the rows that share a timestamp with its
   * first and last (one completion batch, or one statement's inserts).
   * Planned per call: operators' reads, rare, and their best index depends on the values.
   */
  const browse = (name: string, shape: BrowseShape) => {
    const col = `j.${shape.sortColumn}`;
    const [cmp, bound, dir, lowest] = shape.descending ? ['<', '<=', 'DESC', `'infinity'`] : ['>', '>=', 'ASC', `'-infinity'`];
    const firstId = shape.descending ? '9223372036854775807' : '0';
    return define(
      name,
      `WITH walk AS (
         SELECT j.id, j.queue_name, j.status, j.priority, j.attempt_count, j.max_attempts, j.last_error_code,
                left(j.last_error_message, 200) AS last_error_message, j.ordering_key, j.lease_owner, j.lease_expires_at,
                j.available_at, j.created_at, j.finished_at, ${col}::text || '|' || j.id AS cursor
         FROM ${shape.table ?? jobs} j
         WHERE ${shape.where} ${shape.queueLed ? 'AND j.queue_name = $1' : ''}
           -- The bound on the sort column alone is what starts the index scan at the cursor (the row
           -- comparison is no index condition of an index without id); the comparison then skips
           -- the cursor's own ties.
           AND ${col} ${bound} coalesce($2::timestamptz, ${lowest})
           AND (${col}, j.id) ${cmp} (coalesce($2::timestamptz, ${lowest}), coalesce($3::bigint, ${firstId}))
         -- j.id, not id: the bigint, whose order is the cursor's.
         ORDER BY ${col} ${dir}, j.id ${dir}
         LIMIT $4
       ), page AS (
         SELECT w.* FROM walk w
         WHERE w.queue_name = $1 AND ($5::text IS NULL OR w.last_error_code = $5)
         ORDER BY w.${shape.sortColumn} ${dir}, w.id ${dir}
         LIMIT $6
       )
       SELECT coalesce((SELECT json_agg(json_build_object(
                'id', p.id::text, 'status', p.status, 'priority', p.priority, 'attempt_count', p.attempt_count,
                'max_attempts', p.max_attempts, 'last_error_code', p.last_error_code, 'last_error_message', p.last_error_message,
                'ordering_key', p.ordering_key, 'lease_owner', p.lease_owner, 'lease_expires_at', p.lease_expires_at,
                'available_at', p.available_at, 'created_at', p.created_at, 'finished_at', p.finished_at, 'cursor', p.cursor)
                ORDER BY p.${shape.sortColumn} ${dir}, p.id ${dir}) FROM page p), '[]'::json) AS jobs,
              (SELECT count(*)::int FROM walk) AS walked,
              (SELECT w.cursor FROM walk w ORDER BY w.${shape.sortColumn} ${dir === 'ASC' ? 'DESC' : 'ASC'}, w.id ${dir === 'ASC' ? 'DESC' : 'ASC'} LIMIT 1) AS last_walked`,
      (p: BrowseParams) => [p.queue, p.after?.sortAt ?? null, p.after?.id ?? null, p.walk, p.code, p.limit],
      browsePage,
      { planPerCall: true },
    );
  };

  return {
    browsePending: browse('browse-pending', { where: `j.status = 'pending' AND NOT j.key_waiting`, sortColumn: 'available_at', descending: false, queueLed: true }),
    browseScheduled: browse('browse-scheduled', { where: `j.status = 'scheduled'`, sortColumn: 'available_at', descending: false, queueLed: false }),
    browseRunning: browse('browse-running', { where: `j.status = 'running'`, sortColumn: 'lease_expires_at', descending: false, queueLed: false }),
    // job_rows: most succeeded jobs are in jobs_succeeded (migration 0014), a few stay in jobs.
    browseSucceeded: browse('browse-succeeded', { where: `j.status = 'succeeded'`, sortColumn: 'finished_at', descending: true, queueLed: false, table: jobRows }),
    browseCancelled: browse('browse-cancelled', { where: `j.status = 'cancelled'`, sortColumn: 'finished_at', descending: true, queueLed: false }),
    browseDead: browse('browse-dead', { where: `j.status = 'dead'`, sortColumn: 'finished_at', descending: true, queueLed: true }),

    /**
     * A queue's dead jobs grouped by error code: how many, the oldest and newest death, and the
     * newest one's message, at most $2 codes (most jobs first). One pass over the queue's entries
     * of jobs_dead_queue_code_idx (queue_name, last_error_code, finished_at, id): its cost follows
     * the queue's dead jobs, as stats()'s dead count does (dead jobs are kept until an operator
     * resolves them, and counted exactly), never the succeeded or cancelled history. The message
     * is one probe of the same index per group. $1 queue.
     */
    deadGroups: define(
      'dead-groups',
      `WITH groups AS (
         SELECT j.last_error_code AS code, count(*)::int AS n, min(j.finished_at) AS oldest, max(j.finished_at) AS newest
         FROM ${jobs} j WHERE j.status = 'dead' AND j.queue_name = $1
         GROUP BY j.last_error_code
         ORDER BY count(*) DESC, j.last_error_code
         LIMIT $2
       )
       SELECT g.code, g.n, g.oldest, g.newest,
              (SELECT left(d.last_error_message, 300) FROM ${jobs} d
               WHERE d.status = 'dead' AND d.queue_name = $1 AND d.last_error_code = g.code
               ORDER BY d.finished_at DESC, d.id DESC LIMIT 1) AS message
       FROM groups g ORDER BY g.n DESC, g.code`,
      (p: { queue: string; limit: number }) => [p.queue, p.limit],
      (rows: { code: string | null; n: number; oldest: Date; newest: Date; message: string | null }[]): DeadErrorGroup[] =>
        rows.map((r) => ({ errorCode: r.code, count: r.n, oldestAt: r.oldest, newestAt: r.newest, lastMessage: r.message })),
      { planPerCall: true },
    ),

    /**
     * Jobs that finished in the last $1 ms, per queue, per $2-ms bucket (0: the newest), succeeded
     * and dead, for every process of the cluster (read from the table, not from this process's
     * counters). Each status is a range of its own index, newest first: jobs_finished_idx
     * (status, finished_at) and jobs_dead_age_idx (finished_at, id), and reads at most $3 rows.
     * So it costs what finished within the window, capped at $3 per status, whatever the retained
     * history. When a range hits the cap, its `covered` row says how far back it got (the older
     * buckets are then incomplete). The queue name needs the heap (neither index has it); recently
     * finished rows are on pages the heap is read for anyway.
     */
    throughput: define(
      'throughput',
      `WITH succeeded AS (
         -- job_rows: jobs_succeeded (migration 0014) by its finished_at index, and the few that stay in jobs.
         SELECT j.queue_name, j.finished_at FROM ${jobRows} j
         WHERE j.status = 'succeeded' AND j.finished_at > now() - ${ms('$1::bigint')}
         ORDER BY j.finished_at DESC LIMIT $3
       ), dead AS (
         SELECT j.queue_name, j.finished_at FROM ${jobs} j
         WHERE j.status = 'dead' AND j.finished_at > now() - ${ms('$1::bigint')}
         ORDER BY j.finished_at DESC, j.id DESC LIMIT $3
       ), finished AS (
         SELECT 'succeeded' AS status, queue_name, finished_at FROM succeeded
         UNION ALL
         SELECT 'dead', queue_name, finished_at FROM dead
       )
       SELECT status, queue_name, floor(extract(epoch FROM now() - finished_at) * 1000 / $2::bigint)::int AS bucket,
              count(*)::int AS n, (extract(epoch FROM now() - min(finished_at)) * 1000)::float8 AS oldest_ms
       FROM finished GROUP BY 1, 2, 3`,
      (p: { windowMs: number; bucketMs: number; cap: number }) => [p.windowMs, p.bucketMs, p.cap],
      (rows: { status: 'succeeded' | 'dead'; queue_name: string; bucket: number; n: number; oldest_ms: number }[]): ThroughputBucket[] =>
        rows.map((r) => ({ status: r.status, queue: r.queue_name, bucket: r.bucket, count: r.n, oldestAgeMs: r.oldest_ms })),
      { planPerCall: true },
    ),
  };
}

export type BrowsableStatus = 'pending' | 'scheduled' | 'running' | 'succeeded' | 'cancelled' | 'dead';
export const BROWSABLE_STATUSES: readonly BrowsableStatus[] = ['pending', 'scheduled', 'running', 'succeeded', 'cancelled', 'dead'];
