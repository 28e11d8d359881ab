import { flagOrList, integer, section, timerMs } from './config.js';
import type { Queryable } from './db.js';
import { EventListeners } from './listeners.js';
import type { LogThrottle } from './log-throttle.js';
import { CLUSTER_EVENTS_PUBLISH } from './messages.js';
import type { CounterSeries, EngineMetrics, JobEvent, JobEventType } from './metrics.js';
import type { Store } from './store/index.js';
import type { ClusterEventsTestSignals } from './test-signals.js';

/**
 * Job events across processes, best effort (`events.crossProcess`). Each process sends the events
 * of its own jobs through NOTIFY on the engine's channel, many in one notification, and hears
 * those of the others on its one LISTEN connection. A notification is the only transport: nothing
 * is stored, so an event is lost whenever a NOTIFY is (the listener down, the sender dead before
 * its flush, a full buffer), and events of two processes arrive in no particular order. What it
 * must never do is slow a job down or fail one: an event is put in a bounded buffer and the emitter
 * moves on; a flush timer sends the buffer through the pool; a full buffer drops the event and
 * counts it.
 */

/** The cross-process stream's events: a job event and the process it happened in. */
export type ClusterJobEvent = JobEvent & {
  /** The `workerId` of the process whose job it was. */
  readonly origin: string;
};

/** Hears the cluster's job events (this process's, then the others' as their NOTIFYs arrive). */
export type ClusterJobEventListener = (event: ClusterJobEvent) => void;

export interface ClusterEventsConfig {
  /**
   * `true`: this process publishes every job event to the other processes and hears theirs
   * (`PgQueue.onClusterEvent`); a list of event types: only those; `false` (default): off, no NOTIFY
   * is sent for events and none is heard.
   */
  crossProcess: boolean | readonly JobEventType[];
  /** Events waiting for the next flush at most; beyond it an event is dropped and counted. */
  bufferSize: number;
  /** The buffer is sent this long after its first event (sooner is more NOTIFYs for the same events). */
  flushIntervalMs: number;
}

/** Why an event was not sent: the `reason` label of `cluster_events_dropped`. */
export const CLUSTER_EVENT_DROP_REASONS = ['buffer_full', 'publish_failed'] as const;
export type ClusterEventDropReason = (typeof CLUSTER_EVENT_DROP_REASONS)[number];

/**
 * The fields of each event type after its queue and job id, in the order they are sent, with their
 * JSON kinds (a received event whose fields do not match is skipped). Keyed by every event type, so
 * a new one does not compile until it says how it travels; the round-trip test checks the fields.
 */
const EVENT_FIELDS: { readonly [K in JobEventType]: readonly (readonly [string, 'string' | 'number' | 'boolean'])[] } = {
  claimed: [['attempt', 'number'], ['leaseToken', 'string']],
  succeeded: [['durationMs', 'number']],
  failed: [['attempt', 'number'], ['code', 'string'], ['dead', 'boolean'], ['delayMs', 'number']],
  lease_lost: [['leaseToken', 'string'], ['reason', 'string'], ['operation', 'string']],
  released: [],
  reaped: [['status', 'string'], ['code', 'string']],
  heartbeat_failed: [['error', 'string']],
};

/** Every job event type, as `events.crossProcess` lists them. */
export const JOB_EVENT_TYPES = Object.keys(EVENT_FIELDS) as JobEventType[];

/**
 * A 10,000-event buffer is about 1 MB, and at 50 ms flushes it holds 200,000 events/s, far above
 * what one process on a 2-core machine produces (two events per job at ~13,000 jobs/s); a flush
 * that waits for a busy pool has room for seconds of events at ordinary rates. 50 ms keeps another
 * process's listener within a tenth of a second of the event while sending at most 20 statements
 * a second however busy the process is (the number of notifications follows the bytes, not this).
 */
export const CLUSTER_EVENTS_DEFAULTS: ClusterEventsConfig = { crossProcess: false, bufferSize: 10_000, flushIntervalMs: 50 };

export const CLUSTER_EVENTS_OPTIONS = section<ClusterEventsConfig>(
  'cross-process events',
  { crossProcess: flagOrList(JOB_EVENT_TYPES), bufferSize: integer(1, 1_000_000), flushIntervalMs: timerMs(1) },
  CLUSTER_EVENTS_DEFAULTS,
);

/** NOTIFY topic of a batch of job events (payload `*events:<JSON>`); queue names cannot start with '*'. */
export const EVENTS_TOPIC = '*events';

/**
 * PostgreSQL refuses a NOTIFY payload of 8000 bytes or more. A payload is cut at this many UTF-8
 * bytes, leaving room for a server encoding that spends more bytes on a character than UTF-8 does
 * (only error texts can hold such characters).
 */
export const PAYLOAD_MAX_BYTES = 7_900;

/** A string field (an error text, a code) travels cut to this: one event can never fill a payload alone. */
const FIELD_MAX_CHARS = 500;

/** The shape of a payload's JSON; `v` changes when the encoding does (a receiver skips versions it does not know). */
const ENCODING_VERSION = 1;

/**
 * `events` as NOTIFY payloads (topic included), in order, each under PAYLOAD_MAX_BYTES: the origin
 * once per payload, then each event as an array (its type, queue, job id, then EVENT_FIELDS). `seq`
 * numbers the payloads of this origin: it also keeps two payloads of one transaction from being
 * identical, which PostgreSQL would deliver once.
 */
export function encodeEvents(origin: string, events: readonly JobEvent[], nextSeq: () => number, maxBytes = PAYLOAD_MAX_BYTES): string[] {
  const payloads: string[] = [];
  let parts: string[] = [];
  let head = '';
  let bytes = 0;
  const start = `${EVENTS_TOPIC}:${payloadHead(origin)}`;
  const open = () => {
    head = `${start}"s":${nextSeq()},"e":[`;
    bytes = Buffer.byteLength(head) + 2; // and the closing "]}"
    parts = [];
  };
  const close = () => payloads.push(`${head}${parts.join(',')}]}`);
  open();
  for (const event of events) {
    const encoded = JSON.stringify(encodeEvent(event));
    const size = Buffer.byteLength(encoded);
    // A comma before every event but the first.
    if (parts.length > 0 && bytes + 1 + size > maxBytes) {
      close();
      open();
    }
    bytes += (parts.length > 0 ? 1 : 0) + size;
    parts.push(encoded);
  }
  if (parts.length > 0) close();
  return payloads;
}

/** How every payload of `origin` begins (after the topic): its version and origin, before its sequence number. */
function payloadHead(origin: string): string {
  return `{"v":${ENCODING_VERSION},"o":${JSON.stringify(origin)},`;
}

function encodeEvent(event: JobEvent): unknown[] {
  const fields = event as unknown as Record<string, unknown>;
  const out: unknown[] = [event.type, event.queue, event.jobId];
  for (const [name] of EVENT_FIELDS[event.type]) {
    const value = fields[name];
    out.push(typeof value === 'string' && value.length > FIELD_MAX_CHARS ? `${value.slice(0, FIELD_MAX_CHARS - 1)}…` : value);
  }
  return out;
}

/**
 * A received payload's argument (the JSON after `*events:`): its origin and the events it carries.
 * Anything that does not parse, or is of an encoding version this process does not know, is
 * undefined; an event whose fields do not match its type is skipped (a newer sender's extra
 * fields are ignored).
 */
export function decodeEvents(argument: string): { origin: string; events: JobEvent[] } | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(argument);
  } catch {
    return undefined;
  }
  const { v, o, e } = (parsed ?? {}) as { v?: unknown; o?: unknown; e?: unknown };
  if (v !== ENCODING_VERSION || typeof o !== 'string' || !Array.isArray(e)) return undefined;
  const events: JobEvent[] = [];
  for (const encoded of e) {
    const event = decodeEvent(encoded);
    if (event) events.push(event);
  }
  return { origin: o, events };
}

function decodeEvent(encoded: unknown): JobEvent | undefined {
  if (!Array.isArray(encoded)) return undefined;
  const [type, queue, jobId, ...values] = encoded as unknown[];
  if (typeof type !== 'string' || !Object.hasOwn(EVENT_FIELDS, type) || typeof queue !== 'string' || typeof jobId !== 'string') return undefined;
  const event: Record<string, unknown> = { type, queue, jobId };
  const fields = EVENT_FIELDS[type as JobEventType];
  for (const [index, [name, kind]] of fields.entries()) {
    if (typeof values[index] !== kind) return undefined;
    event[name] = values[index];
  }
  return event as JobEvent;
}

export interface ClusterEventsDeps {
  readonly pool: Queryable;
  readonly store: Store;
  readonly channel: string;
  /** This process's `workerId`: the origin of what it sends, and what it skips when it hears it back. */
  readonly origin: string;
  readonly metrics: EngineMetrics;
  readonly failures: LogThrottle;
  /** Where a cluster listener's throw goes. */
  readonly reportListenerError: (error: unknown) => void;
}

/**
 * The cross-process event stream of one engine. Off (`crossProcess: false`), it sends nothing,
 * hears nothing, and adds no listener to this process's events (so workers do not even build
 * the events nobody hears).
 */
export class ClusterEvents {
  /** The event types this process publishes and hears: empty when off. */
  readonly types: ReadonlySet<JobEventType>;
  readonly config: ClusterEventsConfig;
  private readonly listeners: EventListeners<ClusterJobEvent>;
  private buffer: JobEvent[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private running = false;
  private seq = 0;
  private readonly unsubscribe: (() => void)[] = [];
  /** How this process's own payloads begin: one comes back to its own listener, skipped without parsing it. */
  private readonly ownPrefix: string;
  private readonly dropped: Readonly<Record<ClusterEventDropReason, CounterSeries>> | undefined;
  private readonly published: CounterSeries | undefined;
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: ClusterEventsTestSignals | undefined;

  constructor(
    private readonly deps: ClusterEventsDeps,
    config: ClusterEventsConfig,
  ) {
    this.config = config;
    const { crossProcess } = config;
    this.types = new Set(crossProcess === true ? JOB_EVENT_TYPES : crossProcess === false ? [] : crossProcess);
    this.listeners = new EventListeners(deps.reportListenerError);
    this.ownPrefix = payloadHead(deps.origin);
    if (this.enabled) {
      // Their label sets are closed: present at 0 from the start, so increase() sees the first drop.
      this.published = deps.metrics.counterSeries('cluster_events_published', {});
      this.dropped = {
        buffer_full: deps.metrics.counterSeries('cluster_events_dropped', { reason: 'buffer_full' }),
        publish_failed: deps.metrics.counterSeries('cluster_events_dropped', { reason: 'publish_failed' }),
      };
    }
  }

  get enabled(): boolean {
    return this.types.size > 0;
  }

  /** See `PgQueue.onClusterEvent` (which refuses it while off). */
  onEvent(listener: ClusterJobEventListener, onClose?: () => void): () => void {
    return this.listeners.add(listener, onClose);
  }

  /**
   * Starts publishing this process's events and hearing the others' on `subscribe` (the
   * notifier's topics). Before the listener starts, so nothing it hears is missed. Nothing when off.
   */
  start(subscribe: (topic: string, fn: (argument: string) => void) => () => void): void {
    if (!this.enabled || this.running) return;
    this.running = true;
    this.unsubscribe.push(this.deps.metrics.onEvent((event) => this.local(event)));
    this.unsubscribe.push(subscribe(EVENTS_TOPIC, (argument) => this.received(argument)));
  }

  /**
   * Stops publishing and sends what the buffer holds (events of the workers' last jobs, released
   * at shutdown): a process that stops cleanly loses none of its own. After the engine's services
   * have stopped, before the pool closes.
   */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    for (const off of this.unsubscribe.splice(0)) off();
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.flushing;
    if (this.buffer.length > 0) await this.flush();
  }

  /** Ends the stream for its listeners (the engine stopped): no event follows. */
  complete(): void {
    this.listeners.complete();
  }

  /** An event of this process: its own listeners hear it now, the others after the next flush. */
  private local(event: JobEvent): void {
    if (!this.types.has(event.type)) return;
    if (this.listeners.size > 0) this.listeners.emit({ ...event, origin: this.deps.origin });
    if (this.buffer.length >= this.config.bufferSize) {
      this.dropped?.buffer_full.add();
      return;
    }
    this.buffer.push(event);
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.flushing || !this.running) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, this.config.flushIntervalMs);
    this.timer.unref();
  }

  /** Sends the whole buffer in one statement (one NOTIFY per payload); a failure drops it, counted. */
  private flush(): Promise<void> {
    const events = this.buffer;
    this.buffer = [];
    const flushing = (async () => {
      const payloads = encodeEvents(this.deps.origin, events, () => (this.seq += 1));
      let published = false;
      try {
        await this.deps.store.notifyMany(this.deps.pool, { channel: this.deps.channel, payloads });
        published = true;
        this.published?.add(events.length);
        this.deps.failures.recovered(PUBLISH);
      } catch (error) {
        // Best effort: not retried (a retry would hold the buffer while the database is away).
        this.dropped?.publish_failed.add(events.length);
        this.deps.failures.failed(PUBLISH, (error as Error).message, 'warn', CLUSTER_EVENTS_PUBLISH(events.length, (error as Error).message));
      }
      this.testSignals?.flushed.signal({ events: events.length, payloads: payloads.length, published });
    })();
    this.flushing = flushing;
    return flushing.finally(() => {
      this.flushing = undefined;
      if (this.buffer.length > 0) this.schedule();
    });
  }

  /** Another process's events (or this one's own, heard back: skipped, its listeners had them directly). */
  private received(argument: string): void {
    if (this.listeners.size === 0 || argument.startsWith(this.ownPrefix)) return;
    const decoded = decodeEvents(argument);
    if (!decoded || decoded.origin === this.deps.origin) return;
    for (const event of decoded.events) {
      if (this.types.has(event.type)) this.listeners.emit({ ...event, origin: decoded.origin });
    }
  }
}

/** The publishing of cross-process events, as a kind of failure in the LogThrottle. */
const PUBLISH = 'Publishing job events to other processes';
