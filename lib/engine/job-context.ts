import type { AttemptDeps } from './attempt.js';
import { runEffect } from './effects.js';
import type { Lease } from './lease.js';
import { completeInTransaction, type Completion } from './transactional-completion.js';
import { requireInteger } from './config.js';
import type { ChildResult, CompleteOptions, EffectOptions, JobContext, Queryable } from './types.js';

/**
 * The worker's executor builds the handler's context over the attempt's lease (River's executor
 * builds the work context; a lease does not). ctx.complete and ctx.effect are free functions of
 * the attempt and a transaction that return their outcome; here, and only here, an outcome is
 * applied to the lease: a fence refusal marks it lost (and aborts the handler's signal), a
 * completion records how the job was finished, for the worker to act on once the handler settles.
 */
export function jobContext(lease: Lease, deps: AttemptDeps): JobContext {
  return {
    // Read on demand: the lease makes its AbortController only for a handler that asks (lease.ts).
    get signal() {
      return lease.signal;
    },
    attempt: lease.job.attempt,
    token: lease.job.leaseToken,
    heartbeat: () => lease.heartbeat(),
    complete: (work, options) => complete(lease, deps, work, options),
    effect: (name, call, options) => effect(lease, deps, name, call, options),
    childResults: <R>(page: { after?: string; limit?: number } = {}) =>
      deps.store.childResults(deps.db, { parent: lease.job.id, after: page.after ?? '0', limit: requireInteger('limit', page.limit ?? 10_000, 1, 100_000) }) as Promise<ChildResult<R>[]>,
  };
}

async function complete<R>(lease: Lease, deps: AttemptDeps, work: (tx: Queryable) => Promise<R>, options?: CompleteOptions): Promise<R> {
  if (lease.completion !== undefined) throw lease.lostError('finished');
  if (lease.lost) throw lease.lostError(lease.lost);
  // The work runs with the lease in its transaction: heartbeats go through it meanwhile.
  const inLease = (tx: Queryable) => lease.inTransaction(tx, () => work(tx));
  let outcome: Completion<R>;
  try {
    outcome = await completeInTransaction(lease, deps, inLease, options);
  } catch (error) {
    // No known commit: a renewal written in the transaction may never have happened.
    lease.dropRenewal();
    throw error;
  }
  if (!outcome.ok) {
    // ctx.complete's fenced lock records nothing in the job's history: the worker records the
    // refusal once the handler has settled (see Lease.lossToRecord).
    lease.lossToRecord = true;
    lease.markLost(outcome.reason, 'complete');
    lease.dropRenewal();
    throw lease.lostError(outcome.reason);
  }
  // Its own transaction committed (its heartbeats hold); the caller's is not known to, until the
  // worker reads the row after the handler settles: the local lease keeps its last committed length.
  if (outcome.completion === 'own') lease.commitRenewal();
  else lease.dropRenewal();
  if (outcome.keysDeferred) lease.keysDeferred = true;
  lease.completion = outcome.completion;
  return outcome.result;
}

async function effect<R>(
  lease: Lease,
  deps: AttemptDeps,
  name: string,
  call: (idempotencyKey: string) => Promise<R>,
  options?: EffectOptions<R>,
): Promise<R> {
  const outcome = await runEffect(lease, deps, name, call, options);
  if (outcome.ok) return outcome.result;
  lease.markLost(outcome.reason, 'effect');
  throw lease.lostError(outcome.reason);
}
