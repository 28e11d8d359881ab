import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { run } from './db.js';
import { completeInTransaction } from './transactional-completion.js';
import { runEffect } from './effects.js';
import { JobAbortedError, LeaseLostError, type FenceLossReason } from './errors.js';
import type { EngineMetrics } from './metrics.js';
import type { Queries } from './sql.js';
import type { TraceCarrier } from './tracing.js';
import type { AbortCode, Job, JobContext } from './types.js';

/** The row the claim statement returns. */
export interface ClaimedRow {
  id: string;
  queue_name: string;
  payload: unknown;
  priority: number;
  attempt_count: number;
  max_attempts: number;
  lease_token: string;
  created_at: Date;
  deadline_at: Date;
  ordering_key: string | null;
  lease_ms_left: number;
  lease_at_deadline: boolean;
  trace_context: TraceCarrier | null;
  waited_ms: number;
}

export interface LeaseDeps {
  readonly db: pg.Pool;
  readonly queries: Queries;
  readonly owner: string;
  readonly metrics: EngineMetrics;
  /** The NOTIFY channel (a transactional completion may wake the next job of an ordering key). */
  readonly channel: string;
}

export interface LeaseTiming {
  readonly leaseMs: number;
  readonly abortMarginMs: number;
}

/**
 * A heartbeat writes only once this fraction (1/3) of the lease has passed since the last grant:
 * frequent progress reports cost no writes, and a handler that reports progress at least every
 * two thirds of a lease (minus the abort margin) never loses it.
 */
const HEARTBEAT_WRITE_AFTER_FRACTION = 3;

/** Loss codes the SQL reports (see `fenceLossCode` in sql.ts), as reasons. */
export function fenceLossReason(code: string): FenceLossReason {
  if (code === 'CANCELLED') return 'cancelled';
  if (code === 'FINISHED') return 'finished';
  return 'lease_lost';
}

/**
 * One claimed attempt of a job, from the worker's side: its fencing token, the handler's abort
 * signal, and a local view of when the lease ends.
 *
 * The local expiry is measured on the monotonic clock from a moment taken *before* the request
 * that granted the lease was sent, so it can only be earlier than the database's expiry. The
 * signal aborts a margin before that, so a handler that honours it stops while the lease is still
 * ours. The database still decides every later write: the local clock only ever makes us give up
 * sooner, never write later.
 */
export class Lease {
  readonly job: Job;
  readonly context: JobContext;
  readonly traceCarrier: TraceCarrier | null;
  /** When the claim that granted this lease was sent (monotonic ms). */
  readonly claimedAt: number;
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private grantedAt: number;
  private expiresAt: number;
  private atDeadline: boolean;
  private renewal: Promise<void> | undefined;
  /** The database refused a renewal (the fence): that renewal, not the abort, reports why. */
  private renewalRefused = false;
  /** Set once a fenced write or heartbeat was refused: nothing more is written for this attempt. */
  lost: FenceLossReason | undefined;
  /** Set once ctx.complete() committed: the job succeeded with the handler's own writes. */
  completedInTransaction = false;

  constructor(
    row: ClaimedRow,
    schema: string,
    requestedAt: number,
    private readonly timing: LeaseTiming,
    readonly deps: LeaseDeps,
  ) {
    this.job = {
      id: row.id,
      queue: row.queue_name,
      payload: row.payload,
      priority: row.priority,
      attempt: row.attempt_count,
      maxAttempts: row.max_attempts,
      leaseToken: row.lease_token,
      idempotencyKey: `${schema}:${row.queue_name}:${row.id}`,
      orderingKey: row.ordering_key,
      createdAt: row.created_at,
      deadlineAt: row.deadline_at,
    };
    this.traceCarrier = row.trace_context;
    this.claimedAt = requestedAt;
    this.grantedAt = requestedAt;
    this.expiresAt = requestedAt + row.lease_ms_left;
    this.atDeadline = row.lease_at_deadline;
    const lease = this;
    this.context = {
      signal: this.controller.signal,
      attempt: row.attempt_count,
      token: row.lease_token,
      heartbeat: () => lease.heartbeat(),
      complete: (work, options) => completeInTransaction(lease, work, options),
      effect: (name, call, options) => runEffect(lease, name, call, options),
    };
    this.arm();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get abortCode(): AbortCode | undefined {
    const reason: unknown = this.controller.signal.reason;
    return reason instanceof JobAbortedError ? reason.code : undefined;
  }

  abort(code: AbortCode, message: string): void {
    if (!this.controller.signal.aborted) this.controller.abort(new JobAbortedError(code, `Job ${this.job.id}: ${message}`));
  }

  /** Marks the fence as lost (a write was refused), counts it, and aborts the handler. */
  markLost(reason: FenceLossReason, operation: 'complete' | 'fail' | 'heartbeat' | 'release' | 'effect'): void {
    this.lost ??= reason;
    this.deps.metrics.increment('lease_lost', { queue: this.job.queue, reason, operation });
    this.deps.metrics.emit({ type: 'lease_lost', queue: this.job.queue, jobId: this.job.id, leaseToken: this.job.leaseToken, reason, operation });
    this.abort(reason === 'cancelled' ? 'CANCELLED' : 'LEASE_LOST', `the worker no longer owns the job (${reason})`);
  }

  /**
   * After a fenced statement matched nothing: reads why, marks the lease lost, returns the error to
   * throw. `recordInHistory`: the refused statement recorded nothing, so record the 'lost_fence' here.
   */
  async lostOn(operation: 'complete' | 'fail' | 'heartbeat' | 'release' | 'effect', recordInHistory = false): Promise<LeaseLostError> {
    const [row] = recordInHistory
      ? await run<{ loss: string }>(this.deps.db, this.deps.queries.recordFenceLoss, [this.job.id, this.job.leaseToken, this.deps.owner])
      : await run<{ loss: string }>(this.deps.db, this.deps.queries.fenceLoss, [this.job.id, this.job.leaseToken, this.deps.owner]);
    const reason = fenceLossReason(row?.loss ?? 'LEASE_LOST');
    this.markLost(reason, operation);
    return new LeaseLostError(this.job.id, this.job.leaseToken, reason);
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
    const { db, queries, owner, metrics } = this.deps;
    const requestedAt = performance.now();
    let row: { lease_ms_left: number | null; lease_at_deadline: boolean | null; loss: string } | undefined;
    try {
      [row] = await run(db, queries.heartbeat, [this.job.id, owner, this.job.leaseToken, this.timing.leaseMs]);
    } catch (error) {
      metrics.increment('heartbeat_failures', { queue: this.job.queue });
      metrics.emit({ type: 'heartbeat_failed', queue: this.job.queue, jobId: this.job.id, error: (error as Error).message });
      return;
    }
    if (row && row.lease_ms_left !== null) {
      metrics.increment('heartbeats', { queue: this.job.queue });
      this.grantedAt = requestedAt;
      this.expiresAt = requestedAt + row.lease_ms_left;
      this.atDeadline = row.lease_at_deadline === true;
      this.arm();
      return;
    }
    const reason = fenceLossReason(row?.loss ?? 'LEASE_LOST');
    this.renewalRefused = true;
    this.markLost(reason, 'heartbeat');
    throw new LeaseLostError(this.job.id, this.job.leaseToken, reason);
  }

  private arm(): void {
    this.dispose();
    if (this.controller.signal.aborted) return;
    const delay = Math.max(0, this.expiresAt - this.timing.abortMarginMs - performance.now());
    this.timer = setTimeout(() => {
      if (this.atDeadline) this.abort('MAX_RUNTIME', 'the attempt reached its maximum runtime');
      else this.abort('LEASE_EXPIRED', 'the lease is about to expire and the handler has not reported progress');
    }, delay);
    this.timer.unref();
  }
}
