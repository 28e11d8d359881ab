import { requireInteger, requireOneOf } from '../engine/config.js';
import { HEALTH_DEFAULTS, InvalidOptionError, PgQueue, REAPER_DEFAULTS, type BackoffOptions, type EngineLogger, type HandlerOptions } from '../engine/index.js';
import { isQueueName } from '../engine/identifiers.js';
import { MIGRATION_MODES } from '../engine/migrator.js';
import type { JobHandlerOptions, PgQueueHealthOptions, PgQueueModuleOptions } from '../interfaces/index.js';
import { HEALTH_TIMEOUT_DEFAULT_MS, SHUTDOWN_TIMEOUT_DEFAULT_MS } from '../pg-queue.constants.js';

/** What the module itself does with its options; everything else goes to the engine. */
export interface ModuleRuntimeConfig {
  readonly processing: boolean;
  readonly shutdownTimeoutMs: number;
  readonly reaperIntervalMs: number;
  readonly queues: readonly string[];
  /** The health indicator's thresholds, defaults applied. */
  readonly health: ResolvedHealthOptions;
}

export type ResolvedHealthOptions = Required<PgQueueHealthOptions>;

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
  health: true,
} satisfies Record<keyof PgQueueModuleOptions, true>;

/** Every handler option's name: `@JobHandler('q', { concurency: 5 })` fails the start instead of running with 10. */
const KNOWN_HANDLER_OPTIONS = {
  concurrency: true,
  prefetch: true,
  leaseMs: true,
  maxRuntimeMs: true,
  maxAttempts: true,
  unknownErrorAttempts: true,
  backoff: true,
  fairShare: true,
  abortMarginMs: true,
} satisfies Record<keyof JobHandlerOptions, true>;

const KNOWN_BACKOFF_OPTIONS = { baseMs: true, maxMs: true } satisfies Record<keyof BackoffOptions, true>;

const KNOWN_HEALTH_OPTIONS = { maxClaimableAgeMs: true, maxListenerDownMs: true, timeoutMs: true } satisfies Record<keyof PgQueueHealthOptions, true>;

/** The health indicator's defaults: the engine's thresholds, and the module's own timeout. */
export const HEALTH_OPTION_DEFAULTS: ResolvedHealthOptions = { ...HEALTH_DEFAULTS, timeoutMs: HEALTH_TIMEOUT_DEFAULT_MS };

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
  requireKnownNames('', options, KNOWN_OPTIONS, 'PgQueueModule');
  if (options.handlerDefaults !== undefined) checkHandlerOptionNames('handlerDefaults', options.handlerDefaults);
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
    health: resolveHealthOptions('health', options.health, HEALTH_OPTION_DEFAULTS),
  };
}

/**
 * Checks a handler's option names (the engine checks their values): a misspelt name is an error
 * naming where it is (`EmailJobs.send.concurency`), not a silent default.
 */
export function checkHandlerOptionNames(where: string, options: unknown): void {
  if (options === undefined) return;
  requireObject(where, options, 'handler options, e.g. { concurrency: 5 }');
  requireKnownNames(`${where}.`, options, KNOWN_HANDLER_OPTIONS, '@JobHandler');
  const { backoff } = options as JobHandlerOptions;
  if (backoff !== undefined) {
    requireObject(`${where}.backoff`, backoff, '{ baseMs, maxMs }');
    requireKnownNames(`${where}.backoff.`, backoff, KNOWN_BACKOFF_OPTIONS, 'backoff');
  }
}

/**
 * The health thresholds: `options` over `base`, field by field, each validated (named `where.field`).
 * Used for the module option and for a call's arguments alike.
 */
export function resolveHealthOptions(where: string, options: PgQueueHealthOptions | undefined, base: ResolvedHealthOptions): ResolvedHealthOptions {
  if (options === undefined) return base;
  requireObject(where, options, '{ maxClaimableAgeMs, maxListenerDownMs, timeoutMs }');
  requireKnownNames(`${where}.`, options, KNOWN_HEALTH_OPTIONS, 'the health check');
  const pick = (field: keyof PgQueueHealthOptions, min: number) => requireInteger(`${where}.${field}`, options[field] ?? base[field], min, TIMER_MAX_MS);
  return { maxClaimableAgeMs: pick('maxClaimableAgeMs', 0), maxListenerDownMs: pick('maxListenerDownMs', 0), timeoutMs: pick('timeoutMs', 1) };
}

function requireObject(option: string, value: unknown, expected: string): asserts value is object {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new InvalidOptionError(option, `${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value} is not an object`, `Pass ${expected}.`);
  }
}

function requireKnownNames(prefix: string, options: object, known: Record<string, true>, owner: string): void {
  for (const key of Object.keys(options)) {
    if (!Object.hasOwn(known, key)) {
      throw new InvalidOptionError(`${prefix}${key}`, `it is not an option of ${owner}`, `Remove it, or use one of: ${Object.keys(known).join(', ')}.`);
    }
  }
}

/** Builds the engine from validated options; the engine validates its own and throws the same way. */
export function createEngine(options: PgQueueModuleOptions, config: ModuleRuntimeConfig, logger: EngineLogger): PgQueue {
  const {
    reaperIntervalMs: _reaperIntervalMs,
    shutdownTimeoutMs: _shutdownTimeoutMs,
    processing: _processing,
    queues: _queues,
    health: _health,
    handlerDefaults,
    reaper,
    ...engineOptions
  } = options;
  return new PgQueue({
    ...engineOptions,
    handlerDefaults: toHandlerOptions(handlerDefaults),
    // The reaper runs every reaperIntervalMs on whichever timer runs it: the engine's own, or
    // (when the app imports ScheduleModule) the interval the orchestrator registers.
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
