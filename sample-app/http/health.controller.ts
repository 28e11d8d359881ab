import { Controller, Get, Inject, ServiceUnavailableException } from '@nestjs/common';
import { PG_QUEUE_ENGINE, type PgQueue } from '../../lib/index.js';

@Controller('health')
export class HealthController {
  constructor(@Inject(PG_QUEUE_ENGINE) private readonly engine: PgQueue) {}

  /** `{ status: 'ok' }` once the queue's database answers; 503 otherwise. */
  @Get()
  async check(): Promise<{ status: 'ok' }> {
    try {
      await this.engine.pool.query('SELECT 1');
    } catch (error) {
      throw new ServiceUnavailableException({ status: 'error', message: `database: ${(error as Error).message}` });
    }
    return { status: 'ok' };
  }
}
