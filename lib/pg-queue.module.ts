import { Module, type DynamicModule, type Provider } from '@nestjs/common';
import { InvalidOptionError, isJobDefinition, isQueueName, type PgQueue } from './engine/index.js';
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
import { getQueueToken, Queue, type RegisterQueueOptions } from './queue.handle.js';
import { FOR_ROOT_MISSING } from './pg-queue.messages.js';

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
 * is global unless `isGlobal: false`. Import `forRoot` once, in the root module (a second one is a
 * start error); feature modules import `registerQueue({ name })` and inject the queue's handle
 * with `@InjectQueue(name)`.
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
export class PgQueueModule extends ConfigurablePgQueueModule {
  /**
   * Handles of queues for a feature module, the @nestjs/bullmq way: each `{ name, defaults }`
   * becomes a `Queue` provider (exported) injected with `@InjectQueue(name)`. The queues are
   * declared when the application starts. Needs `forRoot()` (or `forRootAsync()`) once, in the
   * root module; this module starts nothing of its own.
   */
  static registerQueue(...queues: RegisterQueueOptions[]): DynamicModule {
    const providers: Provider[] = queues.map((options, index) => {
      const definition = options?.job;
      if (definition !== undefined && !isJobDefinition(definition)) {
        throw new InvalidOptionError(`registerQueue[${index}].job`, 'it is not a job definition', 'Pass what defineJob() returned.');
      }
      const name: unknown = options?.name ?? definition?.queue;
      if (definition && name !== definition.queue) {
        throw new InvalidOptionError(`registerQueue[${index}].name`, `"${String(name)}" is not the definition's queue "${definition.queue}"`, 'Leave name out, or give the definition\'s queue.');
      }
      if (typeof name !== 'string' || !isQueueName(name)) {
        throw new InvalidOptionError(
          `registerQueue[${index}].name`,
          `${JSON.stringify(String(name).slice(0, 80))} is not a valid queue name`,
          'Use 1-128 characters: letters, digits, "_", ".", ":" or "-", starting with a letter or digit.',
        );
      }
      return {
        provide: getQueueToken(name),
        useFactory: (engine: PgQueue | undefined) => {
          if (!engine) throw new InvalidOptionError('PgQueueModule.registerQueue', FOR_ROOT_MISSING(name), 'Add PgQueueModule.forRoot() to the root module.');
          return new Queue(name, engine, options.defaults, definition);
        },
        inject: [{ token: PG_QUEUE_ENGINE, optional: true }],
      };
    });
    return { module: PgQueueFeatureModule, providers, exports: providers.map((p) => (p as { provide: string }).provide) };
  }
}

/** The module `registerQueue` returns: queue handles only, on the root module's engine. */
@Module({})
export class PgQueueFeatureModule {}
