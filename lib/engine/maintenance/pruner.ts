import { integer, resolveSection, section, timerMs } from '../config.js';
import type { Queryable } from '../db.js';
import type { LogThrottle } from '../log-throttle.js';
import type { EngineLogger } from '../logger.js';
import { PeriodicRunner } from './runner.js';
import type { FixedIntervalPass, MaintenanceService } from './service.js';
import type { Store } from '../store/index.js';
import type { PassSignals } from '../test-signals.js';

export interface PrunerConfig {
  /** Succeeded jobs are deleted this long after they finished. */
  retentionMs: number;
  intervalMs: number;
  /** Rows deleted per statement. */
  batchSize: number;
  /** Batches per pass: retention catches up over several passes instead of one long burst. */
  maxBatchesPerPass: number;
}

export const PRUNER_DEFAULTS: PrunerConfig = {
  retentionMs: 7 * 24 * 3_600_000,
  intervalMs: 60_000,
  batchSize: 1_000,
  maxBatchesPerPass: 10,
};

export const PRUNER_OPTIONS = section<PrunerConfig>(
  'the pruner',
  { retentionMs: integer(0), intervalMs: timerMs(10), batchSize: integer(1, 100_000), maxBatchesPerPass: integer(1, 10_000) },
  PRUNER_DEFAULTS,
);

/**
 * Retention of succeeded jobs, in bounded batches. It deletes nothing else: dead jobs are an
 * operational state that only an operator's explicit purge removes (and records), and pending,
 * scheduled and running jobs are work. Safe in many processes at once (SKIP LOCKED).
 */
export class Pruner implements MaintenanceService {
  readonly name = 'pruner';
  readonly config: PrunerConfig;
  readonly fixedInterval: FixedIntervalPass;
  private readonly runner: PeriodicRunner;
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: PassSignals<{ removed: number }> | undefined;

  constructor(
    private readonly db: Queryable,
    private readonly store: Store,
    private readonly logger: EngineLogger,
    failures: LogThrottle,
    config?: Partial<PrunerConfig>,
  ) {
    this.config = resolveSection(PRUNER_OPTIONS, config, 'pruner');
    this.runner = new PeriodicRunner(
      () => this.runOnce(),
      () => this.config.intervalMs,
      { log: failures, what: 'Pruner pass' },
    );
    this.fixedInterval = { label: 'Pruner', intervalMs: this.config.intervalMs, runOnce: () => this.runOnce() };
  }

  /** One bounded pass; returns how many succeeded jobs it deleted. */
  async runOnce(): Promise<number> {
    let removed = 0;
    for (let batch = 0; batch < this.config.maxBatchesPerPass; batch++) {
      const pruned = await this.store.pruneSucceeded(this.db, { retentionMs: this.config.retentionMs, limit: this.config.batchSize });
      removed += pruned.removed;
      // A batch of each table per statement (jobs and jobs_succeeded): more may be left while either was full.
      if (pruned.largestBatch < this.config.batchSize) break;
    }
    if (removed > 0) this.logger.log(`Pruner deleted ${removed} succeeded job(s) past retention.`);
    this.testSignals?.passRan.signal({ removed });
    return removed;
  }

  start(): void {
    this.runner.start();
  }

  stop(): Promise<void> {
    return this.runner.stop();
  }
}
