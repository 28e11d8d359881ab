import { performance } from 'node:perf_hooks';
import { requireInteger } from './config.js';
import type pg from 'pg';
import { run } from './db.js';
import { InvalidOptionError } from './errors.js';
import type { Completer } from './completer.js';
import { fenceLossReason, Lease, type ClaimedRow } from './lease.js';
import type { EngineLogger } from './logger.js';
import type { EngineMetrics } from './metrics.js';
import { classifyFailure, decideRetry } from './retry.js';
import type { Queries } from './sql.js';
import { settlesWithin } from './service.js';
import { runInJobSpan } from './tracing.js';
import type { HandlerOptions, JobHandlerFn } from './types.js';

export const HANDLER_DEFAULTS: HandlerOptions = {
  concurrency: 10,
  prefetch: 10,
  leaseMs: 30_000,
  maxRuntimeMs: 15 * 60_000,
  maxAttempts: 5,
  unknownErrorAttempts: 3,
  backoff: { baseMs: 1_000, maxMs: 10 * 60_000 },
  fairShare: 0.1,
  abortMarginMs: undefined,
};

/** The margin used when none is configured: a tenth of the lease, within [50 ms, 5 s]. */
export function defaultAbortMarginMs(leaseMs: number): number {
  return Math.min(5_000, Math.max(50, Math.floor(leaseMs / 10)));
}

export function resolveHandlerOptions(queue: string, options: Partial<HandlerOptions> | undefined, base: HandlerOptions): HandlerOptions {
  const merged: HandlerOptions = {
    ...base,
    ...Object.fromEntries(Object.entries(options ?? {}).filter(([, v]) => v !== undefined)),
    backoff: { ...base.backoff, ...options?.backoff },
  };
  const at = (field: string) => `${queue}.${field}`;
  requireInteger(at('concurrency'), merged.concurrency, 1, 1_000);
  requireInteger(at('prefetch'), merged.prefetch, 0, 10_000);
  requireInteger(at('leaseMs'), merged.leaseMs, 200, 24 * 3_600_000);
  requireInteger(at('maxRuntimeMs'), merged.maxRuntimeMs, 1, 7 * 24 * 3_600_000);
  requireInteger(at('maxAttempts'), merged.maxAttempts, 1, 1_000_000);
  requireInteger(at('unknownErrorAttempts'), merged.unknownErrorAttempts, 1, 1_000_000);
  requireInteger(at('backoff.baseMs'), merged.backoff.baseMs, 0, 2_147_483_647);
  requireInteger(at('backoff.maxMs'), merged.backoff.maxMs, 0, 2_147_483_647);
  if (typeof merged.fairShare !== 'number' || !(merged.fairShare >= 0 && merged.fairShare <= 1)) {
    throw new InvalidOptionError(at('fairShare'), `${String(merged.fairShare)} is not a number from 0 to 1`, 'Use 0 for strict priority, or the share of claims taken oldest-first (e.g. 0.1).');
  }
  if (merged.abortMarginMs !== undefined) {
    requireInteger(at('abortMarginMs'), merged.abortMarginMs, 0);
    if (merged.abortMarginMs * 2 > merged.leaseMs) {
      throw new InvalidOptionError(at('abortMarginMs'), `${merged.abortMarginMs} ms is more than half the lease (${merged.leaseMs} ms)`, 'Use a smaller margin or a longer lease.');
    }
  }
  return merged;
}

export interface WorkerDeps {
  readonly db: pg.Pool;
  /** The NOTIFY channel of the schema. */
  readonly channel: string;
  readonly queries: Queries;
  readonly owner: string;
  readonly completer: Completer;
  readonly metrics: EngineMetrics;
  readonly logger: EngineLogger;
  /** Claim again this often even without a wake-up: NOTIFY is only an optimisation. */
  readonly pollIntervalMs: number;
  /** Shutdown releases that give the attempt back before releases start to count as attempts. */
  readonly maxFreeReleases: number;
  /**
   * After a claim that drained the queue, wake-ups within this window wait for its end and share
   * one claim: a stream of NOTIFYs costs at most one claim per window, while an idle worker still
   * claims at once.
   */
  readonly wakeCooldownMs: number;
}

export interface WorkerHooks {
  /** Called after every claim with the number of jobs it took (a test hook, like River's). */
  claimed?(count: number): void;
}

type WorkerState = 'idle' | 'running' | 'stopping' | 'stopped';

/**
 * The claim loop of one queue in this process. It keeps up to `concurrency` handlers running and
 * up to `prefetch` claimed jobs waiting, claims in batches (one statement, committed before any
 * handler runs), and hands finished jobs to the completer. No transaction is ever open while a
 * handler runs.
 */
export class Worker {
  readonly options: HandlerOptions;
  private readonly abortMarginMs: number;
  private state: WorkerState = 'idle';
  private readonly buffered: Lease[] = [];
  private readonly running = new Map<Lease, Promise<void>>();
  private readonly writes = new Set<Promise<unknown>>();
  /** A claim may find work: set by start, wake-ups, polls and full batches; cleared by a short batch. */
  private moreWork = true;
  /** Counts wake-ups, so one that arrives while a claim is in flight is not lost when it returns. */
  private wakeups = 0;
  /**
   * Fair-share credit: grows by `fairShare` per job asked for; each whole unit buys one job taken
   * oldest-first. Exact over any sequence of claim sizes, so one job in every ceil(1 / fairShare)
   * is an oldest-first one even when claims are of one job each.
   */
  private fairCredit = 0;
  /** When the last claim that came back short was sent (monotonic ms). */
  private lastShortClaimAt = Number.NEGATIVE_INFINITY;
  private nudge: (() => void) | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private loop: Promise<void> | undefined;

  constructor(
    readonly queue: string,
    private readonly handler: JobHandlerFn<never>,
    options: HandlerOptions,
    private readonly deps: WorkerDeps,
    private readonly hooks: WorkerHooks = {},
  ) {
    this.options = options;
    this.abortMarginMs = options.abortMarginMs ?? defaultAbortMarginMs(options.leaseMs);
  }

  /** Jobs claimed by this worker and not finished: running handlers plus prefetched ones. */
  get inFlight(): number {
    return this.running.size + this.buffered.length;
  }

  get busySlots(): number {
    return this.running.size;
  }

  start(): void {
    if (this.state !== 'idle') return;
    this.state = 'running';
    this.pollTimer = setInterval(() => this.wake(), this.deps.pollIntervalMs);
    this.pollTimer.unref();
    this.loop = this.claimLoop();
  }

  /** Something may be claimable (a NOTIFY, a poll, a promotion). Cheap; bursts coalesce. */
  wake(): void {
    this.wakeups += 1;
    this.moreWork = true;
    this.poke();
  }

  /**
   * Stops claiming, hands back prefetched jobs, and lets running handlers finish for up to
   * `timeoutMs`. Then it aborts their signals, gives them `graceMs` to settle, and releases the
   * leases of those that did not (fenced, back to pending), so no job waits for the reaper.
   */
  async stop(timeoutMs: number, graceMs = Math.min(1_000, this.abortMarginMs)): Promise<void> {
    if (this.state === 'idle') this.state = 'stopped';
    if (this.state !== 'running') return;
    this.state = 'stopping';
    clearInterval(this.pollTimer);
    this.poke();
    await this.loop;

    for (const lease of this.buffered.splice(0)) this.track(this.release(lease, false));

    const allSettled = () => Promise.allSettled([...this.running.values()]);
    if (this.running.size > 0) await settlesWithin(allSettled(), timeoutMs);
    if (this.running.size > 0) {
      for (const lease of this.running.keys()) lease.abort('SHUTDOWN', 'the worker is shutting down');
      await settlesWithin(allSettled(), graceMs);
    }
    for (const lease of [...this.running.keys()]) {
      // The handler ignored its signal. Hand the job back now; its late outcome is ignored.
      this.running.delete(lease);
      lease.dispose();
      this.deps.logger.warn(`Job ${lease.job.id} (queue "${this.queue}") did not stop at shutdown; its lease is released.`);
      this.track(this.release(lease, true));
    }
    // Bounded too: a write stuck on a dead network must not hold the shutdown forever (the reaper
    // recovers whatever it was writing).
    if (!(await settlesWithin(Promise.allSettled([...this.writes]), timeoutMs))) {
      this.deps.logger.warn(`Queue "${this.queue}": outcome writes still pending after ${timeoutMs} ms at shutdown; leaving them to the reaper.`);
    }
    this.state = 'stopped';
  }

  private poke(): void {
    const nudge = this.nudge;
    this.nudge = undefined;
    nudge?.();
  }

  private async claimLoop(): Promise<void> {
    const { concurrency, prefetch } = this.options;
    const target = concurrency + prefetch;
    // Under load, claim in batches of at least half the target instead of one job per freed slot.
    const minBatch = Math.max(1, Math.floor(target / 2));
    while (this.state === 'running') {
      const room = target - this.inFlight;
      const slotsIdle = this.running.size < concurrency && this.buffered.length === 0;
      // Backpressure: finished jobs whose outcome is not written yet still hold their leases.
      // Claiming past them lets completions fall behind claims until leases expire unwritten.
      const writesBehind = this.writes.size >= target;
      if (this.moreWork && room > 0 && !writesBehind && (room >= minBatch || slotsIdle)) {
        const cooldownLeft = this.lastShortClaimAt + this.deps.wakeCooldownMs - performance.now();
        if (cooldownLeft > 0) await new Promise((resolve) => setTimeout(resolve, cooldownLeft));
        if (this.state !== 'running') break;
        await this.claim(target - this.inFlight);
        continue;
      }
      await new Promise<void>((resolve) => {
        this.nudge = resolve;
      });
    }
  }

  private async claim(limit: number): Promise<void> {
    const { leaseMs, maxRuntimeMs, maxAttempts, backoff, fairShare } = this.options;
    this.fairCredit += limit * fairShare;
    const oldestFirst = Math.min(limit, Math.floor(this.fairCredit + 1e-9)); // 10 × 0.1 is 0.999…
    this.fairCredit -= oldestFirst;
    const requestedAt = performance.now();
    const wakeupsBefore = this.wakeups;
    let rows: ClaimedRow[];
    try {
      rows = await run<ClaimedRow>(this.deps.db, this.deps.queries.claim, [
        this.queue,
        this.deps.owner,
        limit,
        leaseMs,
        maxRuntimeMs,
        maxAttempts,
        backoff.baseMs,
        backoff.maxMs,
        oldestFirst,
      ]);
    } catch (error) {
      this.deps.logger.error(`Claim on queue "${this.queue}" failed: ${(error as Error).message}. Retrying at the next poll.`);
      this.moreWork = this.wakeups !== wakeupsBefore;
      return;
    } finally {
      this.deps.metrics.increment('claim_queries', { queue: this.queue });
      this.deps.metrics.observe('claim_query_ms', performance.now() - requestedAt, { queue: this.queue });
    }
    if (rows.length < limit) this.lastShortClaimAt = requestedAt;
    this.moreWork = rows.length === limit || this.wakeups !== wakeupsBefore;
    this.hooks.claimed?.(rows.length);
    for (const row of rows) {
      const lease = new Lease(row, this.deps.queries.schema, requestedAt, { leaseMs, abortMarginMs: this.abortMarginMs }, this.deps);
      this.deps.metrics.increment('jobs_claimed', { queue: this.queue });
      this.deps.metrics.observe('claim_wait_ms', Math.max(0, row.waited_ms), { queue: this.queue });
      this.deps.metrics.emit({ type: 'claimed', queue: this.queue, jobId: lease.job.id, attempt: lease.job.attempt, leaseToken: lease.job.leaseToken });
      this.buffered.push(lease);
    }
    this.dispatch();
  }

  private dispatch(): void {
    while (this.state === 'running' && this.running.size < this.options.concurrency && this.buffered.length > 0) {
      const lease = this.buffered.shift()!;
      this.running.set(lease, this.execute(lease));
    }
  }

  private async execute(lease: Lease): Promise<void> {
    const startedAt = performance.now();
    let outcome: { ok: true } | { ok: false; error: unknown };
    const abandon = this.watchForUnsettled(lease);
    try {
      await runInJobSpan(lease.job, lease.traceCarrier, async () => this.handler(lease.job as never, lease.context));
      outcome = { ok: true };
    } catch (error) {
      outcome = { ok: false, error };
    } finally {
      abandon.cancel();
      this.deps.metrics.observe('handler_duration_ms', performance.now() - startedAt, { queue: this.queue });
    }
    // Not ours any more: stop() released it, or the handler ignored its abort past the grace.
    if (!this.running.delete(lease)) return;
    lease.dispose();
    this.dispatch();
    this.poke();
    this.track(outcome.ok ? this.complete(lease, startedAt) : this.fail(lease, outcome.error));
  }

  /** An operator cancelled a job (a NOTIFY from any process): abort its handler if it runs here. */
  cancelled(jobId: string): void {
    for (const lease of this.running.keys()) {
      if (lease.job.id === jobId) lease.abort('CANCELLED', 'the job was cancelled by an operator');
    }
    const waiting = this.buffered.findIndex((lease) => lease.job.id === jobId);
    if (waiting !== -1) this.buffered.splice(waiting, 1)[0]!.dispose(); // final in the table already
  }

  /**
   * A handler whose signal was aborted gets half the abort margin to settle. One that does not
   * is abandoned: its slot is freed and its attempt recorded as failed (fenced, while the lease
   * is still ours), so a stuck handler can neither hold a slot forever nor wait for the reaper.
   */
  private watchForUnsettled(lease: Lease): { cancel(): void } {
    let timer: NodeJS.Timeout | undefined;
    const onAbort = () => {
      const code = lease.abortCode;
      if (code !== 'LEASE_EXPIRED' && code !== 'MAX_RUNTIME' && code !== 'CANCELLED') return;
      timer = setTimeout(() => {
        if (!this.running.delete(lease)) return;
        lease.dispose();
        this.deps.logger.warn(`Job ${lease.job.id} (queue "${this.queue}") ignored its aborted signal (${code}); its slot is freed.`);
        this.dispatch();
        this.poke();
        // A cancelled job is already final in the table: nothing to write.
        if (code !== 'CANCELLED') this.track(this.fail(lease, new Error('the handler did not settle after its signal was aborted')));
      }, Math.max(1, Math.floor(this.abortMarginMs / 2)));
      timer.unref();
    };
    lease.signal.addEventListener('abort', onAbort, { once: true });
    return {
      cancel: () => {
        clearTimeout(timer);
        lease.signal.removeEventListener('abort', onAbort);
      },
    };
  }

  private async complete(lease: Lease, startedAt: number): Promise<void> {
    if (lease.lost) return;
    if (lease.completedInTransaction) return this.succeeded(lease, startedAt); // ctx.complete() committed it
    const outcome = await this.deps.completer.complete(lease.job.id, lease.job.leaseToken, lease.job.orderingKey !== null);
    if (!outcome.applied) {
      lease.markLost(outcome.reason, 'complete');
      return;
    }
    this.succeeded(lease, startedAt);
  }

  private succeeded(lease: Lease, startedAt: number): void {
    this.deps.metrics.increment('jobs_succeeded', { queue: this.queue });
    this.deps.metrics.observe('completion_latency_ms', performance.now() - lease.claimedAt, { queue: this.queue });
    this.deps.metrics.emit({ type: 'succeeded', queue: this.queue, jobId: lease.job.id, durationMs: performance.now() - startedAt });
  }

  private async fail(lease: Lease, error: unknown): Promise<void> {
    if (lease.lost) return;
    if (lease.completedInTransaction) {
      // The job's success already committed with ctx.complete(); what the handler did after it cannot undo that.
      this.deps.logger.warn(`Job ${lease.job.id} (queue "${this.queue}") threw after ctx.complete() committed; it stays succeeded.`);
      return;
    }
    const abortCode = lease.abortCode;
    if (abortCode === 'SHUTDOWN') return this.release(lease, true);
    const failure = classifyFailure(error, abortCode);
    const { maxAttempts, unknownErrorAttempts, backoff } = this.options;
    const decision = decideRetry(failure, lease.job.attempt, lease.job.maxAttempts ?? maxAttempts, unknownErrorAttempts, backoff);
    const [row] = await run<{ applied: number; loss: string }>(this.deps.db, this.deps.queries.fail, [
      lease.job.id,
      this.deps.owner,
      lease.job.leaseToken,
      decision.dead,
      decision.delayMs,
      failure.code,
      failure.message,
    ]);
    if (!row || row.applied !== 1) {
      lease.markLost(fenceLossReason(row?.loss ?? 'LEASE_LOST'), 'fail');
      return;
    }
    this.deps.metrics.increment(decision.dead ? 'jobs_dead' : 'jobs_retried', { queue: this.queue, code: failure.code, attempt: lease.job.attempt });
    this.deps.metrics.emit({
      type: 'failed',
      queue: this.queue,
      jobId: lease.job.id,
      attempt: lease.job.attempt,
      code: failure.code,
      dead: decision.dead,
      delayMs: decision.delayMs,
    });
  }

  private async release(lease: Lease, started: boolean): Promise<void> {
    lease.dispose();
    if (lease.lost) return;
    const [row] = await run<{ applied: number }>(this.deps.db, this.deps.queries.release, [
      lease.job.id,
      this.deps.owner,
      lease.job.leaseToken,
      started,
      this.deps.maxFreeReleases,
    ]);
    if (!row || row.applied !== 1) {
      lease.markLost('lease_lost', 'release');
      return;
    }
    this.deps.metrics.increment('jobs_released', { queue: this.queue });
    this.deps.metrics.emit({ type: 'released', queue: this.queue, jobId: lease.job.id });
  }

  /** Keeps a write's promise until it settles, so stop() can wait for it; logs its failure. */
  private track(write: Promise<void>): void {
    const tracked = write.catch((error: unknown) => {
      this.deps.logger.error(`Queue "${this.queue}": writing a job's outcome failed: ${(error as Error).message}. The reaper will recover the job when its lease expires.`);
    });
    this.writes.add(tracked);
    void tracked.finally(() => {
      this.writes.delete(tracked);
      this.poke(); // the claim loop may have waited for writes to catch up
    });
  }
}
