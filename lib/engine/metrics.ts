import { metrics as otel, type Attributes, type Counter, type Histogram } from '@opentelemetry/api';
import { Subject, type Observable } from 'rxjs';
import type { FenceLossReason } from './errors.js';

/** What happened to a job in this process, as a stream (`PgQueue.metrics.events$`). Never carries payloads. */
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
      readonly operation: 'start' | 'complete' | 'fail' | 'heartbeat' | 'release' | 'effect';
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

/** Durations, in milliseconds. */
export type HistogramName =
  /** From when a job became due (available_at) to its claim: the queue's wait. */
  | 'claim_wait_ms'
  /** From the claim to the recorded completion. */
  | 'completion_latency_ms'
  /** The claim statement's round trip. */
  | 'claim_query_ms'
  /** The handler's own run time. */
  | 'handler_duration_ms';

/** Upper bounds of the histogram buckets, in ms (Prometheus `le`). */
export const HISTOGRAM_BUCKETS_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000];

export interface HistogramSnapshot {
  name: HistogramName;
  labels: Labels;
  /** Cumulative counts per bucket of HISTOGRAM_BUCKETS_MS. */
  buckets: number[];
  count: number;
  sum: number;
}

/**
 * In-process counters and the event stream. Counters are keyed by name and labels; a snapshot
 * is a plain object, cheap enough to take on every scrape.
 */
export class EngineMetrics {
  private readonly counters = new Map<string, { name: CounterName; labels: Labels; value: number }>();
  private readonly histograms = new Map<string, HistogramSnapshot>();
  private readonly subject = new Subject<JobEvent>();
  /** Published through @opentelemetry/api too: a no-op unless the app installs an SDK. */
  private readonly meter = otel.getMeter('nestjs-pg-queue');
  private readonly otelCounters = new Map<CounterName, Counter>();
  private readonly otelHistograms = new Map<HistogramName, Histogram>();

  readonly events$: Observable<JobEvent> = this.subject.asObservable();

  increment(name: CounterName, labels: Labels = {}, by = 1): void {
    const key = `${name}${JSON.stringify(labels)}`;
    const counter = this.counters.get(key);
    if (counter) counter.value += by;
    else this.counters.set(key, { name, labels, value: by });
    let published = this.otelCounters.get(name);
    if (!published) this.otelCounters.set(name, (published = this.meter.createCounter(`pgqueue.${name}`)));
    published.add(by, labels as Attributes);
  }

  observe(name: HistogramName, valueMs: number, labels: Labels = {}): void {
    const key = `${name}${JSON.stringify(labels)}`;
    let histogram = this.histograms.get(key);
    if (!histogram) {
      histogram = { name, labels, buckets: HISTOGRAM_BUCKETS_MS.map(() => 0), count: 0, sum: 0 };
      this.histograms.set(key, histogram);
    }
    for (let i = HISTOGRAM_BUCKETS_MS.length - 1; i >= 0 && valueMs <= HISTOGRAM_BUCKETS_MS[i]!; i--) histogram.buckets[i]! += 1;
    histogram.count += 1;
    histogram.sum += valueMs;
    let published = this.otelHistograms.get(name);
    if (!published) this.otelHistograms.set(name, (published = this.meter.createHistogram(`pgqueue.${name}`, { unit: 'ms' })));
    published.record(valueMs, labels as Attributes);
  }

  histogramSnapshot(): HistogramSnapshot[] {
    return [...this.histograms.values()].map((h) => ({ ...h, buckets: [...h.buckets] }));
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
