import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
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
 * is global unless `isGlobal: false`. It imports `ScheduleModule.forRoot()` for the reaper's
 * interval; importing it yourself as well is fine.
 *
 * @publicApi
 */
@Module({
  imports: [DiscoveryModule, ScheduleModule.forRoot()],
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
