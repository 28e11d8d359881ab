// The public API of nestjs-pg-queue. The framework-free engine has its own entry point,
// "nestjs-pg-queue/engine", and the test kit its own, "nestjs-pg-queue/testing".
export { PgQueueModule, PgQueueFeatureModule } from './pg-queue.module.js';
export { Queue, getQueueToken, type RegisterQueueOptions, type QueueJobToEnqueue } from './queue.handle.js';
export { InjectQueue } from './inject-queue.decorator.js';
export { PgQueueExceptionFilter, pgQueueErrorStatus, type PgQueueErrorBody, type PgQueueHttpError } from './pg-queue-exception.filter.js';
export type { PgQueueModuleExtras } from './pg-queue.module-definition.js';
export { JobHandler } from './job-handler.decorator.js';
export { Processor, type JobProcessor } from './processor.decorator.js';
export { Recurring } from './recurring.decorator.js';
export { OnQueueEvent, type QueueEvent, type QueueEventType } from './on-queue-event.decorator.js';
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
import { drainQueues as drainQueuesOfTesting, type DrainQueuesOptions as DrainQueuesOptionsOfTesting } from './testing/index.js';
/** @deprecated Import it from "nestjs-pg-queue/testing"; this export goes in the next minor version. */
export const drainQueues = drainQueuesOfTesting;
/** @deprecated Import it from "nestjs-pg-queue/testing"; this export goes in the next minor version. */
export type DrainQueuesOptions = DrainQueuesOptionsOfTesting;
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
  RateLimitedError,
  type RateLimitedErrorOptions,
  type RateLimit,
  type QueueLimits,
  type QueueLimitsInput,
  type GroupLimits,
  type GroupLimitsInput,
  type GroupLimitsRecord,
  JobStateError,
  DatabaseUnavailableError,
  DatabaseTimeoutError,
  DatabaseConnectionError,
  EngineStoppedError,
  InvalidPayloadError,
  defineJob,
  type JobDefinition,
  type DefineJobOptions,
  type StandardSchema,
  type SchemaOutput,
  type Upcasters,
  InternalError,
  HandlerUsageError,
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
  type ScheduleCalls,
  type ScheduleInput,
  type ScheduleFilter,
  type ScheduleRecord,
  type ScheduleStats,
  type ScheduleQueueStats,
  type LateSchedule,
  type RecurringOptions,
  type CodeScheduleOptions,
  type MissedPolicy,
  type QueueStats,
  type QueueCounts,
  type LiveJobStatus,
  type FinishedJobStatus,
  type JobEvent,
} from './engine/index.js';
