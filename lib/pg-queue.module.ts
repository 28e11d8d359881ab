import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { PgQueueMetadataAccessor } from './nest/pg-queue-metadata.accessor.js';
import { PgQueueExplorer } from './nest/pg-queue.explorer.js';
import { PgQueueOrchestrator } from './nest/pg-queue.orchestrator.js';
import { pgQueueProviders } from './nest/pg-queue.providers.js';
import { PG_QUEUE_ENGINE } from './pg-queue.constants.js';
import { ConfigurablePgQueueModule } from './pg-queue.module-definition.js';
import { PgQueueHealthIndicator } from './pg-queue-health.indicator.js';
import { PgQueueMetricsService } from './pg-queue-metrics.service.js';
import { QueueService } from './queue.service.js';

/**
 * PostgreSQL as a job queue for Nest.
 *
 * ```ts
 * @Module({
 *   imports: [PgQueueModule.forRoot({ connectionString: process.env.DATABASE_URL })],
 *   providers: [EmailJobs],
 * })
 * export class AppModule {}
 * ```
 *
 * It provides (and exports) `QueueService` (enqueue, read, operate), `PgQueueHealthIndicator`
 * (health by age, for @nestjs/terminus or on its own) and `PgQueueMetricsService` (Prometheus).
 *
 * `forRootAsync({ imports, inject, useFactory })` (or `useClass` / `useExisting` with a
 * `PgQueueOptionsFactory`) reads the options from other providers, e.g. `ConfigService`. The module
 * is global unless `isGlobal: false`.
 *
 * It never imports `ScheduleModule.forRoot()` (a second one would run the app's own `@Cron` and
 * `@Interval` methods twice). When the app imports it, the reaper's and pruner's passes are
 * registered with its `SchedulerRegistry`; without it (or without `@nestjs/schedule` installed)
 * they run on the engine's own timers.
 *
 * @publicApi
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    ...pgQueueProviders,
    PgQueueMetadataAccessor,
    PgQueueExplorer,
    PgQueueOrchestrator,
    QueueService,
    PgQueueHealthIndicator,
    PgQueueMetricsService,
  ],
  exports: [QueueService, PgQueueHealthIndicator, PgQueueMetricsService, PG_QUEUE_ENGINE],
})
export class PgQueueModule extends ConfigurablePgQueueModule {}
