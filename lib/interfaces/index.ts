export type { JobHandlerMetadata, JobHandlerOptions, PgQueueHealthOptions, PgQueueModuleOptions, PgQueueOptionsFactory } from './pg-queue-options.interface.js';
