// The public API of nestjs-pg-queue. The framework-free engine has its own entry point,
// "nestjs-pg-queue/engine".
export { PgQueueModule } from './pg-queue.module.js';
export type { PgQueueModuleExtras } from './pg-queue.module-definition.js';
export { JobHandler } from './job-handler.decorator.js';
export {
  QueueService,
  type QueueEnqueueOptions,
  type DeadJobFilter,
  type ReplayDeadFilter,
  type PurgeDeadFilter,
  type DiscardOptions,
  type StatsOptions,
} from './queue.service.js';
export { PgQueueHealthIndicator, type PgQueueHealthResult, type PgQueueHealthDetails } from './pg-queue-health.indicator.js';
export { PgQueueMetricsService } from './pg-queue-metrics.service.js';
export {
  PG_QUEUE_ENGINE,
  PG_QUEUE_MODULE_OPTIONS,
  JOB_HANDLER_METADATA,
  REAPER_INTERVAL_NAME,
  PRUNER_INTERVAL_NAME,
  PROMETHEUS_CONTENT_TYPE,
} from './pg-queue.constants.js';
export type { JobHandlerOptions, PgQueueHealthOptions, PgQueueMetricsOptions, PgQueueModuleOptions, PgQueueOptionsFactory } from './interfaces/index.js';
export { drainQueues, type DrainQueuesOptions } from './testing/index.js';
export {
  type PgQueue,
  PgQueueError,
  InvalidOptionError,
  InvalidJobError,
  MigrationError,
  LeaseLostError,
  JobAbortedError,
  PermanentJobError,
  RetryableJobError,
  JobStateError,
  DatabaseUnavailableError,
  DatabaseTimeoutError,
  type Job,
  type JobContext,
  type JobStatus,
  type JobRecord,
  type JobEventRecord,
  type EnqueueOptions,
  type EnqueueCallOptions,
  type JobToEnqueue,
  type BackoffOptions,
  type AbortCode,
  type FenceLossReason,
  type Queryable,
  type MigrationMode,
  type OperatorNote,
  type ReplayOutcome,
  type DeadJobPage,
  type DeadJobSummary,
  type EngineStats,
  type ProcessStats,
  type QueueStats,
  type QueueCounts,
  type LiveJobStatus,
  type FinishedJobStatus,
  type JobEvent,
} from './engine/index.js';
