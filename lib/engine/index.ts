// The framework-free engine: everything the Nest module is built on, usable without Nest.
export { PgQueue, type PgQueueOptions, type StartOptions, type JobRecord, type JobEventRecord } from './pg-queue.js';
export type { Job, JobContext, JobHandlerFn, HandlerOptions, BackoffOptions, JobStatus, AbortCode } from './types.js';
export type { EnqueueOptions, EnqueueCallOptions, JobToEnqueue } from './producer.js';
export type { Queryable } from './db.js';
export type { EngineLogger } from './logger.js';
export { EngineMetrics, type JobEvent, type CounterName } from './metrics.js';
export { HANDLER_DEFAULTS, type WorkerHooks } from './worker.js';
export { REAPER_DEFAULTS, type ReaperConfig, type ReapResult } from './reaper.js';
export { SCHEDULER_DEFAULTS, type SchedulerConfig } from './scheduler.js';
export { NOTIFIER_DEFAULTS, type NotifierConfig } from './notifier.js';
export { migrate, type MigrationMode, type MigrateOptions, type MigrationReport } from './migrator.js';
export { DEFAULT_SCHEMA } from './identifiers.js';
export {
  PgQueueError,
  InvalidOptionError,
  InvalidJobError,
  MigrationError,
  LeaseLostError,
  JobAbortedError,
  PermanentJobError,
  RetryableJobError,
  type FenceLossReason,
} from './errors.js';
