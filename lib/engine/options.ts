import { CLUSTER_EVENTS_OPTIONS, type ClusterEventsConfig } from './cluster-events.js';
import { COMPLETER_OPTIONS, type CompleterConfig } from './completer.js';
import { boolean, integer, nested, oneOf, opaque, section, string, TIMER_MAX_MS, timerMs } from './config.js';
import { DEFAULT_SCHEMA } from './identifiers.js';
import { KEY_HANDOFFS_OPTIONS, type KeyHandoffsConfig } from './maintenance/key-handoffs.js';
import { FLOWS_OPTIONS, type FlowsConfig } from './maintenance/flows.js';
import { FAILURE_LOG_INTERVAL_MS } from './log-throttle.js';
import { MIGRATION_MODE_DEFAULT, MIGRATION_MODES } from './migrator.js';
import { NOTIFIER_OPTIONS, type NotifierConfig } from './notifier.js';
import type pg from 'pg';
import type { EngineLogger } from './logger.js';
import type { MigrationMode } from './migrator.js';
import { MAX_PAYLOAD_BYTES_DEFAULT } from './json.js';
import { PRUNER_OPTIONS, type PrunerConfig } from './maintenance/pruner.js';
import { REAPER_OPTIONS, type ReaperConfig } from './maintenance/reaper.js';
import { SCHEDULER_OPTIONS, type SchedulerConfig } from './maintenance/scheduler.js';
import { TICKER_OPTIONS, type TickerConfig } from './maintenance/ticker.js';
import { CLIENT_TIMEOUT_SLACK_MS, STATEMENT_TIMEOUT_DEFAULT_MS } from './store/statement.js';
import type { HandlerOptions } from './types.js';
import { HANDLER_OPTIONS } from './worker.js';

export interface PgQueueOptions {
  /** Where the queue's tables live. Give one of `connectionString` or `pool`. */
  connectionString?: string;
  /** An existing pool: the queue uses it and never closes it. */
  pool?: pg.Pool;
  /** Size of the pool the queue creates from `connectionString`. */
  poolSize?: number;
  /**
   * A direct (not transaction-pooled) connection string for the one LISTEN connection, when the
   * main one goes through PgBouncer in transaction mode. Defaults to the main connection. A
   * listener that LISTENs but never hears its probe (as through a transaction pooler) is reported
   * down, with a warning that names this option.
   */
  listenConnectionString?: string;
  /**
   * Prepare each statement once per connection, by name (default), or send every statement
   * unnamed (`false`), planned on each call. Set false when the main connection goes through
   * PgBouncer (or another pooler) in transaction mode: there consecutive statements of one client
   * run on different server connections, and a name prepared on one is unknown on the next.
   * A statement refused for its name while this is true is told once, with a warning naming it.
   */
  preparedStatements?: boolean;
  schema?: string;
  /** This process's identity in `lease_owner`; default `host:pid:random`. Must be unique per process. */
  workerId?: string;
  migrations?: MigrationMode;
  /** Defaults for every handler in this process; each handler may override them. */
  handlerDefaults?: Partial<HandlerOptions>;
  /** Claim again this often without a wake-up (NOTIFY is only an optimisation). */
  pollIntervalMs?: number;
  /** Wake-ups right after a claim that drained the queue share one claim within this window. */
  wakeCooldownMs?: number;
  maxPayloadBytes?: number;
  /** Shutdown releases that give a job's attempt back before they start to count. */
  maxFreeReleases?: number;
  reaper?: Partial<ReaperConfig>;
  scheduler?: Partial<SchedulerConfig>;
  /** Retention of succeeded jobs; `false` keeps them forever. */
  pruner?: Partial<PrunerConfig> | false;
  /**
   * The pass that runs recurring schedules (docs/recurring-jobs.md); `false`: this process runs
   * no ticks (the others do; a schedule is late only when no process runs one).
   */
  ticker?: Partial<TickerConfig> | false;
  /** The LISTEN connection's reconnect backoff and its probe (see NOTIFIER_DEFAULTS). */
  notifier?: Partial<NotifierConfig>;
  completer?: Partial<CompleterConfig>;
  /** The pass that hands ordering keys on when a producer held the key's row at completion. */
  keyHandoffs?: Partial<KeyHandoffsConfig>;
  /** The pass that settles flow parents a worker could not (see docs/flows.md). */
  flows?: Partial<FlowsConfig>;
  /**
   * Job events across processes (`PgQueue.onClusterEvent`, `QueueService.clusterEvents$`,
   * `@OnQueueEvent(type, { from: 'cluster' })`), best effort, through NOTIFY: off by default.
   * `{ crossProcess: true }` publishes this process's events and hears the others'.
   */
  events?: Partial<ClusterEventsConfig>;
  /**
   * Bound of every statement the engine runs, and of every connection its pool opens (default
   * 10 s): client-side on every statement (a connection that died silently fails it instead of
   * hanging until the kernel gives up), and as `SET LOCAL statement_timeout` inside the engine's
   * own transactions. Never a session or start-up setting: those do not survive transaction
   * pooling. Migrations are not bounded by it.
   */
  statementTimeoutMs?: number;
  /**
   * A failure that repeats while the database is away (a claim, a maintenance pass, the listener,
   * outcome writes) is logged once per this interval per kind, with a count, and once more when it
   * works again (default 30 s). 0 logs every failure.
   */
  failureLogIntervalMs?: number;
  /**
   * How long `start()` keeps trying a database that cannot be reached (refused, not resolving, not
   * answering, starting up) before it fails, backing off from 250 ms to 5 s between attempts and
   * logging each failed attempt once (default 30 s; 0: fail at the first attempt). A database that
   * answers and refuses (a wrong password, no such database, TLS) fails at once: waiting changes
   * nothing. What a deploy expects when the application and its database start together
   * (Kubernetes, docker compose).
   */
  startupRetryMs?: number;
  logger?: EngineLogger;
}

/**
 * The engine's options: one section, built from the sections of the services it configures. The
 * Nest module validates its own options against this same section (plus the few that are only
 * its own), so both layers accept the same names, bounds and defaults, and say the same thing
 * when one is wrong. Internal: not exported from the package.
 */

export const POLL_INTERVAL_DEFAULT_MS = 2_000;
export const WAKE_COOLDOWN_DEFAULT_MS = 5;
export const POOL_SIZE_DEFAULT = 10;
export const MAX_FREE_RELEASES_DEFAULT = 3;
export const STARTUP_RETRY_DEFAULT_MS = 30_000;

/** What the engine's constructor works with: every option with a default has its value. */
export type ResolvedEngineOptions = Omit<PgQueueOptions, 'reaper' | 'scheduler' | 'pruner' | 'ticker' | 'notifier' | 'completer' | 'keyHandoffs' | 'flows' | 'events' | 'handlerDefaults'> &
  Required<Pick<PgQueueOptions, 'poolSize' | 'preparedStatements' | 'schema' | 'migrations' | 'pollIntervalMs' | 'wakeCooldownMs' | 'maxPayloadBytes' | 'maxFreeReleases' | 'statementTimeoutMs' | 'failureLogIntervalMs' | 'startupRetryMs'>> & {
    reaper: ReaperConfig;
    scheduler: SchedulerConfig;
    pruner: PrunerConfig | false;
    ticker: TickerConfig | false;
    notifier: NotifierConfig;
    completer: CompleterConfig;
    keyHandoffs: KeyHandoffsConfig;
    flows: FlowsConfig;
    events: ClusterEventsConfig;
    handlerDefaults: HandlerOptions;
  };

export const ENGINE_OPTIONS = section<PgQueueOptions>(
  'PgQueue',
  {
    connectionString: string(),
    pool: opaque('object'),
    poolSize: integer(2, 1_000),
    listenConnectionString: string(),
    preparedStatements: boolean(),
    // Its own validator (validateSchemaName) says more than a pattern could.
    schema: string(),
    workerId: string(/^[\x21-\x7e]{1,200}$/, 'Use 1-200 printable ASCII characters without spaces, unique per process.'),
    migrations: oneOf(MIGRATION_MODES),
    handlerDefaults: nested(HANDLER_OPTIONS),
    pollIntervalMs: timerMs(10),
    wakeCooldownMs: integer(0, 10_000),
    maxPayloadBytes: integer(2, 64 * 1024 * 1024),
    // release_count is an int4.
    maxFreeReleases: integer(0, 2_147_483_647),
    reaper: nested(REAPER_OPTIONS),
    scheduler: nested(SCHEDULER_OPTIONS),
    pruner: nested(PRUNER_OPTIONS, true),
    ticker: nested(TICKER_OPTIONS, true),
    notifier: nested(NOTIFIER_OPTIONS),
    completer: nested(COMPLETER_OPTIONS),
    keyHandoffs: nested(KEY_HANDOFFS_OPTIONS),
    flows: nested(FLOWS_OPTIONS),
    events: nested(CLUSTER_EVENTS_OPTIONS),
    // The client-side timeout adds CLIENT_TIMEOUT_SLACK_MS, and a timer waits at most TIMER_MAX_MS.
    statementTimeoutMs: integer(100, TIMER_MAX_MS - CLIENT_TIMEOUT_SLACK_MS),
    failureLogIntervalMs: timerMs(0),
    startupRetryMs: timerMs(0),
    logger: opaque('object'),
  },
  {
    poolSize: POOL_SIZE_DEFAULT,
    preparedStatements: true,
    schema: DEFAULT_SCHEMA,
    migrations: MIGRATION_MODE_DEFAULT,
    pollIntervalMs: POLL_INTERVAL_DEFAULT_MS,
    wakeCooldownMs: WAKE_COOLDOWN_DEFAULT_MS,
    maxPayloadBytes: MAX_PAYLOAD_BYTES_DEFAULT,
    maxFreeReleases: MAX_FREE_RELEASES_DEFAULT,
    statementTimeoutMs: STATEMENT_TIMEOUT_DEFAULT_MS,
    failureLogIntervalMs: FAILURE_LOG_INTERVAL_MS,
    startupRetryMs: STARTUP_RETRY_DEFAULT_MS,
  },
);
