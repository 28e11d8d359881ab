import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService, type HealthCheckResult } from '@nestjs/terminus';
import { PgQueueHealthIndicator } from '../../lib/index.js';

/**
 * Health through @nestjs/terminus: 200 `{ status: 'ok', info: { pgQueue: { status: 'up', … } } }`,
 * or 503 `{ status: 'error', error: { pgQueue: { status: 'down', problems: [...] } } }` when a
 * queue's oldest claimable job has waited too long, the LISTEN connection has been down too long,
 * or the database does not answer. Add your other indicators to the same list.
 */
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly pgQueue: PgQueueHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check(): Promise<HealthCheckResult> {
    return this.health.check([() => this.pgQueue.isHealthy()]);
  }
}
