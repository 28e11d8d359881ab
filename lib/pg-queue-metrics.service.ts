import { Inject, Injectable } from '@nestjs/common';
import { PgQueue, renderPrometheus } from './engine/index.js';
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
 * lease expirations its reaper recovered, latencies); gauges are read from the database on each
 * scrape (jobs per live status, jobs finished within the last minute, age of the oldest
 * claimable and dead job, running jobs near lease expiry) and so are the whole queue's:
 * aggregate them with `max`, not `sum`, across processes. A scrape never counts the retained
 * history, so it costs the same however much of it is kept.
 * The same counters and histograms are published through `@opentelemetry/api` (a no-op until the
 * application installs an SDK).
 *
 * @publicApi
 */
@Injectable()
export class PgQueueMetricsService {
  /** The content type to serve `prometheus()` with. */
  readonly contentType = PROMETHEUS_CONTENT_TYPE;

  constructor(@Inject(PG_QUEUE_ENGINE) private readonly engine: PgQueue) {}

  /** Renders every metric; one snapshot query (`QueueService.stats()`) per call. */
  async prometheus(): Promise<string> {
    return renderPrometheus(this.engine.metrics, await this.engine.stats());
  }
}
