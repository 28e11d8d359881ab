export type { JobHandlerMetadata, JobHandlerOptions, PgQueueModuleOptions, PgQueueOptionsFactory } from './pg-queue-options.interface.js';
