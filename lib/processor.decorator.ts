import { SetMetadata } from '@nestjs/common';
import { isJobDefinition, type Job, type JobContext, type JobDefinition } from './engine/index.js';
import type { JobHandlerMetadata, JobHandlerOptions } from './interfaces/index.js';
import { PROCESSOR_METADATA } from './pg-queue.constants.js';

/** What a `@Processor` class implements: its `process` is the queue's handler. */
export interface JobProcessor<T = unknown> {
  process(job: Job<T>, ctx: JobContext): unknown;
}

/**
 * Marks a provider class as the handler of `queue`: its `process(job, ctx)` method runs each job,
 * with the same outcomes and options as a `@JobHandler` method (it is one, on the same engine):
 *
 * ```ts
 * @Processor('emails', { concurrency: 10 })
 * export class EmailProcessor implements JobProcessor<WelcomeEmail> {
 *   constructor(private readonly mailer: Mailer) {}
 *   async process(job: Job<WelcomeEmail>, ctx: JobContext) {
 *     await this.mailer.send(job.payload, { signal: ctx.signal });
 *   }
 * }
 * ```
 *
 * Still one handler per queue per process: a `@Processor` and a `@JobHandler` of one queue fail
 * the start, naming both. List the class in a module's `providers`.
 *
 * @publicApi
 */
export function Processor(queue: string | JobDefinition, options: JobHandlerOptions = {}): ClassDecorator {
  const metadata: JobHandlerMetadata = isJobDefinition(queue) ? { queue: queue.queue, definition: queue, options } : { queue, definition: undefined, options };
  return SetMetadata(PROCESSOR_METADATA, metadata);
}
