import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { PgQueueMetadataAccessor } from './nest/pg-queue-metadata.accessor.js';
import { PgQueueExplorer } from './nest/pg-queue.explorer.js';
import { PgQueueOrchestrator } from './nest/pg-queue.orchestrator.js';
import { pgQueueProviders } from './nest/pg-queue.providers.js';
import { PG_QUEUE_ENGINE } from './pg-queue.constants.js';
import { ConfigurablePgQueueModule } from './pg-queue.module-definition.js';
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
 * `forRootAsync({ imports, inject, useFactory })` (or `useClass` / `useExisting` with a
 * `PgQueueOptionsFactory`) reads the options from other providers, e.g. `ConfigService`. The module
 * is global unless `isGlobal: false`. It imports `ScheduleModule.forRoot()` for the reaper's
 * interval; importing it yourself as well is fine.
 *
 * @publicApi
 */
@Module({
  imports: [DiscoveryModule, ScheduleModule.forRoot()],
  providers: [...pgQueueProviders, PgQueueMetadataAccessor, PgQueueExplorer, PgQueueOrchestrator, QueueService],
  exports: [QueueService, PG_QUEUE_ENGINE],
})
export class PgQueueModule extends ConfigurablePgQueueModule {}
