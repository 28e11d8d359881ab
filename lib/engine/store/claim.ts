import { fence, fenceLossCode, lost, type FencedOutcome, type FenceParams } from './fence.js';
import { ms, type StatementContext } from './statement.js';
import type { TraceCarrier } from '../tracing.js';

/** The claim, and the fenced renewals of a claimed attempt's lease. */

export interface ClaimParams {
  queue: string;
  owner: string;
  limit: number;
  leaseMs: number;
  /** Policy the row lacks comes from the handler: these four. */
  maxRuntimeMs: number;
  maxAttempts: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** Jobs of the batch taken oldest-first whatever their priority (the fairness policy; 0: strict priority). */
  oldestFirst: number;
}

/** A job as the claim returns it. */
export interface ClaimedJob {
  id: string;
  queue: string;
  payload: unknown;
  priority: number;
  attempt: number;
  maxAttempts: number;
  maxRuntimeMs: number;
  leaseToken: string;
  createdAt: Date;
  deadlineAt: Date;
  orderingKey: string | null;
  group: string | null;
  /** The flow parent waiting for this job, or null. */
  parentId: string | null;
  leaseMsLeft: number;
  leaseAtDeadline: boolean;
  traceContext: TraceCarrier | null;
  /** The payload shape's version it was enqueued with (defineJob), or null. */
  payloadVersion: number | null;
  waitedMs: number;
}

export interface ClaimedRow {
  id: string;
  queue_name: string;
  payload: unknown;
  priority: number;
  attempt_count: number;
  max_attempts: number;
  max_runtime_ms: number;
  lease_token: string;
  /** Epoch milliseconds (see the claim's RETURNING). */
  created_ms: number;
  deadline_ms: number;
  ordering_key: string | null;
  group_key: string | null;
  parent_id: string | null;
  lease_ms_left: number;
  lease_at_deadline: boolean;
  trace_context: TraceCarrier | null;
  payload_version: number | null;
  waited_ms: number;
}

/**
 * What held a claim back, besides there being no work: the queue has flow control on (its
 * worker must claim through flowClaim), and how long until a throttle or rate limit lets a claim
 * take more (null: nothing of the kind held it).
 */
export interface ClaimGate {
  flow: boolean;
  waitMs: number | null;
}

/** A claim's jobs, and its gate. */
export type ClaimedJobs = ClaimedJob[] & { readonly gate: ClaimGate };

/**
 * What a claim sets: the claimant, the next fencing token, the attempt, the lease from database
 * time (never past the attempt's deadline), and the policy the row lacks from the handler
 * ($4 lease ms, $5 max runtime ms, $6 max attempts, $7/$8 backoff base and max ms).
 */
export function CLAIM_SET(claimedAt: string): string {
  return `status = 'running',
           attempt_count = j.attempt_count + 1,
           lease_token = j.lease_token + 1,
           lease_owner = $2,
           claimed_at = ${claimedAt},
           heartbeat_at = NULL,
           max_attempts = coalesce(j.max_attempts, $6),
           max_runtime_ms = coalesce(j.max_runtime_ms, $5),
           backoff_base_ms = coalesce(j.backoff_base_ms, $7),
           backoff_max_ms = coalesce(j.backoff_max_ms, $8),
           deadline_at = now() + ${ms('coalesce(j.max_runtime_ms, $5)')},
           lease_expires_at = now() + ${ms('least($4::bigint, coalesce(j.max_runtime_ms, $5))')}`;
}

// Timestamps as epoch milliseconds: the driver parses a number much faster than a timestamptz's
// text, and a Date keeps milliseconds only anyway. date_part, not extract: extract(epoch …) is
// numeric since PostgreSQL 14, and numeric arithmetic on five columns of every claimed row was a
// measurable part of the claim (bench/probes/sql-floor.mjs, `+tid` variants); date_part stays float8.
const epochMs = (value: string) => `(date_part('epoch', ${value}) * 1000)`;
// A point in time as whole epoch milliseconds, exactly those of the timestamp's text: the float8
// product can land a hair under a whole millisecond (…804.9998 for …805), which a Date would
// truncate. Its error is under half a microsecond for dates before 2100 (float8's step there), so
// adding half a microsecond before the floor gives the timestamp's own millisecond, in float8.
const epochWholeMs = (value: string) => `floor(date_part('epoch', ${value}) * 1000 + 0.0005)`;

export const CLAIM_RETURNING = `j.id, j.queue_name, j.payload, j.priority, j.attempt_count, j.max_attempts, j.max_runtime_ms,
                 j.lease_token::text AS lease_token,
                 ${epochWholeMs('j.created_at')} AS created_ms,
                 ${epochWholeMs('j.deadline_at')} AS deadline_ms, j.ordering_key, j.group_key, j.parent_id::text AS parent_id,
                 ${epochMs('j.lease_expires_at - now()')} AS lease_ms_left,
                 j.lease_expires_at >= j.deadline_at AS lease_at_deadline,
                 j.trace_context, j.payload_version,
                 ${epochMs('now() - j.available_at')} AS waited_ms`;

/**
 * The rows of a claim whose result is `gate LEFT JOIN claimed ON true`: one row with no job when
 * nothing was claimed, so the gate's columns always arrive.
 */
export function claimedJobs(rows: (ClaimedRow | (Partial<ClaimedRow> & { id: null }))[], gate: ClaimGate): ClaimedJobs {
  const jobs: ClaimedJob[] = [];
  for (const r of rows) {
    if (r.id === null) continue;
    jobs.push({
      id: r.id,
      queue: r.queue_name,
      payload: r.payload,
      priority: r.priority,
      attempt: r.attempt_count,
      maxAttempts: r.max_attempts,
      maxRuntimeMs: r.max_runtime_ms,
      leaseToken: r.lease_token,
      createdAt: new Date(r.created_ms),
      deadlineAt: new Date(r.deadline_ms),
      orderingKey: r.ordering_key,
      group: r.group_key,
      parentId: r.parent_id,
      leaseMsLeft: r.lease_ms_left,
      leaseAtDeadline: r.lease_at_deadline,
      traceContext: r.trace_context,
      payloadVersion: r.payload_version,
      waitedMs: r.waited_ms,
    });
  }
  return Object.assign(jobs, { gate });
}

/** A renewed lease: how much of it is left by the database's clock, and whether it reaches the deadline. */
export interface Renewal {
  leaseMsLeft: number;
  leaseAtDeadline: boolean;
}

export interface RenewParams extends FenceParams {
  leaseMs: number;
}

type RenewedRow = { lease_ms_left: number | null; lease_at_deadline: boolean | null; loss: string };

function renewal(row: RenewedRow | undefined): FencedOutcome<Renewal> {
  if (row && row.lease_ms_left !== null) return { ok: true, leaseMsLeft: row.lease_ms_left, leaseAtDeadline: row.lease_at_deadline === true };
  return lost(row?.loss);
}

export function claimStatements({ define, s, jobs, jobRows, events }: StatementContext) {
  return {
    /**
     * The claim: one statement, committed before any handler runs. SKIP LOCKED lets concurrent
     * claimers pass each other's rows; the UPDATE increments the fencing token and starts the
     * lease from database time. Policy the row lacks comes from the handler ($4..$8); the lease
     * never reaches past the attempt's deadline.
     *
     * What is claimable: due work is 'pending' (delayed work waits in 'scheduled'), and a job of
     * an ordering key only while it is the key's head (the others wait with key_waiting), so the
     * index walks read claimable rows only, and a batch can never hold two jobs of one key.
     *
     * Fairness: $9 of the batch is taken oldest-first whatever the priority (jobs_claimable_age_idx),
     * the rest by priority; so a flood of high-priority work cannot starve older low-priority jobs.
     * $9 = 0 is strict priority. $1 queue, $2 owner, $3 limit, $4 lease ms, $5 max runtime ms,
     * $6 max attempts, $7 backoff base ms, $8 backoff max ms, $9 jobs to take oldest-first.
     */
    claim: define(
      'claim',
      `WITH gate AS (
         -- A paused or throttled queue claims nothing, nor does one under flow control: its worker
         -- claims through flowClaim (told by the gate's columns). Evaluated once per statement.
         SELECT coalesce(q.paused_at IS NULL AND NOT q.flow AND NOT coalesce(q.throttled_until > now(), false), true) AS open,
                coalesce(q.flow, false) AS flow,
                CASE WHEN q.throttled_until > now() THEN (extract(epoch FROM q.throttled_until - now()) * 1000)::float8 END AS wait_ms
         FROM (SELECT 1) one LEFT JOIN ${s}.queues q ON q.name = $1
       ), by_age AS (
         SELECT id, ctid FROM ${jobs}
         WHERE queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()
           AND (SELECT open FROM gate)
         ORDER BY available_at, id
         LIMIT $9
         FOR UPDATE SKIP LOCKED
       ), by_priority AS (
         SELECT id, ctid FROM ${jobs}
         WHERE queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()
           AND (SELECT open FROM gate)
           AND id NOT IN (SELECT id FROM by_age)
         ORDER BY priority DESC, available_at, id
         LIMIT (SELECT $3 - count(*) FROM by_age)
         FOR UPDATE SKIP LOCKED
       ), candidate AS (
         SELECT ctid FROM by_age UNION ALL SELECT ctid FROM by_priority
       ), claimed AS (
         UPDATE ${jobs} AS j
         SET ${CLAIM_SET('now()')}
         -- = ANY(ARRAY(…)) rather than a join: the planner cannot size the candidates (their LIMIT is
         -- an expression), and a misjudged join turns the update into a scan of the whole table.
         -- By ctid, not id: a TID scan finds each row where its lock found it, without a second
         -- primary-key descent per row (~4 µs a job). Safe: this statement holds each row's lock, so
         -- its version cannot move; a row some other writer had changed after this statement's
         -- snapshot is locked at its new version, which the snapshot cannot see: it is left pending
         -- for the next claim, never claimed twice.
         WHERE j.ctid = ANY (ARRAY(SELECT ctid FROM candidate))
         RETURNING ${CLAIM_RETURNING}
       )
       SELECT c.*, g.flow AS gate_flow, g.wait_ms AS gate_wait_ms FROM gate g LEFT JOIN claimed c ON true`,
      (p: ClaimParams) => [p.queue, p.owner, p.limit, p.leaseMs, p.maxRuntimeMs, p.maxAttempts, p.backoffBaseMs, p.backoffMaxMs, p.oldestFirst],
      (rows: ((ClaimedRow | (Partial<ClaimedRow> & { id: null })) & { gate_flow: boolean; gate_wait_ms: number | null })[]): ClaimedJobs =>
        claimedJobs(rows, { flow: rows[0]?.gate_flow ?? false, waitMs: rows[0]?.gate_wait_ms ?? null }),
    ),

    /**
     * A prefetched job's attempt starts: its lease is renewed to a full length and its deadline set
     * from now, so time spent waiting in the worker's buffer is neither lease nor runtime the
     * handler loses. Fenced; run only when the buffered lease is too short to be useful.
     * $1 id, $2 owner, $3 token, $4 lease ms.
     */
    startAttempt: define(
      'start-attempt',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       started AS (
         UPDATE ${jobs} AS j
         SET deadline_at = now() + ${ms('j.max_runtime_ms')},
             lease_expires_at = now() + ${ms('least($4::bigint, j.max_runtime_ms)')}
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING (extract(epoch FROM j.lease_expires_at - now()) * 1000)::float8 AS lease_ms_left,
                   j.lease_expires_at >= j.deadline_at AS lease_at_deadline, j.deadline_at
       )
       -- The loss is read from job_rows: a job completed (and moved to jobs_succeeded, migration
       -- 0014) meanwhile is reported FINISHED, as before.
       SELECT s.lease_ms_left, s.lease_at_deadline, s.deadline_at,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token', 't.owner')} END AS loss
       FROM target t LEFT JOIN started s ON true LEFT JOIN ${jobRows} j ON j.id = t.id`,
      (p: RenewParams) => [p.id, p.owner, p.token, p.leaseMs],
      (rows: (RenewedRow & { deadline_at: Date | null })[]): FencedOutcome<Renewal & { deadlineAt: Date | null }> => {
        const outcome = renewal(rows[0]);
        return outcome.ok ? { ...outcome, deadlineAt: rows[0]?.deadline_at ?? null } : outcome;
      },
    ),

    /**
     * Renews a lease after progress: to a full lease length from now, but never past the deadline.
     * $1 id, $2 owner, $3 token, $4 lease ms.
     */
    heartbeat: define(
      'heartbeat',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       renewed AS (
         UPDATE ${jobs} AS j
         SET lease_expires_at = least(now() + ${ms('$4::bigint')}, j.deadline_at), heartbeat_at = now()
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING (extract(epoch FROM j.lease_expires_at - now()) * 1000)::float8 AS lease_ms_left,
                   j.lease_expires_at >= j.deadline_at AS lease_at_deadline
       ), lost AS (
         INSERT INTO ${events} (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT j.id, 'lost_fence', j.status, j.attempt_count, t.token, t.owner, ${fenceLossCode('j', 't.token', 't.owner')}
         FROM target t JOIN ${jobRows} j ON j.id = t.id
         WHERE NOT EXISTS (SELECT 1 FROM renewed)
       )
       SELECT r.lease_ms_left, r.lease_at_deadline,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token', 't.owner')} END AS loss
       FROM target t LEFT JOIN renewed r ON true LEFT JOIN ${jobRows} j ON j.id = t.id`,
      (p: RenewParams) => [p.id, p.owner, p.token, p.leaseMs],
      (rows: RenewedRow[]) => renewal(rows[0]),
    ),
  };
}
