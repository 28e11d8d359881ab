import { SetMetadata } from '@nestjs/common';
import type { ClusterJobEvent, JobEvent } from './engine/index.js';
import { QUEUE_EVENT_METADATA } from './pg-queue.constants.js';

/** The event types of `QueueService.events$`, and `'*'` for all of them. */
export type QueueEventType = JobEvent['type'] | '*';

/**
 * Whose events a listener hears: `'process'` (default), this process's jobs only (`events$`);
 * `'cluster'`, every publishing process's (`clusterEvents$`: `events.crossProcess` must be on).
 */
export type QueueEventSource = 'process' | 'cluster';

export interface QueueEventMetadata {
  readonly type: QueueEventType;
  /** Only this queue's events (default: every queue's). */
  readonly queue: string | undefined;
  readonly from: QueueEventSource;
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
 * logged and changes nothing. Events carry no payload.
 *
 * With `from: 'cluster'` it hears the events of every process that publishes them (those with
 * `events.crossProcess` on), this one's included, each with its `origin` (`ClusterQueueEvent`):
 * best effort, through NOTIFY (see docs/module.md). While `events.crossProcess` is off (the
 * default), or does not list `type`, such a listener fails the start with `InvalidOptionError`.
 *
 * @publicApi
 */
export function OnQueueEvent(type: QueueEventType, options: { queue?: string; from?: QueueEventSource } = {}): MethodDecorator {
  const metadata: QueueEventMetadata = { type, queue: options.queue, from: options.from ?? 'process' };
  return SetMetadata(QUEUE_EVENT_METADATA, metadata);
}

/** The event a listener of `type` receives. */
export type QueueEvent<K extends QueueEventType = '*'> = K extends '*' ? JobEvent : Extract<JobEvent, { type: K }>;

/** The event a `from: 'cluster'` listener of `type` receives: with the `origin` process's `workerId`. */
export type ClusterQueueEvent<K extends QueueEventType = '*'> = K extends '*' ? ClusterJobEvent : Extract<ClusterJobEvent, { type: K }>;
