import type pg from 'pg';
import { integer, resolveSection, section, timerMs } from '../config.js';
import type { LogThrottle } from '../log-throttle.js';
import type { EngineLogger } from '../logger.js';
import type { EngineMetrics } from '../metrics.js';
import { isTransientDatabaseError } from '../pg-errors.js';
import { PeriodicRunner } from './runner.js';
import type { FixedIntervalPass, MaintenanceService } from './service.js';
import type { ReapedJob, Store } from '../store/index.js';
import type { PassSignals } from '../test-signals.js';

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

export const REAPER_OPTIONS = section<ReaperConfig>(
  'the reaper',
  { intervalMs: timerMs(10), batchSize: integer(1, 100_000), maxBatchesPerPass: integer(1, 10_000) },
  REAPER_DEFAULTS,
);

export interface ReapResult {
  readonly reaped: number;
  readonly dead: number;
  readonly batches: number;
  /** Cancelled attempts whose lease ran out unconfirmed: ended, their keys let go. */
  readonly cancelsEnded: number;
}

/** What the reaper needs to hand ordering keys on (see endExpiredCancels). */
export interface ReaperKeys {
  readonly channel: string;
  readonly keysDeferred: () => void;
}

/** Rows set aside in memory at most; past it, a poisoned row is retried (and logged) every pass. */
const SET_ASIDE_MAX = 10_000;

/**
 * Recovers jobs whose lease expired: their worker crashed, hung, or lost its connection. Safe to
 * run in every process at once: each batch locks its rows with SKIP LOCKED, so reapers split the
 * work instead of waiting on each other, and all comparisons use the database's clock.
 *
 * One row never fails a pass. The expired leases a batch takes are the oldest, so a row that
 * makes the batch statement fail would be first in every later batch too, and every expired lease
 * of every queue would stay 'running' behind it. When a batch fails for a reason other than the
 * database being away, its rows are recovered one at a time; a row that fails alone is marked dead
 * (REAP_FAILED, visible and replayable), and one that cannot even be marked dead is set aside for
 * the life of the process and logged once.
 */
export class Reaper implements MaintenanceService {
  readonly name = 'reaper';
  readonly config: ReaperConfig;
  readonly fixedInterval: FixedIntervalPass;
  private readonly runner: PeriodicRunner;
  private readonly setAside = new Set<string>();
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: PassSignals<ReapResult> | undefined;

  constructor(
    private readonly db: pg.Pool,
    private readonly store: Store,
    private readonly metrics: EngineMetrics,
    private readonly logger: EngineLogger,
    failures: LogThrottle,
    config: Partial<ReaperConfig> | undefined,
    private readonly keys: ReaperKeys,
    private readonly onReaped: () => void = () => {},
  ) {
    this.config = resolveSection(REAPER_OPTIONS, config, 'reaper');
    this.runner = new PeriodicRunner(
      () => this.runOnce(),
      () => this.config.intervalMs,
      { log: failures, what: 'Reaper pass' },
    );
    this.fixedInterval = { label: 'Reaper', intervalMs: this.config.intervalMs, runOnce: () => this.runOnce() };
  }

  /** One bounded pass: batches until one comes back short or the pass's bound is reached. */
  async runOnce(): Promise<ReapResult> {
    let reaped = 0;
    let dead = 0;
    let batches = 0;
    while (batches < this.config.maxBatchesPerPass) {
      let rows: ReapedJob[];
      let full: boolean;
      try {
        rows = await this.store.reapExpired(this.db, { limit: this.config.batchSize, setAside: [...this.setAside], only: null });
        full = rows.length === this.config.batchSize;
      } catch (error) {
        if (isTransientDatabaseError(error)) throw error;
        this.logger.warn(`Reaper batch failed (${(error as Error).message}); recovering its expired leases one at a time.`);
        ({ rows, full } = await this.reapOneByOne());
      }
      batches += 1;
      for (const row of rows) {
        this.metrics.increment('lease_expired', { queue: row.queue, code: row.code });
        if (row.status === 'dead') this.metrics.increment('jobs_dead', { queue: row.queue, code: row.code, attempt: row.attempt });
        this.metrics.emit({ type: 'reaped', queue: row.queue, jobId: row.id, status: row.status, code: row.code });
        if (row.status === 'dead') dead += 1;
      }
      reaped += rows.length;
      if (!full) break;
    }
    const cancelsEnded = await this.endExpiredCancels();
    if (reaped > 0) {
      this.logger.log(`Reaper recovered ${reaped} expired lease(s) (${dead} dead).`);
      this.onReaped();
    }
    const result = { reaped, dead, batches, cancelsEnded };
    this.testSignals?.passRan.signal(result);
    return result;
  }

  /**
   * Cancelled jobs whose attempt may still have been running hold their ordering key until their
   * worker confirms the attempt ended; a worker that crashed never does, so once the lease has
   * run out (by the fence's own rule, the attempt is over) the reaper ends it. Bounded like the rest.
   */
  private async endExpiredCancels(): Promise<number> {
    let ended = 0;
    for (let batch = 0; batch < this.config.maxBatchesPerPass; batch++) {
      const batchEnded = (
        await this.store.releasingKeys(this.db, this.keys.channel, (db) => this.store.endExpiredCancels(db, { limit: this.config.batchSize }), this.keys.keysDeferred)
      ).ended;
      ended += batchEnded;
      if (batchEnded < this.config.batchSize) break;
    }
    return ended;
  }

  /** A batch's worth of expired leases, each in a statement of its own; `full` when a batch's worth was found. */
  private async reapOneByOne(): Promise<{ rows: ReapedJob[]; full: boolean }> {
    const candidates = await this.store.expiredLeaseIds(this.db, { limit: this.config.batchSize, setAside: [...this.setAside] });
    const rows: ReapedJob[] = [];
    for (const id of candidates) {
      let failure: unknown;
      try {
        rows.push(...(await this.store.reapExpired(this.db, { limit: 1, setAside: [], only: id })));
        continue;
      } catch (error) {
        if (isTransientDatabaseError(error)) throw error;
        failure = error;
      }
      const message = `the reaper could not recover the expired lease: ${String((failure as Error).message).slice(0, 900)}`;
      try {
        const marked = await this.store.reapAsDead(this.db, { id, message });
        rows.push(...marked);
        if (marked.length > 0) this.logger.error(`Reaper: job ${id} could not be recovered (${(failure as Error).message}); it is dead with code REAP_FAILED.`);
        continue;
      } catch (error) {
        if (isTransientDatabaseError(error)) throw error;
      }
      if (this.setAside.size < SET_ASIDE_MAX) this.setAside.add(id);
      this.logger.error(
        `Reaper: job ${id} could not be recovered nor marked dead (${(failure as Error).message}); this process leaves it alone until it restarts. Inspect the row.`,
      );
    }
    return { rows, full: candidates.length === this.config.batchSize };
  }

  start(): void {
    this.runner.start();
  }

  stop(): Promise<void> {
    return this.runner.stop();
  }
}
