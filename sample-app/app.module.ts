import { Module, type DynamicModule } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { PgQueueModule, type PgQueueModuleOptions } from '../lib/index.js';
import { FakePaymentGateway } from './fake-payment-gateway.js';
import { HealthController } from './http/health.controller.js';
import { JobsController } from './http/jobs.controller.js';
import { PgQueueErrorFilter } from './http/pg-queue-error.filter.js';
import { ImportJobs } from './jobs/imports.jobs.js';
import { PaymentJobs } from './jobs/payments.jobs.js';
import { ReportJobs } from './jobs/reports.jobs.js';
import { WebhookJobs } from './jobs/webhooks.jobs.js';

/**
 * The sample application. `register()` takes the queue's options so that tests can boot the
 * same module against their own database with shorter intervals.
 */
@Module({})
export class AppModule {
  static register(queueOptions: PgQueueModuleOptions): DynamicModule {
    return {
      module: AppModule,
      imports: [PgQueueModule.forRoot(queueOptions)],
      controllers: [JobsController, HealthController],
      providers: [
        FakePaymentGateway,
        PaymentJobs,
        ReportJobs,
        WebhookJobs,
        ImportJobs,
        { provide: APP_FILTER, useClass: PgQueueErrorFilter },
      ],
    };
  }
}
