import type pg from 'pg';
import type { BackoffOptions, HandlerOptions, HealthThresholds, MigrationMode, PrunerConfig, ReaperConfig, SchedulerConfig } from '../engine/index.js';

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
}

/**
 * Options of `PgQueueModule.forRoot()` (and what a `forRootAsync()` factory returns). They are
 * validated when the application starts; an invalid value fails the start with an
 * `InvalidOptionError` that names the option and says how to fix it.
 *
 * @publicApi
 */
export interface PgQueueModuleOptions {
  /** Where the queue's tables live. Give exactly one of `connectionString` or `pool`. */
  connectionString?: string;
  /**
   * An existing pool: the queue uses it and never closes it (closing it is the owner's job, after
   * the application has shut down). A pool created from `connectionString` is closed at shutdown.
   */
  pool?: pg.Pool;
  /** Size of the pool created from `connectionString` (default 10). */
  poolSize?: number;
  /**
   * A direct (not transaction-pooled) connection string for the one LISTEN connection of the
   * process, when `connectionString` goes through PgBouncer in transaction mode.
   */
  listenConnectionString?: string;
  /** Schema of the queue's tables (default "pgqueue"). */
  schema?: string;
  /** This process's identity in `lease_owner` (default `host:pid:random`). Must be unique per process. */
  workerId?: string;
  /** `auto` (default) applies pending migrations at start, `verify` only checks them, `off` skips both. */
  migrations?: MigrationMode;
  /** Defaults for every `@JobHandler` of this process; each handler may override them. */
  handlerDefaults?: JobHandlerOptions;
  /** Each worker claims again this often without a wake-up (NOTIFY is only an optimisation). Default 2000. */
  pollIntervalMs?: number;
  /**
   * The reaper's pass (recovery of expired leases) runs this often: from the app's
   * `SchedulerRegistry` when it imports `ScheduleModule`, else on the engine's own timer. Default 5000.
   */
  reaperIntervalMs?: number;
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
   * Queues this process enqueues to without handling them (declared at start). A queue that has
   * a handler in this process is declared anyway.
   */
  queues?: readonly string[];
  /** The largest payload `enqueue` accepts, in bytes of JSON (default 256 KiB). */
  maxPayloadBytes?: number;
  /** Shutdown releases that give a job's attempt back before they start to count (default 3). */
  maxFreeReleases?: number;
  /** The reaper's batch bounds (its interval is `reaperIntervalMs`). */
  reaper?: Partial<Omit<ReaperConfig, 'intervalMs'>>;
  /** The scheduler that promotes due delayed jobs and retries. */
  scheduler?: Partial<SchedulerConfig>;
  /**
   * Retention of succeeded jobs (default: deleted 7 days after they finished, checked every
   * minute, run like the reaper); `false` keeps them forever. Dead jobs are never pruned.
   */
  pruner?: Partial<PrunerConfig> | false;
  /**
   * Thresholds of `PgQueueHealthIndicator` (defaults: down when an unpaused queue's oldest
   * claimable job has waited more than 5 minutes, or the LISTEN connection has been down more
   * than 1 minute, or the database has not answered within 5 s). A call's arguments override them.
   */
  health?: PgQueueHealthOptions;
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
  readonly options: JobHandlerOptions;
}
