import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import type { Queryable } from './db.js';
import { completeInTransaction } from './transactional-completion.js';
import { runEffect } from './effects.js';
import { JobAbortedError, LeaseLostError, type FenceLossReason } from './errors.js';
import type { EngineMetrics, LeaseOperation } from './metrics.js';
import type { ClaimedJob, FencedOutcome, FenceParams, Renewal, Store } from './store/index.js';
import type { TraceCarrier } from './tracing.js';
import type { AbortCode, Job, JobContext } from './types.js';

export interface LeaseDeps {
  readonly db: pg.Pool;
  readonly store: Store;
  readonly owner: string;
  readonly metrics: EngineMetrics;
  /** The NOTIFY channel (a transactional completion may wake the next job of an ordering key). */
  readonly channel: string;
}

export interface LeaseTiming {
  /** The handler's lease length (a heartbeat renews the lease to this length, never past the deadline). */
  readonly leaseMs: number;
  /** The margin the handler asked for, if any (otherwise a tenth of the attempt's lease). */
  readonly abortMarginMs: number | undefined;
}

/**
 * A heartbeat writes only once this fraction (1/3) of the lease has passed since the last grant:
 * frequent progress reports cost no writes, and a handler that reports progress at least every
 * two thirds of a lease (minus the abort margin) never loses it.
 */
const HEARTBEAT_WRITE_AFTER_FRACTION = 3;

/** The margin used when none is configured: a tenth of the lease, within [50 ms, 5 s]. */
export function defaultAbortMarginMs(leaseMs: number): number {
  return Math.min(5_000, Math.max(50, Math.floor(leaseMs / 10)));
}

/**
 * The abort margin of one attempt. It is sized from the attempt's own lease, which is the handler's
 * lease or the job's maximum runtime when that is shorter, and never exceeds half of it: a margin
 * sized from `leaseMs` alone aborted every attempt of a job whose maxRuntimeMs was below it, at once.
 */
export function attemptAbortMarginMs(attemptLeaseMs: number, configured: number | undefined): number {
  return Math.min(configured ?? defaultAbortMarginMs(attemptLeaseMs), Math.floor(attemptLeaseMs / 2));
}

export type { LeaseOperation } from './metrics.js';

/**
 * One claimed attempt of a job, from the worker's side: its fencing token, the handler's abort
 * signal, and a local view of when the lease ends.
 *
 * The local expiry is measured on the monotonic clock from a moment taken *before* the request
 * that granted the lease was sent, so it can only be earlier than the database's expiry. The
 * signal aborts a margin before that, so a handler that honours it stops while the lease is still
 * ours. The database still decides every later write: the local clock only ever makes us give up
 * sooner, never write later.
 *
 * While the attempt waits in the worker's buffer (prefetched, not started), running out of lease
 * does not abort it: `onBufferedExpiry` hands it back instead (the worker releases it without
 * charging the attempt).
 */
export class Lease {
  /** What the handler receives; replaced (never mutated) when a start renewal moves the deadline. */
  job: Job;
  readonly context: JobContext;
  readonly traceCarrier: TraceCarrier | null;
  /** When the claim that granted this lease was sent (monotonic ms). */
  readonly claimedAt: number;
  /** This attempt's full lease: the handler's lease, or the job's maximum runtime when shorter. */
  readonly attemptLeaseMs: number;
  readonly abortMarginMs: number;
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private grantedAt: number;
  private expiresAt: number;
  private atDeadline: boolean;
  private renewal: Promise<void> | undefined;
  /** The database refused a renewal (the fence): that renewal, not the abort, reports why. */
  private renewalRefused = false;
  /** Whether the handler has started (false while the attempt waits in the buffer). */
  started = false;
  /** Set once a fenced write, check or heartbeat was refused: nothing more is written for this attempt. */
  lost: FenceLossReason | undefined;
  /**
   * A refusal no statement recorded in the job's history yet (ctx.complete's fenced lock records
   * nothing): the worker records it once the handler has settled, when no connection of the
   * handler's is held any more (recording it at once would wait for a second pool connection).
   */
  lossToRecord = false;
  /**
   * How ctx.complete finished the job: committed in its own transaction ('own'), or written in
   * the caller's transaction ('client'), which only the caller's COMMIT makes true.
   */
  completion: 'own' | 'client' | undefined;
  /** The transaction of a ctx.complete in progress: heartbeats go through it (see heartbeat()). */
  openTransaction: Queryable | undefined;
  /**
   * The last committed grant, kept while a renewal written inside that transaction is not known
   * to have committed: the renewal holds while the transaction is open (its row lock keeps every
   * other session off the job) and is undone if the transaction ends without a known commit.
   */
  private committedGrant: { grantedAt: number; expiresAt: number; atDeadline: boolean } | undefined;
  /** ctx.complete handed the job's key off (a producer held its row): the worker wakes the handoff pass. */
  keysDeferred = false;

  constructor(
    row: ClaimedJob,
    schema: string,
    requestedAt: number,
    private readonly timing: LeaseTiming,
    readonly deps: LeaseDeps,
    private readonly onBufferedExpiry: (lease: Lease) => void,
  ) {
    this.job = {
      id: row.id,
      queue: row.queue,
      payload: row.payload,
      priority: row.priority,
      attempt: row.attempt,
      maxAttempts: row.maxAttempts,
      leaseToken: row.leaseToken,
      idempotencyKey: `${schema}:${row.queue}:${row.id}`,
      orderingKey: row.orderingKey,
      createdAt: row.createdAt,
      deadlineAt: row.deadlineAt,
    };
    this.traceCarrier = row.traceContext;
    this.claimedAt = requestedAt;
    this.attemptLeaseMs = Math.min(timing.leaseMs, row.maxRuntimeMs ?? timing.leaseMs);
    this.abortMarginMs = attemptAbortMarginMs(this.attemptLeaseMs, timing.abortMarginMs);
    this.grantedAt = requestedAt;
    this.expiresAt = requestedAt + row.leaseMsLeft;
    this.atDeadline = row.leaseAtDeadline;
    const lease = this;
    this.context = {
      signal: this.controller.signal,
      attempt: row.attempt,
      token: row.leaseToken,
      heartbeat: () => lease.heartbeat(),
      complete: (work, options) => completeInTransaction(lease, work, options),
      effect: (name, call, options) => runEffect(lease, name, call, options),
    };
    this.arm();
  }

  /** What the fence matches this attempt's writes by: the job, this worker, this claim's token. */
  get fenceKey(): FenceParams {
    return { id: this.job.id, owner: this.deps.owner, token: this.job.leaseToken };
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get abortCode(): AbortCode | undefined {
    const reason: unknown = this.controller.signal.reason;
    return reason instanceof JobAbortedError ? reason.code : undefined;
  }

  /** Milliseconds of lease left by the local (conservative) clock. */
  get msLeft(): number {
    return this.expiresAt - performance.now();
  }

  abort(code: AbortCode, message: string): void {
    if (!this.controller.signal.aborted) this.controller.abort(new JobAbortedError(code, `Job ${this.job.id}: ${message}`));
  }

  /** Marks the fence as lost (a write was refused), counts it, and aborts the handler. */
  markLost(reason: FenceLossReason, operation: LeaseOperation): void {
    this.lost ??= reason;
    this.deps.metrics.increment('lease_lost', { queue: this.job.queue, reason, operation });
    this.deps.metrics.emit({ type: 'lease_lost', queue: this.job.queue, jobId: this.job.id, leaseToken: this.job.leaseToken, reason, operation });
    this.abort(reason === 'cancelled' ? 'CANCELLED' : 'LEASE_LOST', `the worker no longer owns the job (${reason})`);
  }

  /** The error a refused operation throws, once the fence is known to be lost. */
  lostError(reason: FenceLossReason): LeaseLostError {
    return new LeaseLostError(this.job.id, this.job.leaseToken, reason);
  }

  /**
   * After a fenced statement matched nothing: reads why (on `db`, which must be a connection the
   * caller may use now: its own transaction's, or the pool when it holds none), marks the lease
   * lost, returns the error to throw.
   */
  async lostOn(operation: LeaseOperation, db: Queryable = this.deps.db): Promise<LeaseLostError> {
    const { reason } = await this.deps.store.fenceLoss(db, this.fenceKey);
    this.markLost(reason, operation);
    return this.lostError(reason);
  }

  /** The handler starts now: from here, running out of lease aborts its signal (the timer reads this flag). */
  begin(): void {
    this.started = true;
  }

  /** ctx.complete's own transaction committed: a renewal written in it holds. */
  commitRenewal(): void {
    this.committedGrant = undefined;
  }

  /**
   * ctx.complete's transaction ended without a known commit (it rolled back, or it is the
   * caller's): a renewal written in it may never have happened, so the local lease goes back to
   * the last committed grant, and aborts at once if that is past. The local lease is never longer
   * than the database's.
   */
  dropRenewal(): void {
    const grant = this.committedGrant;
    this.committedGrant = undefined;
    if (!grant) return;
    this.grantedAt = grant.grantedAt;
    this.expiresAt = grant.expiresAt;
    this.atDeadline = grant.atDeadline;
    this.arm();
  }

  /** The attempt's start renewal (startAttempt) moved its deadline: the handler sees the new one. */
  startsWithDeadline(deadlineAt: Date): void {
    this.job = { ...this.job, deadlineAt };
  }

  /** A renewal granted `leaseMsLeft` from `requestedAt`. */
  renewed(requestedAt: number, leaseMsLeft: number, atDeadline: boolean): void {
    this.grantedAt = requestedAt;
    this.expiresAt = requestedAt + leaseMsLeft;
    this.atDeadline = atDeadline;
    this.arm();
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * Renews the lease after progress. Throttled: no write until a third of the lease has passed,
   * and none once the lease already reaches the deadline (it cannot grow). Concurrent calls share
   * one write. A database error is counted and swallowed: the local timer still protects the
   * attempt, and a blip should not fail a job that is making progress.
   */
  async heartbeat(): Promise<void> {
    if (this.controller.signal.aborted) throw this.controller.signal.reason;
    if (this.atDeadline) return;
    if (performance.now() - this.grantedAt < this.timing.leaseMs / HEARTBEAT_WRITE_AFTER_FRACTION) return;
    this.renewal ??= this.renew().finally(() => {
      this.renewal = undefined;
    });
    // A renewal whose write hangs (a network that drops packets, a pool with no free connection)
    // must not hold the handler past its abort: the caller gets the signal's reason as soon as it
    // aborts, so a handler that honours its signal can stop before the lease expires. The write
    // itself goes on in the background, fenced as always. (When the renewal's own fence is refused
    // it aborts the signal too, and then reports the LeaseLostError itself.)
    const renewal = this.renewal;
    const signal = this.controller.signal;
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        if (!this.renewalRefused) reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      renewal.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }

  private async renew(): Promise<void> {
    const { store, metrics } = this.deps;
    // Inside ctx.complete, the renewal goes through its transaction: the row is locked by it, and
    // asking the pool for a second connection while the handler holds one can wait forever (every
    // handler of a full pool doing the same). Committed with the completion, which needs it.
    const db = this.openTransaction ?? this.deps.db;
    const inTransaction = this.openTransaction !== undefined;
    const requestedAt = performance.now();
    let outcome: FencedOutcome<Renewal>;
    try {
      outcome = await store.heartbeat(db, { ...this.fenceKey, leaseMs: this.timing.leaseMs });
    } catch (error) {
      metrics.increment('heartbeat_failures', { queue: this.job.queue });
      metrics.emit({ type: 'heartbeat_failed', queue: this.job.queue, jobId: this.job.id, error: (error as Error).message });
      return;
    }
    if (outcome.ok) {
      metrics.increment('heartbeats', { queue: this.job.queue });
      // Written inside ctx.complete's transaction: it holds only if that commits (see
      // committedGrant), or a rollback would leave the handler running, unaborted, beside the
      // next attempt.
      if (inTransaction) this.committedGrant ??= { grantedAt: this.grantedAt, expiresAt: this.expiresAt, atDeadline: this.atDeadline };
      this.renewed(requestedAt, outcome.leaseMsLeft, outcome.leaseAtDeadline);
      return;
    }
    const { reason } = outcome;
    this.renewalRefused = true;
    this.markLost(reason, 'heartbeat');
    throw this.lostError(reason);
  }

  private arm(): void {
    this.dispose();
    if (this.controller.signal.aborted) return;
    const delay = Math.max(0, this.expiresAt - this.abortMarginMs - performance.now());
    this.timer = setTimeout(() => {
      if (!this.started) this.onBufferedExpiry(this);
      else if (this.atDeadline) this.abort('MAX_RUNTIME', 'the attempt reached its maximum runtime');
      else this.abort('LEASE_EXPIRED', 'the lease is about to expire and the handler has not reported progress');
    }, delay);
    this.timer.unref();
  }
}
