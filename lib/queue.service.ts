import { Inject, Injectable } from '@nestjs/common';
import {
  PgQueue,
  type EnqueueCallOptions,
  type EnqueueOptions,
  type JobEventRecord,
  type JobRecord,
  type JobToEnqueue,
} from './engine/index.js';
import { PG_QUEUE_ENGINE } from './pg-queue.constants.js';

/** Options of `QueueService.enqueue`: when and how the job runs, and on which connection. */
export type QueueEnqueueOptions = EnqueueOptions & EnqueueCallOptions;

/**
 * Enqueue jobs and read them back. Inject it anywhere once `PgQueueModule` is imported.
 *
 * Payload types are the caller's: share one type between the producer and the handler, and
 * `enqueue<T>` / `Job<T>` check both sides.
 *
 * ```ts
 * export interface SendEmail { to: string; template: string }
 * await queue.enqueue<SendEmail>('emails', { to, template: 'welcome' }, { priority: 5 });
 * // handler: @JobHandler('emails') send(job: Job<SendEmail>, ctx: JobContext) { … }
 * ```
 *
 * @publicApi
 */
@Injectable()
export class QueueService {
  constructor(@Inject(PG_QUEUE_ENGINE) private readonly engine: PgQueue) {}

  /**
   * Adds one job and returns its id. Everything is validated before any SQL runs: a bad job
   * throws `InvalidJobError` (unknown queue, payload not JSON or too large, bad option) and nothing
   * is written. With `client`, the job is written in the caller's transaction: it exists, and
   * workers are woken, only if that transaction commits.
   */
  enqueue<T>(queue: string, payload: T, options?: QueueEnqueueOptions): Promise<string> {
    return this.engine.enqueue<T>(queue, payload, options);
  }

  /** Adds several jobs in one statement (all or none); ids are returned in input order. */
  enqueueMany<T = unknown>(jobs: readonly JobToEnqueue<T>[], options?: EnqueueCallOptions): Promise<string[]> {
    return this.engine.enqueueMany(jobs, options);
  }

  /** The job's current record, or `undefined` when there is no job with that id. */
  get<T = unknown>(id: string): Promise<JobRecord<T> | undefined> {
    return this.engine.getJob<T>(id);
  }

  /**
   * The job's audit trail, oldest first: every exceptional transition (retry scheduled, lease
   * expired, lost fence, dead, released, …). The happy path (claim, success) writes no rows.
   */
  history(id: string): Promise<JobEventRecord[]> {
    return this.engine.getJobEvents(id);
  }

  /**
   * Declares queues so this process can enqueue to them before any worker has started. The
   * `queues` option of the module does this at start; a queue with a handler is declared anyway.
   */
  declareQueues(queues: readonly string[]): Promise<void> {
    return this.engine.declareQueues(queues);
  }
}
