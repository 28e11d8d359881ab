import type pg from 'pg';
import { integer, resolveSection, section, timerMs } from '../config.js';
import type { LogThrottle } from '../log-throttle.js';
import { PeriodicRunner } from './runner.js';
import type { MaintenanceService } from './service.js';
import type { Store } from '../store/index.js';

export interface FlowsConfig {
  /** Between passes over the waiting parents. */
  intervalMs: number;
  /** Parents settled per statement. */
  batchSize: number;
  /** Statements per pass: a pass walks the waiting parents in id order, at most this many batches. */
  maxBatchesPerPass: number;
}

export const FLOWS_DEFAULTS: FlowsConfig = { intervalMs: 5_000, batchSize: 500, maxBatchesPerPass: 20 };

export const FLOWS_OPTIONS = section<FlowsConfig>(
  'the flows pass',
  { intervalMs: timerMs(10), batchSize: integer(1, 100_000), maxBatchesPerPass: integer(1, 10_000) },
  FLOWS_DEFAULTS,
);

/**
 * Settles the flow parents that a worker could not: each child's worker settles its parent once
 * the child's completion (or death) has committed, but a process that died between the two, a
 * child the reaper moved to dead, and a child an operator discarded leave that to this pass. Safe
 * in every process at once (settleParents skips a parent another statement holds).
 */
export class FlowsPass implements MaintenanceService {
  readonly name = 'flows';
  readonly config: FlowsConfig;
  private readonly runner: PeriodicRunner;

  constructor(
    private readonly pool: pg.Pool,
    private readonly store: Store,
    private readonly channel: string,
    failures: LogThrottle,
    config?: Partial<FlowsConfig>,
  ) {
    this.config = resolveSection(FLOWS_OPTIONS, config, 'flows');
    this.runner = new PeriodicRunner(() => this.runOnce(), () => this.config.intervalMs, { log: failures, what: 'Flows pass' });
  }

  /** One bounded pass: how many parents it released (became pending) and failed (CHILD_DEAD). */
  async runOnce(): Promise<{ released: number; failed: number }> {
    let released = 0;
    let failed = 0;
    let after = '0';
    for (let batch = 0; batch < this.config.maxBatchesPerPass; batch++) {
      const ids = await this.store.waitingParents(this.pool, { after, limit: this.config.batchSize });
      if (ids.length === 0) break;
      const settled = await this.store.settleParents(this.pool, { ids, channel: this.channel });
      released += settled.released;
      failed += settled.failed;
      if (ids.length < this.config.batchSize) break;
      after = ids.at(-1)!;
    }
    return { released, failed };
  }

  /** A parent may be ready now (an operator resolved a child): pass at once. */
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
