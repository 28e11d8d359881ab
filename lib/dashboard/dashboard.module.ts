import { Module, type DynamicModule, type OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { DASHBOARD_CONFIG } from './dashboard.constants.js';
import { dashboardController } from './dashboard.controller.js';
import { DashboardError } from './dashboard.errors.js';
import { DASHBOARD_PLATFORM_UNSUPPORTED } from './dashboard.messages.js';
import { resolveDashboardOptions, type PgQueueDashboardOptions } from './dashboard.options.js';
import { DashboardService } from './dashboard.service.js';

/** Refuses, at start, an application that is not on Express (the pages write to Node's response). */
export function checkDashboardPlatform(adapterHost: Pick<HttpAdapterHost, 'httpAdapter'> | undefined): void {
  const type = adapterHost?.httpAdapter?.getType?.();
  // No HTTP adapter: a standalone application context (a test module never listened on); nothing is served.
  if (type === undefined || type === 'express') return;
  throw new DashboardError('DASHBOARD_PLATFORM_UNSUPPORTED', DASHBOARD_PLATFORM_UNSUPPORTED(String(type)));
}

/**
 * The operator's dashboard, served by the application that imports it (no server of its own):
 *
 * ```ts
 * imports: [PgQueueModule.forRoot({ … }), PgQueueDashboardModule.forRoot({ guard: (req) => isAdmin(req), actor: (req) => req.user.email })]
 * ```
 *
 * It reads and acts through `QueueService`, so `PgQueueModule` must be imported (it is global by
 * default). Express only. See docs/dashboard.md.
 */
@Module({})
export class PgQueueDashboardModule implements OnModuleInit {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  /** Throws DashboardError (DASHBOARD_UNGUARDED, DASHBOARD_INVALID_OPTION) at once, when the app's module is built. */
  static forRoot(options: PgQueueDashboardOptions = {}): DynamicModule {
    const config = resolveDashboardOptions(options, process.env.NODE_ENV);
    return {
      module: PgQueueDashboardModule,
      controllers: [dashboardController(config.path)],
      providers: [{ provide: DASHBOARD_CONFIG, useValue: config }, DashboardService],
    };
  }

  onModuleInit(): void {
    checkDashboardPlatform(this.adapterHost);
  }
}
