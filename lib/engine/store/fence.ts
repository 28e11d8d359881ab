import type { FenceLossReason } from '../errors.js';
import type { StatementContext } from './statement.js';

/**
 * The fence. A worker may change a job only while all of these hold: it is the job it claimed
 * (`id`), it is still the claimant (`lease_owner`), no later claim happened (`lease_token`: every
 * claim increments it, nothing resets it), the job is still running, and the lease has not expired
 * by the database's clock. Zero rows matched means the worker lost the job and must not write it.
 */
export function fence(job: string, id: string, owner: string, token: string): string {
  return `${job}.id = ${id} AND ${job}.lease_token = ${token} AND ${fenceHolds(job, owner)}`;
}

/**
 * The fence without its id and token, for a statement that matches those itself (complete-many
 * matches a batch's (id, token) pairs through a hashed subplan).
 */
export function fenceHolds(job: string, owner: string): string {
  // `status::text`, not `status`: the same test, but one the running jobs' partial index
  // (jobs_running_idx: queue, group, lease_expires_at WHERE status = 'running') cannot serve. With it, a planner misled by stale
  // statistics walks every running row for each fenced write; without it, the row is found by its
  // primary key, whatever the statistics say.
  //
  // clock_timestamp(), not now(): now() is the start of the transaction, and a fenced statement
  // can run long after it began: inside a caller's transaction (ctx.complete with { client }),
  // or after waiting for a row lock. A lease that expired meanwhile must refuse the write.
  return `${job}.lease_owner = ${owner} AND ${job}.status::text = 'running' AND ${job}.lease_expires_at > clock_timestamp()`;
}

/** The loss codes the SQL reports, and the reason each one means. */
export const LOSS_CODES = { LEASE_LOST: 'lease_lost', CANCELLED: 'cancelled', FINISHED: 'finished' } as const satisfies Record<string, FenceLossReason>;
export type LossCode = keyof typeof LOSS_CODES;

/**
 * Why a fenced write matched nothing, read from the row as the statement saw it. Cancelled wins;
 * "finished" only when this claim finished it (a second completion: the job succeeded or died by
 * its own worker's write, under the same token and owner; the reaper and operators clear
 * lease_owner when they end a job); everything else is a lost lease (expired, reaped, or
 * reclaimed under a newer token).
 */
export function fenceLossCode(job: string, token: string, owner: string): string {
  return `CASE WHEN ${job}.status = 'cancelled' THEN 'CANCELLED'
    WHEN ${job}.lease_token = ${token} AND ${job}.lease_owner = ${owner} AND ${job}.status IN ('succeeded', 'dead') THEN 'FINISHED'
    ELSE 'LEASE_LOST' END`;
}

/** fenceLossCode for a job that may be missing (a LEFT JOIN): no row is a lost lease. */
export function fenceLossOrMissing(job: string, token: string, owner: string): string {
  return `CASE WHEN ${job}.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode(job, token, owner)} END`;
}

/** The one decoder of loss codes: a code the statement did not report (no row) is a lost lease. */
export function decodeLoss(code: string | null | undefined): FenceLossReason {
  if (code === 'CANCELLED') return LOSS_CODES.CANCELLED;
  if (code === 'FINISHED') return LOSS_CODES.FINISHED;
  return LOSS_CODES.LEASE_LOST;
}

/**
 * What every fenced write returns: it was applied (with what the statement reports), or it was
 * refused because the worker no longer owns the job, and why.
 */
export type FencedOutcome<T extends object = object> = ({ readonly ok: true } & T) | { readonly ok: false; readonly reason: FenceLossReason };

export function lost(code: string | null | undefined): { readonly ok: false; readonly reason: FenceLossReason } {
  return { ok: false, reason: decodeLoss(code) };
}

export interface FenceParams {
  id: string;
  owner: string;
  token: string;
}

/** Why a fence is refused, the row's status, and whether the fence still holds. */
export interface FenceState {
  reason: FenceLossReason;
  status: string | null;
  /** The fence still holds (the row may be locked by someone else, see lockFence). */
  owned: boolean;
  /** The loss code as the statement reported it (FINISHED with status 'succeeded': this claim's completion committed). */
  finishedByThisClaim: boolean;
}

export interface LeaseCheck {
  id: string;
  token: string;
  reason: FenceLossReason;
}

export function fenceStatements({ define, jobs, jobRows, events }: StatementContext) {
  // The loss-reporting reads name job_rows, not jobs: a job whose completion moved it to
  // jobs_succeeded (migration 0014) is reported FINISHED as before, never as missing.
  return {
    /**
     * Takes the fence as a row lock, inside a handler's transactional completion: the row is
     * locked with the full fence predicate, so from here to COMMIT no one else can change the job
     * (the reaper and the claim skip locked rows, a cancellation waits). Never waits itself (SKIP
     * LOCKED): a row someone else holds gives NULL, and the caller tells "held" from "lost" with
     * fenceLoss and tries again for a bounded time, so no lock_timeout is set in the caller's
     * transaction and no lock error aborts it.
     */
    lockFence: define(
      'lock-fence',
      `SELECT (SELECT j.id FROM ${jobs} AS j WHERE ${fence('j', '$1', '$2', '$3')} FOR UPDATE OF j SKIP LOCKED)::text AS locked`,
      (p: FenceParams) => [p.id, p.owner, p.token],
      (rows: { locked: string | null }[]) => ({ locked: rows[0]?.locked != null }),
    ),

    /**
     * Fails (25P01) unless the connection is inside a transaction block: a caller's client in
     * autocommit would let ctx.complete's lock end with its statement and its work commit on its
     * own. One round trip, no parameters (simple protocol, two statements), nothing left behind.
     * Sent by its text (sendText), not its name: two statements cannot be one prepared statement.
     */
    requireTransaction: define(
      'require-transaction',
      `SAVEPOINT pgq_complete; RELEASE SAVEPOINT pgq_complete`,
      () => [],
      () => undefined,
    ),

    /**
     * Why a fence was refused, for a caller that learnt it from a statement without reasons, and
     * the row's status.
     */
    fenceLoss: define(
      'fence-loss',
      `SELECT ${fenceLossOrMissing('j', '$2::bigint', '$3::text')} AS loss,
              j.status::text AS status,
              -- The fence still holds (the row may be locked by someone else, see lockFence).
              coalesce(${fence('j', '$1::bigint', '$3::text', '$2::bigint')}, false) AS owned
       FROM (SELECT 1) AS one LEFT JOIN ${jobRows} AS j ON j.id = $1`,
      (p: FenceParams) => [p.id, p.token, p.owner],
      (rows: { loss: string; status: string | null; owned: boolean }[]): FenceState => {
        const row = rows[0];
        return {
          reason: decodeLoss(row?.loss),
          status: row?.status ?? null,
          owned: row?.owned === true,
          finishedByThisClaim: row?.loss === 'FINISHED' && row.status === 'succeeded',
        };
      },
    ),

    /**
     * fenceLoss for a fenced write refused by a statement that records nothing (ctx.complete's
     * fenced row lock): reports why and records the refusal in the job's history as 'lost_fence',
     * as the fenced completion, failure and heartbeat statements do.
     */
    recordFenceLoss: define(
      'record-fence-loss',
      `WITH target AS (SELECT $1::bigint AS id, $2::bigint AS token, $3::text AS owner),
       lost AS (
         INSERT INTO ${events} (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT j.id, 'lost_fence', j.status, j.attempt_count, t.token, t.owner, ${fenceLossCode('j', 't.token', 't.owner')}
         FROM target t JOIN ${jobRows} j ON j.id = t.id
       )
       SELECT ${fenceLossOrMissing('j', 't.token', 't.owner')} AS loss
       FROM target t LEFT JOIN ${jobRows} j ON j.id = t.id`,
      (p: FenceParams) => [p.id, p.token, p.owner],
      (rows: { loss: string }[]) => decodeLoss(rows[0]?.loss),
    ),

    /**
     * A worker's leases that are no longer its own (cancelled, reaped, reclaimed), with why: run
     * once per poll, so a cancel reaches the handler even when its NOTIFY is lost. Read-only.
     */
    checkLeases: define(
      'check-leases',
      `SELECT i.id::text AS id, i.token::text AS token,
              ${fenceLossOrMissing('j', 'i.token', '$3')} AS loss
       FROM unnest($1::bigint[], $2::bigint[]) AS i(id, token) LEFT JOIN ${jobRows} j ON j.id = i.id
       WHERE j.id IS NULL OR j.status <> 'running' OR j.lease_token <> i.token OR j.lease_owner <> $3`,
      (p: { ids: string[]; tokens: string[]; owner: string }) => [p.ids, p.tokens, p.owner],
      (rows: { id: string; token: string; loss: string }[]): LeaseCheck[] => rows.map((r) => ({ id: r.id, token: r.token, reason: decodeLoss(r.loss) })),
    ),
  };
}
