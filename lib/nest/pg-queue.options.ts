import { requireInteger, requireOneOf } from '../engine/config.js';
import { InvalidOptionError, PgQueue, REAPER_DEFAULTS, type EngineLogger, type HandlerOptions } from '../engine/index.js';
import { isQueueName } from '../engine/identifiers.js';
import { MIGRATION_MODES } from '../engine/migrator.js';
import type { JobHandlerOptions, PgQueueModuleOptions } from '../interfaces/index.js';
import { SHUTDOWN_TIMEOUT_DEFAULT_MS } from '../pg-queue.constants.js';

/** What the module itself does with its options; everything else goes to the engine. */
export interface ModuleRuntimeConfig {
  readonly processing: boolean;
  readonly shutdownTimeoutMs: number;
  readonly reaperIntervalMs: number;
  readonly queues: readonly string[];
}

/** Every option's name, so a misspelt one is an error at start instead of a silent default. */
const KNOWN_OPTIONS = {
  connectionString: true,
  pool: true,
  poolSize: true,
  listenConnectionString: true,
  schema: true,
  workerId: true,
  migrations: true,
  handlerDefaults: true,
  pollIntervalMs: true,
  reaperIntervalMs: true,
  shutdownTimeoutMs: true,
  processing: true,
  queues: true,
  maxPayloadBytes: true,
  maxFreeReleases: true,
  reaper: true,
  scheduler: true,
  pruner: true,
} satisfies Record<keyof PgQueueModuleOptions, true>;

/** setInterval/setTimeout take at most 2^31-1 ms; longer values fire at once. */
const TIMER_MAX_MS = 2_147_483_647;

/**
 * Validates the module's own options (the engine validates the rest when it is constructed, with
 * the same error class and style) and applies their defaults, in one place.
 */
export function resolveModuleConfig(options: PgQueueModuleOptions | undefined | null): ModuleRuntimeConfig {
  if (options === null || typeof options !== 'object') {
    throw new InvalidOptionError(
      'options',
      `PgQueueModule got ${options === null ? 'null' : typeof options} instead of an options object`,
      'Pass forRoot({ connectionString }) or return { connectionString } (or { pool }) from the forRootAsync factory.',
    );
  }
  for (const key of Object.keys(options)) {
    if (!Object.hasOwn(KNOWN_OPTIONS, key)) {
      throw new InvalidOptionError(key, 'it is not an option of PgQueueModule', `Remove it, or use one of: ${Object.keys(KNOWN_OPTIONS).join(', ')}.`);
    }
  }
  if (options.migrations !== undefined) requireOneOf('migrations', options.migrations, MIGRATION_MODES);
  if (options.processing !== undefined && typeof options.processing !== 'boolean') {
    throw new InvalidOptionError('processing', `${typeof options.processing} is not a boolean`, 'Set "processing" to true (run handlers) or false (enqueue only).');
  }
  const queues = options.queues ?? [];
  if (!Array.isArray(queues)) {
    throw new InvalidOptionError('queues', `${typeof queues} is not an array`, 'Set "queues" to an array of queue names, e.g. ["emails"].');
  }
  for (const [index, queue] of queues.entries()) {
    if (!isQueueName(queue)) {
      throw new InvalidOptionError(
        `queues[${index}]`,
        `${JSON.stringify(String(queue).slice(0, 80))} is not a valid queue name`,
        'Use 1-128 characters: letters, digits, "_", ".", ":" or "-", starting with a letter or digit.',
      );
    }
  }
  return {
    processing: options.processing ?? true,
    shutdownTimeoutMs: requireInteger('shutdownTimeoutMs', options.shutdownTimeoutMs ?? SHUTDOWN_TIMEOUT_DEFAULT_MS, 0, TIMER_MAX_MS),
    reaperIntervalMs: requireInteger('reaperIntervalMs', options.reaperIntervalMs ?? REAPER_DEFAULTS.intervalMs, 10, TIMER_MAX_MS),
    queues: [...new Set(queues)],
  };
}

/** Builds the engine from validated options; the engine validates its own and throws the same way. */
export function createEngine(options: PgQueueModuleOptions, config: ModuleRuntimeConfig, logger: EngineLogger): PgQueue {
  const {
    reaperIntervalMs: _reaperIntervalMs,
    shutdownTimeoutMs: _shutdownTimeoutMs,
    processing: _processing,
    queues: _queues,
    handlerDefaults,
    reaper,
    ...engineOptions
  } = options;
  return new PgQueue({
    ...engineOptions,
    handlerDefaults: toHandlerOptions(handlerDefaults),
    // The engine's own reaper timer stays off under Nest (SchedulerRegistry runs the pass); the
    // interval is set anyway so the engine's view of its reaper matches what actually runs.
    reaper: { ...reaper, intervalMs: config.reaperIntervalMs },
    logger,
  });
}

/**
 * `JobHandlerOptions` allows a partial `backoff`; the engine's resolver merges it field by field
 * with the base, so the cast only widens the declared type, not what happens.
 */
export function toHandlerOptions(options: JobHandlerOptions | undefined): Partial<HandlerOptions> | undefined {
  return options as Partial<HandlerOptions> | undefined;
}
