import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import type { Attempt } from './attempt.js';
import { JobAbortedError, LeaseLostError, type FenceLossReason } from './errors.js';
import { LEASE_ABORTED, LEASE_LOST_ABORT } from './messages.js';
import type { EngineMetrics, LeaseOperation } from './metrics.js';
import type { ClaimedJob, FencedOutcome, FenceParams, Renewal, Store } from './store/index.js';
import type { TraceCarrier } from './tracing.js';
import type { AbortCode, Job, Queryable } from './types.js';

export interface LeaseDeps {
  readonly db: pg.Pool;
  readonly store: Store;
  readonly owner: string;
  readonly metrics: EngineMetrics;
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

/** What a worker gives each of its leases: one timer for all of them, and where their events go. */
export interface LeaseHooks {
  readonly timers: LeaseTimers;
  /** A buffered (not started) attempt ran out of lease: the worker hands it back. */
  bufferedExpiry(lease: Lease): void;
  /** The attempt's signal was just aborted (called synchronously, as an 'abort' listener would be). */
  aborted(lease: Lease): void;
}

/**
 * One timer for all of a worker's leases: their local deadlines (abort or hand-back) in a min-heap,
 * and one setTimeout armed for the nearest. A timer per lease cost a Timeout object, its list
 * insertion and its removal for every job; here a job costs a heap insertion and removal among the
 * worker's few hundred leases, and the timer is re-armed only when a deadline earlier than the armed
 * one arrives (rare: leases of one worker have one length, so later claims expire later).
 */
export class LeaseTimers {
  private readonly heap: Lease[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The deadline the timer is armed for (Infinity when none). */
  private armedAt = Number.POSITIVE_INFINITY;
  /** Ties break by scheduling order, as separate timers of equal delay fired. */
  private sequence = 0;

  get size(): number {
    return this.heap.length;
  }

  /** `lease.deadlineReached()` runs at `at` (monotonic ms), replacing any earlier schedule of it. */
  schedule(lease: Lease, at: number): void {
    if (lease.heapIndex !== -1) this.remove(lease);
    lease.deadline = at;
    lease.sequence = ++this.sequence;
    lease.heapIndex = this.heap.length;
    this.heap.push(lease);
    this.up(lease.heapIndex);
    if (at < this.armedAt) this.arm();
  }

  /** Unschedules `lease` (nothing if it is not scheduled). The armed timer stays: firing early, it re-arms. */
  cancel(lease: Lease): void {
    if (lease.heapIndex !== -1) this.remove(lease);
  }

  /** Stops the timer (the worker stopped; nothing it holds needs a deadline any more). */
  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.armedAt = Number.POSITIVE_INFINITY;
  }

  private readonly fire = (): void => {
    this.timer = undefined;
    this.armedAt = Number.POSITIVE_INFINITY;
    // A millisecond of slack: the timer's clock is the event loop's, which lags performance.now().
    const now = performance.now() + 1;
    const heap = this.heap;
    while (heap.length > 0 && heap[0]!.deadline <= now) {
      const lease = heap[0]!;
      this.remove(lease);
      lease.deadlineReached();
    }
    if (heap.length > 0 && heap[0]!.deadline < this.armedAt) this.arm();
  };

  private arm(): void {
    clearTimeout(this.timer);
    const at = this.heap[0]!.deadline;
    this.armedAt = at;
    this.timer = setTimeout(this.fire, Math.max(0, at - performance.now()));
    this.timer.unref();
  }

  private remove(lease: Lease): void {
    const heap = this.heap;
    const i = lease.heapIndex;
    lease.heapIndex = -1;
    const last = heap.pop()!;
    if (last === lease) return;
    heap[i] = last;
    last.heapIndex = i;
    if (i > 0 && before(last, heap[(i - 1) >> 1]!)) this.up(i);
    else this.down(i);
  }

  private up(i: number): void {
    const heap = this.heap;
    const lease = heap[i]!;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = heap[p]!;
      if (!before(lease, parent)) break;
      heap[i] = parent;
      parent.heapIndex = i;
      i = p;
    }
    heap[i] = lease;
    lease.heapIndex = i;
  }

  private down(i: number): void {
    const heap = this.heap;
    const n = heap.length;
    const lease = heap[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && before(heap[r]!, heap[l]!) ? r : l;
      const child = heap[c]!;
      if (!before(child, lease)) break;
      heap[i] = child;
      child.heapIndex = i;
      i = c;
    }
    heap[i] = lease;
    lease.heapIndex = i;
  }
}

function before(a: Lease, b: Lease): boolean {
  return a.deadline < b.deadline || (a.deadline === b.deadline && a.sequence < b.sequence);
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
 *
 * While the attempt waits in the worker's buffer (prefetched, not started), running out of lease
 * does not abort it: `hooks.bufferedExpiry` hands it back instead (the worker releases it without
 * charging the attempt).
 *
 * The AbortController is made only when someone reads `signal` (the handler, a heartbeat,
 * ctx.complete or ctx.effect): most handlers never do, and a controller, its signal and their
 * listeners were a tenth of the worker's time per job. An abort before that is kept as its reason
 * and delivered when the signal is made (already aborted); the worker learns of every abort
 * synchronously through `hooks.aborted`, as an 'abort' listener added first would.
 *
 * It is the attempt's state and nothing more: the handler's context is built over it by the
 * worker's executor (job-context.ts), and ctx.complete and ctx.effect see it only as an `Attempt`.
 */
export class Lease implements Attempt {
  /** What the handler receives; replaced (never mutated) when a start renewal moves the deadline. */
  job: Job;
  readonly traceCarrier: TraceCarrier | null;
  /** When the claim that granted this lease was sent (monotonic ms). */
  readonly claimedAt: number;
  /** This attempt's full lease: the handler's lease, or the job's maximum runtime when shorter. */
  readonly attemptLeaseMs: number;
  readonly abortMarginMs: number;
  /** Made when `signal` is first read (see the class's comment). */
  private controller: AbortController | undefined;
  /** The abort's reason, once aborted (with or without a controller). */
  private abortReason: JobAbortedError | undefined;
  /** Where this lease sits in `hooks.timers` (-1: not scheduled); its deadline and tie-break. @internal */
  heapIndex = -1;
  /** @internal */
  deadline = 0;
  /** @internal */
  sequence = 0;
  private grantedAt: number;
  private expiresAt: number;
  private atDeadline: boolean;
  private renewal: Promise<void> | undefined;
  /** The database refused a renewal (the fence): that renewal, not the abort, reports why. */
  private renewalRefused = false;
  /** Whether the handler has started (false while the attempt waits in the buffer). */
  started = false;
  /** The worker's: the handler runs and has not settled (an abort now starts its watch for an unsettled handler). */
  handlerRunning = false;
  /** The worker's: the watch's timer, cleared when the handler settles. */
  unsettledTimer: NodeJS.Timeout | undefined;
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
  private openTransaction: Queryable | undefined;
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
    private readonly hooks: LeaseHooks,
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
      group: row.group,
      parentId: row.parentId,
      createdAt: row.createdAt,
      deadlineAt: row.deadlineAt,
      version: row.payloadVersion,
    };
    this.traceCarrier = row.traceContext;
    this.claimedAt = requestedAt;
    this.attemptLeaseMs = Math.min(timing.leaseMs, row.maxRuntimeMs ?? timing.leaseMs);
    this.abortMarginMs = attemptAbortMarginMs(this.attemptLeaseMs, timing.abortMarginMs);
    this.grantedAt = requestedAt;
    this.expiresAt = requestedAt + row.leaseMsLeft;
    this.atDeadline = row.leaseAtDeadline;
    this.arm();
  }

  /** What the fence matches this attempt's writes by: the job, this worker, this claim's token. */
  get fenceKey(): FenceParams {
    return { id: this.job.id, owner: this.deps.owner, token: this.job.leaseToken };
  }

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.abortReason !== undefined) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  /** Whether the signal was aborted (read without making the signal). */
  get aborted(): boolean {
    return this.abortReason !== undefined;
  }

  get abortCode(): AbortCode | undefined {
    return this.abortReason?.code;
  }

  /** Milliseconds of lease left by the local (conservative) clock. */
  get msLeft(): number {
    return this.expiresAt - performance.now();
  }

  /** ctx.complete's work is running: its transaction is open. */
  get inCompletion(): boolean {
    return this.openTransaction !== undefined;
  }

  abort(code: AbortCode, message: string): void {
    if (this.abortReason !== undefined) return;
    this.abortReason = new JobAbortedError(code, LEASE_ABORTED(this.job.id, message));
    // The worker hears first (its watch was the signal's first listener when it had one).
    this.hooks.aborted(this);
    this.controller?.abort(this.abortReason);
  }

  /** Marks the fence as lost (a write was refused), counts it, and aborts the handler. */
  markLost(reason: FenceLossReason, operation: LeaseOperation): void {
    this.lost ??= reason;
    this.deps.metrics.increment('lease_lost', { queue: this.job.queue, reason, operation });
    this.deps.metrics.emit({ type: 'lease_lost', queue: this.job.queue, jobId: this.job.id, leaseToken: this.job.leaseToken, reason, operation });
    this.abort(reason === 'cancelled' ? 'CANCELLED' : 'LEASE_LOST', LEASE_LOST_ABORT(reason));
  }

  /** The error a refused operation throws, once the fence is known to be lost. */
  lostError(reason: FenceLossReason): LeaseLostError {
    return new LeaseLostError(this.job.id, this.job.leaseToken, reason);
  }

  /** The handler starts now: from here, running out of lease aborts its signal (the timer reads this flag). */
  begin(): void {
    this.started = true;
  }

  /**
   * Runs ctx.complete's work with its transaction open: a heartbeat meanwhile goes through that
   * transaction (see renew()), and ctx.effect refuses to run (see inCompletion).
   */
  async inTransaction<R>(tx: Queryable, work: () => Promise<R>): Promise<R> {
    this.openTransaction = tx;
    try {
      return await work();
    } finally {
      this.openTransaction = undefined;
    }
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
    this.hooks.timers.cancel(this);
  }

  /**
   * Renews the lease after progress. Throttled: no write until a third of the lease has passed,
   * and none once the lease already reaches the deadline (it cannot grow). Concurrent calls share
   * one write. A database error is counted and swallowed: the local timer still protects the
   * attempt, and a blip should not fail a job that is making progress.
   */
  async heartbeat(): Promise<void> {
    if (this.abortReason !== undefined) throw this.abortReason;
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
    const signal = this.signal;
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
    if (this.abortReason !== undefined) {
      this.dispose();
      return;
    }
    // A deadline already past still fires from the timer, never from here: as a 0 ms timeout did.
    this.hooks.timers.schedule(this, this.expiresAt - this.abortMarginMs);
  }

  /** The local deadline (a margin before the lease ends) came: called by `hooks.timers`. @internal */
  deadlineReached(): void {
    if (!this.started) this.hooks.bufferedExpiry(this);
    else if (this.atDeadline) this.abort('MAX_RUNTIME', 'the attempt reached its maximum runtime');
    else this.abort('LEASE_EXPIRED', 'the lease is about to expire and the handler has not reported progress');
  }
}
