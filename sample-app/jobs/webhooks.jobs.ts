import { Injectable } from '@nestjs/common';
import { JobHandler, RetryableJobError, type Job } from '../../lib/index.js';
import { QUEUES, type DeliverWebhook } from './job-payloads.js';

/**
 * (c) A transient failure: the receiver is briefly unavailable. `RetryableJobError` schedules a
 * retry with backoff (here at least `retryAfterMs`, as a 503's Retry-After would say) until
 * `maxAttempts`; the job's history records each retry with its code.
 */
@Injectable()
export class WebhookJobs {
  @JobHandler(QUEUES.webhooks, { concurrency: 5, maxAttempts: 5, backoff: { baseMs: 200, maxMs: 5_000 } })
  async deliver(job: Job<DeliverWebhook>): Promise<void> {
    // The demo's receiver answers 503 on the first `failuresBeforeSuccess` attempts.
    if (job.attempt <= (job.payload.failuresBeforeSuccess ?? 0)) {
      throw new RetryableJobError(`${job.payload.url} answered 503`, { code: 'RECEIVER_UNAVAILABLE', retryAfterMs: 200 });
    }
  }
}
