import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { PgQueueModuleOptions } from './interfaces/index.js';
import { PG_QUEUE_MODULE_OPTIONS } from './pg-queue.constants.js';

/** Extras of `forRoot` / `forRootAsync` that shape the module rather than the queue. */
export interface PgQueueModuleExtras {
  /** Register `QueueService` globally, so feature modules need not import the module (default true). */
  isGlobal?: boolean;
}

export const {
  ConfigurableModuleClass: ConfigurablePgQueueModule,
  OPTIONS_TYPE: PG_QUEUE_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: PG_QUEUE_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<PgQueueModuleOptions>({ optionsInjectionToken: PG_QUEUE_MODULE_OPTIONS, moduleName: 'PgQueue' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createPgQueueOptions')
  .setExtras<PgQueueModuleExtras>({ isGlobal: true }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();
