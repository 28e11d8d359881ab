import { metrics as otel, type Attributes, type Counter, type Histogram } from '@opentelemetry/api';
import { FENCE_LOSS_REASONS, type FenceLossReason } from './errors.js';
import { EventListeners } from './listeners.js';

/** The fenced writes a worker makes (the `operation` label of lease_lost): a closed set. */
export const LEASE_OPERATIONS = ['start', 'complete', 'fail', 'heartbeat', 'release', 'effect'] as const;
/** The operation whose fenced write was refused. */
export type LeaseOperation = (typeof LEASE_OPERATIONS)[number];

/** What happened to a job in this process (`PgQueue.onJobEvent`, `QueueService.events$`). Never carries payloads. */
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
      readonly operation: LeaseOperation;
    }
  | { readonly type: 'released'; readonly queue: string; readonly jobId: string }
  | { readonly type: 'reaped'; readonly queue: string; readonly jobId: string; readonly status: string; readonly code: string }
  | { readonly type: 'heartbeat_failed'; readonly queue: string; readonly jobId: string; readonly error: string };

/** The kinds of job event: `claimed`, `succeeded`, `failed`, `lease_lost`, `released`, `reaped`, `heartbeat_failed`. */
export type JobEventType = JobEvent['type'];

/** Counter names, one word per idea, the same as in the docs and the event types. */
export type CounterName =
  | 'jobs_claimed'
  | 'jobs_succeeded'
  | 'jobs_retried'
  | 'jobs_dead'
  | 'jobs_released'
  | 'jobs_rate_limited'
  | 'lease_lost'
  | 'lease_expired'
  | 'heartbeats'
  | 'heartbeat_failures'
  | 'claim_queries'
  /** Job events sent to the other processes (`events.crossProcess`), in NOTIFYs that committed. */
  | 'cluster_events_published'
  /** Job events not sent to the other processes, by reason: the buffer was full, or the NOTIFY failed. */
  | 'cluster_events_dropped'
  | 'schedule_jobs_enqueued'
  | 'schedule_ticks_missed'
  | 'schedule_ticks_skipped';

/** Hears every job event of this process, synchronously, as it happens: keep it quick. */
export type JobEventListener = (event: JobEvent) => void;

export type Labels = Readonly<Record<string, string | number>>;

/** The `code` label of `lease_expired`: what the reaper wrote on the job it recovered (see reapExpired, reapAsDead in store/maintenance.ts). */
export const LEASE_EXPIRED_CODES = ['LEASE_EXPIRED', 'MAX_RUNTIME', 'REAP_FAILED'] as const;

/** Durations, in seconds (the Prometheus base unit; the names say so, as promtool wants). */
export type HistogramName =
  /** From when a job became due (available_at) to its claim: the queue's wait. */
  | 'claim_wait_seconds'
  /** From the claim to the recorded completion. */
  | 'completion_latency_seconds'
  /** The claim statement's round trip. */
  | 'claim_query_duration_seconds'
  /** The handler's own run time. */
  | 'handler_duration_seconds';

/**
 * @deprecated The former names, in milliseconds. `observe()` still takes them, with a value
 * in milliseconds that it records in seconds under the new name, until the next minor version.
 */
export type DeprecatedHistogramName = 'claim_wait_ms' | 'completion_latency_ms' | 'claim_query_ms' | 'handler_duration_ms';

const RENAMED_HISTOGRAMS: Readonly<Record<DeprecatedHistogramName, HistogramName>> = {
  claim_wait_ms: 'claim_wait_seconds',
  completion_latency_ms: 'completion_latency_seconds',
  claim_query_ms: 'claim_query_duration_seconds',
  handler_duration_ms: 'handler_duration_seconds',
};

/**
 * How long a job's steps take: a few ms (a wake-up by NOTIFY, a quick handler), the poll interval
 * (2 s by default) without one, minutes to an hour behind a backlog or for a long handler. From
 * 1 s to 15 min each bound is at most 5/3 of the one below it, so a quantile read from the buckets
 * is within 5/3 of the truth there (the old 10 s → 30 s gap read a p99 of 29.6 s for waits of at
 * most 20 s); below 1 s within 2.5×, above 15 min within 2×.
 */
const JOB_STEP_BUCKETS_SECONDS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600, 900, 1_800, 3_600,
] as const;

/**
 * A statement's round trip: about a millisecond when healthy, up to the statement timeout (10 s
 * by default) when not. Within 5/3 from 1 ms to 100 ms, within 2.5× up to 10 s.
 */
const QUERY_BUCKETS_SECONDS = [
  0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
] as const;

/** Upper bounds of each histogram's buckets, in seconds (Prometheus `le`; +Inf is implied). */
export const HISTOGRAM_BUCKETS: Readonly<Record<HistogramName, readonly number[]>> = {
  claim_wait_seconds: JOB_STEP_BUCKETS_SECONDS,
  completion_latency_seconds: JOB_STEP_BUCKETS_SECONDS,
  claim_query_duration_seconds: QUERY_BUCKETS_SECONDS,
  handler_duration_seconds: JOB_STEP_BUCKETS_SECONDS,
};

/**
 * The OpenTelemetry instrument of each histogram (unit `s`): without the unit in the name, as
 * OpenTelemetry names go; an OpenTelemetry Prometheus exporter adds `_seconds` back.
 */
const OTEL_HISTOGRAM_NAMES: Readonly<Record<HistogramName, string>> = {
  claim_wait_seconds: 'pgqueue.claim_wait',
  completion_latency_seconds: 'pgqueue.completion_latency',
  claim_query_duration_seconds: 'pgqueue.claim_query_duration',
  handler_duration_seconds: 'pgqueue.handler_duration',
};

export interface HistogramSnapshot {
  name: HistogramName;
  labels: Labels;
  /** The buckets' upper bounds, in seconds (HISTOGRAM_BUCKETS[name]). */
  bounds: readonly number[];
  /** Cumulative counts per bucket of `bounds`. */
  buckets: number[];
  count: number;
  /** In seconds. */
  sum: number;
}

/** One counter series (a name and its labels), found once: adding to it costs no key. */
export interface CounterSeries {
  add(by?: number): void;
}

/** One histogram series (a name and its labels), found once: observing costs no key. */
export interface HistogramSeries {
  /** Records a duration, in seconds. */
  observe(seconds: number): void;
}

interface CounterEntry {
  name: CounterName;
  labels: Labels;
  value: number;
}

/**
 * A histogram series as kept: `counts[i]` is the observations in bucket i alone (above bounds[i - 1],
 * at most bounds[i]), so an observation touches one bucket; the cumulative counts Prometheus wants
 * are summed when a snapshot is taken (a scrape), not on every observation.
 */
interface HistogramEntry {
  name: HistogramName;
  labels: Labels;
  bounds: readonly number[];
  counts: number[];
  count: number;
  sum: number;
}

/**
 * In-process counters and the job events' listeners. Counters are keyed by name and labels; a
 * snapshot is a plain object, cheap enough to take on every scrape. The worker's per-job series
 * are looked up once (counterSeries, histogramSeries): building a series key per job was a tenth
 * of the worker's busy time.
 */
export class EngineMetrics {
  private readonly counters = new Map<string, CounterEntry>();
  private readonly histograms = new Map<string, HistogramEntry>();
  private readonly listeners: EventListeners<JobEvent>;
  /** Published through @opentelemetry/api too: a no-op unless the app installs an SDK. */
  private readonly meter = otel.getMeter('nestjs-pg-queue');
  private readonly otelCounters = new Map<CounterName, Counter>();
  private readonly otelHistograms = new Map<HistogramName, Histogram>();

  /** `reportListenerError`: where a listener's throw goes (it never reaches the code that emitted). */
  constructor(reportListenerError: (error: unknown) => void = () => {}) {
    this.listeners = new EventListeners(reportListenerError);
  }

  /**
   * Adds a listener of job events; returns the function that removes it. `onClose` is called once
   * when the engine stops (no event follows it), at once when it has stopped already.
   */
  onEvent(listener: JobEventListener, onClose?: () => void): () => void {
    return this.listeners.add(listener, onClose);
  }

  /** Whether any listener hears job events (an emitter may skip building an event nobody hears). */
  get heard(): boolean {
    return this.listeners.size > 0;
  }

  increment(name: CounterName, labels: Labels = {}, by = 1): void {
    this.counterEntry(name, labels).value += by;
    this.otelCounter(name).add(by, labels as Attributes);
  }

  /**
   * The series of `name` with `labels`, created at 0 if it is new (as `increment(name, labels, 0)`
   * does). Adding to it is `increment(name, labels, by)` without the key.
   */
  counterSeries(name: CounterName, labels: Labels): CounterSeries {
    const entry = this.counterEntry(name, labels);
    const published = this.otelCounter(name);
    published.add(0, labels as Attributes);
    return {
      add(by = 1) {
        entry.value += by;
        published.add(by, labels as Attributes);
      },
    };
  }

  /**
   * The series of `name` with `labels`: observing is `observe(name, seconds, labels)` without the
   * key. The series appears (in snapshots and the exposition) with its first observation, as it
   * does through `observe`.
   */
  histogramSeries(name: HistogramName, labels: Labels): HistogramSeries {
    let entry: HistogramEntry | undefined;
    const published = this.otelHistogram(name);
    return {
      observe: (seconds) => {
        entry ??= this.histogramEntry(name, labels);
        addObservation(entry, seconds);
        published.record(seconds, labels as Attributes);
      },
    };
  }

  private counterEntry(name: CounterName, labels: Labels): CounterEntry {
    const key = seriesKey(name, labels);
    let counter = this.counters.get(key);
    if (!counter) this.counters.set(key, (counter = { name, labels, value: 0 }));
    return counter;
  }

  private otelCounter(name: CounterName): Counter {
    let published = this.otelCounters.get(name);
    if (!published) this.otelCounters.set(name, (published = this.meter.createCounter(`pgqueue.${name}`)));
    return published;
  }

  /**
   * Creates, at 0, every series of the counters whose labels are a closed set, for a queue this
   * process handles: Prometheus's `increase()` and `rate()` need a sample before the first event
   * to count it, and a series that first appears at 1 reads as no increase at all. Counters keyed
   * by an error code (retried, dead) have no closed set and appear with their first event.
   */
  handles(queue: string): void {
    const zero = (name: CounterName, labels: Labels) => this.increment(name, labels, 0);
    for (const name of ['jobs_claimed', 'jobs_succeeded', 'jobs_released', 'jobs_rate_limited', 'heartbeats', 'heartbeat_failures', 'claim_queries'] as const) zero(name, { queue });
    // Any process's ticker may run a queue's schedules: the queue's handlers are where they are watched.
    for (const name of ['schedule_jobs_enqueued', 'schedule_ticks_missed', 'schedule_ticks_skipped'] as const) zero(name, { queue });
    for (const reason of FENCE_LOSS_REASONS) for (const operation of LEASE_OPERATIONS) zero('lease_lost', { queue, reason, operation });
    for (const code of LEASE_EXPIRED_CODES) zero('lease_expired', { queue, code });
  }

  /** Records a duration, in seconds (a deprecated `_ms` name takes milliseconds). */
  observe(name: HistogramName | DeprecatedHistogramName, seconds: number, labels: Labels = {}): void {
    if (Object.hasOwn(RENAMED_HISTOGRAMS, name)) this.record(RENAMED_HISTOGRAMS[name as DeprecatedHistogramName], seconds / 1_000, labels);
    else this.record(name as HistogramName, seconds, labels);
  }

  private record(name: HistogramName, seconds: number, labels: Labels): void {
    addObservation(this.histogramEntry(name, labels), seconds);
    this.otelHistogram(name).record(seconds, labels as Attributes);
  }

  private histogramEntry(name: HistogramName, labels: Labels): HistogramEntry {
    const key = seriesKey(name, labels);
    let histogram = this.histograms.get(key);
    if (!histogram) {
      const bounds = HISTOGRAM_BUCKETS[name];
      histogram = { name, labels, bounds, counts: bounds.map(() => 0), count: 0, sum: 0 };
      this.histograms.set(key, histogram);
    }
    return histogram;
  }

  private otelHistogram(name: HistogramName): Histogram {
    let published = this.otelHistograms.get(name);
    if (!published) {
      // The SDK's default boundaries (0 to 10,000) are made for milliseconds: in seconds nearly
      // every job would land in the first few. Advise ours.
      published = this.meter.createHistogram(OTEL_HISTOGRAM_NAMES[name], { unit: 's', advice: { explicitBucketBoundaries: [...HISTOGRAM_BUCKETS[name]] } });
      this.otelHistograms.set(name, published);
    }
    return published;
  }

  histogramSnapshot(): HistogramSnapshot[] {
    return [...this.histograms.values()].map(({ name, labels, bounds, counts, count, sum }) => {
      const buckets = new Array<number>(counts.length);
      let below = 0;
      for (let i = 0; i < counts.length; i++) buckets[i] = below += counts[i]!;
      return { name, labels, bounds, buckets, count, sum };
    });
  }

  emit(event: JobEvent): void {
    this.listeners.emit(event);
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
    this.listeners.complete();
  }
}

/**
 * One series per name and label values, whatever the labels' order or type: `{ attempt: 1 }` and
 * `{ attempt: '1' }` render the same line, so two entries for them would be a duplicate series.
 * (The default sort compares "name,value": a label name has no comma, so names alone decide.)
 */
function seriesKey(name: string, labels: Labels): string {
  return `${name}${JSON.stringify(Object.entries(labels).map(([k, v]) => [k, String(v)]).sort())}`;
}

/** One observation into its one bucket (the first bound it is at most; none above the last, or for NaN). */
function addObservation(histogram: HistogramEntry, seconds: number): void {
  const { bounds, counts } = histogram;
  for (let i = 0; i < bounds.length; i++) {
    if (seconds <= bounds[i]!) {
      counts[i]! += 1;
      break;
    }
  }
  histogram.count += 1;
  histogram.sum += seconds;
}
