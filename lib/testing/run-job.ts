import { PgQueueError, type EnqueueOptions, type JobRecord, type PgQueue } from '../engine/index.js';
import { PG_QUEUE_ENGINE } from '../pg-queue.constants.js';
import { ENGINE_NOT_FOUND } from '../pg-queue.messages.js';
import { Queue } from '../queue.handle.js';
import { DRAIN_INTERVAL_DEFAULT_MS, DRAIN_TIMEOUT_DEFAULT_MS, type ProviderSource } from './drain-queues.js';
import { RUN_JOB_NO_WORKER, RUN_JOB_TIMEOUT } from './testing.messages.js';
import { waitUntil, type Look } from './wait-until.js';

/** `runJob`'s options: the job's enqueue options, and how long to wait for it. */
export interface RunJobOptions extends EnqueueOptions {
  /** Reject when the job has not finished by then (default 10 000 ms). */
  timeoutMs?: number;
  /** How often to look (default 25 ms). */
  intervalMs?: number;
}

/** The statuses a job ends in: what `runJob` resolves with. */
export const FINAL_JOB_STATUSES = ['succeeded', 'dead', 'cancelled'] as const;

/**
 * `runJob` gave up: `RUN_JOB_TIMEOUT`, the job had not finished at the timeout (the message says
 * what state it is stuck in; `job` is its last record); `WORKERS_NOT_RUNNING`, no worker of the
 * queue runs in this application, so nothing was enqueued; `ENGINE_NOT_FOUND`, the application
 * has no PgQueueModule.
 */
export class RunJobError extends PgQueueError {
  constructor(
    readonly code: 'RUN_JOB_TIMEOUT' | 'WORKERS_NOT_RUNNING' | 'ENGINE_NOT_FOUND',
    message: string,
    readonly job?: JobRecord,
  ) {
    super(message);
  }
}

/**
 * Enqueues one job through the application's engine and resolves with its final record once a
 * worker of this application has finished it: `succeeded`, `dead` (retries exhausted, or a
 * permanent failure: see `lastErrorCode`) or `cancelled`. Retries run as usual, so a job that
 * fails once and then succeeds resolves `succeeded` with `attemptCount` 2.
 *
 * ```ts
 * const job = await runJob(app, 'emails', { to: 'ada@example.com' });
 * expect(job.status).toBe('succeeded');
 * ```
 *
 * `queue` is a queue's name or its handle (`app.get(getQueueToken('emails'))`, whose `defaults`
 * then apply). The application's workers must be running (`app.init()`; with `autoStart: false`,
 * `startProcessing()`): without a worker of the queue it rejects at once and writes nothing.
 *
 * @publicApi
 */
export async function runJob<T>(app: ProviderSource, queue: string | Queue<T>, payload: T, options: RunJobOptions = {}): Promise<JobRecord<T>> {
  const { timeoutMs = DRAIN_TIMEOUT_DEFAULT_MS, intervalMs = DRAIN_INTERVAL_DEFAULT_MS, ...enqueueOptions } = options;
  let engine: PgQueue;
  try {
    engine = app.get<unknown, PgQueue>(PG_QUEUE_ENGINE, { strict: false });
  } catch {
    throw new RunJobError('ENGINE_NOT_FOUND', ENGINE_NOT_FOUND('runJob'));
  }
  const name = queue instanceof Queue ? queue.name : queue;
  if (engine.handlerOptions(name) === undefined) throw new RunJobError('WORKERS_NOT_RUNNING', RUN_JOB_NO_WORKER(name, engine.processing));
  const id = queue instanceof Queue ? await queue.enqueue(payload, enqueueOptions) : await engine.enqueue<T>(name, payload, enqueueOptions);
  let last: JobRecord<T> | undefined;
  return waitUntil(
    async (): Promise<Look<JobRecord<T>>> => {
      last = await engine.getJob<T>(id);
      if (last && (FINAL_JOB_STATUSES as readonly string[]).includes(last.status)) return { done: true, value: last };
      return { done: false, left: describeState(last, engine.processing) };
    },
    { timeoutMs, intervalMs },
    (state) => new RunJobError('RUN_JOB_TIMEOUT', RUN_JOB_TIMEOUT(id, name, timeoutMs, state), last as JobRecord | undefined),
  );
}

/** What a job that has not finished is doing, for the timeout's message. */
function describeState(job: JobRecord | undefined, processing: boolean): string {
  if (!job) return 'gone (deleted, or pruned)';
  const attempts = `attempt ${job.attemptCount}${job.maxAttempts === null ? '' : ` of ${job.maxAttempts}`}`;
  const lastError = job.lastErrorCode ? `; last error ${job.lastErrorCode}: ${job.lastErrorMessage ?? ''}` : '';
  const workers = processing ? '' : '; the workers of this application have stopped';
  switch (job.status) {
    case 'scheduled':
      if (job.availableAt === null) return `a flow parent waiting for its children (see listChildren)${workers}`;
      return `scheduled for ${job.availableAt.toISOString()} (${job.attemptCount > 0 ? `a retry waiting out its backoff after ${attempts}${lastError}` : 'a delayed job, not attempted yet'})${workers}`;
    case 'pending':
      return `pending, not claimed (${attempts}${lastError}: is the queue paused, or is an earlier job of its ordering key unfinished?)${workers}`;
    case 'running':
      return `running (${attempts}, lease ${job.leaseExpiresAt ? `until ${job.leaseExpiresAt.toISOString()}` : 'unset'}${lastError}: the handler has not returned)${workers}`;
    default:
      return job.status;
  }
}
