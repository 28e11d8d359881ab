import type pg from 'pg';
import { integer, resolveSection, section, timerMs } from '../config.js';
import { planTicks, TickClock } from '../cron.js';
import type { LogThrottle } from '../log-throttle.js';
import type { EngineLogger } from '../logger.js';
import { SCHEDULE_TICK_FAILED, SCHEDULE_TICKS_DUPLICATED } from '../messages.js';
import type { EngineMetrics } from '../metrics.js';
import { isTransientDatabaseError } from '../pg-errors.js';
import { PeriodicRunner } from './runner.js';
import { LOCKED_DUE_ROW_RETRY_MS } from './scheduler.js';
import type { MaintenanceService } from './service.js';
import type { AdvanceOutcome, DueSchedule, SchedulePlan, Store } from '../store/index.js';
import type { PassSignals } from '../test-signals.js';

export interface TickerConfig {
  /** Longest sleep between passes; a pass also runs when the next tick falls due, and when a schedule changes (NOTIFY). */
  intervalMs: number;
  /** Due schedules read per statement. */
  batchSize: number;
  /** Batches per pass, so a pass stays short however many schedules fall due at once. */
  maxBatchesPerPass: number;
  /** The default of a schedule's `missedAfterMs`: a tick handled later than this after it fell due is missed. */
  missedAfterMs: number;
  /** The default of a schedule's `maxMissedRuns` (`missed: 'all'`). */
  maxMissedRuns: number;
  /** Tick rows (the unique (schedule, tick) keys) are deleted this long after they were handled. */
  tickRetentionMs: number;
}

/** The longest `missedAfterMs`: a tick on time for a day longer is no longer on time. */
export const MISSED_AFTER_MAX_MS = 86_400_000;
/** The most missed ticks `missed: 'all'` runs at once. */
export const MAX_MISSED_RUNS_MAX = 1_000;

export const TICKER_DEFAULTS: TickerConfig = {
  intervalMs: 1_000,
  batchSize: 100,
  maxBatchesPerPass: 10,
  missedAfterMs: 60_000,
  maxMissedRuns: 100,
  tickRetentionMs: 86_400_000,
};

export const TICKER_OPTIONS = section<TickerConfig>(
  'the ticker',
  {
    intervalMs: timerMs(10),
    batchSize: integer(1, 10_000),
    maxBatchesPerPass: integer(1, 10_000),
    missedAfterMs: integer(0, MISSED_AFTER_MAX_MS),
    maxMissedRuns: integer(1, MAX_MISSED_RUNS_MAX),
    tickRetentionMs: integer(60_000),
  },
  TICKER_DEFAULTS,
);

/** A schedule whose tick failed (a pattern that no longer parses, a statement refused) waits this long. */
const FAILED_SCHEDULE_RETRY_MS = 60_000;
/** Tick rows past retention are deleted at most this often, in one bounded batch. */
const TICK_PRUNE_EVERY_MS = 60_000;
const TICK_PRUNE_BATCH = 1_000;
/** Compiled patterns kept (a few per schedule at most: the key is the pattern and the zone). */
const CLOCKS_MAX = 10_000;

interface PlannedTick {
  readonly schedule: DueSchedule;
  readonly plan: SchedulePlan;
  /** The walk was cut short: more of this schedule's ticks are due (the next pass follows at once). */
  readonly more: boolean;
}

export interface TickResult {
  /** Schedules advanced by this process in the pass. */
  schedules: number;
  enqueued: number;
  missed: number;
  skipped: number;
}

/**
 * Runs recurring schedules (docs/recurring-jobs.md). Every process runs one, and all race for
 * each tick: a pass reads the due schedules, plans each one's ticks (planTicks: which run, which
 * were missed, the next one) and hands the batch's plans to one statement (advanceSchedules) that
 * locks each schedule with SKIP LOCKED, claims the (schedule, tick) keys, inserts the jobs and
 * moves the schedule on, all or nothing. One statement per batch, not per schedule: 100 schedules
 * due each second were 100 commits (and WAL flushes) a second, which halved the throughput of the
 * queue beside them (bench process.c10.tuned.schedules100). The process that locks the row first does it; the others find it
 * locked or already moved and do nothing, so a tick gets one job whatever the number of processes.
 * A process killed mid-statement leaves nothing: its transaction never commits, and the next pass
 * of any process finds the tick still due.
 *
 * It sleeps until the next tick of any schedule (at most `intervalMs`), and a NOTIFY from a
 * schedule's change wakes it early. It is a sleep-until-due service: no host (SchedulerRegistry)
 * ever runs it, so @nestjs/schedule's per-process timers play no part in a tick.
 */
export class Ticker implements MaintenanceService {
  readonly name = 'ticker';
  readonly config: TickerConfig;
  private readonly runner: PeriodicRunner;
  private nextDelayMs: number;
  private readonly clocks = new Map<string, TickClock>();
  /** Schedules whose tick failed, until when they are left alone (by name). */
  private readonly failing = new Map<string, number>();
  private lastPruneAt = 0;
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: PassSignals<TickResult> | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly store: Store,
    private readonly channel: string,
    private readonly metrics: EngineMetrics,
    private readonly logger: EngineLogger,
    failures: LogThrottle,
    config?: Partial<TickerConfig>,
  ) {
    this.config = resolveSection(TICKER_OPTIONS, config, 'ticker');
    this.nextDelayMs = this.config.intervalMs;
    this.runner = new PeriodicRunner(
      () => this.runOnce(),
      () => this.nextDelayMs,
      { log: failures, what: 'Ticker pass', onError: () => (this.nextDelayMs = this.config.intervalMs) },
    );
  }

  /** One bounded pass over the due schedules; returns what this process did. */
  async runOnce(): Promise<TickResult> {
    const result: TickResult = { schedules: 0, enqueued: 0, missed: 0, skipped: 0 };
    let contended = false;
    let again = false;
    for (let batch = 0; batch < this.config.maxBatchesPerPass; batch++) {
      const due = await this.store.dueSchedules(this.pool, { limit: this.config.batchSize });
      const plans: PlannedTick[] = [];
      for (const schedule of due) {
        const retryAt = this.failing.get(schedule.name);
        if (retryAt !== undefined && retryAt > schedule.nowMs) continue;
        const planned = this.plan(schedule);
        if (planned) plans.push(planned);
      }
      const outcomes = await this.advance(plans);
      for (const { schedule, plan, more } of plans) {
        const outcome = outcomes.get(schedule.name);
        if (outcome === 'failed') continue;
        if (!outcome) {
          contended = true;
          continue;
        }
        this.failing.delete(schedule.name);
        result.schedules += 1;
        result.enqueued += outcome.enqueued;
        result.missed += plan.missed;
        result.skipped += outcome.skipped;
        if (more) again = true;
        const { queue } = outcome;
        if (outcome.enqueued > 0) this.metrics.increment('schedule_jobs_enqueued', { queue }, outcome.enqueued);
        if (plan.missed > 0) this.metrics.increment('schedule_ticks_missed', { queue }, plan.missed);
        if (outcome.skipped > 0) this.metrics.increment('schedule_ticks_skipped', { queue }, outcome.skipped);
        const duplicates = plan.ticks.length - outcome.won;
        if (duplicates > 0) this.logger.warn(SCHEDULE_TICKS_DUPLICATED(schedule.name, duplicates));
      }
      if (due.length < this.config.batchSize) break;
      if (batch === this.config.maxBatchesPerPass - 1) again = true;
    }
    await this.pruneTicks();
    const next = await this.store.nextScheduleInMs(this.pool);
    if (again) this.nextDelayMs = 0;
    // A due tick left behind: another process holds its row (it is advancing it now); look again
    // shortly, not at full speed (a spin), and not at the interval (it may die holding it).
    else if (contended) this.nextDelayMs = LOCKED_DUE_ROW_RETRY_MS;
    else if (next === undefined || next <= 0) this.nextDelayMs = this.config.intervalMs; // only failing ones are due
    else this.nextDelayMs = Math.min(this.config.intervalMs, Math.ceil(next));
    this.testSignals?.passRan.signal(result);
    return result;
  }

  /** A due schedule's plan, or undefined (logged, left alone for a while) when its pattern no longer parses. */
  private plan(schedule: DueSchedule): PlannedTick | undefined {
    try {
      const tickPlan = planTicks(this.clock(schedule.cron, schedule.tz), schedule.nextTickMs, schedule.nowMs, {
        policy: schedule.missedPolicy,
        missedAfterMs: schedule.missedAfterMs,
        maxMissedRuns: schedule.maxMissedRuns,
      });
      const plan: SchedulePlan = { name: schedule.name, expectedMs: schedule.nextTickMs, ticks: tickPlan.run, missed: tickPlan.missed, nextMs: tickPlan.next ?? null };
      return { schedule, plan, more: tickPlan.more };
    } catch (error) {
      this.fail(schedule, error);
      return undefined;
    }
  }

  /**
   * The batch's plans in one statement. One schedule's row that makes the statement fail (a hand
   * edit a CHECK refuses) would fail every pass for every schedule, so a batch that fails for a
   * reason other than the database being away is tried again a schedule at a time, and only the
   * failing one is left alone for a while (logged).
   */
  private async advance(plans: readonly PlannedTick[]): Promise<Map<string, AdvanceOutcome | 'failed'>> {
    if (plans.length === 0) return new Map();
    try {
      return await this.store.advanceSchedules(this.pool, { plans: plans.map((p) => p.plan), channel: this.channel });
    } catch (error) {
      // The database away fails the pass (the runner logs it, bounded, and retries).
      if (isTransientDatabaseError(error)) throw error;
    }
    const outcomes = new Map<string, AdvanceOutcome | 'failed'>();
    for (const planned of plans) {
      try {
        const one = await this.store.advanceSchedules(this.pool, { plans: [planned.plan], channel: this.channel });
        for (const [name, outcome] of one) outcomes.set(name, outcome);
      } catch (error) {
        if (isTransientDatabaseError(error)) throw error;
        this.fail(planned.schedule, error);
        outcomes.set(planned.schedule.name, 'failed');
      }
    }
    return outcomes;
  }

  private fail(schedule: DueSchedule, error: unknown): void {
    this.failing.set(schedule.name, schedule.nowMs + FAILED_SCHEDULE_RETRY_MS);
    this.logger.error(SCHEDULE_TICK_FAILED(schedule.name, (error as Error).message));
  }

  private clock(pattern: string, tz: string): TickClock {
    const key = `${tz}\u0000${pattern}`;
    let clock = this.clocks.get(key);
    if (!clock) {
      if (this.clocks.size >= CLOCKS_MAX) this.clocks.clear();
      this.clocks.set(key, (clock = new TickClock(pattern, tz)));
    }
    return clock;
  }

  /** One bounded batch of old tick rows, at most once a minute (any process: SKIP LOCKED). */
  private async pruneTicks(): Promise<void> {
    const now = Date.now();
    if (now - this.lastPruneAt < TICK_PRUNE_EVERY_MS) return;
    this.lastPruneAt = now;
    await this.store.pruneScheduleTicks(this.pool, { retentionMs: this.config.tickRetentionMs, limit: TICK_PRUNE_BATCH });
  }

  /** A schedule was created, changed or resumed somewhere: look at the due ticks again. */
  wake(): void {
    this.runner.trigger();
  }

  start(): void {
    this.runner.start();
  }

  stop(): Promise<void> {
    return this.runner.stop();
  }
}
