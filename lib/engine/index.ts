// The framework-free engine: everything the Nest module is built on, usable without Nest.
export {
  PgQueue,
  type PgQueueOptions,
  type StartOptions,
  type JobRecord,
  type JobEventRecord,
  type JobEffectRecord,
  type QueueAuditRecord,
  type JobSummary,
  type JobPage,
  type DeadErrorGroup,
  type Throughput,
  type BrowsableStatus,
  type OperatorNote,
  type ReplayOutcome,
  type DeadJobPage,
  type DeadJobSummary,
  type QueueStats,
  type QueueCounts,
  type EngineStats,
  type ProcessStats,
} from './pg-queue.js';
export type { ScheduleRecord, ScheduleStats, ScheduleQueueStats, LateSchedule } from './records.js';
export { OPERATOR_BATCH_MAX, LIST_JOBS_MAX } from './operator.js';
export { BROWSABLE_STATUSES, BROWSE_WALK_MAX } from './store/index.js';
export type { MaintenanceService, FixedIntervalPass, HostablePass } from './maintenance/service.js';
export type {
  Job,
  JobContext,
  JobHandlerFn,
  HandlerOptions,
  BackoffOptions,
  JobStatus,
  LiveJobStatus,
  FinishedJobStatus,
  AbortCode,
  CompleteOptions,
  EffectOptions,
  Reconciliation,
  RateLimit,
  ChildResult,
  QueueLimits,
  QueueLimitsInput,
  GroupLimits,
  GroupLimitsInput,
  GroupLimitsRecord,
} from './types.js';
export { EFFECT_RESULT_MAX_BYTES } from './effects.js';
export type {
  DebounceOptions,
  EnqueueCallOptions,
  EnqueuedIds,
  EnqueueOptions,
  EnqueueResult,
  JobToEnqueue,
  KeyedEnqueueOptions,
  DeduplicationOptions,
  UniqueOptions,
  UniqueWhile,
} from './producer.js';
export { FLOW_RESULT_MAX_BYTES, FLOW_MAX_JOBS, type FlowNode, type FlowJobOptions, type EnqueuedFlow } from './flows.js';
export type { Queryable } from './db.js';
export type { EngineLogger } from './logger.js';
export { FAILURE_LOG_INTERVAL_MS } from './log-throttle.js';
export {
  EngineMetrics,
  HISTOGRAM_BUCKETS,
  LEASE_EXPIRED_CODES,
  LEASE_OPERATIONS,
  type JobEvent,
  type JobEventListener,
  type JobEventType,
  type CounterName,
  type HistogramName,
  type DeprecatedHistogramName,
  type HistogramSnapshot,
  type Labels,
  type LeaseOperation,
} from './metrics.js';
export {
  CLUSTER_EVENTS_DEFAULTS,
  CLUSTER_EVENT_DROP_REASONS,
  JOB_EVENT_TYPES,
  type ClusterEventsConfig,
  type ClusterEventDropReason,
  type ClusterJobEvent,
  type ClusterJobEventListener,
} from './cluster-events.js';
export { PRUNER_DEFAULTS, type PrunerConfig } from './maintenance/pruner.js';
export { HANDLER_DEFAULTS, type WorkerHooks } from './worker.js';
export { REAPER_DEFAULTS, type ReaperConfig, type ReapResult } from './maintenance/reaper.js';
export { SCHEDULER_DEFAULTS, type SchedulerConfig } from './maintenance/scheduler.js';
export { TICKER_DEFAULTS, type TickerConfig } from './maintenance/ticker.js';
export { ScheduleCalls, type CodeScheduleOptions, type RecurringOptions, type ScheduleFilter, type ScheduleInput } from './recurring.js';
export { MISSED_POLICIES, type MissedPolicy } from './cron.js';
export { NOTIFIER_DEFAULTS, type NotifierConfig } from './notifier.js';
export { migrate, type MigrationMode, type MigrateOptions, type MigrationReport } from './migrator.js';
export { DEFAULT_SCHEMA } from './identifiers.js';
export {
  PgQueueError,
  InvalidOptionError,
  InvalidJobError,
  InvalidPayloadError,
  MigrationError,
  LeaseLostError,
  JobAbortedError,
  PermanentJobError,
  RetryableJobError,
  RateLimitedError,
  type RateLimitedErrorOptions,
  JobStateError,
  DatabaseUnavailableError,
  DatabaseConnectionError,
  EngineStoppedError,
  DatabaseTimeoutError,
  InternalError,
  HandlerUsageError,
  FENCE_LOSS_REASONS,
  type FenceLossReason,
} from './errors.js';
export { renderPrometheus, PROMETHEUS_TIMEOUT_DEFAULT_MS } from './prometheus.js';
export { checkHealth, HEALTH_DEFAULTS, type HealthThresholds, type HealthReport } from './health.js';

// ---------------------------------------------------------------------------------------------
// @internal: for the Nest module of this package only (it imports the engine through this barrel
// alone). Not a stable API: these may change in any release; do not use them from an app.
export { LogThrottle } from './log-throttle.js';
export { boolean, nested, opaque, resolveSection, section, timerMs, type Section, type Warn } from './config.js';
export { ENGINE_OPTIONS } from './options.js';
export { isQueueName } from './identifiers.js';
export { CLUSTER_EVENTS_OFF, CLUSTER_EVENTS_OFF_FIX, CLUSTER_EVENT_NOT_PUBLISHED, CLUSTER_EVENT_NOT_PUBLISHED_FIX } from './messages.js';
export {
  defineJob,
  isJobDefinition,
  payloadToEnqueue,
  payloadForHandler,
  checkUpcasters,
  type JobDefinition,
  type DefineJobOptions,
  type StandardSchema,
  type StandardResult,
  type StandardIssue,
  type SchemaOutput,
  type SchemaInput,
  type Upcasters,
} from './job-definition.js';
export { resolveHandlerOptions } from './worker.js';
// For the project's own tests (lib/testing/test-signals.ts): the services' test signals.
export {
  ENABLE_TEST_SIGNALS,
  TestSignal,
  TestSignalError,
  TEST_SIGNAL_TIMEOUT_DEFAULT_MS,
  type AttemptOutcome,
  type EngineTestSignals,
} from './test-signals.js';
