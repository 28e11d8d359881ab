import type pg from 'pg';
import type { KeyHandoffs } from './maintenance/key-handoffs.js';
import type { Pruner } from './maintenance/pruner.js';
import type { Reaper } from './maintenance/reaper.js';
import type { Scheduler } from './maintenance/scheduler.js';
import type { Ticker } from './maintenance/ticker.js';
import type { EngineMetrics } from './metrics.js';
import type { Notifier } from './notifier.js';
import type { Worker } from './worker.js';

/**
 * The engine's services, for the engine's own tests (a listener to disconnect, a pass to
 * replace, a config to read). Not part of the API: the package exports neither this file nor
 * the symbol, and nothing under lib/ outside the engine uses it.
 */
export const ENGINE_INTERNALS = Symbol('pg-queue:engine-internals');

export interface EngineInternals {
  readonly pool: pg.Pool;
  readonly metrics: EngineMetrics;
  readonly notifier: Notifier;
  readonly reaper: Reaper;
  readonly scheduler: Scheduler;
  readonly pruner: Pruner | undefined;
  readonly keyHandoffs: KeyHandoffs;
  readonly ticker: Ticker | undefined;
  worker(queue: string): Worker | undefined;
}

/** `engineInternals(q).notifier.listening`: the services of a PgQueue, for tests. */
export function engineInternals(engine: { [ENGINE_INTERNALS](): EngineInternals }): EngineInternals {
  return engine[ENGINE_INTERNALS]();
}
