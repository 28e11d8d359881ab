/**
 * Tokens, metadata keys and defaults of the Nest module, in one place. Keys are plain, namespaced
 * strings (not `DiscoveryService.createDecorator`'s random keys), so two copies of the library in
 * one `node_modules` still read each other's metadata, and a debugger shows what they are.
 */

/** Metadata key that `@JobHandler()` sets on a method. */
export const JOB_HANDLER_METADATA = 'pg-queue:job-handler';

/** Metadata key of `@Processor()` (on a class). */
export const PROCESSOR_METADATA = 'pg-queue:processor';

/** Metadata key of `@Recurring()` (on a handler's method, or a `@Processor` class): a list. */
export const RECURRING_METADATA = 'pg-queue:recurring';

/** Metadata key of `@OnQueueEvent()`. */
export const QUEUE_EVENT_METADATA = 'pg-queue:queue-event';

/** Injection token of the module's options (what `forRoot` / `forRootAsync` produced). */
export const PG_QUEUE_MODULE_OPTIONS = Symbol('pg-queue:module-options');

/**
 * Injection token of the framework-free engine (`PgQueue` from `nestjs-pg-queue/engine`) that the
 * module owns. Inject it for what `QueueService` does not cover (metrics, the event stream).
 */
export const PG_QUEUE_ENGINE = Symbol('pg-queue:engine');

/**
 * The name in `@nestjs/schedule`'s `SchedulerRegistry` of the interval that runs one of the
 * engine's fixed-interval passes (`PgQueue.hostablePasses`), when the app imports `ScheduleModule`.
 */
export const passIntervalName = (pass: string) => `pg-queue:${pass}`;

/** Name of the reaper's interval in `SchedulerRegistry`. */
export const REAPER_INTERVAL_NAME = passIntervalName('reaper');

/** Name of the pruner's interval (retention of succeeded jobs) in `SchedulerRegistry`, likewise. */
export const PRUNER_INTERVAL_NAME = passIntervalName('pruner');

/** Context of every log line the module writes through Nest's `Logger`. */
export const PG_QUEUE_LOGGER_CONTEXT = 'PgQueue';

/** How long shutdown lets running handlers finish before it aborts their signals and releases them. */
export const SHUTDOWN_TIMEOUT_DEFAULT_MS = 10_000;

/** How long the health indicator waits for the database before it reports down. */
export const HEALTH_TIMEOUT_DEFAULT_MS = 5_000;

/** The health indicator's default key in a @nestjs/terminus result. */
export const HEALTH_KEY_DEFAULT = 'pgQueue';

/** Content type of the Prometheus text exposition format that `PgQueueMetricsService.prometheus()` renders. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';
