import { Controller, Get, Param, Post, Req, Res, type Type } from '@nestjs/common';
import type { ServerResponse } from 'node:http';
import { DASHBOARD_CSS, htmxScript } from './dashboard.assets.js';
import type { DashboardRequest } from './dashboard.options.js';
import { setSecurityHeaders } from './dashboard.security.js';
import { DashboardService } from './dashboard.service.js';

/**
 * The dashboard's routes, under `path` (a class per module: the path is the module's option, and
 * Nest reads a controller's path from its class). Each route names how many segments it adds to
 * the base, so the pages link right under any global prefix. Nothing outside `path` is routed.
 */
export function dashboardController(path: string): Type<unknown> {
  @Controller(path)
  class PgQueueDashboardController {
    constructor(private readonly pages: DashboardService) {}

    @Get()
    queues(@Req() req: DashboardRequest, @Res() res: ServerResponse): Promise<void> {
      return this.pages.serve(req, res, 0, (ctx) => this.pages.queues(ctx, req));
    }

    @Get('live')
    live(@Req() req: DashboardRequest, @Res() res: ServerResponse): Promise<void> {
      return this.pages.serve(req, res, 1, (ctx) => this.pages.queuesLive(ctx, req));
    }

    @Get('assets/htmx.min.js')
    htmx(@Res() res: ServerResponse): void {
      asset(res, 'text/javascript; charset=utf-8', htmxScript());
    }

    @Get('assets/dashboard.css')
    css(@Res() res: ServerResponse): void {
      asset(res, 'text/css; charset=utf-8', DASHBOARD_CSS);
    }

    @Get('queues/:name')
    queue(@Req() req: DashboardRequest, @Res() res: ServerResponse, @Param('name') name: string): Promise<void> {
      return this.pages.serve(req, res, 2, (ctx) => this.pages.queuePage(ctx, req, name));
    }

    @Get('queues/:name/live')
    queueLive(@Req() req: DashboardRequest, @Res() res: ServerResponse, @Param('name') name: string): Promise<void> {
      return this.pages.serve(req, res, 3, (ctx) => this.pages.queueLive(ctx, req, name));
    }

    @Get('queues/:name/dead')
    dead(@Req() req: DashboardRequest, @Res() res: ServerResponse, @Param('name') name: string): Promise<void> {
      return this.pages.serve(req, res, 3, (ctx) => this.pages.deadPage(ctx, req, name));
    }

    @Get('jobs')
    goToJob(@Req() req: DashboardRequest, @Res() res: ServerResponse): Promise<void> {
      return this.pages.serve(req, res, 1, (ctx) => this.pages.goToJob(ctx, req));
    }

    @Get('jobs/:id')
    job(@Req() req: DashboardRequest, @Res() res: ServerResponse, @Param('id') id: string): Promise<void> {
      return this.pages.serve(req, res, 2, (ctx) => this.pages.jobPage(ctx, req, id));
    }

    @Get('confirm')
    confirm(@Req() req: DashboardRequest, @Res() res: ServerResponse): Promise<void> {
      return this.pages.serve(req, res, 1, (ctx) => this.pages.confirm(ctx, req));
    }

    @Post('actions/:action')
    act(@Req() req: DashboardRequest, @Res() res: ServerResponse, @Param('action') action: string): Promise<void> {
      return this.pages.serve(req, res, 2, (ctx) => this.pages.act(ctx, req, action), true);
    }
  }
  return PgQueueDashboardController;
}

/** The module's own script and stylesheet: public (the refusal page needs them too), cached for an hour. */
function asset(res: ServerResponse, type: string, body: string | Buffer): void {
  setSecurityHeaders(res);
  res.setHeader('Cache-Control', 'public, max-age=3600');
  res.setHeader('Content-Type', type);
  res.end(body);
}
