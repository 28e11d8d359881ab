import { BadRequestException } from '@nestjs/common';
import type { QueueEnqueueOptions } from '../../lib/index.js';

export interface EnqueueRequest {
  queue: string;
  payload: unknown;
  options: QueueEnqueueOptions;
}

const OPTION_KEYS = ['priority', 'delayMs', 'runAt', 'maxAttempts', 'maxRuntimeMs', 'orderingKey'] as const;

/**
 * The shape of `POST /jobs` ({ queue, payload, options? }). Only the shape is checked here: the
 * values (queue name, known queue, payload size, option ranges) are the queue's to validate, and
 * its InvalidJobError becomes a 400 in PgQueueExceptionFilter.
 */
export function parseEnqueueRequest(body: unknown): EnqueueRequest {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new BadRequestException('The body must be a JSON object { "queue": string, "payload": any, "options"?: object }.');
  }
  const { queue, payload, options = {} } = body as Record<string, unknown>;
  if (typeof queue !== 'string') throw new BadRequestException('"queue" must be a string.');
  if (payload === undefined) throw new BadRequestException('"payload" is required (any JSON value).');
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new BadRequestException('"options" must be an object.');
  }
  const raw = options as Record<string, unknown>;
  for (const key of Object.keys(raw)) {
    if (!(OPTION_KEYS as readonly string[]).includes(key)) {
      throw new BadRequestException(`Unknown option "${key.slice(0, 40)}". Options: ${OPTION_KEYS.join(', ')}.`);
    }
  }
  const parsed: QueueEnqueueOptions = { ...(raw as Omit<QueueEnqueueOptions, 'runAt'>) };
  if (raw.runAt !== undefined) {
    const runAt = typeof raw.runAt === 'string' ? new Date(raw.runAt) : undefined;
    if (!runAt || Number.isNaN(runAt.getTime())) throw new BadRequestException('"options.runAt" must be an ISO 8601 date-time string.');
    parsed.runAt = runAt;
  }
  return { queue, payload, options: parsed };
}
