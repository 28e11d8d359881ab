import { integer, resolveSection, section, timerMs } from '../config.js';
import type { Queryable } from '../db.js';
import type { LogThrottle } from '../log-throttle.js';
import { PeriodicRunner } from './runner.js';
import type { MaintenanceService } from './service.js';
import type { Store } from '../store/index.js';
import type { PassSignals } from '../test-signals.js';

export interface SchedulerConfig {
  /** Longest sleep between passes; a pass also runs when the next scheduled job falls due. */
  intervalMs: number;
  /** Jobs promoted per statement. */
  batchSize: number;
  /** Batches per pass, so a pass stays short however many jobs fall due at once. */
  maxBatchesPerPass: number;
}

export const SCHEDULER_DEFAULTS: SchedulerConfig = { intervalMs: 1_000, batchSize: 1_000, maxBatchesPerPass: 10 };

export const SCHEDULER_OPTIONS = section<SchedulerConfig>(
  'the scheduler',
  { intervalMs: timerMs(5), batchSize: integer(1, 100_000), maxBatchesPerPass: integer(1, 10_000) },
  SCHEDULER_DEFAULTS,
);

/** The shortest sleep when the next due job is held by another session (see runOnce). */
export const LOCKED_DUE_ROW_RETRY_MS = 25;

/**
 * Promotes due jobs from 'scheduled' to 'pending'. Delayed jobs and retries waiting out their
 * backoff live in 'scheduled', outside the claimable index, so a million of them cost a claim
 * nothing; this service moves each one once, in bounded batches, when it falls due, and wakes the
 * queue's workers. It sleeps until the next due job (or the interval), and a NOTIFY from an
 * enqueue of a scheduled job wakes it early. Safe in many processes at once (SKIP LOCKED).
 */
export class Scheduler implements MaintenanceService {
  readonly name = 'scheduler';
  readonly config: SchedulerConfig;
  private readonly runner: PeriodicRunner;
  private nextDelayMs: number;
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: PassSignals<{ promoted: number }> | undefined;

  constructor(
    private readonly db: Queryable,
    private readonly store: Store,
    private readonly channel: string,
    failures: LogThrottle,
    config?: Partial<SchedulerConfig>,
  ) {
    this.config = resolveSection(SCHEDULER_OPTIONS, config, 'scheduler');
    this.nextDelayMs = this.config.intervalMs;
    this.runner = new PeriodicRunner(
      () => this.runOnce(),
      () => this.nextDelayMs,
      { log: failures, what: 'Scheduler pass', onError: () => (this.nextDelayMs = this.config.intervalMs) },
    );
  }

  /** One bounded pass; returns how many jobs were promoted. */
  async runOnce(): Promise<number> {
    let promoted = 0;
    for (let batch = 0; batch < this.config.maxBatchesPerPass; batch++) {
      const rows = await this.store.promoteScheduled(this.db, { limit: this.config.batchSize, channel: this.channel });
      const count = rows.reduce((sum, row) => sum + row.promoted, 0);
      promoted += count;
      if (count < this.config.batchSize) {
        const next = await this.store.nextScheduledInMs(this.db);
        // A job already due after a pass that promoted less than a batch is one that pass skipped:
        // another session holds its row. Waiting for it at full speed is a spin (over a thousand
        // passes a second); it is looked at again after a floor.
        const msLeft = next !== undefined ? Math.ceil(next) : this.config.intervalMs;
        this.nextDelayMs = Math.min(this.config.intervalMs, msLeft <= 0 ? LOCKED_DUE_ROW_RETRY_MS : msLeft);
        this.testSignals?.passRan.signal({ promoted });
        return promoted;
      }
    }
    this.nextDelayMs = 0; // the pass hit its bound with work left: continue right away
    this.testSignals?.passRan.signal({ promoted });
    return promoted;
  }

  /** A job was scheduled somewhere: recompute when the next one falls due. */
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
