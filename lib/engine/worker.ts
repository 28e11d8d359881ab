import { performance } from 'node:perf_hooks';
import { integer, nested, number, opaque, resolveSection, section, type Section } from './config.js';
import type pg from 'pg';
import { InvalidOptionError, JobAbortedError, PermanentJobError, RateLimitedError, RetryableJobError, type FenceLossReason } from './errors.js';
import { payloadJson } from './json.js';
import { FLOW_RESULT_MAX_BYTES } from './flows.js';
import type { Completer, CompletionOutcome } from './completer.js';
import { jobContext } from './job-context.js';
import { Lease, LeaseTimers, type LeaseHooks } from './lease.js';
import type { LogThrottle } from './log-throttle.js';
import type { EngineLogger } from './logger.js';
import {
  ABORT_MARGIN_FIX,
  ABORT_MARGIN_TOO_LARGE,
  CLAIM_FAILED,
  CLAIM_KIND,
  COMPLETION_NOT_COMMITTED,
  HANDLER_DID_NOT_SETTLE,
  HANDLER_DID_NOT_STOP,
  LEASE_LOST_ABORT,
  OUTCOME_WRITE_FAILED,
  SIGNAL_IGNORED,
  START_RENEWAL_FAILED,
  THREW_AFTER_CLIENT_COMPLETE,
  THREW_AFTER_COMPLETE,
  WRITE_KIND,
  WRITES_PENDING_AT_SHUTDOWN,
} from './messages.js';
import type { CounterSeries, EngineMetrics, HistogramSeries, LeaseOperation } from './metrics.js';
import { classifyFailure, decideRetry } from './retry.js';
import { whileLeaseLasts } from './retrying.js';
import { transaction, type ClaimedJobs, type Store } from './store/index.js';
import { checkQueueLimits, FLOW_MAX_GROUPS_PER_CLAIM, FLOW_UNGROUPED_WINDOW } from './flow-control.js';
import type { AttemptOutcome, WorkerTestSignals } from './test-signals.js';
import { settlesWithin } from './settles-within.js';
import { jobTracer, runInJobSpan } from './tracing.js';
import type { BackoffOptions, HandlerOptions, JobHandlerFn } from './types.js';

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
  limits: undefined,
  maxRateLimitedRetries: 20,
};

const INT32_MAX = 2_147_483_647;

export const BACKOFF_OPTIONS = section<BackoffOptions>('backoff', { baseMs: integer(0, INT32_MAX), maxMs: integer(0, INT32_MAX) }, HANDLER_DEFAULTS.backoff);

export const HANDLER_OPTIONS = section<HandlerOptions>(
  'a handler',
  {
    concurrency: integer(1, 1_000),
    prefetch: integer(0, 10_000),
    leaseMs: integer(200, 24 * 3_600_000),
    maxRuntimeMs: integer(1, 7 * 24 * 3_600_000),
    maxAttempts: integer(1, 1_000_000),
    unknownErrorAttempts: integer(1, 1_000_000),
    backoff: nested(BACKOFF_OPTIONS),
    fairShare: number(0, 1),
    abortMarginMs: integer(0, INT32_MAX),
    limits: opaque('object'),
    maxRateLimitedRetries: integer(0, 1_000_000),
  },
  HANDLER_DEFAULTS,
);

/** HANDLER_OPTIONS with other defaults (a process's handlerDefaults), field by field, backoff included. */
function withBase(base: HandlerOptions): Section<HandlerOptions> {
  return { ...HANDLER_OPTIONS, defaults: base, fields: { ...HANDLER_OPTIONS.fields, backoff: nested({ ...BACKOFF_OPTIONS, defaults: base.backoff }) } };
}

/** A handler's options over `base`: every name and value checked, named `where.field` in messages. */
export function resolveHandlerOptions(where: string, options: Partial<HandlerOptions> | undefined, base: HandlerOptions): HandlerOptions {
  const merged = resolveSection(withBase(base), options, where);
  const at = (field: string) => `${where}.${field}`;
  if (merged.limits !== undefined) merged.limits = checkQueueLimits(at('limits'), merged.limits);
  if (merged.abortMarginMs !== undefined) {
    // The attempt's lease is the shorter of leaseMs and maxRuntimeMs.
    const attemptLeaseMs = Math.min(merged.leaseMs, merged.maxRuntimeMs);
    if (merged.abortMarginMs * 2 > attemptLeaseMs) {
      throw new InvalidOptionError(
        at('abortMarginMs'),
        ABORT_MARGIN_TOO_LARGE(merged.abortMarginMs, attemptLeaseMs),
        ABORT_MARGIN_FIX(),
      );
    }
  }
  return merged;
}

export interface WorkerDeps {
  readonly db: pg.Pool;
  /** The NOTIFY channel of the schema. */
  readonly channel: string;
  readonly store: Store;
  readonly owner: string;
  readonly completer: Completer;
  readonly metrics: EngineMetrics;
  readonly logger: EngineLogger;
  /** Failures that repeat while the database is away (claims, outcome writes) are logged through it. */
  readonly failures: LogThrottle;
  /** Claim again this often even without a wake-up (NOTIFY is only an optimisation); leases are checked as often. */
  readonly pollIntervalMs: number;
  /** Shutdown releases that give the attempt back before releases start to count as attempts. */
  readonly maxFreeReleases: number;
  /**
   * After a claim that drained the queue, wake-ups within this window wait for its end and share
   * one claim: a stream of NOTIFYs costs at most one claim per window, while an idle worker still
   * claims at once.
   */
  readonly wakeCooldownMs: number;
  /** Some key releases were handed off (a producer held the key's row): run the handoff pass soon. */
  readonly keysDeferred: () => void;
}

export interface WorkerHooks {
  /** Called after every claim with the number of jobs it took (a test hook, like River's). */
  claimed?(count: number): void;
}

type WorkerState = 'idle' | 'running' | 'stopping' | 'stopped';
/** `value`: a flow child's return value (its parent reads it); not kept for other jobs. */
type Outcome = { ok: true; value?: unknown } | { ok: false; error: unknown };

const SUCCEEDED: Outcome = { ok: true };

/** The series a worker touches per job, looked up once when it starts (see EngineMetrics.counterSeries). */
interface WorkerSeries {
  claimed: CounterSeries;
  succeeded: CounterSeries;
  claimQueries: CounterSeries;
  claimWait: HistogramSeries;
  claimQueryDuration: HistogramSeries;
  handlerDuration: HistogramSeries;
  completionLatency: HistogramSeries;
}

/** Handler durations kept for the prefetch rule: the median of the most recent ones. */
const DURATION_SAMPLES = 32;
const MEDIAN_EVERY = 8;

/**
 * The claim loop of one queue in this process. It keeps up to `concurrency` handlers running and
 * up to `prefetch` claimed jobs waiting, claims in batches (one statement, committed before any
 * handler runs), and hands finished jobs to the completer. No transaction is ever open while a
 * handler runs.
 *
 * The prefetch rule: a buffered job's lease runs while it waits, so the buffer holds no more than
 * the handlers finish in a quarter of a lease, by the median of recent handler times (before any
 * are known, no more than `concurrency`), and never more than `prefetch`. A buffered job that
 * still waited too long is renewed under the fence when it starts (startAttempt: full lease, and
 * its deadline from then), and one whose lease runs out while it waits is released without
 * charging its attempt: time in the buffer never costs an attempt, or starts a handler on a lease
 * too short to be useful.
 */
export class Worker {
  readonly options: HandlerOptions;
  private state: WorkerState = 'idle';
  private readonly buffered: Lease[] = [];
  private readonly running = new Map<Lease, Promise<void>>();
  /**
   * Outcome writes handed off and not settled (each still holds its job's lease): counted, not
   * kept as promises, so a job's completion costs no promise of the worker's.
   */
  private writesPending = 0;
  /** stop()'s waits for `writesPending` to reach 0. */
  private writesDrained: (() => void)[] = [];
  /** One timer for every lease of this worker (lease.ts), and what the leases tell the worker. */
  private readonly timers = new LeaseTimers();
  private readonly leaseHooks: LeaseHooks = {
    timers: this.timers,
    bufferedExpiry: (lease) => this.bufferedExpiry(lease),
    aborted: (lease) => this.leaseAborted(lease),
  };
  private series: WorkerSeries | undefined;
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
  /**
   * The queue has flow control on (limits, fairness or group settings in the database): claims go
   * through the flow claim. Learnt from the claims themselves (the plain claim refuses such a
   * queue and says so; the flow claim's lock says when it is off again), so a limit set at run
   * time by any process is followed from this worker's next claim.
   */
  private flow = false;
  /** Wakes the loop when a throttle or rate limit that held a claim back lets it take more. */
  private gateTimer: NodeJS.Timeout | undefined;
  /** The last DURATION_SAMPLES handler durations, a ring (`durationCount` of them filled). */
  private readonly durations = new Float64Array(DURATION_SAMPLES);
  private durationCount = 0;
  /** The median of `durations`, recomputed every MEDIAN_EVERY samples (it is read per job). */
  private median: number | undefined;
  private samplesSinceMedian = 0;
  private checking = false;
  /** This worker's kinds of repeated failure in the LogThrottle (and the subjects of their lines). */
  private readonly claimKind: string;
  private readonly writeKind: string;
  private nudge: (() => void) | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private loop: Promise<void> | undefined;
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: WorkerTestSignals | undefined;

  constructor(
    readonly queue: string,
    private readonly handler: JobHandlerFn<never>,
    options: HandlerOptions,
    private readonly deps: WorkerDeps,
    private readonly hooks: WorkerHooks = {},
  ) {
    this.options = options;
    this.claimKind = CLAIM_KIND(queue);
    this.writeKind = WRITE_KIND(queue);
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
    const { metrics } = this.deps;
    metrics.handles(this.queue);
    const labels = { queue: this.queue };
    this.series = {
      claimed: metrics.counterSeries('jobs_claimed', labels),
      succeeded: metrics.counterSeries('jobs_succeeded', labels),
      claimQueries: metrics.counterSeries('claim_queries', labels),
      claimWait: metrics.histogramSeries('claim_wait_seconds', labels),
      claimQueryDuration: metrics.histogramSeries('claim_query_duration_seconds', labels),
      handlerDuration: metrics.histogramSeries('handler_duration_seconds', labels),
      completionLatency: metrics.histogramSeries('completion_latency_seconds', labels),
    };
    this.pollTimer = setInterval(() => {
      this.wake();
      void this.checkLeases();
    }, this.deps.pollIntervalMs);
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
  async stop(timeoutMs: number, graceMs = 1_000): Promise<void> {
    if (this.state === 'idle') this.state = 'stopped';
    if (this.state !== 'running') return;
    this.state = 'stopping';
    clearInterval(this.pollTimer);
    clearTimeout(this.gateTimer);
    this.poke();
    // Bounded: a claim waiting for a connection that no handler gives back (a pool without a
    // connect timeout, all of it held by handlers that wait to be aborted) must not hold the stop.
    await settlesWithin(this.loop ?? Promise.resolve(), timeoutMs);

    for (const lease of this.buffered.splice(0)) this.track(this.release(lease, false));

    const allSettled = () => Promise.allSettled([...this.running.values()]);
    if (this.running.size > 0) await settlesWithin(allSettled(), timeoutMs);
    if (this.running.size > 0) {
      for (const lease of this.running.keys()) lease.abort('SHUTDOWN', 'the worker is shutting down');
      const grace = Math.min(graceMs, ...[...this.running.keys()].map((lease) => lease.abortMarginMs));
      await settlesWithin(allSettled(), grace);
    }
    for (const lease of [...this.running.keys()]) {
      // The handler ignored its signal. Hand the job back now; its late outcome is ignored.
      this.running.delete(lease);
      lease.dispose();
      this.deps.logger.warn(HANDLER_DID_NOT_STOP(lease.job.id, this.queue));
      this.track(this.release(lease, lease.started));
    }
    // Bounded too: a write stuck on a dead network must not hold the shutdown forever (the reaper
    // recovers whatever it was writing).
    const drained = this.writesPending === 0 ? Promise.resolve() : new Promise<void>((resolve) => this.writesDrained.push(resolve));
    if (!(await settlesWithin(drained, timeoutMs))) {
      this.deps.logger.warn(WRITES_PENDING_AT_SHUTDOWN(this.queue, timeoutMs));
    }
    this.state = 'stopped';
  }

  /** An operator cancelled a job (a NOTIFY from any process, or this worker's lease check). */
  cancelled(jobId: string): void {
    for (const lease of this.running.keys()) {
      if (lease.job.id === jobId) lease.abort('CANCELLED', 'the job was cancelled by an operator');
    }
    const waiting = this.buffered.findIndex((lease) => lease.job.id === jobId);
    if (waiting !== -1) {
      // Never started: the attempt is over now, and the job lets go of its key.
      const [lease] = this.buffered.splice(waiting, 1);
      lease!.dispose();
      this.track(this.endCancelled(lease!));
    }
  }

  private poke(): void {
    const nudge = this.nudge;
    this.nudge = undefined;
    nudge?.();
  }

  private async claimLoop(): Promise<void> {
    while (this.state === 'running') {
      const { concurrency } = this.options;
      const target = concurrency + this.prefetchLimit();
      // Under load, claim in batches of at least two thirds of the target instead of one job per
      // freed slot (half made claims of ~290 of a target of 510: a claim statement per 300 jobs);
      // the third left in the buffer covers a claim's round trip at the rates a backlog runs at.
      const minBatch = Math.max(1, Math.floor((target * 2) / 3));
      const room = target - this.inFlight;
      const slotsIdle = this.running.size < concurrency && this.buffered.length === 0;
      // Backpressure: finished jobs whose outcome is not written yet still hold their leases.
      // Claiming past them lets completions fall behind claims until leases expire unwritten.
      const writesBehind = this.writesPending >= target;
      if (this.moreWork && room > 0 && !writesBehind && (room >= minBatch || slotsIdle)) {
        const cooldownLeft = this.lastShortClaimAt + this.deps.wakeCooldownMs - performance.now();
        if (cooldownLeft > 0) await new Promise((resolve) => setTimeout(resolve, cooldownLeft));
        if (this.state !== 'running') break;
        await this.claim(room);
        continue;
      }
      await new Promise<void>((resolve) => {
        this.nudge = resolve;
      });
    }
  }

  /** How many claimed jobs may wait in the buffer now (see the class's comment). */
  private prefetchLimit(): number {
    const { prefetch, concurrency, leaseMs, maxRuntimeMs } = this.options;
    const median = this.medianDurationMs();
    if (median === undefined) return Math.min(prefetch, concurrency);
    const quarterLease = Math.min(leaseMs, maxRuntimeMs) / 4;
    return Math.min(prefetch, Math.floor((concurrency * quarterLease) / Math.max(median, 0.01)));
  }

  private medianDurationMs(): number | undefined {
    return this.median;
  }

  private recordDuration(ms: number): void {
    this.durations[this.durationCount % DURATION_SAMPLES] = ms;
    this.durationCount += 1;
    if (this.median !== undefined && ++this.samplesSinceMedian < MEDIAN_EVERY) return;
    this.samplesSinceMedian = 0;
    const sorted = this.durations.slice(0, Math.min(this.durationCount, DURATION_SAMPLES)).sort();
    this.median = sorted[Math.floor(sorted.length / 2)];
  }

  /**
   * Below this much lease left, a buffered job is renewed before its handler starts: at least half
   * its lease, and enough for a typical handler (1.5 × the median) plus the abort margin, but never
   * the whole lease (a job claimed a moment ago is not renewed).
   */
  private renewBelowMs(lease: Lease): number {
    const full = lease.attemptLeaseMs;
    const median = this.medianDurationMs() ?? 0;
    return Math.max(full / 2, Math.min(full - Math.min(full / 10, 1_000), 1.5 * median + lease.abortMarginMs));
  }

  private async claim(limit: number): Promise<void> {
    const { leaseMs, maxRuntimeMs, maxAttempts, backoff, fairShare, abortMarginMs } = this.options;
    this.fairCredit += limit * fairShare;
    const oldestFirst = Math.min(limit, Math.floor(this.fairCredit + 1e-9)); // 10 × 0.1 is 0.999…
    this.fairCredit -= oldestFirst;
    const requestedAt = performance.now();
    const wakeupsBefore = this.wakeups;
    const params = {
      queue: this.queue,
      owner: this.deps.owner,
      limit,
      leaseMs,
      maxRuntimeMs,
      maxAttempts,
      backoffBaseMs: backoff.baseMs,
      backoffMaxMs: backoff.maxMs,
      oldestFirst,
    };
    let rows: ClaimedJobs;
    try {
      rows = this.flow ? await this.flowClaim(params) : await this.deps.store.claim(this.deps.db, params);
    } catch (error) {
      const reason = (error as Error).message;
      this.deps.failures.failed(this.claimKind, reason, 'error', CLAIM_FAILED(this.claimKind, reason));
      this.moreWork = this.wakeups !== wakeupsBefore;
      return;
    } finally {
      this.series!.claimQueries.add(1);
      this.series!.claimQueryDuration.observe((performance.now() - requestedAt) / 1_000);
    }
    this.deps.failures.recovered(this.claimKind);
    if (this.state !== 'running') {
      // Claimed while stop() was already handing jobs back (it does not wait for a claim forever):
      // these go back too, attempt not charged.
      for (const row of rows) {
        const lease = new Lease(row, this.deps.store.schema, requestedAt, { leaseMs, abortMarginMs }, this.deps, this.leaseHooks);
        lease.dispose();
        this.track(this.release(lease, false));
      }
      return;
    }
    if (rows.length < limit) this.lastShortClaimAt = requestedAt;
    this.moreWork = rows.length === limit || this.wakeups !== wakeupsBefore;
    if (rows.gate.flow !== this.flow) {
      // Flow control was turned on or off: claim again at once, the other way.
      this.flow = rows.gate.flow;
      this.moreWork = true;
    } else if (rows.length < limit && rows.gate.waitMs !== null) {
      this.wakeAfter(rows.gate.waitMs);
    }
    this.hooks.claimed?.(rows.length);
    const { metrics } = this.deps;
    const series = this.series!;
    const timing = { leaseMs, abortMarginMs };
    for (const row of rows) {
      const lease = new Lease(row, this.deps.store.schema, requestedAt, timing, this.deps, this.leaseHooks);
      series.claimed.add(1);
      series.claimWait.observe(Math.max(0, row.waitedMs) / 1_000);
      if (metrics.heard) metrics.emit({ type: 'claimed', queue: this.queue, jobId: lease.job.id, attempt: lease.job.attempt, leaseToken: lease.job.leaseToken });
      this.buffered.push(lease);
    }
    this.dispatch();
    this.testSignals?.batchClaimed.signal({ queue: this.queue, jobIds: rows.map((row) => row.id) });
  }

  /**
   * The claim of a queue under flow control: its claimers take turns on the queue's row, and the
   * claim counts slots and claims after its turn began (see store/flow.ts). A lock that finds flow
   * control off again returns nothing, with a gate that says so.
   */
  private flowClaim(params: Parameters<Store['claim']>[1]): Promise<ClaimedJobs> {
    const { store, db } = this.deps;
    return transaction(
      db,
      async (client) => {
        const lock = await store.flowLock(client, { queue: this.queue });
        if (!lock.flow) return Object.assign([], { gate: { flow: false, waitMs: null } });
        return store.flowClaim(client, { ...params, cursor: lock.cursor, maxGroups: FLOW_MAX_GROUPS_PER_CLAIM, ungroupedWindow: FLOW_UNGROUPED_WINDOW });
      },
      { statementTimeoutMs: store.statementTimeoutMs, genericPlans: true },
    );
  }

  /** Claims again after `ms` (a throttle or rate limit will let it), or at the next poll if that comes first. */
  private wakeAfter(ms: number): void {
    if (this.gateTimer !== undefined || ms >= this.deps.pollIntervalMs) return;
    this.gateTimer = setTimeout(() => {
      this.gateTimer = undefined;
      this.wake();
    }, Math.max(1, Math.ceil(ms)));
    this.gateTimer.unref();
  }

  private dispatch(): void {
    while (this.state === 'running' && this.running.size < this.options.concurrency && this.buffered.length > 0) {
      const lease = this.buffered.shift()!;
      // The common case starts at once; a job that waited too long, or was cancelled or lost while
      // it waited, goes the longer way (begin).
      const ready = !lease.lost && !lease.aborted && lease.msLeft >= this.renewBelowMs(lease);
      this.running.set(lease, ready ? this.execute(lease) : this.begin(lease));
    }
  }

  /** A buffered job ran out of lease before a slot was free: hand it back, attempt not charged. */
  private bufferedExpiry(lease: Lease): void {
    const waiting = this.buffered.indexOf(lease);
    if (waiting === -1) return; // it is starting (its renewal re-arms the timer)
    this.buffered.splice(waiting, 1);
    lease.dispose();
    this.track(this.release(lease, false));
    this.poke();
  }

  /** A slot is free for `lease`, which waited too long or lost its job meanwhile: renew it if it can still run, then run it. */
  private async begin(lease: Lease): Promise<void> {
    if (!lease.lost && !lease.aborted) await this.startAttempt(lease);
    if (lease.lost || lease.aborted) {
      // Cancelled, reclaimed, lost or shut down before it started: the handler never runs.
      if (!this.running.delete(lease)) return; // stop() released it meanwhile
      lease.dispose();
      if (lease.lost === 'cancelled' || lease.abortCode === 'CANCELLED') this.track(this.endCancelled(lease));
      else if (lease.abortCode === 'SHUTDOWN') this.track(this.release(lease, false));
      else if (lease.abortCode !== 'LEASE_EXPIRED') this.ended(lease, 'lost'); // LEASE_EXPIRED: startAttempt released it
      this.dispatch();
      this.poke();
      return;
    }
    await this.execute(lease);
  }

  /** The fenced renewal of a buffered job's lease as its handler starts (see the class's comment). */
  private async startAttempt(lease: Lease): Promise<void> {
    const requestedAt = performance.now();
    try {
      const outcome = await this.deps.store.startAttempt(this.deps.db, { ...lease.fenceKey, leaseMs: this.options.leaseMs });
      if (outcome.ok) {
        lease.renewed(requestedAt, outcome.leaseMsLeft, outcome.leaseAtDeadline);
        if (outcome.deadlineAt) lease.startsWithDeadline(outcome.deadlineAt);
        return;
      }
      lease.markLost(outcome.reason, 'start');
    } catch (error) {
      // Not renewed (the database is away): start on what is left if that is still of use, else
      // give the job back without charging the attempt.
      if (lease.msLeft > 2 * lease.abortMarginMs) return;
      this.deps.logger.warn(START_RENEWAL_FAILED(lease.job.id, this.queue, (error as Error).message));
      lease.abort('LEASE_EXPIRED', 'its lease ran out in the buffer and could not be renewed');
      this.track(this.release(lease, false));
    }
  }

  /**
   * Runs the handler; its settling is handled by `settled`. Written with one `then` rather than
   * async functions around the handler (and a span only when an SDK is registered): the layers of
   * promises per job were a measurable part of the worker's time.
   */
  private execute(lease: Lease): Promise<void> {
    const startedAt = performance.now();
    lease.begin();
    lease.handlerRunning = true;
    // Aborted before the handler started (while it started): watched the same way (leaseAborted).
    if (lease.aborted) this.leaseAborted(lease);
    let result: unknown;
    try {
      const tracer = jobTracer();
      result =
        tracer === undefined
          ? this.handler(lease.job as never, jobContext(lease, this.deps))
          : runInJobSpan(lease.job, lease.traceCarrier, async () => this.handler(lease.job as never, jobContext(lease, this.deps)), tracer);
    } catch (error) {
      result = Promise.reject(error);
    }
    // Always settles in a later microtask, never during dispatch (which has yet to record the run).
    return Promise.resolve(result).then(
      (value) => this.settled(lease, lease.job.parentId === null ? SUCCEEDED : { ok: true, value }, startedAt),
      (error: unknown) => this.settled(lease, { ok: false, error }, startedAt),
    );
  }

  /** The handler settled with `outcome`. */
  private settled(lease: Lease, outcome: Outcome, startedAt: number): void {
    lease.handlerRunning = false;
    clearTimeout(lease.unsettledTimer);
    const ran = performance.now() - startedAt;
    this.series!.handlerDuration.observe(ran / 1_000);
    this.recordDuration(ran);
    // Not ours any more: stop() released it, or the handler ignored its abort past the grace.
    if (!this.running.delete(lease)) return this.settledLate(lease);
    lease.dispose();
    this.dispatch();
    this.poke();
    if (outcome.ok && !lease.lossToRecord && !lease.keysDeferred && lease.completion === undefined && !lease.lost && lease.job.parentId === null) {
      // The common case, without a promise: the completer calls back with the row's outcome.
      this.writesPending += 1;
      this.deps.completer.add(lease.job.id, lease.job.leaseToken, lease.job.orderingKey !== null, lease, (completion, error) =>
        this.completed(lease, startedAt, completion, error),
      );
      return;
    }
    this.track(this.finish(lease, outcome, startedAt));
  }

  /** The completer wrote (or could not write) a succeeded handler's completion: as `complete` then `track`. */
  private completed(lease: Lease, startedAt: number, completion: CompletionOutcome | undefined, error: unknown): void {
    try {
      if (completion === undefined) this.writeFailed(error);
      else if (completion.ok) {
        this.succeeded(lease, startedAt);
        this.deps.failures.recovered(this.writeKind);
      } else this.track(this.refused(lease, completion.reason, 'complete'));
    } catch (thrown) {
      this.writeFailed(thrown);
    } finally {
      this.writeSettled();
    }
  }

  /** What the handler's outcome means for the job, now that it settled (all but the common success, see settled). */
  private async finish(lease: Lease, outcome: Outcome, startedAt: number): Promise<void> {
    if (lease.lossToRecord) this.track(this.recordLoss(lease));
    if (lease.keysDeferred) this.deps.keysDeferred(); // ctx.complete's transaction has ended
    if (lease.completion === 'own') {
      // ctx.complete() committed the job's success with the handler's own writes.
      if (!outcome.ok) this.deps.logger.warn(THREW_AFTER_COMPLETE(lease.job.id, this.queue));
      return this.succeeded(lease, startedAt);
    }
    if (lease.completion === 'client') return this.afterClientCompletion(lease, outcome, startedAt);
    if (lease.lost === 'cancelled') return this.endCancelled(lease);
    if (lease.lost) return this.ended(lease, 'lost');
    // Cancelled while it ran (the NOTIFY, or the lease check): the outcome's write is refused as
    // "cancelled" (and recorded: the handler finished after its cancel), then the attempt ends.
    if (outcome.ok && lease.job.parentId !== null) return this.completeChild(lease, outcome.value, startedAt);
    return outcome.ok ? this.complete(lease, startedAt) : this.fail(lease, outcome.error);
  }

  /**
   * A flow child's completion: fenced as any, with the handler's return value as its result (JSON,
   * at most FLOW_RESULT_MAX_BYTES; a result that is not is the attempt's permanent failure, code
   * INVALID_RESULT). Its parent is settled after the completion committed (see ended()).
   */
  private async completeChild(lease: Lease, value: unknown, startedAt: number): Promise<void> {
    let result: string | null;
    try {
      result = value === undefined ? null : payloadJson(value, `the result of job ${lease.job.id}`, FLOW_RESULT_MAX_BYTES);
    } catch (error) {
      return this.fail(lease, new PermanentJobError((error as Error).message, { code: 'INVALID_RESULT', cause: error }));
    }
    const outcome = await whileLeaseLasts(lease, () => this.deps.store.completeChild(this.deps.db, { ...lease.fenceKey, result }));
    if (!outcome.ok) return this.refused(lease, outcome.reason, 'complete');
    this.succeeded(lease, startedAt);
  }

  /** A handler abandoned earlier (it ignored its aborted signal) settled at last. */
  private settledLate(lease: Lease): void {
    if (lease.lossToRecord) this.track(this.recordLoss(lease));
    // A cancelled attempt is over only now: its key's next job may start.
    if (lease.lost === 'cancelled' || lease.abortCode === 'CANCELLED') this.track(this.endCancelled(lease));
  }

  /**
   * ctx.complete({ client }) wrote the job's success in the caller's transaction, which only the
   * caller's COMMIT makes true. Once the handler settled, the row says whether it did: succeeded
   * under this claim (committed), or still running under it (rolled back, or the COMMIT failed):
   * then the attempt failed like any other, with the handler's error if it threw.
   */
  private async afterClientCompletion(lease: Lease, outcome: Outcome, startedAt: number): Promise<void> {
    const fence = await whileLeaseLasts(lease, () => this.deps.store.fenceLoss(this.deps.db, lease.fenceKey));
    if (fence.finishedByThisClaim) {
      if (!outcome.ok) this.deps.logger.warn(THREW_AFTER_CLIENT_COMPLETE(lease.job.id, this.queue));
      return this.succeeded(lease, startedAt);
    }
    if (fence.owned) {
      const error = outcome.ok
        ? new RetryableJobError(COMPLETION_NOT_COMMITTED(lease.job.id), { code: 'COMPLETION_NOT_COMMITTED' })
        : outcome.error;
      return this.fail(lease, error);
    }
    return this.refused(lease, fence.reason, 'complete');
  }

  /**
   * A handler whose signal was aborted gets half the abort margin to settle. One that does not
   * is abandoned: its slot is freed and (when its lease ran out or its runtime did) its attempt
   * recorded as failed, fenced, while the lease is still ours, so a stuck handler can neither
   * hold a slot forever nor wait for the reaper. A cancelled or lost attempt writes nothing now;
   * when (if) its handler settles at last, the attempt is over (see settledLate).
   */
  private leaseAborted(lease: Lease): void {
    // Only while the handler runs (from execute until it settles): the signal's abort is heard
    // synchronously from the lease, as the 'abort' listener that this replaces heard it.
    if (!lease.handlerRunning) return;
    const code = lease.abortCode;
    if (code !== 'LEASE_EXPIRED' && code !== 'MAX_RUNTIME' && code !== 'CANCELLED' && code !== 'LEASE_LOST') return;
    lease.unsettledTimer = setTimeout(() => {
      if (!this.running.delete(lease)) return;
      lease.dispose();
      this.deps.logger.warn(SIGNAL_IGNORED(lease.job.id, this.queue, code));
      this.dispatch();
      this.poke();
      if ((code === 'LEASE_EXPIRED' || code === 'MAX_RUNTIME') && !lease.lost && lease.completion === undefined) {
        this.track(this.fail(lease, new JobAbortedError(code, HANDLER_DID_NOT_SETTLE())));
      }
    }, Math.max(1, Math.floor(lease.abortMarginMs / 2)));
    lease.unsettledTimer.unref();
  }

  /**
   * Once per poll: asks the database which of this worker's leases are no longer its own, so a
   * cancellation (or a reclaim) reaches the handler within one poll interval even when its NOTIFY
   * was lost (the listener down, or deaf). Read-only.
   */
  private async checkLeases(): Promise<void> {
    if (this.checking || this.state !== 'running') return;
    const leases = [...this.running.keys(), ...this.buffered];
    if (leases.length === 0) return;
    this.checking = true;
    try {
      const rows = await this.deps.store.checkLeases(this.deps.db, {
        ids: leases.map((l) => l.job.id),
        tokens: leases.map((l) => l.job.leaseToken),
        owner: this.deps.owner,
      });
      for (const row of rows) {
        const lease = leases.find((l) => l.job.id === row.id && l.job.leaseToken === row.token);
        if (!lease) continue;
        const { reason } = row;
        if (reason === 'cancelled') this.cancelled(lease.job.id);
        else this.disown(lease, reason);
      }
    } catch {
      // A failed check changes nothing: the fence still guards every write. Next poll tries again.
    } finally {
      this.checking = false;
    }
  }

  /**
   * The job is someone else's now (reaped and reclaimed): a buffered one is dropped, a running
   * one's handler is aborted. Its outcome's write is still sent and refused by the fence (and
   * recorded as a lost fence): the check reads a snapshot, the fence decides.
   */
  private disown(lease: Lease, reason: FenceLossReason): void {
    const waiting = this.buffered.indexOf(lease);
    if (waiting !== -1) {
      this.buffered.splice(waiting, 1);
      lease.dispose();
      this.ended(lease, 'lost');
      return;
    }
    lease.abort('LEASE_LOST', LEASE_LOST_ABORT(reason));
  }

  private async complete(lease: Lease, startedAt: number): Promise<void> {
    const outcome = await this.deps.completer.complete(lease.job.id, lease.job.leaseToken, lease.job.orderingKey !== null, lease);
    if (!outcome.ok) return this.refused(lease, outcome.reason, 'complete');
    this.succeeded(lease, startedAt);
  }

  private succeeded(lease: Lease, startedAt: number): void {
    const { metrics } = this.deps;
    this.series!.succeeded.add(1);
    this.series!.completionLatency.observe((performance.now() - lease.claimedAt) / 1_000);
    if (metrics.heard) metrics.emit({ type: 'succeeded', queue: this.queue, jobId: lease.job.id, durationMs: performance.now() - startedAt });
    this.ended(lease, 'succeeded');
  }

  private async fail(lease: Lease, error: unknown): Promise<void> {
    if (lease.lost) return this.ended(lease, 'lost');
    const abortCode = lease.abortCode;
    if (abortCode === 'SHUTDOWN') return this.release(lease, true);
    if (error instanceof RateLimitedError && abortCode === undefined) return this.throttled(lease, error);
    const failure = classifyFailure(error, abortCode);
    const { maxAttempts, unknownErrorAttempts, backoff } = this.options;
    const decision = decideRetry(failure, lease.job.attempt, lease.job.maxAttempts ?? maxAttempts, unknownErrorAttempts, backoff);
    // Applied, or `already`: a try whose reply was lost had committed (the retry finds its history row).
    const outcome = await whileLeaseLasts(lease, () =>
      this.deps.store.fail(this.deps.db, { ...lease.fenceKey, dead: decision.dead, delayMs: decision.delayMs, code: failure.code, message: failure.message }),
    );
    if (!outcome.ok) return this.refused(lease, outcome.reason, 'fail');
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
    this.ended(lease, decision.dead ? 'dead' : 'retried');
  }

  /**
   * The handler reported a rate limit: its group (or queue) is throttled for the time it gave,
   * and the job waits that long, its attempt given back up to `maxRateLimitedRetries` times.
   */
  private async throttled(lease: Lease, error: RateLimitedError): Promise<void> {
    const outcome = await whileLeaseLasts(lease, () =>
      this.deps.store.throttle(this.deps.db, {
        ...lease.fenceKey,
        scope: error.scope,
        retryAfterMs: error.retryAfterMs,
        maxFreeRetries: this.options.maxRateLimitedRetries,
        message: error.message.slice(0, 1_000),
      }),
    );
    if (!outcome.ok) return this.refused(lease, outcome.reason, 'fail');
    const dead = outcome.status === 'dead';
    this.deps.metrics.increment('jobs_rate_limited', { queue: this.queue });
    if (!outcome.free) this.deps.metrics.increment(dead ? 'jobs_dead' : 'jobs_retried', { queue: this.queue, code: 'RATE_LIMITED', attempt: lease.job.attempt });
    this.deps.metrics.emit({ type: 'failed', queue: this.queue, jobId: lease.job.id, attempt: lease.job.attempt, code: 'RATE_LIMITED', dead, delayMs: error.retryAfterMs });
    // The throttle holds this process's claims too: they learn it from the database.
    this.flow ||= error.scope === 'group' && lease.job.group !== null;
    this.ended(lease, dead ? 'dead' : 'retried');
  }

  private async release(lease: Lease, started: boolean): Promise<void> {
    lease.dispose();
    if (lease.lost) return this.ended(lease, 'lost');
    const outcome = await whileLeaseLasts(lease, () =>
      this.deps.store.release(this.deps.db, { ...lease.fenceKey, started, maxFreeReleases: this.deps.maxFreeReleases }),
    );
    if (!outcome.ok) {
      lease.markLost(outcome.reason, 'release');
      this.ended(lease, 'lost');
      return;
    }
    this.deps.metrics.increment('jobs_released', { queue: this.queue });
    this.deps.metrics.emit({ type: 'released', queue: this.queue, jobId: lease.job.id });
    this.ended(lease, 'released');
  }

  /**
   * A fenced write of the attempt's outcome was refused, for the reason the store decoded: the
   * lease is lost (counted, and the handler's signal aborted), and the attempt is over for this
   * worker. A cancelled job still lets go of its ordering key.
   */
  private async refused(lease: Lease, reason: FenceLossReason, operation: LeaseOperation): Promise<void> {
    lease.markLost(reason, operation);
    if (reason === 'cancelled') return this.endCancelled(lease);
    this.ended(lease, 'lost');
  }

  /** A cancelled job's attempt is over: it lets go of its lease and of its ordering key. */
  private async endCancelled(lease: Lease): Promise<void> {
    await whileLeaseLasts(lease, () =>
      this.deps.store.releasingKeys(this.deps.db, this.deps.channel, (db) => this.deps.store.endCancelledAttempt(db, lease.fenceKey), this.deps.keysDeferred),
    );
    this.ended(lease, 'cancelled');
  }

  /** The attempt is over for this worker (a test signal; nothing when signals are off). */
  private ended(lease: Lease, outcome: AttemptOutcome): void {
    // A flow child resolved or died: its parent may be ready (or fail, with fail_on_dead_child).
    // After this attempt's write committed, so the last of its siblings to commit sees them all.
    const parent = lease.job.parentId;
    if (parent !== null && (outcome === 'succeeded' || outcome === 'dead')) this.track(this.settleParent(parent));
    this.testSignals?.attemptEnded.signal({ queue: this.queue, jobId: lease.job.id, outcome });
  }

  private async settleParent(parent: string): Promise<void> {
    await this.deps.store.settleParents(this.deps.db, { ids: [parent], channel: this.deps.channel });
  }

  /** Records a refusal that no statement recorded (see Lease.lossToRecord). */
  private async recordLoss(lease: Lease): Promise<void> {
    lease.lossToRecord = false;
    await this.deps.store.recordFenceLoss(this.deps.db, lease.fenceKey);
  }

  /** Counts a write until it settles, so stop() can wait for it; logs its failure. */
  private track(write: Promise<void>): void {
    this.writesPending += 1;
    write.then(
      () => {
        this.deps.failures.recovered(this.writeKind);
        this.writeSettled();
      },
      (error: unknown) => {
        this.writeFailed(error);
        this.writeSettled();
      },
    );
  }

  private writeFailed(error: unknown): void {
    // One per job, and a whole batch fails at once while the database is away: bounded.
    const reason = (error as Error).message;
    this.deps.failures.failed(this.writeKind, reason, 'error', OUTCOME_WRITE_FAILED(this.writeKind, reason));
  }

  private writeSettled(): void {
    this.writesPending -= 1;
    if (this.writesPending === 0) for (const resolve of this.writesDrained.splice(0)) resolve();
    // Under flow control, a finished job frees a slot of a limit: the next claim may take more.
    if (this.flow) this.moreWork = true;
    this.poke(); // the claim loop may have waited for writes to catch up
  }
}

