import type { INestApplicationContext } from '@nestjs/common';
import { PgQueueError, type PgQueue } from '../engine/index.js';
import { PgQueueExplorer } from '../nest/pg-queue.explorer.js';
import { PG_QUEUE_ENGINE } from '../pg-queue.constants.js';
import { DRAIN_TIMEOUT, ENGINE_NOT_FOUND } from '../pg-queue.messages.js';
import { waitUntil, type Look } from './wait-until.js';

/** Anything Nest can resolve providers from: an application, its context, or a `TestingModule`. */
export type ProviderSource = Pick<INestApplicationContext, 'get'>;

export interface DrainQueuesOptions {
  /** Reject when the queues have not drained by then (default 10 000 ms). */
  timeoutMs?: number;
  /** The queues to wait for (default: every queue with a `@JobHandler` in this application). */
  queues?: readonly string[];
  /** How often to look (default 25 ms). */
  intervalMs?: number;
}

export const DRAIN_TIMEOUT_DEFAULT_MS = 10_000;

/**
 * `drainQueues` gave up: `DRAIN_TIMEOUT`, jobs were still unfinished at its timeout (the message
 * lists them); `ENGINE_NOT_FOUND`, the application it was given has no PgQueueModule.
 */
export class DrainQueuesError extends PgQueueError {
  constructor(
    readonly code: 'DRAIN_TIMEOUT' | 'ENGINE_NOT_FOUND',
    message: string,
  ) {
    super(message);
  }
}
export const DRAIN_INTERVAL_DEFAULT_MS = 25;

/**
 * Resolves once every job of the handled queues that can still run before the timeout has
 * finished: no row is `pending` or `running`, none is `scheduled` to fall due before the timeout
 * (a delayed job, or a retry waiting out its backoff), and this process has nothing in flight.
 * Rejects after `timeoutMs`, listing what is left. For e2e tests: enqueue, `await drainQueues(app)`,
 * then assert on the outcome, with no sleeps.
 *
 * Jobs scheduled beyond the timeout are not waited for (they would only make it time out); dead
 * and cancelled jobs count as finished. It only reads: it never claims or changes a job.
 *
 * @publicApi
 */
export async function drainQueues(app: ProviderSource, options: DrainQueuesOptions = {}): Promise<void> {
  const engine = resolve<PgQueue>(app, PG_QUEUE_ENGINE);
  const queues = options.queues ?? resolve<PgQueueExplorer>(app, PgQueueExplorer).handledQueues;
  const timeoutMs = options.timeoutMs ?? DRAIN_TIMEOUT_DEFAULT_MS;
  const intervalMs = options.intervalMs ?? DRAIN_INTERVAL_DEFAULT_MS;
  if (queues.length === 0) return;
  await waitUntil(
    async (remainingMs): Promise<Look<void>> => {
      // Scheduled jobs count when they fall due before the deadline (a retry waiting out its backoff).
      const left = await engine.unfinished(queues, remainingMs);
      const inFlight = queues.map((queue) => [queue, engine.inFlight(queue)] as const).filter(([, n]) => n > 0);
      return left.length === 0 && inFlight.length === 0 ? { done: true, value: undefined } : { done: false, left: describeLeft(left, inFlight) };
    },
    { timeoutMs, intervalMs },
    (left) => new DrainQueuesError('DRAIN_TIMEOUT', DRAIN_TIMEOUT(timeoutMs, left)),
  );
}

function resolve<T>(app: ProviderSource, token: symbol | Function): T {
  try {
    return app.get<unknown, T>(token, { strict: false });
  } catch {
    throw new DrainQueuesError('ENGINE_NOT_FOUND', ENGINE_NOT_FOUND('drainQueues'));
  }
}

function describeLeft(left: Awaited<ReturnType<PgQueue['unfinished']>>, inFlight: readonly (readonly [string, number])[]): string {
  const parts = left.map((r) => `${r.queue}: ${r.count} ${r.status} (id ${r.ids.join(', ')}${r.count > r.ids.length ? ', …' : ''})`);
  for (const [queue, n] of inFlight) parts.push(`${queue}: ${n} in flight in this process`);
  return parts.join('; ');
}
