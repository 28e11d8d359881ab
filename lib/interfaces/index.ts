export type { JobHandlerMetadata, JobHandlerOptions, PgQueueHealthOptions, PgQueueMetricsOptions, PgQueueModuleOptions, PgQueueOptionsFactory } from './pg-queue-options.interface.js';
