import type pg from 'pg';
import type { FenceParams, Store } from './store/index.js';
import type { Job } from './types.js';

/**
 * What ctx.complete (transactional-completion.ts) and ctx.effect (effects.ts) see of a claimed
 * attempt: a narrow, read-only view, never the Lease itself. They return what happened (a
 * FencedOutcome) and the worker's executor (job-context.ts) applies it to the lease: like River's
 * JobCompleteTx, a free function over the job and a transaction, which changes no one's fields.
 */
export interface Attempt {
  /** The job as the handler sees it (its id and idempotency key name what is written). */
  readonly job: Job;
  /** What the fence matches this attempt's writes by. */
  readonly fenceKey: FenceParams;
  /** The handler's signal: aborted, nothing more is started for the attempt. */
  readonly signal: AbortSignal;
  /** Milliseconds of lease left by the local (conservative) clock: writes are retried while it lasts. */
  readonly msLeft: number;
  /** ctx.complete's work is running (its transaction is open). */
  readonly inCompletion: boolean;
}

/** What an attempt's writes go through. */
export interface AttemptDeps {
  readonly db: pg.Pool;
  readonly store: Store;
  /** The NOTIFY channel (a transactional completion may wake the next job of an ordering key). */
  readonly channel: string;
}
