import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ClusterEvents,
  CLUSTER_EVENTS_DEFAULTS,
  decodeEvents,
  encodeEvents,
  EVENTS_TOPIC,
  PAYLOAD_MAX_BYTES,
  type ClusterEventsConfig,
  type ClusterJobEvent,
} from '../../lib/engine/cluster-events.js';
import { EngineMetrics, InvalidOptionError, PgQueue, TestSignal, type JobEvent, type JobEventType } from '../../lib/engine/index.js';
import { wakeChannel } from '../../lib/engine/identifiers.js';
import { engineInternals } from '../../lib/engine/internals.js';
import type { LogThrottle } from '../../lib/engine/log-throttle.js';
import type { Store } from '../../lib/engine/store/index.js';
import { engineFixture, testLogger, waitForOutcome } from '../support/engine.js';
import { localSignal, nextValues, testSignals } from '../support/signals.js';

/**
 * Job events across processes (events.crossProcess): NOTIFY-based, best effort. Two engines on
 * separate pools stand for two processes; a raw LISTEN session shows what goes over the channel.
 */

/** One event of every type, with every field: a new type (or field) must travel, or this fails. */
const SAMPLES: { readonly [K in JobEventType]: Extract<JobEvent, { type: K }> } = {
  claimed: { type: 'claimed', queue: 'q', jobId: '1', attempt: 1, leaseToken: '7' },
  succeeded: { type: 'succeeded', queue: 'q', jobId: '1', durationMs: 1.25 },
  failed: { type: 'failed', queue: 'q', jobId: '2', attempt: 3, code: 'NOPE', dead: true, delayMs: 0 },
  lease_lost: { type: 'lease_lost', queue: 'q', jobId: '3', leaseToken: '9', reason: 'cancelled', operation: 'complete' },
  released: { type: 'released', queue: 'q', jobId: '4' },
  reaped: { type: 'reaped', queue: 'q', jobId: '5', status: 'scheduled', code: 'LEASE_EXPIRED' },
  heartbeat_failed: { type: 'heartbeat_failed', queue: 'q', jobId: '6', error: 'connection reset' },
};

/** The JSON argument of a payload (what the notifier hands subscribers after `*events:`). */
const argumentOf = (payload: string) => payload.slice(`${EVENTS_TOPIC}:`.length);

describe('the encoding', () => {
  it('carries every event type with every field, and the origin', () => {
    let seq = 0;
    const events = Object.values(SAMPLES);
    const payloads = encodeEvents('host:1:abc', events, () => ++seq);
    expect(payloads).toHaveLength(1);
    expect(payloads[0]!.startsWith(`${EVENTS_TOPIC}:`)).toBe(true);
    expect(decodeEvents(argumentOf(payloads[0]!))).toEqual({ origin: 'host:1:abc', events });
  });

  it('splits many events into payloads under PostgreSQL\'s 8000-byte limit, in order, each numbered', () => {
    const events: JobEvent[] = Array.from({ length: 2_000 }, (_, i) => ({ type: 'succeeded', queue: `queue-${'x'.repeat(100)}`, jobId: String(i), durationMs: i / 7 }));
    let seq = 0;
    const payloads = encodeEvents('o'.repeat(200), events, () => ++seq);
    expect(payloads.length).toBeGreaterThan(10);
    for (const payload of payloads) expect(Buffer.byteLength(payload)).toBeLessThanOrEqual(PAYLOAD_MAX_BYTES);
    // Nearly full: a payload is closed only when the next event would not fit.
    for (const payload of payloads.slice(0, -1)) expect(Buffer.byteLength(payload)).toBeGreaterThan(PAYLOAD_MAX_BYTES - 200);
    expect(payloads.flatMap((p) => decodeEvents(argumentOf(p))!.events)).toEqual(events);
    expect(payloads.map((p) => (JSON.parse(argumentOf(p)) as { s: number }).s)).toEqual(payloads.map((_, i) => i + 1));
  });

  it('cuts long texts (an error message) so one event never fills a payload', () => {
    const event: JobEvent = { type: 'heartbeat_failed', queue: 'q', jobId: '1', error: '\u0000é'.repeat(5_000) };
    const [payload] = encodeEvents('o', [event], () => 1);
    expect(Buffer.byteLength(payload!)).toBeLessThan(PAYLOAD_MAX_BYTES);
    const [decoded] = decodeEvents(argumentOf(payload!))!.events as Extract<JobEvent, { type: 'heartbeat_failed' }>[];
    expect(decoded!.error).toHaveLength(500);
    expect(decoded!.error.endsWith('…')).toBe(true);
  });

  it('ignores what it cannot read: not JSON, another version, an event whose fields do not match', () => {
    expect(decodeEvents('not json')).toBeUndefined();
    expect(decodeEvents('{"v":2,"o":"x","e":[]}')).toBeUndefined();
    expect(decodeEvents('{"v":1,"o":"x","e":[["succeeded","q","1","fast"],["nope","q","1"],["released","q","2"],["succeeded","q","3",4,"a newer field"]]}')).toEqual({
      origin: 'x',
      events: [
        { type: 'released', queue: 'q', jobId: '2' },
        { type: 'succeeded', queue: 'q', jobId: '3', durationMs: 4 },
      ],
    });
  });
});

describe('the option', () => {
  const make = (events: unknown) => new PgQueue({ connectionString: 'postgres://options.invalid/db', logger: testLogger(), events: events as never });

  it('is off by default, and takes true, false or a list of event types', () => {
    expect(make(undefined).clusterEventTypes).toEqual([]);
    expect(make({ crossProcess: false }).clusterEventTypes).toEqual([]);
    expect(make({ crossProcess: true }).clusterEventTypes).toEqual(Object.keys(SAMPLES));
    expect(make({ crossProcess: ['failed', 'reaped'] }).clusterEventTypes).toEqual(['failed', 'reaped']);
  });

  it('refuses anything else, naming the option', () => {
    for (const [value, option] of [
      ['yes', 'events.crossProcess'],
      [[], 'events.crossProcess'],
      [['failed', 'exploded'], 'events.crossProcess[1]'],
    ] as const) {
      const error = (() => {
        try {
          make({ crossProcess: value });
        } catch (e) {
          return e;
        }
      })();
      expect(error, JSON.stringify(value)).toBeInstanceOf(InvalidOptionError);
      expect(error).toMatchObject({ option });
    }
    expect(() => make({ bufferSize: 0 })).toThrow(/events\.bufferSize/);
    expect(() => make({ crossProcess: true, flushMs: 5 })).toThrow(/events\.flushMs.*not an option/);
  });

  it('a listener of cluster events while it is off is an error naming it', () => {
    const error = (() => {
      try {
        make(undefined).onClusterEvent(() => {});
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect(error).toMatchObject({ option: 'events.crossProcess' });
    expect((error as Error).message).toMatch(/crossProcess: true/);
  });
});

/** A ClusterEvents over a store whose NOTIFY `notify` decides, with no database. */
function standalone(config: Partial<ClusterEventsConfig>, notify: (payloads: string[]) => Promise<void>) {
  const metrics = new EngineMetrics();
  const warnings: string[] = [];
  const failures = { failed: (_what: string, _reason: string, _level: string, line: string) => warnings.push(line), recovered: () => {} } as unknown as LogThrottle;
  const store = { notifyMany: (_db: unknown, p: { payloads: string[] }) => notify(p.payloads) } as unknown as Store;
  const events = new ClusterEvents(
    { pool: {} as never, store, channel: 'c', origin: 'me', metrics, failures, reportListenerError: () => {} },
    { ...CLUSTER_EVENTS_DEFAULTS, crossProcess: true, ...config },
  );
  events.testSignals = { flushed: new TestSignal('flushed') };
  events.start(() => () => {});
  return { metrics, events, warnings };
}

describe('best effort, never in the way', () => {
  it('drops events beyond a full buffer and counts them; local listeners still hear every one', async () => {
    const sent: string[][] = [];
    const { metrics, events } = standalone({ bufferSize: 3, flushIntervalMs: 3_600_000 }, async (payloads) => void sent.push(payloads));
    const heard: ClusterJobEvent[] = [];
    events.onEvent((e) => heard.push(e));
    for (let i = 1; i <= 5; i++) metrics.emit({ type: 'released', queue: 'q', jobId: String(i) });
    expect(heard.map((e) => [e.jobId, e.origin])).toEqual([1, 2, 3, 4, 5].map((i) => [String(i), 'me']));
    expect(metrics.count('cluster_events_dropped', { reason: 'buffer_full' })).toBe(2);
    expect(sent).toEqual([]);
    await events.stop(); // sends what the buffer holds
    expect(sent.flatMap((p) => p.flatMap((payload) => decodeEvents(argumentOf(payload))!.events.map((e) => e.jobId)))).toEqual(['1', '2', '3']);
    expect(metrics.count('cluster_events_published')).toBe(3);
  });

  it('drops a batch whose NOTIFY fails, counts it and warns; the emitter never sees the failure', async () => {
    const { metrics, events, warnings } = standalone({ flushIntervalMs: 1 }, async () => {
      throw new Error('the database is away');
    });
    const flushed = events.testSignals!.flushed;
    metrics.emit({ type: 'released', queue: 'q', jobId: '1' });
    metrics.emit({ type: 'released', queue: 'q', jobId: '2' });
    expect(await flushed.next()).toEqual({ events: 2, payloads: 1, published: false });
    expect(metrics.count('cluster_events_dropped', { reason: 'publish_failed' })).toBe(2);
    expect(metrics.count('cluster_events_published')).toBe(0);
    expect(warnings.join('\n')).toMatch(/Publishing 2 job events to other processes failed.*the database is away/);
    await events.stop();
  });

  it('publishes only the listed types', async () => {
    const sent: string[] = [];
    const { metrics, events } = standalone({ crossProcess: ['failed'], flushIntervalMs: 1 }, async (payloads) => void sent.push(...payloads));
    metrics.emit(SAMPLES.claimed);
    metrics.emit(SAMPLES.failed);
    await events.testSignals!.flushed.next();
    expect(sent.flatMap((p) => decodeEvents(argumentOf(p))!.events)).toEqual([SAMPLES.failed]);
    await events.stop();
  });
});

describe('two processes on one database', () => {
  let fx: Awaited<ReturnType<typeof engineFixture>>;
  beforeAll(async () => {
    fx = await engineFixture('cluster_events');
  });
  afterAll(async () => {
    await fx.close();
  });

  /** A session LISTENing on the engine's channel: every payload it hears, and a marker to know it has heard all that committed before. */
  async function channelSpy() {
    const channel = wakeChannel('pgqueue');
    const client = new pg.Client({ connectionString: fx.url });
    await client.connect();
    const payloads: string[] = [];
    const markers = localSignal<string>('spy.marker');
    client.on('notification', (m) => {
      if (m.payload?.startsWith('*marker:')) markers.signal(m.payload);
      else payloads.push(m.payload ?? '');
    });
    await client.query(`LISTEN "${channel}"`);
    return {
      payloads,
      /** Resolves once the spy has heard every notification that committed before this call (a channel delivers in commit order). */
      async caughtUp() {
        const marker = `*marker:${Math.random()}`;
        await fx.pool.query('SELECT pg_notify($1, $2)', [channel, marker]);
        await markers.waitFor((m) => m === marker);
      },
      end: () => client.end(),
    };
  }

  /** Sends a marker on the channel and waits until `engine`'s listener has dispatched it: it has heard everything that committed before. */
  async function heardUpToNow(engine: PgQueue) {
    const marker = String(Math.random());
    await fx.pool.query('SELECT pg_notify($1, $2)', [wakeChannel('pgqueue'), `*marker:${marker}`]);
    await testSignals(engine).notifier.notification.waitFor((n) => n.topic === '*marker' && n.argument === marker);
  }

  it("hears another process's events with their origin, and its own once, directly", async () => {
    const a = fx.make({ workerId: 'process-a', events: { crossProcess: true } });
    const b = fx.make({ workerId: 'process-b', events: { crossProcess: true } });
    a.work('cluster-a', async () => {});
    b.work('cluster-b', async () => {});
    const heardByB = localSignal<ClusterJobEvent>('b.cluster');
    b.onClusterEvent((event) => heardByB.signal(event));
    const local: JobEvent[] = [];
    b.onJobEvent((event) => local.push(event));
    await Promise.all([a.start(), b.start()]);

    const fromA = await a.enqueue('cluster-a', {});
    await waitForOutcome(a, fromA, 'succeeded');
    const [claimed, succeeded] = await nextValues(heardByB, 2);
    expect(claimed).toMatchObject({ type: 'claimed', queue: 'cluster-a', jobId: fromA, origin: 'process-a', attempt: 1 });
    expect(succeeded).toMatchObject({ type: 'succeeded', queue: 'cluster-a', jobId: fromA, origin: 'process-a' });
    // events$ / onJobEvent keep meaning this process: A's job is not among B's own events.
    expect(local.filter((e) => e.jobId === fromA)).toEqual([]);

    const fromB = await b.enqueue('cluster-b', {});
    await waitForOutcome(b, fromB, 'succeeded');
    // B's own NOTIFY comes back to B's listener too: once B has sent its two events and heard
    // everything sent so far, its listener has had each exactly once (delivered directly, the echo
    // skipped).
    const flushed = testSignals(b).clusterEvents.flushed;
    for (let sent = 0; sent < 2; ) {
      const flush = await flushed.next();
      expect(flush.published).toBe(true);
      sent += flush.events;
    }
    await a.stop(1_000);
    await heardUpToNow(b);
    const rest = await nextValues(heardByB, heardByB.count - 2);
    expect(rest.map((e) => [e.type, e.jobId, e.origin])).toEqual([
      ['claimed', fromB, 'process-b'],
      ['succeeded', fromB, 'process-b'],
    ]);
  });

  it('sends nothing on the channel while the option is off (and does while it is on)', async () => {
    const spy = await channelSpy();
    try {
      const off = fx.make({ workerId: 'process-off' });
      off.work('cluster-off', async () => {});
      await off.start();
      const id = await off.enqueue('cluster-off', {});
      await waitForOutcome(off, id, 'succeeded');
      await off.stop(1_000); // a process with the option on sends its buffer as it stops
      await spy.caughtUp();
      expect(spy.payloads.filter((p) => p.startsWith(`${EVENTS_TOPIC}:`))).toEqual([]);

      const on = fx.make({ workerId: 'process-on', events: { crossProcess: true } });
      on.work('cluster-on', async () => {});
      await on.start();
      const other = await on.enqueue('cluster-on', {});
      await waitForOutcome(on, other, 'succeeded');
      await on.stop(1_000);
      await spy.caughtUp();
      const sent = spy.payloads.filter((p) => p.startsWith(`${EVENTS_TOPIC}:`)).flatMap((p) => decodeEvents(argumentOf(p))!.events);
      expect(sent.map((e) => [e.type, e.jobId])).toEqual([
        ['claimed', other],
        ['succeeded', other],
      ]);
    } finally {
      await spy.end();
    }
  });

  it('a full buffer drops and counts; what it held reaches the other process', async () => {
    const a = fx.make({ workerId: 'process-full', events: { crossProcess: true, bufferSize: 3, flushIntervalMs: 3_600_000 } });
    const b = fx.make({ workerId: 'process-hears', events: { crossProcess: true } });
    const heardByB = localSignal<ClusterJobEvent>('b.cluster');
    b.onClusterEvent((event) => heardByB.signal(event));
    await Promise.all([a.start(), b.start()]);
    // Events as the workers emit them (synchronously, in the middle of a job's step).
    for (let i = 1; i <= 5; i++) engineInternals(a).metrics.emit({ type: 'released', queue: 'q', jobId: String(i) });
    expect(await a.prometheus()).toMatch(/^pgqueue_cluster_events_dropped_total\{reason="buffer_full"\} 2$/m);
    await a.stop(1_000);
    await heardUpToNow(b);
    expect(heardByB.count).toBe(3);
    expect((await nextValues(heardByB, 3)).map((e) => [e.jobId, e.origin])).toEqual([
      ['1', 'process-full'],
      ['2', 'process-full'],
      ['3', 'process-full'],
    ]);
  });
});
