import { Inject, Injectable } from '@nestjs/common';
import { PgQueue } from './engine/index.js';
import type { PgQueueMetricsOptions } from './interfaces/index.js';
import { PG_QUEUE_RUNTIME_CONFIG } from './nest/pg-queue.providers.js';
import { resolveMetricsOptions, type ModuleRuntimeConfig } from './nest/pg-queue.options.js';
import { PG_QUEUE_ENGINE, PROMETHEUS_CONTENT_TYPE } from './pg-queue.constants.js';

/**
 * The queue's metrics in the Prometheus text format, for a scrape endpoint:
 *
 * ```ts
 * @Get('metrics') @Header('content-type', PROMETHEUS_CONTENT_TYPE)
 * metrics() { return this.metrics.prometheus(); }
 * ```
 *
 * Counters and histograms are this process's (claims, retries by code and attempt, lost fences,
 * lease expirations its reaper recovered, durations in seconds); gauges are read from the database
 * on each scrape (jobs per live status, jobs finished within the last minute, age of the oldest
 * claimable and dead job, running jobs near lease expiry) and so are the whole queue's:
 * aggregate them with `max`, not `sum`, across processes. A scrape never counts the retained
 * history, so it costs the same however much of it is kept. When the database fails or does not
 * answer within `timeoutMs`, the scrape still answers: this process's figures, no database
 * gauges, and `pgqueue_database_up 0`.
 * The same counters and histograms are published through `@opentelemetry/api` (a no-op until the
 * application installs an SDK).
 *
 * @publicApi
 */
@Injectable()
export class PgQueueMetricsService {
  /** The content type to serve `prometheus()` with. */
  readonly contentType = PROMETHEUS_CONTENT_TYPE;

  constructor(
    @Inject(PG_QUEUE_ENGINE) private readonly engine: PgQueue,
    @Inject(PG_QUEUE_RUNTIME_CONFIG) private readonly config: ModuleRuntimeConfig,
  ) {}

  /**
   * Renders every metric; one snapshot read (`QueueService.stats()`) per call, shared by calls
   * that overlap, and waited for at most `timeoutMs` (module option `metrics`, overridden here).
   * Throws `InvalidOptionError` only for a bad option, never because of the database.
   */
  prometheus(options?: PgQueueMetricsOptions): Promise<string> {
    const { timeoutMs } = resolveMetricsOptions('metrics', options, this.config.metrics);
    return this.engine.prometheus({ timeoutMs });
  }
}
