import { requireInteger, withDefaults } from './config.js';
import { run, type Queryable } from './db.js';
import type { EngineLogger } from './logger.js';
import type { EngineMetrics } from './metrics.js';
import { PeriodicRunner } from './service.js';
import type { Queries } from './sql.js';

export interface ReaperConfig {
  /** Time between passes when the reaper runs its own timer. */
  intervalMs: number;
  /** Expired leases recovered per statement: each batch is one short transaction. */
  batchSize: number;
  /**
   * Batches per pass. A pass is bounded so that after a mass crash the reaper works through the
   * backlog over several passes instead of one long burst that competes with live claims.
   */
  maxBatchesPerPass: number;
}

export const REAPER_DEFAULTS: ReaperConfig = { intervalMs: 5_000, batchSize: 500, maxBatchesPerPass: 20 };

export interface ReapResult {
  readonly reaped: number;
  readonly dead: number;
  readonly batches: number;
}

/**
 * Recovers jobs whose lease expired: their worker crashed, hung, or lost its connection. Safe to
 * run in every process at once: each batch locks its rows with SKIP LOCKED, so reapers split the
 * work instead of waiting on each other, and all comparisons use the database's clock.
 */
export class Reaper {
  readonly config: ReaperConfig;
  private readonly runner: PeriodicRunner;

  constructor(
    private readonly db: Queryable,
    private readonly queries: Queries,
    private readonly metrics: EngineMetrics,
    private readonly logger: EngineLogger,
    config?: Partial<ReaperConfig>,
    private readonly onReaped: () => void = () => {},
  ) {
    this.config = withDefaults(REAPER_DEFAULTS, config);
    requireInteger('reaper.intervalMs', this.config.intervalMs, 10);
    requireInteger('reaper.batchSize', this.config.batchSize, 1, 100_000);
    requireInteger('reaper.maxBatchesPerPass', this.config.maxBatchesPerPass, 1, 10_000);
    this.runner = new PeriodicRunner(
      () => this.runOnce(),
      () => this.config.intervalMs,
      (error) => this.logger.error(`Reaper pass failed: ${(error as Error).message}`),
    );
  }

  /** One bounded pass: batches until one comes back short or the pass's bound is reached. */
  async runOnce(): Promise<ReapResult> {
    let reaped = 0;
    let dead = 0;
    let batches = 0;
    while (batches < this.config.maxBatchesPerPass) {
      const rows = await run<{ id: string; queue_name: string; status: string; last_error_code: string; attempt_count: number }>(
        this.db,
        this.queries.reapExpired,
        [this.config.batchSize],
      );
      batches += 1;
      for (const row of rows) {
        this.metrics.increment('lease_expired', { queue: row.queue_name, code: row.last_error_code });
        if (row.status === 'dead') this.metrics.increment('jobs_dead', { queue: row.queue_name, code: row.last_error_code, attempt: row.attempt_count });
        this.metrics.emit({ type: 'reaped', queue: row.queue_name, jobId: row.id, status: row.status, code: row.last_error_code });
        if (row.status === 'dead') dead += 1;
      }
      reaped += rows.length;
      if (rows.length < this.config.batchSize) break;
    }
    if (reaped > 0) {
      this.logger.log(`Reaper recovered ${reaped} expired lease(s) (${dead} dead).`);
      this.onReaped();
    }
    return { reaped, dead, batches };
  }

  start(): void {
    this.runner.start();
  }

  stop(): Promise<void> {
    return this.runner.stop();
  }
}
