import { integer, resolveSection, section, timerMs } from '../config.js';
import { run, type Queryable } from '../db.js';
import type { LogThrottle } from '../log-throttle.js';
import type { EngineLogger } from '../logger.js';
import { PeriodicRunner } from './runner.js';
import type { FixedIntervalPass, MaintenanceService } from './service.js';
import type { Queries } from '../sql.js';

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

  constructor(
    private readonly db: Queryable,
    private readonly queries: Queries,
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
      const [row] = await run<{ removed: number }>(this.db, this.queries.pruneSucceeded, [this.config.retentionMs, this.config.batchSize]);
      removed += row?.removed ?? 0;
      if ((row?.removed ?? 0) < this.config.batchSize) break;
    }
    if (removed > 0) this.logger.log(`Pruner deleted ${removed} succeeded job(s) past retention.`);
    return removed;
  }

  start(): void {
    this.runner.start();
  }

  stop(): Promise<void> {
    return this.runner.stop();
  }
}
