import { Subject, type Observable } from 'rxjs';
import type { FenceLossReason } from './errors.js';

/** What happened to a job in this process, as a stream (`PgQueue.events$`). Never carries payloads. */
export type JobEvent =
  | { readonly type: 'claimed'; readonly queue: string; readonly jobId: string; readonly attempt: number; readonly leaseToken: string }
  | { readonly type: 'succeeded'; readonly queue: string; readonly jobId: string; readonly durationMs: number }
  | {
      readonly type: 'failed';
      readonly queue: string;
      readonly jobId: string;
      readonly attempt: number;
      readonly code: string;
      readonly dead: boolean;
      readonly delayMs: number;
    }
  | {
      readonly type: 'lease_lost';
      readonly queue: string;
      readonly jobId: string;
      readonly leaseToken: string;
      readonly reason: FenceLossReason;
      readonly operation: 'complete' | 'fail' | 'heartbeat' | 'release';
    }
  | { readonly type: 'released'; readonly queue: string; readonly jobId: string }
  | { readonly type: 'reaped'; readonly queue: string; readonly jobId: string; readonly status: string; readonly code: string }
  | { readonly type: 'heartbeat_failed'; readonly queue: string; readonly jobId: string; readonly error: string };

/** Counter names, one word per idea, the same as in the docs and the event types. */
export type CounterName =
  | 'jobs_claimed'
  | 'jobs_succeeded'
  | 'jobs_retried'
  | 'jobs_dead'
  | 'jobs_released'
  | 'lease_lost'
  | 'lease_expired'
  | 'heartbeats'
  | 'heartbeat_failures'
  | 'claim_queries';

export type Labels = Readonly<Record<string, string | number>>;

/**
 * In-process counters and the event stream. Counters are keyed by name and labels; a snapshot
 * is a plain object, cheap enough to take on every scrape.
 */
export class EngineMetrics {
  private readonly counters = new Map<string, { name: CounterName; labels: Labels; value: number }>();
  private readonly subject = new Subject<JobEvent>();

  readonly events$: Observable<JobEvent> = this.subject.asObservable();

  increment(name: CounterName, labels: Labels = {}, by = 1): void {
    const key = `${name}${JSON.stringify(labels)}`;
    const counter = this.counters.get(key);
    if (counter) counter.value += by;
    else this.counters.set(key, { name, labels, value: by });
  }

  emit(event: JobEvent): void {
    if (this.subject.observed) this.subject.next(event);
  }

  /** The sum of a counter over every label set that contains `labels`. */
  count(name: CounterName, labels: Labels = {}): number {
    let total = 0;
    for (const counter of this.counters.values()) {
      if (counter.name !== name) continue;
      if (Object.entries(labels).every(([k, v]) => counter.labels[k] === v)) total += counter.value;
    }
    return total;
  }

  snapshot(): { name: CounterName; labels: Labels; value: number }[] {
    return [...this.counters.values()].map((c) => ({ ...c }));
  }

  complete(): void {
    this.subject.complete();
  }
}
