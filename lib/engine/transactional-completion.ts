import { setTimeout as sleep } from 'node:timers/promises';
import type { Attempt, AttemptDeps } from './attempt.js';
import { requireInteger } from './config.js';
import { HandlerUsageError, LeaseLostError, RetryableJobError, type FenceLossReason } from './errors.js';
import { CLIENT_NOT_IN_TRANSACTION, FENCE_LOCK_TIMEOUT } from './messages.js';
import { sqlState } from './pg-errors.js';
import { lost, transaction, type FencedOutcome, type Store } from './store/index.js';
import type { CompleteOptions, Queryable } from './types.js';

export const LOCK_TIMEOUT_DEFAULT_MS = 5_000;

/** How often a completion whose row someone else holds looks again (see lockFence in store/fence.ts). */
const LOCK_RETRY_MS = 20;

/**
 * Fenced transactional completion: the handler's own writes commit together with the job's
 * success, or not at all. Order inside the transaction: take the fence as a row lock, run the
 * handler's work, mark the job succeeded (hand its ordering key on), commit. A stale worker
 * fails at the first step, so its writes never happen; and while the lock is held, nothing can
 * take the job away (the reaper skips locked rows, a cancellation waits). Peers' completion in a
 * transaction (River's JobCompleteTx) checks only the state column, which a stale worker passes.
 *
 * Off the happy path:
 * - `{ client }` must be inside a transaction block (BEGIN): in autocommit the lock would end with
 *   its statement and the work would commit on its own even when the completion is refused.
 * - The fence compares with the database's clock at each statement (clock_timestamp()), so a
 *   caller's transaction opened before the lease expired cannot complete after it.
 * - Nothing here sets anything in the caller's transaction (no lock_timeout): the row lock is
 *   taken with SKIP LOCKED and retried for `lockTimeoutMs` instead.
 * - Nothing here asks the pool for a connection while the transaction holds one: a refusal is
 *   read on the transaction's own connection, and recorded in the job's history by the worker
 *   once the handler has settled.
 *
 * A function of the attempt and the transaction: it returns what happened, and changes nothing
 * of the attempt's. The executor (job-context.ts) applies the outcome: a refusal marks the lease
 * lost; a success says how the job was finished ('own': committed here; 'client': written in the
 * caller's transaction, true only once the caller commits) and whether a key was handed off.
 */
export async function completeInTransaction<R>(
  attempt: Attempt,
  deps: AttemptDeps,
  work: (tx: Queryable) => Promise<R>,
  options: CompleteOptions = {},
): Promise<Completion<R>> {
  const lockTimeoutMs = requireInteger('lockTimeoutMs', options.lockTimeoutMs ?? LOCK_TIMEOUT_DEFAULT_MS, 1, 600_000);
  const { store, channel } = deps;
  const { id } = attempt.job;
  const fenceKey = attempt.fenceKey;
  /**
   * A fenced step was refused: set, then thrown so that the work (if it ran) rolls back with it.
   * Only this function's own refusal is turned into the outcome: an error of the work's (even a
   * LeaseLostError from a heartbeat inside it) goes to the handler as it is.
   */
  let refusal: FenceLossReason | undefined;
  const refuse = (reason: FenceLossReason) => {
    refusal = reason;
    return new LeaseLostError(id, fenceKey.token, reason);
  };

  const inTransaction = async (tx: Queryable): Promise<{ result: R; keysDeferred: boolean }> => {
    const lockUntil = performance.now() + lockTimeoutMs;
    for (;;) {
      if ((await store.lockFence(tx, fenceKey)).locked) break;
      const fence = await store.fenceLoss(tx, fenceKey);
      if (!fence.owned) throw refuse(fence.reason);
      // Still ours, but someone holds the row (an operator's cancellation deciding first).
      if (performance.now() >= lockUntil) throw new RetryableJobError(FENCE_LOCK_TIMEOUT(id, lockTimeoutMs), { code: 'FENCE_LOCK_TIMEOUT' });
      await sleep(Math.min(LOCK_RETRY_MS, Math.max(1, lockUntil - performance.now())));
    }

    const result = await work(tx);
    const done = await store.completeMany(tx, { ids: [fenceKey.id], tokens: [fenceKey.token], owner: fenceKey.owner });
    const outcome: FencedOutcome = done.rows[0] ?? lost(null);
    // We hold the row, so only time can refuse it now: the lease ran out during the work (by
    // the database's clock). The work rolls back with the refusal.
    if (!outcome.ok) throw refuse(outcome.reason);
    // Told once the transaction commits (the worker does, after the handler settles).
    const keysDeferred = await store.promoteReleasedKeys(tx, channel, done.keys);
    return { result, keysDeferred };
  };

  try {
    if (options.client) {
      await requireTransaction(options.client, store, id);
      // True only once the caller commits: the worker checks after the handler settles (D14).
      return { ok: true, completion: 'client', ...(await inTransaction(options.client)) };
    }
    return { ok: true, completion: 'own', ...(await transaction(deps.db, inTransaction, store)) };
  } catch (error) {
    if (refusal !== undefined) return { ok: false, reason: refusal };
    throw error;
  }
}

/**
 * What ctx.complete did: refused by the fence (nothing was written), or the job's success written
 * with the work's `result`, committed here ('own') or in the caller's transaction ('client').
 */
export type Completion<R> = FencedOutcome<{ result: R; completion: 'own' | 'client'; keysDeferred: boolean }>;

/** A caller's client must be inside a transaction block (see requireTransaction in store/fence.ts). */
async function requireTransaction(client: Queryable, store: Store, jobId: string): Promise<void> {
  try {
    await store.requireTransaction(client);
  } catch (error) {
    if (sqlState(error) !== '25P01') throw error;
    throw new HandlerUsageError('CLIENT_NOT_IN_TRANSACTION', CLIENT_NOT_IN_TRANSACTION(jobId));
  }
}
