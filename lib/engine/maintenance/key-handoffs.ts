import type pg from 'pg';
import { integer, resolveSection, section, timerMs } from '../config.js';
import type { LogThrottle } from '../log-throttle.js';
import { PeriodicRunner } from './runner.js';
import type { MaintenanceService } from './service.js';
import type { Store } from '../store/index.js';
import type { PassSignals } from '../test-signals.js';

export interface KeyHandoffsConfig {
  /** Longest time between passes; a statement that handed keys off triggers one at once. */
  intervalMs: number;
  /** Handoffs applied per statement. */
  batchSize: number;
  /** Statements per pass: a pass walks the handoffs in id order, at most this many batches. */
  maxBatchesPerPass: number;
  /** While keys are still held by producers, look again after this long. */
  retryMs: number;
}

export const KEY_HANDOFFS_DEFAULTS: KeyHandoffsConfig = { intervalMs: 5_000, batchSize: 500, maxBatchesPerPass: 20, retryMs: 100 };

export const KEY_HANDOFFS_OPTIONS = section<KeyHandoffsConfig>(
  'the key handoff pass',
  { intervalMs: timerMs(10), batchSize: integer(1, 100_000), maxBatchesPerPass: integer(1, 10_000), retryMs: timerMs(1) },
  KEY_HANDOFFS_DEFAULTS,
);

/**
 * Applies the key releases that statements finishing keyed jobs could not apply at once because a
 * producer held the key's row (see releaseKeys in store/finish.ts and key_handoffs in migration 0006): once
 * the row is free, the key's count goes down and its next job becomes the head, in the same
 * transaction. Durable (the handoff row was written with the job's new state), so a handoff left
 * by a process that crashed is applied by any other. Safe in every process at once (SKIP LOCKED).
 */
export class KeyHandoffs implements MaintenanceService {
  readonly name = 'keyHandoffs';
  readonly config: KeyHandoffsConfig;
  private readonly runner: PeriodicRunner;
  private nextDelayMs: number;
  /** Passes in a row that left handoffs waiting for their key's row. */
  private heldFor = 0;
  /** Passes in a row that failed (the database away): they back off like held keys do. */
  private failedFor = 0;
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: PassSignals<{ handed: number; waiting: number }> | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly store: Store,
    private readonly channel: string,
    failures: LogThrottle,
    config?: Partial<KeyHandoffsConfig>,
  ) {
    this.config = resolveSection(KEY_HANDOFFS_OPTIONS, config, 'keyHandoffs');
    this.nextDelayMs = this.config.intervalMs;
    this.runner = new PeriodicRunner(
      () => this.runOnce(),
      () => this.nextDelayMs,
      { log: failures, what: 'Key handoff pass', onError: () => this.passFailed() },
    );
  }

  /** When the next timed pass runs (a wake runs one at once). */
  get nextPassInMs(): number {
    return this.nextDelayMs;
  }

  /**
   * A pass failed: try again soon, doubling from retryMs up to intervalMs while they keep failing.
   * Retrying every retryMs (100 ms) through an outage was ten failed connects a second per process.
   */
  private passFailed(): void {
    this.nextDelayMs = this.failedFor === 0 ? this.config.retryMs : Math.min(this.config.intervalMs, this.nextDelayMs * 2);
    this.failedFor += 1;
  }

  /** One bounded pass; returns how many handoffs it applied and how many wait for their key's row. */
  async runOnce(): Promise<{ handed: number; waiting: number }> {
    let handed = 0;
    let waiting = 0;
    let after = '0';
    for (let batch = 0; batch < this.config.maxBatchesPerPass; batch++) {
      const pass = await this.store.releasingKeys(this.pool, this.channel, (db) => this.store.handOffKeys(db, { limit: this.config.batchSize, afterId: after }));
      handed += pass.handed;
      waiting += pass.pending - pass.handed;
      if (pass.pending < this.config.batchSize || !pass.lastId) break;
      after = pass.lastId;
    }
    // A producer still holds some keys: look again soon (retryMs, doubling while they stay held),
    // not at the idle interval.
    this.nextDelayMs = waiting > 0 ? Math.min(this.config.intervalMs, this.heldFor === 0 ? this.config.retryMs : this.nextDelayMs * 2) : this.config.intervalMs;
    this.heldFor = waiting > 0 ? this.heldFor + 1 : 0;
    this.failedFor = 0;
    const result = { handed, waiting };
    this.testSignals?.passRan.signal(result);
    return result;
  }

  /** A statement just handed some keys off. */
  wake(): void {
    this.heldFor = 0;
    this.runner.trigger();
  }

  start(): void {
    this.runner.start();
  }

  stop(): Promise<void> {
    return this.runner.stop();
  }
}
