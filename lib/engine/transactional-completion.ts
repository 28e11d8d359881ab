import { setTimeout as sleep } from 'node:timers/promises';
import { requireInteger } from './config.js';
import type { Queryable } from './db.js';
import { HandlerUsageError, RetryableJobError } from './errors.js';
import type { Lease } from './lease.js';
import { sqlState } from './pg-errors.js';
import { transaction, type FencedOutcome, type Store } from './store/index.js';
import type { CompleteOptions } from './types.js';

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
 */
export async function completeInTransaction<R>(lease: Lease, work: (tx: Queryable) => Promise<R>, options: CompleteOptions = {}): Promise<R> {
  if (lease.completion !== undefined) throw lease.lostError('finished');
  if (lease.lost) throw lease.lostError(lease.lost);
  const lockTimeoutMs = requireInteger('lockTimeoutMs', options.lockTimeoutMs ?? LOCK_TIMEOUT_DEFAULT_MS, 1, 600_000);
  const { store, channel } = lease.deps;
  const { id } = lease.job;
  const fenceKey = lease.fenceKey;
  /** A fenced step was refused: the lease is lost, and the refusal is recorded once the handler settles. */
  const refused = (outcome: FencedOutcome & { ok: false }) => {
    lease.lossToRecord = true;
    lease.markLost(outcome.reason, 'complete');
    return lease.lostError(outcome.reason);
  };

  const inTransaction = async (tx: Queryable): Promise<R> => {
    const lockUntil = performance.now() + lockTimeoutMs;
    for (;;) {
      if ((await store.lockFence(tx, fenceKey)).locked) break;
      const fence = await store.fenceLoss(tx, fenceKey);
      if (!fence.owned) throw refused({ ok: false, reason: fence.reason });
      // Still ours, but someone holds the row (an operator's cancellation deciding first).
      if (performance.now() >= lockUntil) {
        throw new RetryableJobError(`Job ${id}: its row stayed locked for ${lockTimeoutMs} ms (an operator's cancellation?); nothing was written.`, {
          code: 'FENCE_LOCK_TIMEOUT',
        });
      }
      await sleep(Math.min(LOCK_RETRY_MS, Math.max(1, lockUntil - performance.now())));
    }

    lease.openTransaction = tx;
    let result: R;
    try {
      result = await work(tx);
    } finally {
      lease.openTransaction = undefined;
    }
    const done = await store.completeMany(tx, { ids: [fenceKey.id], tokens: [fenceKey.token], owner: fenceKey.owner });
    const outcome: FencedOutcome = done.rows[0] ?? { ok: false, reason: 'lease_lost' };
    // We hold the row, so only time can refuse it now: the lease ran out during the work (by
    // the database's clock). The work rolls back with the refusal.
    if (!outcome.ok) throw refused(outcome);
    // Told once the transaction commits (the worker does, after the handler settles).
    if (await store.promoteReleasedKeys(tx, channel, done.keys)) lease.keysDeferred = true;
    return result;
  };

  if (options.client) {
    await requireTransaction(options.client, store, id);
    // Its heartbeats hold only if the caller commits, which nothing here learns: the local lease
    // keeps its last committed length (the conservative side).
    const result = await inTransaction(options.client).finally(() => lease.dropRenewal());
    // True only once the caller commits: the worker checks after the handler settles (D14).
    lease.completion = 'client';
    return result;
  }
  let result: R;
  try {
    result = await transaction(lease.deps.db, inTransaction, store);
  } catch (error) {
    lease.dropRenewal();
    throw error;
  }
  lease.commitRenewal();
  lease.completion = 'own';
  return result;
}

/** A caller's client must be inside a transaction block (see requireTransaction in store/fence.ts). */
async function requireTransaction(client: Queryable, store: Store, jobId: string): Promise<void> {
  try {
    await store.requireTransaction(client);
  } catch (error) {
    if (sqlState(error) !== '25P01') throw error;
    throw new HandlerUsageError(
      'CLIENT_NOT_IN_TRANSACTION',
      `Job ${jobId}: ctx.complete({ client }) needs a client inside a transaction: call client.query('BEGIN') first, and COMMIT after ctx.complete returns. ` +
        'Nothing was written; outside a transaction the work would commit on its own even if the completion were refused.',
    );
  }
}
