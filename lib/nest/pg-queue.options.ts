import {
  boolean,
  ENGINE_OPTIONS,
  HEALTH_DEFAULTS,
  InvalidOptionError,
  isQueueName,
  nested,
  opaque,
  PgQueue,
  PROMETHEUS_TIMEOUT_DEFAULT_MS,
  resolveSection,
  section,
  timerMs,
  type EngineLogger,
  type HandlerOptions,
  type PgQueueOptions,
  type Section,
  type Warn,
} from '../engine/index.js';
import type { JobHandlerOptions, PgQueueHealthOptions, PgQueueMetricsOptions, PgQueueModuleOptions } from '../interfaces/index.js';
import { HEALTH_TIMEOUT_DEFAULT_MS, SHUTDOWN_TIMEOUT_DEFAULT_MS } from '../pg-queue.constants.js';

/** What the module itself does with its options, and what it hands to the engine. */
export interface ModuleRuntimeConfig {
  readonly processing: boolean;
  /** Start the workers at bootstrap (false: `QueueService.startProcessing()` does). */
  readonly autoStart: boolean;
  readonly shutdownTimeoutMs: number;
  readonly queues: readonly string[];
  /** The health indicator's thresholds, defaults applied. */
  readonly health: ResolvedHealthOptions;
  /** The metrics service's options, defaults applied. */
  readonly metrics: ResolvedMetricsOptions;
  /** The engine's options, validated (the Nest logger is added when the engine is built). */
  readonly engine: Omit<PgQueueOptions, 'logger'>;
}

export type ResolvedHealthOptions = Required<PgQueueHealthOptions>;
export type ResolvedMetricsOptions = Required<PgQueueMetricsOptions>;

/** The health indicator's defaults: the engine's thresholds, and the module's own timeout. */
export const HEALTH_OPTION_DEFAULTS: ResolvedHealthOptions = { ...HEALTH_DEFAULTS, timeoutMs: HEALTH_TIMEOUT_DEFAULT_MS };

const HEALTH_OPTIONS = section<PgQueueHealthOptions>(
  'the health check',
  { maxClaimableAgeMs: timerMs(0), maxListenerDownMs: timerMs(0), maxScheduleLateMs: timerMs(0), timeoutMs: timerMs(1) },
  HEALTH_OPTION_DEFAULTS,
);

const METRICS_OPTIONS = section<PgQueueMetricsOptions>('the metrics scrape', { timeoutMs: timerMs(1) }, { timeoutMs: PROMETHEUS_TIMEOUT_DEFAULT_MS });

/** Options only the module has; they never reach the engine. */
const MODULE_ONLY = ['shutdownTimeoutMs', 'processing', 'autoStart', 'queues', 'health', 'metrics'] as const;

/**
 * The module's options: the engine's (one section, the engine's own: the same names, bounds,
 * defaults and messages in both layers) but its logger (the module passes Nest's), plus the
 * module's own. `reaperIntervalMs` is the old name of `reaper.intervalMs`.
 */
const { logger: _logger, ...engineFields } = ENGINE_OPTIONS.fields;
const MODULE_OPTIONS = section<Omit<PgQueueModuleOptions, 'reaperIntervalMs'>>(
  'PgQueueModule',
  {
    ...engineFields,
    shutdownTimeoutMs: timerMs(0),
    processing: boolean(),
    autoStart: boolean(),
    queues: opaque('array'),
    health: nested(HEALTH_OPTIONS),
    metrics: nested(METRICS_OPTIONS),
  } satisfies Section<Omit<PgQueueModuleOptions, 'reaperIntervalMs'>>['fields'],
  { ...ENGINE_OPTIONS.defaults, shutdownTimeoutMs: SHUTDOWN_TIMEOUT_DEFAULT_MS, processing: true, autoStart: true },
  { reaperIntervalMs: { use: 'reaper.intervalMs', moveTo: 'reaper.intervalMs' } },
);

/**
 * Validates every option (the engine's with the engine's own section, nested ones included) and
 * applies the defaults, in one place, when the application is created: before any connection is
 * opened, a bad option fails the start with a message naming it.
 */
export function resolveModuleConfig(options: PgQueueModuleOptions | undefined | null, warn: Warn): ModuleRuntimeConfig {
  if (options === null || typeof options !== 'object') {
    throw new InvalidOptionError(
      'options',
      `PgQueueModule got ${options === null ? 'null' : typeof options} instead of an options object`,
      'Pass forRoot({ connectionString }) or return { connectionString } (or { pool }) from the forRootAsync factory.',
    );
  }
  const resolved = resolveSection(MODULE_OPTIONS, options, '', warn) as PgQueueModuleOptions & Required<Pick<PgQueueModuleOptions, 'shutdownTimeoutMs' | 'processing' | 'autoStart'>>;
  const queues = resolved.queues ?? [];
  for (const [index, queue] of queues.entries()) {
    if (!isQueueName(queue)) {
      throw new InvalidOptionError(
        `queues[${index}]`,
        `${JSON.stringify(String(queue).slice(0, 80))} is not a valid queue name`,
        'Use 1-128 characters: letters, digits, "_", ".", ":" or "-", starting with a letter or digit.',
      );
    }
  }
  const engine: Record<string, unknown> = { ...resolved };
  for (const name of MODULE_ONLY) delete engine[name];
  delete engine.reaperIntervalMs;
  return {
    processing: resolved.processing,
    autoStart: resolved.autoStart,
    shutdownTimeoutMs: resolved.shutdownTimeoutMs,
    queues: [...new Set(queues)],
    health: resolved.health as ResolvedHealthOptions,
    metrics: resolved.metrics as ResolvedMetricsOptions,
    engine: engine as Omit<PgQueueOptions, 'logger'>,
  };
}

/**
 * The health thresholds: `options` over `base`, field by field, each validated (named `where.field`).
 * Used for the module option and for a call's arguments alike.
 */
export function resolveHealthOptions(where: string, options: PgQueueHealthOptions | undefined, base: ResolvedHealthOptions): ResolvedHealthOptions {
  if (options === undefined) return base;
  return resolveSection({ ...HEALTH_OPTIONS, defaults: base }, options, where) as ResolvedHealthOptions;
}

/** The metrics options of a call over the module's, validated like the health thresholds. */
export function resolveMetricsOptions(where: string, options: PgQueueMetricsOptions | undefined, base: ResolvedMetricsOptions): ResolvedMetricsOptions {
  if (options === undefined) return base;
  return resolveSection({ ...METRICS_OPTIONS, defaults: base }, options, where) as ResolvedMetricsOptions;
}

/** Builds the engine from the validated options, with Nest's logger. */
export function createEngine(config: ModuleRuntimeConfig, logger: EngineLogger): PgQueue {
  return new PgQueue({ ...config.engine, logger });
}

/**
 * `JobHandlerOptions` allows a partial `backoff`; the engine's resolver merges it field by field
 * with the base, so the cast only widens the declared type, not what happens.
 */
export function toHandlerOptions(options: JobHandlerOptions | undefined): Partial<HandlerOptions> | undefined {
  return options as Partial<HandlerOptions> | undefined;
}
