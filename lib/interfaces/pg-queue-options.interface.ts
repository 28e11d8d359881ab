import type pg from 'pg';
import type { BackoffOptions, HandlerOptions, HealthThresholds, JobDefinition, PgQueueOptions, Upcasters } from '../engine/index.js';

/**
 * Options of one `@JobHandler(queue, options)`, and of `handlerDefaults`. Every field is optional:
 * a handler's value wins over `handlerDefaults`, which wins over the engine's `HANDLER_DEFAULTS`.
 * Among them `fairShare` (0 to 1, default 0.1): the share of each claim taken oldest-first whatever
 * the priority, so a flood of high-priority work cannot starve the rest (0 = strict priority).
 * A misspelt option name fails the start, naming the method.
 *
 * @publicApi
 */
export interface JobHandlerOptions extends Partial<Omit<HandlerOptions, 'backoff'>> {
  /** Retry delays: full jitter up to `baseMs * 2^(attempt-1)`, never more than `maxMs`. */
  backoff?: Partial<BackoffOptions>;
  /**
   * With a job definition only: `{ [fromVersion]: (payload) => payload of the next version }`, so
   * jobs enqueued with an older shape still run after a deploy that changes it.
   */
  upcast?: Upcasters;
}

/**
 * Options of `PgQueueModule.forRoot()` (and what a `forRootAsync()` factory returns): the engine's
 * options (`PgQueueOptions` of `nestjs-pg-queue/engine`, the same names, defaults and checks; the
 * module passes Nest's logger) and the module's own below. They are validated when the
 * application starts; an invalid value, or a name that is not an option at any depth, fails the
 * start with an `InvalidOptionError` that names the option and says how to fix it.
 *
 * Among the engine's: `connectionString` or `pool` (exactly one), `poolSize` (10),
 * `listenConnectionString` (a direct connection for LISTEN behind a transaction pooler), `schema`
 * ("pgqueue"), `workerId`, `migrations` ("auto"), `pollIntervalMs` (2000), `statementTimeoutMs`
 * (10000), `maxPayloadBytes`, `maxFreeReleases` (3), and the sections `reaper` (`intervalMs`
 * 5000, batch bounds), `scheduler`, `pruner` (or `false`), `notifier`, `completer`, `keyHandoffs`.
 *
 * @publicApi
 */
export interface PgQueueModuleOptions extends Omit<PgQueueOptions, 'logger' | 'handlerDefaults'> {
  /** Defaults for every `@JobHandler` of this process; each handler may override them. */
  handlerDefaults?: JobHandlerOptions;
  /**
   * At shutdown, running handlers get this long to finish; then their signals abort and their jobs
   * are released to `pending` (fenced, attempt given back). Default 10000.
   */
  shutdownTimeoutMs?: number;
  /**
   * `false`: an API-only process. It enqueues and reads jobs but runs no handlers (no claims). The
   * reaper and the scheduler still run: both are bounded, safe in any number of processes, and
   * keep expired leases and due delayed jobs moving even while every worker process is down.
   * Default true.
   */
  processing?: boolean;
  /**
   * `false`: the workers do not start with the application; call `QueueService.startProcessing()`
   * when they should (after a warm-up, a leader election, a feature flag) and `stopProcessing()`
   * to stop them again. Default true. Has no effect with `processing: false`.
   */
  autoStart?: boolean;
  /**
   * Queues this process enqueues to without handling them (declared at start). A queue that has
   * a handler in this process is declared anyway.
   */
  queues?: readonly string[];
  /**
   * Thresholds of `PgQueueHealthIndicator` (defaults: down when an unpaused queue's oldest
   * claimable job has waited more than 5 minutes, or the LISTEN connection has been down more
   * than 1 minute, or the database has not answered within 5 s). A call's arguments override them.
   */
  health?: PgQueueHealthOptions;
  /** `PgQueueMetricsService` (default: a scrape waits at most 5 s for the database). A call's argument overrides it. */
  metrics?: PgQueueMetricsOptions;
  /**
   * @deprecated Use `reaper: { intervalMs }` (the engine's name). Still accepted, with a warning,
   * until the next minor version.
   */
  reaperIntervalMs?: number;
}

/**
 * Thresholds of `PgQueueHealthIndicator` (module option `health`, or per call). The check is by
 * age, not by counts: a small queue whose oldest job does not move is broken, a large one that
 * drains is not.
 *
 * @publicApi
 */
export interface PgQueueHealthOptions extends HealthThresholds {
  /**
   * Down when the database has not answered the check within this long (default 5000 ms): a
   * health endpoint must answer even when the database does not.
   */
  timeoutMs?: number;
}

/**
 * Options of `PgQueueMetricsService.prometheus()` (module option `metrics`, or per call).
 *
 * @publicApi
 */
export interface PgQueueMetricsOptions {
  /**
   * How long a scrape waits for the database's snapshot (default 5000 ms, under Prometheus's
   * default scrape timeout of 10 s). Past it, or when the database fails, the scrape answers
   * without the database's gauges and with `pgqueue_database_up 0`.
   */
  timeoutMs?: number;
}

/**
 * What `forRootAsync({ useClass })` / `forRootAsync({ useExisting })` expect.
 *
 * @publicApi
 */
export interface PgQueueOptionsFactory {
  createPgQueueOptions(): PgQueueModuleOptions | Promise<PgQueueModuleOptions>;
}

/** What `@JobHandler()` stores on a method. */
export interface JobHandlerMetadata {
  readonly queue: string;
  /** The job definition the handler was declared with, if any. */
  readonly definition: JobDefinition | undefined;
  readonly options: JobHandlerOptions;
}
