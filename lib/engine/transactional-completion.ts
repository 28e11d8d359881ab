import { requireInteger } from './config.js';
import { run, transaction, type Queryable, type ReleasedKeys } from './db.js';
import { RetryableJobError } from './errors.js';
import type { Lease } from './lease.js';
import type { CompleteOptions } from './types.js';

export const LOCK_TIMEOUT_DEFAULT_MS = 5_000;

/**
 * Fenced transactional completion: the handler's own writes commit together with the job's
 * success, or not at all. Order inside the transaction: take the fence as a row lock, run the
 * handler's work, mark the job succeeded (hand its ordering key on), commit. A stale worker
 * fails at the first step, so its writes never happen; and while the lock is held, nothing can
 * take the job away (the reaper skips locked rows, a cancellation waits). Peers' completion in a
 * transaction (River's JobCompleteTx) checks only the state column, which a stale worker passes.
 */
export async function completeInTransaction<R>(lease: Lease, work: (tx: Queryable) => Promise<R>, options: CompleteOptions = {}): Promise<R> {
  if (lease.lost || lease.completedInTransaction) throw await lease.lostOn('complete');
  const lockTimeoutMs = requireInteger('lockTimeoutMs', options.lockTimeoutMs ?? LOCK_TIMEOUT_DEFAULT_MS, 1, 600_000);
  const inTransaction = async (tx: Queryable): Promise<R> => {
    // SET LOCAL cannot take a parameter; the value is a validated integer.
    await tx.query({ text: `SET LOCAL lock_timeout = ${lockTimeoutMs}` });
    const locked = await run(tx, lease.deps.queries.lockFence, [lease.job.id, lease.deps.owner, lease.job.leaseToken]).catch((error: unknown) => {
      if ((error as { code?: string }).code === '55P03') {
        throw new RetryableJobError(`Job ${lease.job.id}: its row stayed locked for ${lockTimeoutMs} ms (an operator's cancellation?); nothing was written.`, {
          code: 'FENCE_LOCK_TIMEOUT',
        });
      }
      throw error;
    });
    // Refused by the database: recorded in the job's history like any refused completion.
    if (locked.length === 0) throw await lease.lostOn('complete', true);
    const result = await work(tx);
    const [done] = await run<{ applied: boolean } & ReleasedKeys>(tx, lease.deps.queries.completeMany, [
      [lease.job.id],
      [lease.job.leaseToken],
      lease.deps.owner,
    ]);
    // We hold the row lock taken under the fence, so this cannot be refused; check anyway.
    if (!done?.applied) throw await lease.lostOn('complete');
    if (done.key_queues?.length) {
      await run(tx, lease.deps.queries.promoteKeyHeads, [done.key_queues, done.key_names, lease.deps.channel]);
    }
    return result;
  };
  const result = options.client ? await inTransaction(options.client) : await transaction(lease.deps.db, inTransaction);
  lease.completedInTransaction = true;
  return result;
}
