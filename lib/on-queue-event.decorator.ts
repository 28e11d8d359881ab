import { SetMetadata } from '@nestjs/common';
import type { JobEvent } from './engine/index.js';
import { QUEUE_EVENT_METADATA } from './pg-queue.constants.js';

/** The event types of `QueueService.events$`, and `'*'` for all of them. */
export type QueueEventType = JobEvent['type'] | '*';

export interface QueueEventMetadata {
  readonly type: QueueEventType;
  /** Only this queue's events (default: every queue's). */
  readonly queue: string | undefined;
}

/**
 * Calls the method with each event of `type` that happens in this process (the events of
 * `QueueService.events$`: `claimed`, `succeeded`, `failed`, `lease_lost`, `released`, `reaped`,
 * `heartbeat_failed`), optionally of one queue only:
 *
 * ```ts
 * @OnQueueEvent('failed', { queue: 'emails' })
 * onFailed(event: QueueEvent<'failed'>) {
 *   if (event.dead) this.alerts.notify(`email job ${event.jobId} died: ${event.code}`);
 * }
 * ```
 *
 * A listener runs after the transition, never inside it: what it throws (or rejects with) is
 * logged and changes nothing. Events are this process's only (not other processes' jobs) and
 * carry no payload.
 *
 * @publicApi
 */
export function OnQueueEvent(type: QueueEventType, options: { queue?: string } = {}): MethodDecorator {
  const metadata: QueueEventMetadata = { type, queue: options.queue };
  return SetMetadata(QUEUE_EVENT_METADATA, metadata);
}

/** The event a listener of `type` receives. */
export type QueueEvent<K extends QueueEventType = '*'> = K extends '*' ? JobEvent : Extract<JobEvent, { type: K }>;
