import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import pg from 'pg';
import { ClusterEvents, type ClusterJobEventListener } from './cluster-events.js';
import { Completer } from './completer.js';
import { KeyHandoffs } from './maintenance/key-handoffs.js';
import { FlowsPass } from './maintenance/flows.js';
import { enqueueFlow, type EnqueuedFlow, type FlowNode } from './flows.js';
import { requireInteger, resolveSection, TIMER_MAX_MS } from './config.js';
import { ENGINE_OPTIONS, type PgQueueOptions, type ResolvedEngineOptions } from './options.js';

export type { PgQueueOptions } from './options.js';
import { describeTarget, targetOf, type Queryable } from './db.js';
import { DatabaseUnavailableError, EngineStoppedError, InvalidOptionError } from './errors.js';
import { isJobId, isQueueName, validateSchemaName, wakeChannel } from './identifiers.js';
import { OperatorCalls, OPERATOR_BATCH_MAX } from './operator.js';
import { LogThrottle } from './log-throttle.js';
import { consoleLogger, type EngineLogger } from './logger.js';
import { EngineMetrics, type JobEventListener, type JobEventType } from './metrics.js';
import { migrate, type MigrationMode, type MigrationReport } from './migrator.js';
import { Notifier } from './notifier.js';
import { toCallError, type CallContext } from './pg-errors.js';
import { PROMETHEUS_TIMEOUT_DEFAULT_MS, renderPrometheus } from './prometheus.js';
import {
  Producer,
  type EnqueueCallOptions,
  type EnqueuedIds,
  type EnqueueOptions,
  type EnqueueResult,
  type JobToEnqueue,
  type KeyedEnqueueOptions,
  type DeduplicationOptions,
} from './producer.js';
import { Pruner } from './maintenance/pruner.js';
import { Reaper, type ReapResult } from './maintenance/reaper.js';
import { Scheduler } from './maintenance/scheduler.js';
import { Ticker, TICKER_DEFAULTS, type TickerConfig } from './maintenance/ticker.js';
import { codeSchedule, ScheduleCalls, type CodeSchedule, type CodeScheduleOptions } from './recurring.js';
import { Maintainer } from './maintenance/maintainer.js';
import type { HostablePass } from './maintenance/service.js';
import { ENGINE_INTERNALS, type EngineInternals } from './internals.js';
import {
  CLUSTER_EVENTS_OFF,
  CLUSTER_EVENTS_OFF_FIX,
  CLUSTER_EVENT_LISTENER_FAILED,
  COMPLETIONS_UNWRITTEN,
  ENGINE_STOPPED,
  HANDLER_AFTER_START,
  HANDLER_TWICE,
  JOB_EVENT_LISTENER_FAILED,
  METRICS_DATABASE_BACK,
  METRICS_NO_ANSWER,
  METRICS_SNAPSHOT_FAILED,
  POOL_NOT_CLOSED,
  PREPARED_STATEMENT_REFUSED,
  SCHEDULE_WITHOUT_HANDLER,
  QUEUE_NAME_FIX,
  QUEUE_NAME_INVALID,
  STARTED_TWICE,
  WORKERS_NOT_STARTABLE,
  STARTUP_REACHED,
  STARTUP_RETRYING,
  STOPPED_DURING_START,
} from './messages.js';
import { settlesWithin } from './settles-within.js';
import { checkUpcasters, isJobDefinition, payloadForHandler, type JobDefinition, type Upcasters } from './job-definition.js';
import { createStore, transaction, type Store } from './store/index.js';
import type { OperatorNote, ReplayOutcome, DeadJobPage, DeadErrorGroup, JobPage, ProcessStats, EngineStats, JobRecord, JobEventRecord, JobEffectRecord, QueueAuditRecord, Throughput } from './records.js';
import type { BrowsableStatus } from './store/index.js';
import type { ChildResult, GroupLimits, GroupLimitsInput, GroupLimitsRecord, HandlerOptions, JobHandlerFn, JobStatus, QueueLimits, QueueLimitsInput } from './types.js';
import { createEngineTestSignals, ENABLE_TEST_SIGNALS, type EngineTestSignals } from './test-signals.js';
import { resolveHandlerOptions, Worker, type WorkerHooks } from './worker.js';

export interface StartOptions {
  /**
   * The fixed-interval passes (names from `hostablePasses`: `reaper`, `pruner`) that the host runs
   * on timers of its own (the Nest module, when the app has a SchedulerRegistry): the engine does
   * not start their loops, so only one timer ever runs each. Default: none, the engine runs all.
   */
  hostedPasses?: readonly string[];
  /** @deprecated Use `hostedPasses: ['reaper']` (false here is the same); removed in the next minor version. */
  reaperTimer?: boolean;
  /** @deprecated Use `hostedPasses: ['pruner']` (false here is the same); removed in the next minor version. */
  prunerTimer?: boolean;
  /** Start workers for the registered handlers (default). False: an enqueue-only process. */
  workers?: boolean;
}

// The records live in records.ts (the store maps rows to them); they are exported from here as before.
export type { OperatorNote, ReplayOutcome, DeadJobPage, DeadJobSummary, QueueCounts, QueueStats, ProcessStats, EngineStats, JobRecord, JobEventRecord, JobEffectRecord, QueueAuditRecord, JobSummary, JobPage, DeadErrorGroup, Throughput } from './records.js';
export type { BrowsableStatus } from './store/index.js';

/** TCP keepalive probes start after this long idle (the kernel's interval and count do the rest). */
const KEEPALIVE_INITIAL_DELAY_MS = 10_000;
/** The pool's idle connections failing, as a kind of failure in the LogThrottle. */
const IDLE_POOL_CONNECTION = 'Idle pool connection';
/** NOTIFY payload that wakes schedulers (queue names cannot start with '*'). */
const SCHEDULER_TOPIC = '*scheduled';
/** NOTIFY payload that wakes tickers: a schedule was created, changed or resumed. */
const TICKER_TOPIC = '*schedules';
/** NOTIFY topic of a cancelled running job (payload `*cancel:<id>`, sent by the cancel statement). */
const CANCEL_TOPIC = '*cancel';
const NEAR_EXPIRY_MS_DEFAULT = 5_000;
/** Start-up retries (startupRetryMs) wait this long after the first failed attempt, doubling up to the maximum. */
const STARTUP_RETRY_FIRST_DELAY_MS = 250;
const STARTUP_RETRY_MAX_DELAY_MS = 5_000;
/** The window of `stats()`'s recently finished counts: its cost is throughput × window. */
const RECENT_WINDOW_MS_DEFAULT = 60_000;
/** `stats().schedules.late`: the schedules late by more than this, at most this many. */
const LATE_SCHEDULE_LISTED_MS = 1_000;
const LATE_SCHEDULES_LISTED = 10;
/** At most a day: the window is read on every call, so it must stay a window, not the history. */
const RECENT_WINDOW_MS_MAX = 86_400_000;

/**
 * The framework-free queue: enqueue, handlers, and the services that keep the state machine
 * moving (workers, reaper, scheduler, notifier). The Nest module is a thin layer over this class;
 * tests and benchmarks use it directly.
 */
export class PgQueue {
  readonly schema: string;
  readonly workerId: string;
  /**
   * @deprecated The engine's pool is internal: pass your own `pool` in the options to share one
   * with your code. Kept for one minor version.
   */
  readonly pool: pg.Pool;
  /**
   * @deprecated Read counters through `prometheus()` or OpenTelemetry, job events through
   * `onJobEvent()`. Kept for one minor version, without `events$` (gone: use `onJobEvent`).
   */
  readonly metrics = new EngineMetrics((error) => this.logger.error(JOB_EVENT_LISTENER_FAILED(error)));
  private readonly reaper: Reaper;
  private readonly scheduler: Scheduler;
  private readonly notifier: Notifier;
  private readonly pruner: Pruner | undefined;
  private readonly keyHandoffs: KeyHandoffs;
  private readonly flows: FlowsPass;
  private readonly ticker: Ticker | undefined;
  /** Recurring schedules: the runtime API and the code declarations (see recurring.ts). */
  private readonly scheduleCalls: ScheduleCalls;
  /** The schedules this process's code declares (`recurring()`), declared at start. */
  private readonly codeSchedules: CodeSchedule[] = [];
  /** The maintenance services, started in this order and stopped in reverse. */
  private readonly maintainer: Maintainer;
  /** pause, resume, cancel, discard, replay, dead jobs: see operator.ts. */
  private readonly operator: OperatorCalls;
  private readonly store: Store;
  private readonly channel: string;
  private readonly ownsPool: boolean;
  private readonly producer: Producer;
  private readonly completer: Completer;
  /** Job events across processes (events.crossProcess): see cluster-events.ts. */
  private readonly clusterEvents: ClusterEvents;
  private readonly handlerDefaults: HandlerOptions;
  private readonly handlers = new Map<string, { handler: JobHandlerFn<never>; options: HandlerOptions; hooks: WorkerHooks }>();
  private readonly workers = new Map<string, Worker>();
  /** The workers' wake-up subscriptions, dropped when they stop. */
  private readonly workerSubscriptions: (() => void)[] = [];
  private readonly knownQueues = new Set<string>();
  private readonly unsubscribe: (() => void)[] = [];
  private readonly logger: EngineLogger;
  /** Every failure that repeats while the database is away is logged through this, bounded. */
  private readonly failures: LogThrottle;
  private readonly migrationMode: MigrationMode;
  private readonly pollIntervalMs: number;
  private readonly wakeCooldownMs: number;
  private readonly maxFreeReleases: number;
  private readonly maxPayloadBytes: number;
  private readonly keysDeferred: () => void;
  /** What a failed public call is reported against (see call()). */
  private readonly callContext: CallContext;
  private readonly startupRetryMs: number;
  private state: 'new' | 'started' | 'stopped' = 'new';
  /** The start in progress, and what stop() aborts it with (its retries' waits). */
  private starting: { done: Promise<void>; abort: AbortController } | undefined;
  /** The `stats()` read that scrapes share while it runs (see prometheus()). */
  private scrapeRead: Promise<EngineStats> | undefined;
  /** Whether the last scrape's read answered: an outage is logged once, not on every scrape. */
  private scrapeAnswered = true;
  /** Off unless a test turned them on (see test-signals.ts). */
  private testSignals: EngineTestSignals | undefined;

  constructor(given: PgQueueOptions) {
    if (given === null || typeof given !== 'object') {
      throw new InvalidOptionError('options', 'missing', 'Pass { connectionString } or { pool }.');
    }
    this.logger = given.logger ?? consoleLogger;
    const options = resolveSection(ENGINE_OPTIONS, given, '', (message) => this.logger.warn(message)) as ResolvedEngineOptions;
    if ((options.connectionString === undefined) === (options.pool === undefined)) {
      throw new InvalidOptionError(
        options.pool ? 'pool' : 'connectionString',
        options.pool ? 'both pool and connectionString are set' : 'neither connectionString nor pool is set',
        'Give exactly one: a connection string (the queue then owns its pool) or an existing pg.Pool.',
      );
    }
    // By shape, not instanceof: the app's pg may be another copy (another version) than ours.
    if (options.pool !== undefined && !isPool(options.pool)) {
      throw new InvalidOptionError('pool', 'it is not a pg.Pool', 'Pass a Pool from the "pg" package, or a connectionString.');
    }
    this.schema = validateSchemaName(options.schema);
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    this.migrationMode = options.migrations;
    this.pollIntervalMs = options.pollIntervalMs;
    this.wakeCooldownMs = options.wakeCooldownMs;
    this.maxFreeReleases = options.maxFreeReleases;
    const { maxPayloadBytes, statementTimeoutMs } = options;
    this.maxPayloadBytes = maxPayloadBytes;
    this.failures = new LogThrottle(this.logger, options.failureLogIntervalMs);
    this.handlerDefaults = options.handlerDefaults;

    this.ownsPool = options.pool === undefined;
    this.pool =
      options.pool ??
      new pg.Pool({
        connectionString: options.connectionString,
        max: options.poolSize,
        application_name: 'nestjs-pg-queue',
        // A connection whose peer vanished (a failover, a cut network) is noticed by the kernel
        // instead of looking idle forever; and a connect to an unreachable server gives up.
        keepAlive: true,
        keepAliveInitialDelayMillis: KEEPALIVE_INITIAL_DELAY_MS,
        connectionTimeoutMillis: statementTimeoutMs,
      });
    // Every idle connection fails at once when the database goes away: one kind, bounded.
    if (this.ownsPool) this.pool.on('error', (error) => this.failures.failed(IDLE_POOL_CONNECTION, error.message, 'warn'));

    this.callContext = {
      target: describeTarget((this.pool as unknown as { options: pg.ClientConfig }).options),
      statementTimeoutMs,
      option: this.ownsPool ? 'connectionString' : 'pool',
    };
    this.startupRetryMs = options.startupRetryMs;
    let toldNameRefused = false;
    const { preparedStatements } = options;
    this.store = createStore(this.schema, {
      statementTimeoutMs,
      preparedStatements,
      // Once: through a transaction pooler nearly every statement would say it again.
      nameRefused: (error) => {
        if (toldNameRefused) return;
        toldNameRefused = true;
        this.logger.warn(PREPARED_STATEMENT_REFUSED(error.message));
      },
    });
    const channel = wakeChannel(this.schema);
    this.channel = channel;
    const listenConfig: pg.ClientConfig = options.listenConnectionString
      ? { connectionString: options.listenConnectionString, application_name: 'nestjs-pg-queue:listen' }
      : { ...(this.pool as unknown as { options: pg.ClientConfig }).options, application_name: 'nestjs-pg-queue:listen' };
    // The probe goes the producers' way (the pool), so a listener that cannot hear them is caught.
    const sendProbe = (payload: string) => this.store.notify(this.pool, { channel, payload });
    this.notifier = new Notifier(listenConfig, channel, sendProbe, this.logger, this.failures, options.notifier);
    this.scheduler = new Scheduler(this.pool, this.store, channel, this.failures, options.scheduler);
    this.keyHandoffs = new KeyHandoffs(this.pool, this.store, channel, this.failures, options.keyHandoffs);
    const keysDeferred = () => this.keyHandoffs.wake();
    this.keysDeferred = keysDeferred;
    this.reaper = new Reaper(this.pool, this.store, this.metrics, this.logger, this.failures, options.reaper, { channel, keysDeferred }, () => this.scheduler.wake());
    this.pruner = options.pruner === false ? undefined : new Pruner(this.pool, this.store, this.logger, this.failures, options.pruner);
    this.flows = new FlowsPass(this.pool, this.store, channel, this.failures, options.flows);
    this.ticker = options.ticker === false ? undefined : new Ticker(this.pool, this.store, channel, this.metrics, this.logger, this.failures, options.ticker);
    const tickerDefaults: TickerConfig = this.ticker?.config ?? TICKER_DEFAULTS;
    this.scheduleCalls = new ScheduleCalls(
      { db: this.pool, store: this.store, schema: this.schema, channel, tickerTopic: TICKER_TOPIC, defaults: () => tickerDefaults, maxPayloadBytes, logger: this.logger },
      (body) => this.call(body),
    );
    this.maintainer = new Maintainer([
      this.notifier,
      this.scheduler,
      ...(this.ticker ? [this.ticker] : []),
      this.keyHandoffs,
      this.reaper,
      ...(this.pruner ? [this.pruner] : []),
      this.flows,
    ]);
    this.operator = new OperatorCalls({ db: this.pool, store: this.store, channel, keysDeferred, flowsChanged: () => this.flows.wake() });
    this.completer = new Completer(this.pool, this.store, this.workerId, channel, options.completer, keysDeferred);
    this.clusterEvents = new ClusterEvents(
      {
        pool: this.pool,
        store: this.store,
        channel,
        origin: this.workerId,
        metrics: this.metrics,
        failures: this.failures,
        reportListenerError: (error) => this.logger.error(CLUSTER_EVENT_LISTENER_FAILED(error)),
      },
      options.events,
    );
    this.producer = new Producer({
      db: this.pool,
      store: this.store,
      channel,
      maxPayloadBytes,
      schedulerTopic: SCHEDULER_TOPIC,
      isKnownQueue: (queue, db) => this.isKnownQueue(queue, db),
      transaction: (fn) => transaction(this.pool, fn, { statementTimeoutMs }),
    });
  }

  /** Applies (or verifies) the migrations according to the `migrations` option. */
  migrate(): Promise<MigrationReport> {
    return this.call(() => migrate(this.pool, { schema: this.schema, mode: this.migrationMode, logger: this.logger }));
  }

  /** Declares queues so producers may enqueue to them before any worker has started. */
  declareQueues(queues: readonly string[]): Promise<void> {
    return this.call(async () => {
      for (const queue of queues) {
        if (!isQueueName(queue)) {
          throw new InvalidOptionError('queue', QUEUE_NAME_INVALID(queue), QUEUE_NAME_FIX());
        }
      }
      if (queues.length === 0) return;
      await this.store.declareQueues(this.pool, { queues: [...queues] });
      for (const queue of queues) this.knownQueues.add(queue);
    });
  }

  /**
   * Registers the handler of a queue (one per queue per process). Call before `start()`. With a
   * job definition (`defineJob`), each job's payload is brought to the definition's version by
   * `upcast` (`{ [fromVersion]: (payload) => payload of the next version }`; a job enqueued
   * without a definition is version 1) and validated by its schema before the handler runs: a
   * payload that does not match is dead with `INVALID_PAYLOAD`, a version with no upcaster to the
   * current one is dead (deploy one, then replay), and a version newer than the definition's (a
   * producer deployed first) is retried for a newer worker.
   */
  work<T>(queue: string | JobDefinition<T, unknown>, handler: JobHandlerFn<T>, options?: Partial<HandlerOptions> & { upcast?: Upcasters }, hooks: WorkerHooks = {}): void {
    if (isJobDefinition(queue)) {
      const definition = queue;
      const { upcast, ...handlerOptions } = options ?? {};
      const upcasters = checkUpcasters(definition.queue, definition, upcast);
      // The payload the handler sees is the definition's: a new Job object only when it differs.
      const defined: JobHandlerFn<T> = async (job, ctx) => {
        const payload = await payloadForHandler(definition, upcasters, job.version, job.payload);
        return handler(payload === job.payload ? job : { ...job, payload }, ctx);
      };
      return this.work(definition.queue, defined, handlerOptions, hooks);
    }
    if (options !== undefined && 'upcast' in options) {
      throw new InvalidOptionError(`${queue}.upcast`, 'upcasters need a job definition', 'Register the handler with its defineJob() definition instead of the queue name.');
    }
    if (!isQueueName(queue)) {
      throw new InvalidOptionError('queue', QUEUE_NAME_INVALID(queue), QUEUE_NAME_FIX());
    }
    if (typeof handler !== 'function') throw new InvalidOptionError(`${queue}.handler`, 'it is not a function', 'Pass (job, ctx) => Promise.');
    if (this.handlers.has(queue)) {
      throw new InvalidOptionError('queue', HANDLER_TWICE(queue), 'Register one handler per queue.');
    }
    if (this.state !== 'new') throw new InvalidOptionError('queue', HANDLER_AFTER_START(queue), 'Register handlers before start().');
    this.handlers.set(queue, { handler: handler as JobHandlerFn<never>, options: resolveHandlerOptions(queue, options, this.handlerDefaults), hooks });
  }

  /**
   * Declares a recurring schedule in code for `queue` (docs/recurring-jobs.md): a row in the
   * database that every process's ticker runs, one job per tick. The queue needs its handler in
   * this process (the handler owns the queue's code schedules); call before `start()`, which
   * declares them. A deploy that changes them wins over the release before it (never the other
   * way), and a schedule no longer declared for a queue handled here is paused.
   */
  recurring(queue: string, cron: string, options?: CodeScheduleOptions, where?: string): void {
    if (this.state !== 'new') throw new InvalidOptionError('recurring', HANDLER_AFTER_START(queue), 'Declare schedules before start().');
    // `where`: what errors name instead of the schedule (the Nest module passes the decorated method).
    const option = where ?? options?.name ?? queue;
    const schedule = codeSchedule(option, queue, cron, options, this.ticker?.config ?? TICKER_DEFAULTS, this.maxPayloadBytes);
    if (this.codeSchedules.some((s) => s.definition.name === schedule.definition.name)) {
      throw new InvalidOptionError(`${option}.name`, `two schedules of this process are named ${JSON.stringify(schedule.definition.name)}`, 'Give each schedule of a queue a name of its own ({ name }).');
    }
    this.codeSchedules.push(schedule);
  }

  /**
   * Schedules as rows (docs/recurring-jobs.md): `upsert` and `remove` the ones created at run time
   * (per tenant), `list` and `get` every one with its next and last tick and its counts, `pause`
   * and `resume` any.
   */
  get schedules(): ScheduleCalls {
    return this.scheduleCalls;
  }

  /** Each handled queue's code schedules (none is a declaration too: its schedules are gone). */
  private async declareCodeSchedules(): Promise<void> {
    for (const queue of this.handlers.keys()) {
      await this.scheduleCalls.declare(queue, this.codeSchedules.filter((s) => s.definition.queue === queue));
    }
  }

  /**
   * Migrates (per mode), declares the handlers' queues, and starts the services. A database that
   * cannot be reached is tried again for `startupRetryMs`. A start that fails leaves nothing
   * running (no service, no timer, no listener; an owned pool is closed): `stop()` after it only
   * returns, and the engine cannot be started again.
   */
  start(options: StartOptions = {}): Promise<void> {
    if (this.state !== 'new') return Promise.reject(new InvalidOptionError('start', STARTED_TWICE(this.state), 'Create a new PgQueue to start again.'));
    const orphan = this.codeSchedules.find((s) => !this.handlers.has(s.definition.queue));
    if (orphan) {
      const { name, queue } = orphan.definition;
      return Promise.reject(new InvalidOptionError('recurring', SCHEDULE_WITHOUT_HANDLER(name, queue), `Register the handler of "${queue}" (work()) in the process that declares its schedules.`));
    }
    this.state = 'started';
    const abort = new AbortController();
    const done = this.startNow(options, abort.signal).catch(async (error: unknown) => {
      // Nothing the start began may outlive it: the caller may never call stop() (an application
      // whose bootstrap failed), and a stop() that comes waits for this.
      await this.shutdown(0).catch(() => {});
      throw error;
    });
    this.starting = { done, abort };
    return done.finally(() => {
      this.starting = undefined;
    });
  }

  private async startNow(options: StartOptions, signal: AbortSignal): Promise<void> {
    const stopped = () => {
      if (signal.aborted) throw new InvalidOptionError('start', STOPPED_DURING_START(), 'Create a new PgQueue to start again.');
    };
    await this.untilReachable(() => migrate(this.pool, { schema: this.schema, mode: this.migrationMode, logger: this.logger }), signal);
    stopped();
    await this.call(async () => {
      const withWorkers = options.workers ?? true;
      if (withWorkers) await this.declareHandledQueues();
      stopped();
      await this.declareCodeSchedules();
      stopped();
      // A connection the pool opens means the database is back: the listener need not wait out its backoff.
      const databaseReachable = () => {
        this.failures.recovered(IDLE_POOL_CONNECTION);
        this.notifier.databaseReachable();
      };
      this.pool.on('connect', databaseReachable);
      this.unsubscribe.push(() => this.pool.off('connect', databaseReachable));
      // Before the listener starts, so no wake-up it hears is missed; waking a service that has
      // not started yet does nothing (it runs a pass as it starts anyway).
      this.unsubscribe.push(this.notifier.subscribe(SCHEDULER_TOPIC, () => this.scheduler.wake()));
      if (this.ticker) {
        const ticker = this.ticker;
        this.unsubscribe.push(this.notifier.subscribe(TICKER_TOPIC, () => ticker.wake()));
      }
      this.unsubscribe.push(
        this.notifier.subscribe(CANCEL_TOPIC, (jobId) => {
          for (const worker of this.workers.values()) worker.cancelled(jobId);
        }),
      );
      this.clusterEvents.start((topic, fn) => this.notifier.subscribe(topic, fn));
      const hosted = [
        ...(options.hostedPasses ?? []),
        ...(options.reaperTimer === false ? ['reaper'] : []),
        ...(options.prunerTimer === false ? ['pruner'] : []),
      ];
      await this.maintainer.start(hosted);
      if (withWorkers) this.startWorkersNow();
    });
  }

  /**
   * Starts the workers of the registered handlers, after a `start({ workers: false })` or a
   * `stopWorkers()`: the Nest module's `autoStart: false` and `QueueService.startProcessing()`.
   * Does nothing when they are running.
   */
  startWorkers(): Promise<void> {
    return this.call(async () => {
      if (this.state !== 'started') throw new InvalidOptionError('startWorkers', WORKERS_NOT_STARTABLE(this.state), 'Call start() first.');
      if (this.workers.size > 0) return;
      await this.declareHandledQueues();
      // stop() may have run while the queues were declared.
      if (this.state === 'started' && this.workers.size === 0) this.startWorkersNow();
    });
  }

  /**
   * Stops this process's workers, as `stop()` does (no new claims; running handlers get
   * `timeoutMs`, then are aborted and their jobs released, fenced), and leaves everything else
   * running: enqueue, operators' calls, maintenance. `startWorkers()` starts them again once
   * this has resolved.
   */
  async stopWorkers(timeoutMs = 10_000): Promise<void> {
    const workers = [...this.workers];
    for (const off of this.workerSubscriptions.splice(0)) off();
    // Still in the map while they stop: a cancel that arrives meanwhile reaches its handler.
    await Promise.all(workers.map(([, w]) => w.stop(timeoutMs)));
    for (const [queue, worker] of workers) if (this.workers.get(queue) === worker) this.workers.delete(queue);
    if (!(await settlesWithin(this.completer.drained(), timeoutMs))) this.logger.warn(COMPLETIONS_UNWRITTEN(timeoutMs));
  }

  /** Whether this process's workers are running (`start()` with workers, or `startWorkers()`). */
  get processing(): boolean {
    return this.workers.size > 0;
  }

  /** The queues of this process's handlers, and the flow control they declare (the last process to start wins). */
  private async declareHandledQueues(): Promise<void> {
    await this.declareQueues([...this.handlers.keys()]);
    for (const [queue, { options }] of this.handlers) {
      if (options.limits !== undefined && Object.keys(options.limits).length > 0) await this.store.setLimits(this.pool, { queue, limits: options.limits });
    }
  }

  private startWorkersNow(): void {
    for (const [queue, { handler, options: handlerOptions, hooks }] of this.handlers) {
      const worker = new Worker(
        queue,
        handler,
        handlerOptions,
        {
          db: this.pool,
          channel: this.channel,
          store: this.store,
          owner: this.workerId,
          completer: this.completer,
          metrics: this.metrics,
          logger: this.logger,
          failures: this.failures,
          pollIntervalMs: this.pollIntervalMs,
          maxFreeReleases: this.maxFreeReleases,
          wakeCooldownMs: this.wakeCooldownMs,
          keysDeferred: this.keysDeferred,
        },
        hooks,
      );
      worker.testSignals = this.testSignals?.worker;
      this.workers.set(queue, worker);
      this.workerSubscriptions.push(this.notifier.subscribe(queue, () => worker.wake()));
      worker.start();
    }
  }

  /**
   * Runs `attempt` (the start's first contact with the database) until it succeeds, fails for a
   * reason other than an unreachable database, or `startupRetryMs` has passed, backing off from
   * STARTUP_RETRY_FIRST_DELAY_MS to STARTUP_RETRY_MAX_DELAY_MS. Each failed attempt is logged once
   * (not through the LogThrottle: each is news, and there are few). Its failure is the call's
   * error (DatabaseUnavailableError naming the attempts, or DatabaseConnectionError at once).
   */
  private async untilReachable<T>(attempt: () => Promise<T>, signal: AbortSignal): Promise<T> {
    const startedAt = Date.now();
    let delayMs = STARTUP_RETRY_FIRST_DELAY_MS;
    for (let attempts = 1; ; attempts++) {
      try {
        const result = await attempt();
        if (attempts > 1) this.logger.log(STARTUP_REACHED(this.callContext.target, attempts, Date.now() - startedAt));
        return result;
      } catch (raw) {
        const error = toCallError(raw, this.callContext);
        const leftMs = this.startupRetryMs - (Date.now() - startedAt);
        if (!(error instanceof DatabaseUnavailableError) || leftMs <= 0 || signal.aborted) {
          throw attempts > 1 && error instanceof DatabaseUnavailableError
            ? toCallError(raw, { ...this.callContext, startup: { attempts, forMs: Date.now() - startedAt } })
            : error;
        }
        const waitMs = Math.min(delayMs, leftMs);
        this.logger.warn(STARTUP_RETRYING(this.callContext.target, error.reason, attempts, waitMs, leftMs));
        await sleep(waitMs, signal);
        if (signal.aborted) throw toCallError(raw, { ...this.callContext, startup: { attempts, forMs: Date.now() - startedAt } });
        delayMs = Math.min(delayMs * 2, STARTUP_RETRY_MAX_DELAY_MS);
      }
    }
  }

  /**
   * Graceful stop: no new claims; running handlers get `timeoutMs` to finish, then their signals
   * abort and unfinished jobs are released (fenced) back to pending; then the services stop and
   * an owned pool closes.
   */
  async stop(timeoutMs = 10_000): Promise<void> {
    // A start in progress gives up (its retries' waits end at once), and cleans up after itself.
    if (this.starting) {
      this.starting.abort.abort();
      await this.starting.done.catch(() => {});
    }
    await this.shutdown(timeoutMs);
  }

  private async shutdown(timeoutMs: number): Promise<void> {
    if (this.state === 'stopped') return;
    const wasStarted = this.state === 'started';
    this.state = 'stopped';
    if (wasStarted) {
      for (const off of this.unsubscribe.splice(0)) off();
      await this.stopWorkers(timeoutMs);
      await this.maintainer.stop();
      // After the workers' last events (releases) and the last passes', before the pool closes.
      await this.clusterEvents.stop();
    }
    this.metrics.complete();
    this.clusterEvents.complete();
    this.failures.flush();
    // pool.end() waits for every checked-out connection; one stuck on a dead network would hang it.
    if (this.ownsPool && !(await settlesWithin(this.pool.end(), timeoutMs))) {
      this.logger.warn(POOL_NOT_CLOSED(timeoutMs));
    }
  }

  /**
   * Turns the services' test signals on (once; later calls return the same signals), for the
   * tests' `testSignals(engine)` in lib/testing. Keyed by a symbol the package does not export.
   */
  [ENABLE_TEST_SIGNALS](): EngineTestSignals {
    if (this.testSignals) return this.testSignals;
    const signals = createEngineTestSignals();
    this.testSignals = signals;
    this.reaper.testSignals = signals.reaper;
    this.scheduler.testSignals = signals.scheduler;
    if (this.pruner) this.pruner.testSignals = signals.pruner;
    this.keyHandoffs.testSignals = signals.keyHandoffs;
    if (this.ticker) this.ticker.testSignals = signals.ticker;
    this.notifier.testSignals = signals.notifier;
    this.completer.testSignals = signals.completer;
    this.clusterEvents.testSignals = signals.clusterEvents;
    for (const worker of this.workers.values()) worker.testSignals = signals.worker;
    return signals;
  }

  /**
   * The fixed-interval maintenance passes (the reaper's, and the pruner's unless `pruner: false`),
   * for a host that runs them on timers of its own: pass their names as `start({ hostedPasses })`
   * and call `runOnce()` every `intervalMs`. Each `runOnce()` fails as the public calls do
   * (DatabaseUnavailableError, DatabaseTimeoutError).
   */
  get hostablePasses(): readonly HostablePass[] {
    return this.maintainer.hostablePasses((pass) => this.call(pass));
  }

  /**
   * Registers a listener of what happens to jobs in this process (claimed, succeeded, failed,
   * lease lost, released, reaped, heartbeat failed; never payloads). Returns the function that
   * removes it. A listener that throws is logged, and the others still hear the event. `onClose`
   * is called once when the engine stops (no event follows), at once if it has stopped already.
   */
  onJobEvent(listener: JobEventListener, onClose?: () => void): () => void {
    if (typeof listener !== 'function') throw new InvalidOptionError('listener', 'it is not a function', 'Pass (event) => void.');
    return this.metrics.onEvent(listener, onClose);
  }

  /**
   * Registers a listener of the job events of every process on this database that publishes them
   * (`events.crossProcess` on): this process's own, delivered as they happen, and the others' as
   * their NOTIFYs arrive, each with the `origin` process's `workerId`. Best effort: an event is
   * lost while this process's listener is down, when its process dies before its next flush (every
   * `events.flushIntervalMs`), or when its buffer was full (counted); events of two processes come in
   * no particular order. Returns the function that removes the listener; `onClose` as for
   * `onJobEvent`. Throws `InvalidOptionError` naming `events.crossProcess` while it is off.
   */
  onClusterEvent(listener: ClusterJobEventListener, onClose?: () => void): () => void {
    if (typeof listener !== 'function') throw new InvalidOptionError('listener', 'it is not a function', 'Pass (event) => void.');
    if (!this.clusterEvents.enabled) throw new InvalidOptionError('events.crossProcess', CLUSTER_EVENTS_OFF('onClusterEvent()'), CLUSTER_EVENTS_OFF_FIX());
    return this.clusterEvents.onEvent(listener, onClose);
  }

  /** The job event types this process publishes to the others and hears from them (`events.crossProcess`); empty when off. */
  get clusterEventTypes(): readonly JobEventType[] {
    return [...this.clusterEvents.types];
  }

  /** Jobs of `queue` this process holds (running, or claimed and waiting for a slot); 0 when it has no handler for it. */
  inFlight(queue: string): number {
    return this.workers.get(queue)?.inFlight ?? 0;
  }

  /** The resolved options of this process's handler of `queue`, or undefined when no worker of it runs here. */
  handlerOptions(queue: string): Readonly<HandlerOptions> | undefined {
    return this.workers.get(queue)?.options;
  }

  /** @deprecated Use `inFlight(queue)` or `handlerOptions(queue)`; the worker is internal. Kept for one minor version. */
  worker(queue: string): Worker | undefined {
    return this.workers.get(queue);
  }

  /** For tests of the engine only (see internals.ts): not part of the API. */
  [ENGINE_INTERNALS](): EngineInternals {
    return {
      pool: this.pool,
      metrics: this.metrics,
      notifier: this.notifier,
      reaper: this.reaper,
      scheduler: this.scheduler,
      pruner: this.pruner,
      keyHandoffs: this.keyHandoffs,
      ticker: this.ticker,
      worker: (queue) => this.workers.get(queue),
    };
  }

  /**
   * Adds one job and returns its id. `queue` is a queue's name, or a job definition (`defineJob`):
   * its schema validates the payload (the validator's output is stored; a refusal is
   * `InvalidPayloadError` and nothing is written) and its version is stored with the job. The
   * payload is typed by the schema's input (`I`); the handler's `Job<T>` gets its output. With
   * `unique` or `debounce` (docs/unique-jobs.md) it returns `{ id, deduplicated }`: the id of the
   * job that holds the key when none was added.
   */
  enqueue<T, I = T>(queue: string | JobDefinition<T, I>, payload: NoInfer<I>, options: KeyedEnqueueOptions<T> & EnqueueCallOptions): Promise<EnqueueResult>;
  enqueue<T, I = T>(queue: string | JobDefinition<T, I>, payload: NoInfer<I>, options?: EnqueueOptions<T> & EnqueueCallOptions): Promise<string>;
  enqueue<T, I = T>(queue: string | JobDefinition<T, I>, payload: NoInfer<I>, options?: EnqueueOptions<T> & DeduplicationOptions<T> & EnqueueCallOptions): Promise<string | EnqueueResult>;
  enqueue<T, I = T>(queue: string | JobDefinition<T, I>, payload: NoInfer<I>, options?: EnqueueOptions<T> & DeduplicationOptions<T> & EnqueueCallOptions): Promise<string | EnqueueResult> {
    const { client, ...jobOptions } = options ?? {};
    const keyed = jobOptions.unique !== undefined || jobOptions.debounce !== undefined;
    return this.call(
      () =>
        this.producer
          .enqueueMany([{ queue, payload, options: jobOptions as EnqueueOptions & DeduplicationOptions }], { client })
          .then((ids) => (keyed ? { id: ids[0]!, deduplicated: ids.deduplicated[0]! } : ids[0]!)),
      client,
    );
  }

  /**
   * Adds several jobs, all or none; ids in input order, with `deduplicated[i]` beside them (jobs
   * with `unique` or `debounce`: the id of a deduplicated job is the one that holds its key).
   */
  enqueueMany<T = unknown, I = T>(jobs: readonly JobToEnqueue<T, I>[], options?: EnqueueCallOptions): Promise<EnqueuedIds> {
    return this.call(() => this.producer.enqueueMany(jobs as readonly JobToEnqueue[], options), options?.client);
  }

  /**
   * Adds a flow (docs/flows.md): a job and the jobs it waits for (`children`, which may have
   * children too), in one transaction (the caller's, with `client`). A job with children runs only
   * once every child has succeeded (or was discarded), and reads their results with
   * `ctx.childResults()`. Resolves to the ids, shaped as the flow.
   */
  enqueueFlow(flow: FlowNode, options: EnqueueCallOptions = {}): Promise<EnqueuedFlow> {
    return this.call(
      () =>
        enqueueFlow(
          {
            db: this.pool,
            pool: this.pool,
            store: this.store,
            channel: this.channel,
            schedulerTopic: SCHEDULER_TOPIC,
            maxPayloadBytes: this.producer.maxPayloadBytes,
            statementTimeoutMs: this.store.statementTimeoutMs,
            isKnownQueue: (queue, db) => this.isKnownQueue(queue, db),
          },
          flow,
          options,
        ),
      options.client,
    );
  }

  /** A flow job's children, by id, a page at a time (default 100 after `after`), with their states and results. */
  listChildren(id: string, page: { after?: string; limit?: number } = {}): Promise<ChildResult[]> {
    return this.call(async () => {
      if (!isJobId(id)) return [];
      const limit = requireInteger('limit', page.limit ?? 100, 1, OPERATOR_BATCH_MAX);
      return this.store.childResults(this.pool, { parent: id, after: page.after ?? '0', limit });
    });
  }

  getJob<T = unknown>(id: string): Promise<JobRecord<T> | undefined> {
    return this.call(async () => {
      if (!isJobId(id)) return undefined;
      return (await this.store.getJob(this.pool, { id })) as JobRecord<T> | undefined;
    });
  }

  /** The job's effect records (ctx.effect): started, confirmed, with results and tries. */
  getJobEffects(id: string): Promise<JobEffectRecord[]> {
    return this.call(async () => {
      if (!isJobId(id)) return [];
      return this.store.jobEffects(this.pool, { id });
    });
  }

  /** The audit trail of a job: every exceptional transition, oldest first. */
  getJobEvents(id: string): Promise<JobEventRecord[]> {
    return this.call(async () => {
      if (!isJobId(id)) return [];
      return this.store.jobEvents(this.pool, { id });
    });
  }

  /**
   * What is left to do in `queues`: pending and running jobs, and scheduled ones due within
   * `withinMs`, per queue and status (with up to 10 ids each). Read-only.
   */
  unfinished(queues: readonly string[], withinMs = 0): Promise<{ queue: string; status: JobStatus; count: number; ids: string[] }[]> {
    return this.call(async () => {
      return this.store.unfinishedJobs(this.pool, { queues: [...queues], withinMs: Math.max(0, Math.round(withinMs)) });
    });
  }

  /** One bounded reaper pass (what the reaper's timer, or the host's scheduler, runs). */
  reapOnce(): Promise<ReapResult> {
    return this.call(() => this.reaper.runOnce());
  }

  /** One bounded retention pass (what the pruner's timer, or the host's scheduler, runs). */
  pruneOnce(): Promise<number> {
    return this.call(() => this.pruner?.runOnce() ?? Promise.resolve(0));
  }

  /**
   * Sets `queue`'s flow control for every process (docs/flow-control.md): `globalConcurrency`,
   * `groupConcurrency`, `rateLimit`, `groupRateLimit` (`{ limit, windowMs }`), `groupFairness`.
   * A field left out keeps its value, `null` removes that limit. Resolves to the queue's limits.
   */
  setLimits(queue: string, limits: QueueLimitsInput): Promise<QueueLimits> {
    return this.call(() => this.operator.setLimits(queue, limits));
  }

  /** `queue`'s flow control as stored. */
  getLimits(queue: string): Promise<QueueLimits> {
    return this.call(() => this.operator.getLimits(queue));
  }

  /**
   * A group's own settings in `queue`: `concurrency` (0 holds the group), `weight` in the
   * round-robin (1 to 1000), `rateLimit`. `null` goes back to the queue's default.
   */
  setGroupLimits(queue: string, group: string, limits: GroupLimitsInput): Promise<GroupLimits> {
    return this.call(() => this.operator.setGroupLimits(queue, group, limits));
  }

  /** The groups of `queue` with settings of their own (or a throttle running), by name, a page at a time. */
  listGroupLimits(queue: string, page: { after?: string; limit?: number } = {}): Promise<GroupLimitsRecord[]> {
    return this.call(() => this.operator.listGroupLimits(queue, page));
  }

  /**
   * Stops claims of `queue` in every process; running jobs finish. `{ actor, reason }` are
   * recorded in the queue's audit trail (`queueHistory`), as every call is.
   */
  pauseQueue(queue: string, note: OperatorNote = {}): Promise<void> {
    return this.call(() => this.operator.setPaused(queue, true, note));
  }

  /** Lets every process claim `queue` again, and wakes its workers; recorded as `pauseQueue` is. */
  resumeQueue(queue: string, note: OperatorNote = {}): Promise<void> {
    return this.call(() => this.operator.setPaused(queue, false, note));
  }

  /**
   * The queue's pauses and resumes, newest first: who asked, why, and whether it was paused
   * before. At most `limit` (default 50) per call; pass the last record's `id` as `before` for
   * the next page. An undeclared queue has none.
   */
  queueHistory(queue: string, options: { limit?: number; before?: string } = {}): Promise<QueueAuditRecord[]> {
    return this.call(() => this.operator.queueHistory(queue, options));
  }

  /**
   * Cancels a scheduled, pending or running job. A running job's handler is aborted (on
   * whichever process runs it) and its late completion is refused with the reason "cancelled".
   */
  cancel(id: string, note: OperatorNote = {}): Promise<void> {
    return this.call(() => this.operator.cancel(id, note));
  }

  /**
   * Discards a dead job: it becomes `cancelled` (kept, with its history), so it no longer counts
   * as unresolved. With `delete: true` the row and its history are deleted instead, and the
   * deletion is recorded in `purges`.
   */
  discard(id: string, note: OperatorNote & { delete?: boolean } = {}): Promise<void> {
    return this.call(() => this.operator.discard(id, note));
  }

  /**
   * Replays one dead job in place (same id and history, a fresh attempt budget). Refused with
   * JOB_NOT_DEAD for a job in any other state.
   */
  replay(id: string, note: OperatorNote = {}): Promise<void> {
    return this.call(() => this.operator.replay(id, note));
  }

  /** Replays many dead jobs by id (at most OPERATOR_BATCH_MAX), reporting each one's outcome. */
  replayMany(ids: readonly string[], note: OperatorNote = {}): Promise<ReplayOutcome[]> {
    return this.call(() => this.operator.replayMany(ids, note));
  }

  /**
   * Replays the oldest dead jobs of a queue, optionally only those that died with `errorCode`,
   * at most `limit` (default 100, at most OPERATOR_BATCH_MAX). Fix the cause first.
   */
  replayDead(filter: { queue: string; errorCode?: string; limit?: number } & OperatorNote): Promise<ReplayOutcome[]> {
    return this.call(() => this.operator.replayDead(filter));
  }

  /** Dead jobs, oldest death first, by queue and error code, a page at a time. */
  listDead(filter: { queue?: string; errorCode?: string; limit?: number; cursor?: string } = {}): Promise<DeadJobPage> {
    return this.call(() => this.operator.listDead(filter));
  }

  /**
   * A page of a queue's jobs of one status, without payloads: `pending` (claimable, oldest due
   * first), `scheduled` (soonest first), `running` (soonest lease expiry first), `succeeded`,
   * `cancelled` and `dead` (newest first), optionally of one error code, `limit` (default 50, at
   * most 200) per page. Each page walks at most a bounded number of index entries
   * (BROWSE_WALK_MAX), so its cost never grows with the history kept; a short page with a
   * `nextCursor` (`walkedOut`) is not the last.
   */
  listJobs(filter: { queue: string; status: BrowsableStatus; errorCode?: string; limit?: number; cursor?: string }): Promise<JobPage> {
    return this.call(() => this.operator.listJobs(filter));
  }

  /** A queue's dead jobs grouped by error code (count, oldest and newest death, newest message), most first. */
  deadGroups(queue: string, options: { limit?: number } = {}): Promise<DeadErrorGroup[]> {
    return this.call(() => this.operator.deadGroups(queue, options));
  }

  /**
   * Jobs that finished (succeeded and dead) per `bucketMs` over the last `windowMs` (default 15
   * minutes, at most an hour), per queue and in total, read from the table: every process's work.
   * It reads at most `maxRows` (default 20,000) jobs per status, so its cost is bounded at any
   * throughput and never grows with the history kept; `completeForMs` says when the cap cut it short.
   */
  throughput(options: { windowMs?: number; bucketMs?: number; maxRows?: number } = {}): Promise<Throughput> {
    return this.call(() => this.operator.throughput(options));
  }

  /**
   * Deletes dead jobs that died before `olderThan` (of one queue, or all), recording each
   * batch's ids in `purges`. The only way dead jobs are ever removed. Returns how many it removed.
   */
  purgeDead(filter: { olderThan: Date; queue?: string; batchSize?: number } & OperatorNote): Promise<number> {
    return this.call(() => this.operator.purgeDead(filter));
  }

  /**
   * A snapshot for dashboards, alerts and `/metrics`, read from the database and this process.
   * Its cost follows live work (and dead jobs), never retained history: succeeded and cancelled
   * jobs are counted only when they finished within `recentWindowMs` (default 60 s, at most a day).
   */
  stats(options: { nearExpiryMs?: number; recentWindowMs?: number; topGroups?: number } = {}): Promise<EngineStats> {
    return this.call(async () => {
      const nearExpiryMs = requireInteger('nearExpiryMs', options.nearExpiryMs ?? NEAR_EXPIRY_MS_DEFAULT, 0);
      const recentWindowMs = requireInteger('recentWindowMs', options.recentWindowMs ?? RECENT_WINDOW_MS_DEFAULT, 1, RECENT_WINDOW_MS_MAX);
      const topGroups = requireInteger('topGroups', options.topGroups ?? 10, 0, 1_000);
      const [queues, database, flows, blockedFlows, scheduleQueues, lateSchedules] = await Promise.all([
        this.store.queueStats(this.pool, { nearExpiryMs, recentWindowMs }),
        this.store.databaseStats(this.pool),
        this.store.flowStats(this.pool, { topGroups }),
        this.store.blockedFlows(this.pool),
        this.store.scheduleQueueStats(this.pool),
        this.store.lateSchedules(this.pool, { lateByMs: LATE_SCHEDULE_LISTED_MS, limit: LATE_SCHEDULES_LISTED }),
      ]);
      const flowOf = new Map(flows.map((f) => [f.queue, f]));
      return {
        ...this.processStats(),
        recentWindowMs,
        queues: queues.map((q) => {
          const worker = this.workers.get(q.queue);
          return { ...q, slots: worker ? { busy: worker.busySlots, total: worker.options.concurrency } : undefined, flow: flowOf.get(q.queue), blockedFlows: blockedFlows.get(q.queue) ?? 0 };
        }),
        database,
        schedules: { queues: scheduleQueues, late: lateSchedules },
      };
    });
  }

  /**
   * Every public call that touches the database goes through here: a failure because the database
   * cannot be reached, or a statement that did not finish within statementTimeoutMs, reaches the
   * caller as DatabaseUnavailableError or DatabaseTimeoutError (the driver's error as `cause`),
   * never as the driver's raw error. `db`: the caller's own connection, when the call used it.
   */
  private async call<T>(body: () => Promise<T>, db?: Queryable): Promise<T> {
    // The pool it would use is closed: say so, instead of pg's "Cannot use a pool after calling end".
    if (this.state === 'stopped' && this.ownsPool && db === undefined) throw new EngineStoppedError(ENGINE_STOPPED());
    try {
      return await body();
    } catch (error) {
      const target = (db && targetOf(db)) ?? this.callContext.target;
      throw toCallError(error, target === this.callContext.target ? this.callContext : { ...this.callContext, target });
    }
  }

  /** This process's own figures: no query, so they are there when the database is not. */
  processStats(): ProcessStats {
    return {
      at: new Date(),
      listener: { listening: this.notifier.listening, downForMs: this.notifier.downForMs },
      pool: { total: this.pool.totalCount, idle: this.pool.idleCount, waiting: this.pool.waitingCount },
      workers: [...this.workers].map(([queue, worker]) => ({ queue, busy: worker.busySlots, total: worker.options.concurrency })),
    };
  }

  /**
   * Every metric in the Prometheus text format (see renderPrometheus), for a scrape: this
   * process's counters and histograms, and a `stats()` snapshot read within `timeoutMs` (default
   * 5 s, under Prometheus's default scrape timeout of 10 s). When the database fails or does not
   * answer in time the scrape still answers, without the database's gauges and with
   * `pgqueue_database_up 0`: a scrape that failed would lose every figure of this process too.
   */
  async prometheus(options: { timeoutMs?: number } = {}): Promise<string> {
    const timeoutMs = requireInteger('timeoutMs', options.timeoutMs ?? PROMETHEUS_TIMEOUT_DEFAULT_MS, 1, TIMER_MAX_MS);
    // Scrapes that overlap (two Prometheus servers, a slow read) share one read: in an outage each
    // read holds pool connections until its statements time out. A read that outlived a scrape's
    // timeout is not shared any further, though: on a pool without a connect timeout (one the app
    // passed) it may never settle, and would keep every later scrape at database_up 0.
    const read = (this.scrapeRead ??= this.stats().finally(() => {
      if (this.scrapeRead === read) this.scrapeRead = undefined;
    }));
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      read.then(
        (stats) => ({ stats }),
        (error: unknown) => ({ problem: (error as Error).message }),
      ),
      new Promise<{ problem: string }>((resolve) => (timer = setTimeout(() => resolve({ problem: METRICS_NO_ANSWER(timeoutMs) }), timeoutMs))),
    ]).finally(() => clearTimeout(timer));
    if (this.scrapeRead === read) this.scrapeRead = undefined;
    if ('stats' in outcome) {
      if (!this.scrapeAnswered) this.logger.log(METRICS_DATABASE_BACK());
      this.scrapeAnswered = true;
      return renderPrometheus(this.metrics, outcome.stats);
    }
    if (this.scrapeAnswered) {
      this.logger.warn(METRICS_SNAPSHOT_FAILED(outcome.problem));
    }
    this.scrapeAnswered = false;
    return renderPrometheus(this.metrics, this.processStats());
  }

  private async isKnownQueue(queue: string, db: Queryable = this.pool): Promise<boolean> {
    if (this.knownQueues.has(queue)) return true;
    for (const name of await this.store.listQueues(db)) this.knownQueues.add(name);
    return this.knownQueues.has(queue);
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

function isPool(value: unknown): value is pg.Pool {
  const pool = value as Partial<Record<'connect' | 'query' | 'end' | 'on', unknown>> | null;
  return typeof pool === 'object' && pool !== null && ['connect', 'query', 'end', 'on'].every((m) => typeof pool[m as 'connect'] === 'function');
}
