import { Controller, Get, Header } from '@nestjs/common';
import { PgQueueMetricsService, PROMETHEUS_CONTENT_TYPE } from '../../lib/index.js';

/** Prometheus scrapes this: `scrape_configs: [{ job_name: 'app', static_configs: [{ targets: ['app:3000'] }] }]`. */
@Controller('metrics')
export class MetricsController {
  constructor(private readonly metrics: PgQueueMetricsService) {}

  @Get()
  @Header('content-type', PROMETHEUS_CONTENT_TYPE)
  scrape(): Promise<string> {
    return this.metrics.prometheus();
  }
}
