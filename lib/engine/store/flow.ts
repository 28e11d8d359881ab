import { claimedJobs, type ClaimedJobs, type ClaimedRow, type ClaimParams, CLAIM_RETURNING, CLAIM_SET } from './claim.js';
import { fence, fenceLossOrMissing, lost, type FencedOutcome, type FenceParams } from './fence.js';
import { ms, type StatementContext } from './statement.js';
import type { FlowStats, GroupLimits, QueueLimits, RateLimit } from '../types.js';

/**
 * Flow control (docs/flow-control.md): the claim of a queue with limits, the limits themselves,
 * and the throttle a handler reports.
 *
 * A limit is only as good as its count, and two claimers that count at once both see room. So the
 * claims of a limited queue take turns: a transaction locks the queue's row (flowLock), and only
 * then does a second statement count and claim (flowClaim). That statement takes its snapshot after
 * the lock was granted, so it sees every claim committed before it, including the one that held
 * the lock last; completions need no lock (a job that ends while we count only makes us take less).
 * Its timestamps are statement_timestamp(), taken after the lock too, so the claim times that rate
 * limits count never run backwards from one holder to the next.
 */

export interface FlowLock {
  /** The queue still has flow control on (false: its worker goes back to the plain claim). */
  flow: boolean;
  /** Where the round-robin over groups goes on: after this group (null: after the ungrouped jobs); unset: from the start. */
  cursor: { set: boolean; key: string | null };
}

export interface FlowClaimParams extends ClaimParams {
  cursor: FlowLock['cursor'];
  /** Most groups one claim visits (each way round the ring). */
  maxGroups: number;
  /** How deep the ungrouped jobs are looked for among the queue's next claimable ones (see flowClaim). */
  ungroupedWindow: number;
}

/** A throttle reported by a handler ($scope: the job's group, or its queue). */
export interface ThrottleParams extends FenceParams {
  scope: 'queue' | 'group';
  retryAfterMs: number;
  /** Throttles that give the attempt back before they count as attempts. */
  maxFreeRetries: number;
  message: string;
}

export interface ThrottleOutcome {
  /** The attempt was given back (false: it counted, as a failure with code RATE_LIMITED). */
  free: boolean;
  status: 'scheduled' | 'dead';
}

interface LimitsRow {
  global_concurrency: number | null;
  group_concurrency: number | null;
  rate_limit: number | null;
  rate_window_ms: number | null;
  group_rate_limit: number | null;
  group_rate_window_ms: number | null;
  group_fairness: boolean;
}

const rate = (limit: number | null, windowMs: number | null): RateLimit | null => (limit === null || windowMs === null ? null : { limit, windowMs });

function queueLimits(row: LimitsRow): QueueLimits {
  return {
    globalConcurrency: row.global_concurrency,
    groupConcurrency: row.group_concurrency,
    rateLimit: rate(row.rate_limit, row.rate_window_ms),
    groupRateLimit: rate(row.group_rate_limit, row.group_rate_window_ms),
    groupFairness: row.group_fairness,
  };
}

/** Whether a queue's row says flow control is on: any limit, fairness, or any group with a row of its own. */
function flowOn(s: string, queue: string): string {
  return `(${queue}.global_concurrency IS NOT NULL OR ${queue}.group_concurrency IS NOT NULL OR ${queue}.rate_limit IS NOT NULL
           OR ${queue}.group_rate_limit IS NOT NULL OR ${queue}.group_fairness
           OR EXISTS (SELECT 1 FROM ${s}.job_groups g WHERE g.queue_name = ${queue}.name))`;
}

/** Claimable work of queue $1. */
const CLAIMABLE = `queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()`;

export function flowStatements({ define, s, jobs, events, status }: StatementContext) {
  /** The walk over groups with claimable jobs, from after `$from` (and up to `$upto`, if not NULL): one index probe per group. */
  const walk = (name: string, from: string, upto: string, when: string) => `${name}(key, n) AS (
         SELECT (SELECT group_key FROM ${jobs} WHERE ${CLAIMABLE} AND group_key IS NOT NULL AND group_key > ${from}
                   AND (${upto} IS NULL OR group_key <= ${upto}) ORDER BY group_key LIMIT 1), 1
         FROM grouping WHERE grouping.on AND ${when}
         UNION ALL
         SELECT (SELECT group_key FROM ${jobs} WHERE ${CLAIMABLE} AND group_key IS NOT NULL AND group_key > w.key
                   AND (${upto} IS NULL OR group_key <= ${upto}) ORDER BY group_key LIMIT 1), w.n + 1
         FROM ${name} w WHERE w.key IS NOT NULL AND w.n < $10
       )`;

  return {
    /**
     * The turn of one claimer of a limited queue: locks the queue's row until the transaction
     * ends, and reads whether flow control is still on and where the round-robin goes on.
     */
    flowLock: define(
      'flow-lock',
      `SELECT flow, fair_cursor, fair_cursor_set FROM ${s}.queues WHERE name = $1 FOR NO KEY UPDATE`,
      (p: { queue: string }) => [p.queue],
      (rows: { flow: boolean; fair_cursor: string | null; fair_cursor_set: boolean }[]): FlowLock => ({
        flow: rows[0]?.flow ?? false,
        cursor: { set: rows[0]?.fair_cursor_set ?? false, key: rows[0]?.fair_cursor ?? null },
      }),
    ),

    /**
     * The flow claim, run after flowLock in its transaction. How many jobs it takes is the least
     * of: the batch ($3), the queue's free global slots (its running rows against
     * global_concurrency), and its rate budget (claims in the window against rate_limit).
     *
     * With group settings or fairness on, the batch is shared between groups: the groups with
     * claimable jobs are visited in key order from where the last claim stopped (a skip scan of
     * jobs_claimable_group_idx, at most $10 groups each way round), jobs without a group counting
     * as one more group. Each group's room is the least of its free slots (running rows of the
     * group against its concurrency), its rate budget and its throttle; the batch is dealt in
     * rounds, `weight` jobs per group per round (weighted round-robin), and within a group in the
     * claim's usual order (priority, then age). Jobs without a group are looked for among the
     * queue's next $11 claimable jobs by priority (they have no index of their own: one would cost
     * every job of every queue an entry).
     *
     * The last row is a marker (id NULL): how long until a rate limit or throttle lets the next
     * claim take more (wait_ms, NULL when it is not what held the claim back).
     * $1 queue … $8 as the claim; $9 the cursor's group, $10 groups to visit, $11 ungrouped window,
     * $12 the cursor is set.
     */
    flowClaim: define(
      'flow-claim',
      `WITH RECURSIVE q AS (
         SELECT q.*, statement_timestamp() AS ts,
                (q.rate_limit IS NOT NULL OR q.group_rate_limit IS NOT NULL
                   OR EXISTS (SELECT 1 FROM ${s}.job_groups g WHERE g.queue_name = $1 AND g.rate_limit IS NOT NULL)) AS logs,
                greatest(q.rate_window_ms, q.group_rate_window_ms,
                         (SELECT max(g.rate_window_ms) FROM ${s}.job_groups g WHERE g.queue_name = $1)) AS longest_window_ms
         FROM ${s}.queues q WHERE q.name = $1 AND q.paused_at IS NULL
       ), grouping AS (
         SELECT (q.group_fairness OR q.group_concurrency IS NOT NULL OR q.group_rate_limit IS NOT NULL
                   OR EXISTS (SELECT 1 FROM ${s}.job_groups g WHERE g.queue_name = $1)) AS on
         FROM q
       ), ungrouped AS (
         -- Whether jobs without a group are among the queue's next $11 claimable ones (see above).
         SELECT NOT grouping.on OR EXISTS (
                  SELECT 1 FROM (SELECT group_key FROM ${jobs} WHERE ${CLAIMABLE}
                                 ORDER BY priority DESC, available_at, id LIMIT $11) w
                  WHERE w.group_key IS NULL) AS yes
         FROM grouping
       ), queue_room AS (
         SELECT greatest(0, least(
                  $3::int,
                  CASE WHEN q.throttled_until > q.ts THEN 0 ELSE $3 END,
                  -- Each count only when its limit is set (an operator's operands are all evaluated), and
                  -- no further than the limit: the running rows of a busy queue cost a heap visit each.
                  -- lease_owner (always set on a running row) is not in jobs_running_idx, so this is an
                  -- index scan, not an index-only one: only an index scan marks the entries of rows that
                  -- left 'running' dead as it passes them, and a busy queue leaves one per job; an
                  -- index-only count visited the heap for every one of them again at every claim.
                  CASE WHEN q.global_concurrency IS NOT NULL THEN q.global_concurrency
                    - (SELECT count(*) FROM (SELECT 1 FROM ${jobs} r WHERE r.queue_name = $1 AND r.status = 'running' AND r.lease_owner IS NOT NULL LIMIT q.global_concurrency) x) END,
                  CASE WHEN q.rate_limit IS NOT NULL THEN q.rate_limit
                    - (SELECT count(*) FROM ${s}.claim_log c WHERE c.queue_name = $1 AND c.claimed_at > q.ts - ${ms('q.rate_window_ms')}) END
                ))::int AS n,
                CASE WHEN q.throttled_until > q.ts THEN (extract(epoch FROM q.throttled_until - q.ts) * 1000)::float8 END AS throttled_ms,
                (SELECT (extract(epoch FROM c.claimed_at + ${ms('q.rate_window_ms')} - q.ts) * 1000)::float8
                 FROM ${s}.claim_log c WHERE c.queue_name = $1 AND c.claimed_at > q.ts - ${ms('q.rate_window_ms')}
                 ORDER BY c.claimed_at LIMIT 1 OFFSET greatest(0, (SELECT count(*) FROM ${s}.claim_log c2
                   WHERE c2.queue_name = $1 AND c2.claimed_at > q.ts - ${ms('q.rate_window_ms')}) - q.rate_limit)) AS rate_free_ms
         FROM q
       ), ${walk('after', "coalesce($9::text, '')", 'NULL::text', 'true')},
       ${walk('before', "''", '$9::text', '$12::boolean AND $9::text IS NOT NULL')}, visited AS (
         -- The ring: the jobs without a group (pos 0), then the groups by key. A claim goes round
         -- from after the cursor ($9, $12) back to it. Without grouping, one stop: every job.
         SELECT 0 AS pos, NULL::text AS key FROM grouping, ungrouped WHERE ungrouped.yes AND (NOT $12::boolean OR NOT grouping.on)
         UNION ALL SELECT n, key FROM after WHERE key IS NOT NULL
         UNION ALL SELECT $10 + 1, NULL FROM grouping, ungrouped WHERE ungrouped.yes AND $12::boolean AND grouping.on
         UNION ALL SELECT $10 + 1 + n, key FROM before WHERE key IS NOT NULL
       ), caps AS (
         SELECT v.pos, v.key, coalesce(g.weight, 1) AS weight,
                greatest(0, least(
                  $3::int,
                  CASE WHEN g.throttled_until > q.ts THEN 0 ELSE $3 END,
                  CASE WHEN v.key IS NOT NULL AND coalesce(g.concurrency, q.group_concurrency) IS NOT NULL THEN coalesce(g.concurrency, q.group_concurrency)
                    - (SELECT count(*) FROM (SELECT 1 FROM ${jobs} r WHERE r.queue_name = $1 AND r.group_key = v.key AND r.status = 'running' AND r.lease_owner IS NOT NULL
                                             LIMIT coalesce(g.concurrency, q.group_concurrency)) x) END,
                  CASE WHEN v.key IS NOT NULL AND coalesce(g.rate_limit, q.group_rate_limit) IS NOT NULL THEN coalesce(g.rate_limit, q.group_rate_limit)
                    - (SELECT count(*) FROM ${s}.claim_log c WHERE c.queue_name = $1 AND c.group_key = v.key
                         AND c.claimed_at > q.ts - ${ms('coalesce(g.rate_window_ms, q.group_rate_window_ms)')}) END
                ))::int AS cap,
                CASE WHEN g.throttled_until > q.ts THEN (extract(epoch FROM g.throttled_until - q.ts) * 1000)::float8 END AS throttled_ms,
                -- When the group's rate budget is spent: how long until its oldest claim in the window
                -- leaves it (the next claim's hint, so the limit is used, not the poll's pace).
                CASE WHEN v.key IS NOT NULL AND coalesce(g.rate_limit, q.group_rate_limit) IS NOT NULL THEN (
                  SELECT CASE WHEN count(*) >= coalesce(g.rate_limit, q.group_rate_limit)
                              THEN (extract(epoch FROM min(c.claimed_at) + ${ms('coalesce(g.rate_window_ms, q.group_rate_window_ms)')} - q.ts) * 1000)::float8 END
                  FROM ${s}.claim_log c WHERE c.queue_name = $1 AND c.group_key = v.key
                    AND c.claimed_at > q.ts - ${ms('coalesce(g.rate_window_ms, q.group_rate_window_ms)')}) END AS rate_free_ms
         FROM visited v CROSS JOIN q
           LEFT JOIN ${s}.job_groups g ON g.queue_name = $1 AND g.group_key = v.key
       ), eligible AS (
         SELECT c.*, ceil((SELECT n FROM queue_room)::numeric / sum(c.weight) OVER ())::int AS rounds
         FROM caps c WHERE c.cap > 0
       ), candidates AS (
         SELECT e.pos, e.key, j.id, ceil(j.rank::numeric / e.weight) AS round, j.rank
         FROM eligible e CROSS JOIN grouping CROSS JOIN LATERAL (
           SELECT x.id, row_number() OVER () AS rank FROM (
             (SELECT id FROM ${jobs}
              WHERE e.key IS NOT NULL AND ${CLAIMABLE} AND group_key = e.key
              ORDER BY priority DESC, available_at, id LIMIT least(e.cap, e.weight * e.rounds))
             UNION ALL
             (SELECT w.id FROM (SELECT id, group_key, priority, available_at FROM ${jobs}
                                WHERE e.key IS NULL AND ${CLAIMABLE}
                                ORDER BY priority DESC, available_at, id
                                LIMIT CASE WHEN grouping.on THEN $11 ELSE least(e.cap, e.weight * e.rounds) END) w
              WHERE NOT grouping.on OR w.group_key IS NULL
              ORDER BY w.priority DESC, w.available_at, w.id LIMIT least(e.cap, e.weight * e.rounds))
           ) x
         ) j
       ), chosen AS (
         SELECT id, key, pos, round, rank FROM candidates
         ORDER BY round, pos, rank LIMIT (SELECT n FROM queue_room)
       ), claimed AS (
         UPDATE ${jobs} AS j
         SET ${CLAIM_SET('(SELECT ts FROM q)')}
         -- status::text: the recheck (a job an operator cancelled meanwhile), in a form no partial
         -- index of pending jobs can serve (the primary key finds the rows).
         WHERE j.id = ANY (ARRAY(SELECT id FROM chosen)) AND j.status::text = 'pending'
         RETURNING ${CLAIM_RETURNING}
       ), logged AS (
         INSERT INTO ${s}.claim_log (queue_name, group_key, claimed_at)
         SELECT $1, c.group_key, q.ts FROM claimed c CROSS JOIN q WHERE q.logs
       ), forgotten AS (
         DELETE FROM ${s}.claim_log c USING q
         WHERE c.queue_name = $1 AND q.longest_window_ms IS NOT NULL AND c.claimed_at <= q.ts - ${ms('q.longest_window_ms')}
       ), turned AS (
         -- The round-robin goes on after the last group served (or the last one visited, when
         -- none was served: the next claim looks further round).
         UPDATE ${s}.queues qq SET fair_cursor = last.key, fair_cursor_set = true
         FROM (SELECT key FROM (SELECT key, round, pos, rank FROM chosen
                                UNION ALL SELECT key, -1, pos, 0 FROM visited WHERE NOT EXISTS (SELECT 1 FROM chosen)) t
               ORDER BY round DESC, pos DESC, rank DESC LIMIT 1) last, grouping
         WHERE qq.name = $1 AND grouping.on
       )
       SELECT c.*, (SELECT least(qr.throttled_ms, CASE WHEN qr.n = 0 THEN qr.rate_free_ms END,
                                 (SELECT min(least(throttled_ms, rate_free_ms)) FROM caps))
                    FROM queue_room qr) AS gate_wait_ms
       FROM (SELECT 1) one LEFT JOIN claimed c ON true`,
      (p: FlowClaimParams) => [
        p.queue, p.owner, p.limit, p.leaseMs, p.maxRuntimeMs, p.maxAttempts, p.backoffBaseMs, p.backoffMaxMs,
        p.cursor.key, p.maxGroups, p.ungroupedWindow, p.cursor.set,
      ],
      (rows: ((ClaimedRow | (Partial<ClaimedRow> & { id: null })) & { gate_wait_ms: number | null })[]): ClaimedJobs =>
        claimedJobs(rows, { flow: true, waitMs: rows[0]?.gate_wait_ms ?? null }),
    ),

    /**
     * What flow control holds back, for the queues that have it on (none: no row, and nothing
     * else is read). Per queue: its limits, running jobs against the global limit, claims in the
     * rate window, the throttle; per group: running and waiting jobs against its limits, the $1
     * groups with the most jobs; and the waiting jobs a throttle or a used-up rate budget holds.
     * Counting waiting jobs by group reads the queue's claimable grouped jobs (their index): a
     * cost that grows with the backlog of these queues, not with retained history.
     */
    flowStats: define(
      'flow-stats',
      `WITH fq AS (
         SELECT q.*, now() AS ts FROM ${s}.queues q WHERE q.flow
       ), groups AS (
         SELECT k.queue_name, k.group_key, sum(k.waiting)::int AS waiting, sum(k.running)::int AS running
         FROM (SELECT j.queue_name, j.group_key, count(*) AS waiting, 0 AS running FROM ${jobs} j JOIN fq ON fq.name = j.queue_name
               WHERE j.status = 'pending' AND NOT j.key_waiting AND j.group_key IS NOT NULL GROUP BY 1, 2
               UNION ALL
               SELECT j.queue_name, j.group_key, 0, count(*) FROM ${jobs} j JOIN fq ON fq.name = j.queue_name
               WHERE j.status = 'running' AND j.group_key IS NOT NULL GROUP BY 1, 2) k
         GROUP BY 1, 2
       ), judged AS (
         SELECT gr.*, coalesce(g.concurrency, fq.group_concurrency) AS concurrency,
                coalesce(g.rate_limit, fq.group_rate_limit) AS rate_limit,
                CASE WHEN g.throttled_until > fq.ts THEN g.throttled_until END AS throttled_until,
                (SELECT count(*) FROM ${s}.claim_log c WHERE c.queue_name = gr.queue_name AND c.group_key = gr.group_key
                   AND c.claimed_at > fq.ts - ${ms('coalesce(g.rate_window_ms, fq.group_rate_window_ms)')})::int AS claims_in_window,
                row_number() OVER (PARTITION BY gr.queue_name ORDER BY gr.waiting + gr.running DESC, gr.group_key) AS rank
         FROM groups gr JOIN fq ON fq.name = gr.queue_name
           LEFT JOIN ${s}.job_groups g ON g.queue_name = gr.queue_name AND g.group_key = gr.group_key
       )
       SELECT fq.name AS queue, fq.global_concurrency, fq.group_concurrency, fq.rate_limit, fq.rate_window_ms,
              fq.group_rate_limit, fq.group_rate_window_ms, fq.group_fairness,
              CASE WHEN fq.throttled_until > fq.ts THEN fq.throttled_until END AS throttled_until,
              (SELECT count(*) FROM ${jobs} r WHERE r.queue_name = fq.name AND r.status = 'running')::int AS running,
              (SELECT count(*) FROM ${s}.claim_log c WHERE c.queue_name = fq.name AND c.claimed_at > fq.ts - ${ms('fq.rate_window_ms')})::int AS claims_in_window,
              (SELECT count(*) FROM judged WHERE judged.queue_name = fq.name)::int AS group_count,
              -- Held by a rate limit or a throttle: the whole queue's waiting jobs when it is the
              -- queue's, else those of the groups whose own budget or throttle holds them.
              CASE WHEN fq.throttled_until > fq.ts OR fq.rate_limit <= (SELECT count(*) FROM ${s}.claim_log c
                          WHERE c.queue_name = fq.name AND c.claimed_at > fq.ts - ${ms('fq.rate_window_ms')})
                   THEN (SELECT count(*) FROM ${jobs} p WHERE p.queue_name = fq.name AND p.status = 'pending' AND NOT p.key_waiting)
                   ELSE (SELECT coalesce(sum(waiting), 0) FROM judged
                         WHERE judged.queue_name = fq.name AND (judged.throttled_until IS NOT NULL OR judged.claims_in_window >= judged.rate_limit)) END::int AS held_by_rate,
              coalesce((SELECT json_agg(json_build_object('group', group_key, 'waiting', waiting, 'running', running, 'concurrency', concurrency,
                                                          'rateLimit', rate_limit, 'claimsInWindow', claims_in_window, 'throttledUntil', throttled_until)
                                        ORDER BY rank)
                        FROM judged WHERE judged.queue_name = fq.name AND judged.rank <= $1), '[]') AS top_groups
       FROM fq ORDER BY fq.name`,
      (p: { topGroups: number }) => [p.topGroups],
      (rows: (LimitsRow & { queue: string; throttled_until: Date | null; running: number; claims_in_window: number; group_count: number; held_by_rate: number;
        top_groups: { group: string; waiting: number; running: number; concurrency: number | null; rateLimit: number | null; claimsInWindow: number; throttledUntil: string | null }[] })[]): FlowStats[] =>
        rows.map((r) => ({
          queue: r.queue,
          limits: queueLimits(r),
          throttledUntil: r.throttled_until,
          running: r.running,
          claimsInWindow: r.rate_limit === null ? null : r.claims_in_window,
          heldByRateLimit: r.held_by_rate,
          groupCount: r.group_count,
          topGroups: r.top_groups.map((g) => ({
            group: g.group,
            waiting: g.waiting,
            running: g.running,
            concurrency: g.concurrency,
            rateLimit: g.rateLimit,
            claimsInWindow: g.rateLimit === null ? null : g.claimsInWindow,
            throttledUntil: g.throttledUntil === null ? null : new Date(g.throttledUntil),
          })),
        })),
    ),

    /** A queue's limits. $1 queue. */
    getLimits: define(
      'get-limits',
      `SELECT global_concurrency, group_concurrency, rate_limit, rate_window_ms, group_rate_limit, group_rate_window_ms, group_fairness
       FROM ${s}.queues WHERE name = $1`,
      (p: { queue: string }) => [p.queue],
      (rows: LimitsRow[]): QueueLimits | undefined => (rows[0] ? queueLimits(rows[0]) : undefined),
    ),

    /**
     * Sets the limits given (a field that is not given keeps its value: $9 lists the given ones)
     * and whether flow control is on, under the queue row's lock. $1 queue, $2 global concurrency,
     * $3 group concurrency, $4/$5 rate limit and window, $6/$7 group rate limit and window,
     * $8 group fairness, $9 fields set.
     */
    setLimits: define(
      'set-limits',
      `WITH v AS (
         SELECT q.name,
                CASE WHEN 'globalConcurrency' = ANY ($9::text[]) THEN $2 ELSE q.global_concurrency END AS global_concurrency,
                CASE WHEN 'groupConcurrency' = ANY ($9::text[]) THEN $3 ELSE q.group_concurrency END AS group_concurrency,
                CASE WHEN 'rateLimit' = ANY ($9::text[]) THEN $4 ELSE q.rate_limit END AS rate_limit,
                CASE WHEN 'rateLimit' = ANY ($9::text[]) THEN $5 ELSE q.rate_window_ms END AS rate_window_ms,
                CASE WHEN 'groupRateLimit' = ANY ($9::text[]) THEN $6 ELSE q.group_rate_limit END AS group_rate_limit,
                CASE WHEN 'groupRateLimit' = ANY ($9::text[]) THEN $7 ELSE q.group_rate_window_ms END AS group_rate_window_ms,
                CASE WHEN 'groupFairness' = ANY ($9::text[]) THEN $8 ELSE q.group_fairness END AS group_fairness
         FROM ${s}.queues q WHERE q.name = $1 FOR NO KEY UPDATE
       )
       UPDATE ${s}.queues q
       SET global_concurrency = v.global_concurrency, group_concurrency = v.group_concurrency,
           rate_limit = v.rate_limit, rate_window_ms = v.rate_window_ms,
           group_rate_limit = v.group_rate_limit, group_rate_window_ms = v.group_rate_window_ms,
           group_fairness = v.group_fairness, flow = ${flowOn(s, 'v')}
       FROM v WHERE q.name = v.name
       RETURNING q.global_concurrency, q.group_concurrency, q.rate_limit, q.rate_window_ms, q.group_rate_limit, q.group_rate_window_ms, q.group_fairness`,
      (p: { queue: string; limits: Partial<QueueLimits> }) => {
        const l = p.limits;
        return [
          p.queue, l.globalConcurrency ?? null, l.groupConcurrency ?? null, l.rateLimit?.limit ?? null, l.rateLimit?.windowMs ?? null,
          l.groupRateLimit?.limit ?? null, l.groupRateLimit?.windowMs ?? null, l.groupFairness ?? false, Object.keys(l),
        ];
      },
      (rows: LimitsRow[]): QueueLimits | undefined => (rows[0] ? queueLimits(rows[0]) : undefined),
    ),

    /**
     * A group's own settings, under the queue row's lock (run in a transaction with
     * forgetDefaultGroup and refreshFlow). Nothing when the queue is not declared.
     * $1 queue, $2 group, $3 concurrency, $4 weight, $5/$6 rate limit and window, $7 fields set.
     */
    setGroupLimits: define(
      'set-group-limits',
      `WITH locked AS (
         SELECT name FROM ${s}.queues WHERE name = $1 FOR NO KEY UPDATE
       )
       INSERT INTO ${s}.job_groups AS g (queue_name, group_key, concurrency, weight, rate_limit, rate_window_ms)
       SELECT $1, $2, $3, coalesce($4, 1), $5, $6 FROM locked
       ON CONFLICT (queue_name, group_key) DO UPDATE SET
         concurrency = CASE WHEN 'concurrency' = ANY ($7::text[]) THEN $3 ELSE g.concurrency END,
         weight = CASE WHEN 'weight' = ANY ($7::text[]) THEN coalesce($4, 1) ELSE g.weight END,
         rate_limit = CASE WHEN 'rateLimit' = ANY ($7::text[]) THEN $5 ELSE g.rate_limit END,
         rate_window_ms = CASE WHEN 'rateLimit' = ANY ($7::text[]) THEN $6 ELSE g.rate_window_ms END
       RETURNING g.concurrency, g.weight, g.rate_limit, g.rate_window_ms`,
      (p: { queue: string; group: string; limits: Partial<GroupLimits> }) => {
        const l = p.limits;
        return [p.queue, p.group, l.concurrency ?? null, l.weight ?? null, l.rateLimit?.limit ?? null, l.rateLimit?.windowMs ?? null, Object.keys(l)];
      },
      (rows: { concurrency: number | null; weight: number; rate_limit: number | null; rate_window_ms: number | null }[]): GroupLimits | undefined =>
        rows[0] ? { concurrency: rows[0].concurrency, weight: rows[0].weight, rateLimit: rate(rows[0].rate_limit, rows[0].rate_window_ms) } : undefined,
    ),

    /** A group back to every default, with no throttle running, loses its row. $1 queue, $2 group (NULL: every such group of the queue). */
    forgetDefaultGroups: define(
      'forget-default-groups',
      `DELETE FROM ${s}.job_groups
       WHERE queue_name = $1 AND ($2::text IS NULL OR group_key = $2)
         AND concurrency IS NULL AND weight = 1 AND rate_limit IS NULL AND (throttled_until IS NULL OR throttled_until <= now())`,
      (p: { queue: string; group: string | null }) => [p.queue, p.group],
      () => undefined,
    ),

    /** Whether flow control is on for the queue, from its row and its groups' rows. $1 queue. */
    refreshFlow: define(
      'refresh-flow',
      `UPDATE ${s}.queues q SET flow = ${flowOn(s, 'q')} WHERE q.name = $1 RETURNING q.flow`,
      (p: { queue: string }) => [p.queue],
      (rows: { flow: boolean }[]) => rows[0]?.flow ?? false,
    ),

    /** Groups with settings of their own, by key, from after $2 (a page of $3). */
    listGroupLimits: define(
      'list-group-limits',
      `SELECT group_key, concurrency, weight, rate_limit, rate_window_ms, throttled_until
       FROM ${s}.job_groups WHERE queue_name = $1 AND group_key > $2 ORDER BY group_key LIMIT $3`,
      (p: { queue: string; after: string; limit: number }) => [p.queue, p.after, p.limit],
      (rows: { group_key: string; concurrency: number | null; weight: number; rate_limit: number | null; rate_window_ms: number | null; throttled_until: Date | null }[]) =>
        rows.map((r) => ({
          group: r.group_key,
          concurrency: r.concurrency,
          weight: r.weight,
          rateLimit: rate(r.rate_limit, r.rate_window_ms),
          throttledUntil: r.throttled_until,
        })),
    ),

    /**
     * A handler reported a rate limit (RateLimitedError): fenced, the job goes back to 'scheduled'
     * until the throttle ends, its attempt given back unless it has been $6 times already (then
     * the attempt counts: dead when it was the last, with code RATE_LIMITED); the queue (scope
     * 'queue') or the job's group is throttled until then (never shortened by a shorter report),
     * and flow control turns on for a group's throttle. Audited.
     * $1 id, $2 owner, $3 token, $4 scope, $5 retry after ms, $6 free retries, $7 message.
     */
    throttle: define(
      'throttle',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       throttled AS (
         UPDATE ${jobs} AS j
         SET status = CASE WHEN j.rate_limited_count >= $6 AND j.attempt_count >= j.max_attempts THEN 'dead'::${status} ELSE 'scheduled'::${status} END,
             finished_at = CASE WHEN j.rate_limited_count >= $6 AND j.attempt_count >= j.max_attempts THEN now() END,
             available_at = now() + ${ms('$5::bigint')},
             attempt_count = CASE WHEN j.rate_limited_count >= $6 THEN j.attempt_count ELSE j.attempt_count - 1 END,
             rate_limited_count = j.rate_limited_count + 1,
             last_error_code = 'RATE_LIMITED', last_error_message = $7,
             lease_owner = CASE WHEN j.rate_limited_count >= $6 AND j.attempt_count >= j.max_attempts THEN j.lease_owner END,
             lease_expires_at = NULL, deadline_at = NULL
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING j.id, j.queue_name, j.group_key, j.status, j.attempt_count, j.rate_limited_count
       ), queue_throttled AS (
         UPDATE ${s}.queues q SET throttled_until = greatest(q.throttled_until, now() + ${ms('$5::bigint')})
         FROM throttled t WHERE q.name = t.queue_name AND ($4 = 'queue' OR t.group_key IS NULL)
       ), group_throttled AS (
         INSERT INTO ${s}.job_groups AS g (queue_name, group_key, throttled_until)
         SELECT t.queue_name, t.group_key, now() + ${ms('$5::bigint')} FROM throttled t WHERE $4 = 'group' AND t.group_key IS NOT NULL
         ON CONFLICT (queue_name, group_key) DO UPDATE SET throttled_until = greatest(g.throttled_until, excluded.throttled_until)
         RETURNING g.queue_name
       ), flow_on AS (
         UPDATE ${s}.queues q SET flow = true FROM group_throttled g WHERE q.name = g.queue_name AND NOT q.flow
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code, message)
         SELECT r.id, CASE WHEN r.status = 'dead' THEN 'dead' ELSE 'rate_limited' END, 'running', r.status, r.attempt_count,
                t.token, t.owner, 'RATE_LIMITED', $7
         FROM throttled r CROSS JOIN target t
       )
       SELECT r.status::text AS status, r.rate_limited_count <= $6 AS free, ${fenceLossOrMissing('j', 't.token', 't.owner')} AS loss
       FROM target t LEFT JOIN throttled r ON true LEFT JOIN ${jobs} j ON j.id = t.id`,
      (p: ThrottleParams) => [p.id, p.owner, p.token, p.scope, p.retryAfterMs, p.maxFreeRetries, p.message],
      (rows: { status: 'scheduled' | 'dead' | null; free: boolean | null; loss: string }[]): FencedOutcome<ThrottleOutcome> => {
        const row = rows[0];
        if (row?.status) return { ok: true, status: row.status, free: row.free === true };
        return lost(row?.loss);
      },
    ),
  };
}
