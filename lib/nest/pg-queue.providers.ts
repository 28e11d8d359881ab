import type { Provider } from '@nestjs/common';
import type { PgQueue } from '../engine/index.js';
import type { PgQueueModuleOptions } from '../interfaces/index.js';
import { PG_QUEUE_ENGINE, PG_QUEUE_MODULE_OPTIONS } from '../pg-queue.constants.js';
import { NestEngineLogger } from './nest-engine-logger.js';
import { createEngine, resolveModuleConfig, type ModuleRuntimeConfig } from './pg-queue.options.js';

/** The module's own settings (processing, shutdown timeout, reaper interval, queues), validated. */
export const PG_QUEUE_RUNTIME_CONFIG = Symbol('pg-queue:runtime-config');

/**
 * The providers behind the tokens: options are validated when the application is created (before
 * any connection is opened), so a bad option fails the start with a message naming it.
 */
export const pgQueueProviders: Provider[] = [
  {
    provide: PG_QUEUE_RUNTIME_CONFIG,
    useFactory: (options: PgQueueModuleOptions): ModuleRuntimeConfig => {
      const logger = new NestEngineLogger();
      return resolveModuleConfig(options, (message) => logger.warn(message));
    },
    inject: [PG_QUEUE_MODULE_OPTIONS],
  },
  {
    provide: PG_QUEUE_ENGINE,
    useFactory: (config: ModuleRuntimeConfig): PgQueue => createEngine(config, new NestEngineLogger()),
    inject: [PG_QUEUE_RUNTIME_CONFIG],
  },
];
