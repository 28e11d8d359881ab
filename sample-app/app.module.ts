import { Module, type DynamicModule, type Provider } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { TerminusModule } from '@nestjs/terminus';
import { PgQueueDashboardModule } from '../lib/dashboard/index.js';
import { PgQueueExceptionFilter, PgQueueModule, type PgQueueModuleOptions } from '../lib/index.js';
import { FakePaymentGateway } from './fake-payment-gateway.js';
import { HealthController } from './http/health.controller.js';
import { JobsController } from './http/jobs.controller.js';
import { MetricsController } from './http/metrics.controller.js';
import { OperatorController } from './http/operator.controller.js';
import { sampleActor, SignInController } from './http/sign-in.controller.js';
import { ImportJobs } from './jobs/imports.jobs.js';
import { PaymentJobs } from './jobs/payments.jobs.js';
import { ReportJobs } from './jobs/reports.jobs.js';
import { WebhookJobs } from './jobs/webhooks.jobs.js';

/**
 * The sample application. `register()` takes the queue's options so that tests can boot the
 * same module against their own database with shorter intervals. `extraProviders` lets a test add
 * handlers of its own beside the sample's.
 */
@Module({})
export class AppModule {
  static register(queueOptions: PgQueueModuleOptions, extraProviders: Provider[] = []): DynamicModule {
    return {
      module: AppModule,
      imports: [
        PgQueueModule.forRoot(queueOptions),
        TerminusModule,
        // The operator's dashboard at /pg-queue. Its guard is the sample's stand-in for authentication
        // (the x-actor header, or the sign-in form's cookie); payments' payloads stay hidden (card data).
        PgQueueDashboardModule.forRoot({
          path: '/pg-queue',
          guard: (req) => sampleActor(req) !== undefined,
          actor: sampleActor,
          showPayload: (_req, job) => job.queue !== 'payments',
          signInUrl: '/sign-in?returnTo=/pg-queue',
          notice: 'Sample app: signed in by a development stand-in for real authentication (any name is believed).',
        }),
      ],
      controllers: [JobsController, OperatorController, HealthController, MetricsController, SignInController],
      providers: [
        FakePaymentGateway,
        PaymentJobs,
        ReportJobs,
        WebhookJobs,
        ImportJobs,
        { provide: APP_FILTER, useClass: PgQueueExceptionFilter },
        ...extraProviders,
      ],
    };
  }
}
