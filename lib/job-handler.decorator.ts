import { SetMetadata } from '@nestjs/common';
import { isJobDefinition, type JobDefinition } from './engine/index.js';
import type { JobHandlerMetadata, JobHandlerOptions } from './interfaces/index.js';
import { JOB_HANDLER_METADATA } from './pg-queue.constants.js';

/**
 * Marks a provider method as the handler of `queue` in this process. The method receives the
 * claimed job and its context, and its outcome decides the job's:
 *
 * - returns (or resolves): the job succeeded;
 * - throws `PermanentJobError`: dead at once (bad payload, unsupported version);
 * - throws `RetryableJobError`: retried with backoff until `maxAttempts`;
 * - throws anything else: retried, at most `unknownErrorAttempts` times.
 *
 * ```ts
 * @Injectable()
 * export class EmailJobs {
 *   @JobHandler('emails', { concurrency: 10, leaseMs: 30_000, maxAttempts: 5 })
 *   async send(job: Job<SendEmail>, ctx: JobContext) {
 *     await this.mailer.send(job.payload, { idempotencyKey: job.idempotencyKey, signal: ctx.signal });
 *   }
 * }
 * ```
 *
 * One handler per queue per process; the provider must be a singleton (request-scoped providers
 * are skipped with a warning). Options are validated at start, named `Class.method.option`.
 *
 * @publicApi
 */
export function JobHandler(queue: string | JobDefinition, options: JobHandlerOptions = {}): MethodDecorator {
  const metadata: JobHandlerMetadata = isJobDefinition(queue) ? { queue: queue.queue, definition: queue, options } : { queue, definition: undefined, options };
  return SetMetadata(JOB_HANDLER_METADATA, metadata);
}
