import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { transaction } from '../../lib/engine/store/index.js';
import { PgQueueError } from '../../lib/engine/index.js';
import { engineFixture } from '../support/engine.js';
import { attemptEnded, claimed, localSignal, testSignals } from '../support/signals.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

// Outages between a worker and its database: a cut network (connections reset, new ones refused)
// and a blackhole (nothing answers, nothing is reset). Only the worker's pool goes through the proxy.
// The outages last real time on purpose (a retry loop, a statement timeout, the log's windows must
// be outlived); the tests wait on signals for everything else.

let fx: Awaited<ReturnType<typeof engineFixture>>;
let proxy: TcpProxy;
beforeAll(async () => {
  fx = await engineFixture('outages');
  const target = new URL(fx.url);
  proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
});
afterAll(async () => {
  await proxy.close();
  await fx.close();
});
afterEach(() => proxy.heal());

const viaProxy = () => {
  const url = new URL(fx.url);
  url.host = `127.0.0.1:${proxy.port}`;
  return url.toString();
};

test('D20: a completion written while the database is unreachable is retried while the lease lasts, not given up after ~250 ms', async () => {
  const worker = fx.make({ connectionString: viaProxy(), listenConnectionString: fx.url, reaper: { intervalMs: 100 } });
  const observer = fx.make();
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let runs = 0;
  worker.work('d20', async () => {
    runs += 1;
    await gate;
  }, { leaseMs: 10_000 });
  await worker.start();
  const id = await observer.enqueue('d20', {});
  await claimed(testSignals(worker), id);
  proxy.cut();
  release(); // the handler finishes while the database cannot be reached
  await new Promise((r) => setTimeout(r, 1_500));
  proxy.heal();
  await attemptEnded(testSignals(worker), id, 'succeeded', 8_000); // well within the 10 s lease
  const job = await observer.getJob(id);
  expect(job).toMatchObject({ status: 'succeeded', attemptCount: 1 });
  expect(runs).toBe(1);
});

test('D5: a claim on a connection that went silent fails after statementTimeoutMs instead of stopping the worker', async () => {
  const worker = fx.make({ connectionString: viaProxy(), listenConnectionString: fx.url, statementTimeoutMs: 1_000, pollIntervalMs: 100 });
  const observer = fx.make();
  const done: string[] = [];
  worker.work('d5', async (job) => void done.push(job.id));
  await worker.start();
  const first = await observer.enqueue('d5', {});
  await attemptEnded(testSignals(worker), first, 'succeeded');
  proxy.blackhole(); // every open connection goes silent, and new ones hang
  await new Promise((r) => setTimeout(r, 2_500)); // claims in flight now hang... until their timeout
  proxy.heal();
  const second = await observer.enqueue('d5', {});
  await attemptEnded(testSignals(worker), second, 'succeeded', 10_000);
  expect((await observer.getJob(second))?.status).toBe('succeeded');
  expect(done).toEqual([first, second]);
});

test('a connection that breaks inside an engine transaction fails the transaction, instead of an uncaught "error" event that would end the process', async () => {
  const pool = new pg.Pool({ connectionString: viaProxy(), max: 2 });
  pool.on('error', () => {});
  const uncaught: unknown[] = [];
  const onUncaught = (error: unknown) => void uncaught.push(error);
  // Vitest's own handler stays: this one only records what reached the process.
  process.on('uncaughtException', onUncaught);
  try {
    const failure = await transaction(
      pool,
      async (client) => {
        proxy.cut(); // between two statements: no query is waiting for this connection's error
        await sleep(100);
        await client.query('SELECT 1');
      },
      { statementTimeoutMs: 1_000 },
    ).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(failure).toBeInstanceOf(Error);
    expect(uncaught).toEqual([]);
    proxy.heal();
    // The broken client was not handed back: the pool's next transaction works.
    expect(await transaction(pool, async (client) => (await client.query<{ n: number }>('SELECT 1 AS n')).rows[0]!.n, { statementTimeoutMs: 1_000 })).toBe(1);
  } finally {
    process.off('uncaughtException', onUncaught);
    await pool.end();
  }
});

test('public calls of a running engine whose connections are cut reject with DATABASE_UNAVAILABLE, not the driver error', async () => {
  const q = fx.make({ connectionString: viaProxy(), listenConnectionString: fx.url });
  q.work('cut-calls', async () => {});
  await q.start();
  const id = await q.enqueue('cut-calls', {});
  proxy.cut();
  const target = `127.0.0.1:${proxy.port}/${new URL(fx.url).pathname.slice(1)}`;
  for (const call of [() => q.getJob(id), () => q.enqueue('cut-calls', {}), () => q.cancel(id), () => q.stats(), () => q.listDead()]) {
    const error = await call().then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(error).toBeInstanceOf(PgQueueError);
    expect(error).toMatchObject({ code: 'DATABASE_UNAVAILABLE' });
    expect(error!.message).toContain(target);
  }
});

/** The subject of an engine log line ("Claim on queue \"x\"", "Reaper pass"): what failed, or works again. */
function kindOf(line: string): string {
  const text = line.replace(/^(log|warn|error): /, '');
  return /^(.+?) (?:failed|works again|lost)\b/.exec(text)?.[1] ?? text.slice(0, 40);
}

test('an outage logs at most one line per kind of failure per failureLogIntervalMs, with counts, and one recovery line per kind', async () => {
  const lines: string[] = [];
  const recoveries = localSignal<string>('outage-log.recoveries');
  const logger = {
    log: (m: string) => {
      lines.push(`log: ${m}`);
      recoveries.signal(m);
    },
    warn: (m: string) => void lines.push(`warn: ${m}`),
    error: (m: string) => void lines.push(`error: ${m}`),
  };
  const intervalMs = 1_000;
  // Everything of this engine goes through the proxy, the listener too, and every loop runs
  // often: each of them fails many times per interval during the outage.
  const q = fx.make({
    connectionString: viaProxy(),
    logger,
    pollIntervalMs: 50,
    reaper: { intervalMs: 50 },
    scheduler: { intervalMs: 50 },
    pruner: { intervalMs: 50 },
    keyHandoffs: { intervalMs: 50, retryMs: 20 },
    notifier: { reconnectMinMs: 20, reconnectMaxMs: 100 },
    failureLogIntervalMs: intervalMs,
  });
  const observer = fx.make();
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  q.work('outage-log', () => gate, { concurrency: 4, leaseMs: 1_000 });
  await q.start();
  const ids = await observer.enqueueMany([1, 2, 3, 4].map((n) => ({ queue: 'outage-log', payload: { n } })));
  for (const id of ids) await claimed(testSignals(q), id);

  const cutAt = performance.now();
  const before = lines.length;
  proxy.cut();
  release(); // four outcome writes that fail until their leases run out
  await sleep(3_500);
  proxy.heal();
  const kinds = ['Claim on queue "outage-log"', 'Reaper pass', 'Scheduler pass', 'Key handoff pass', 'Pruner pass'];
  for (const kind of kinds) await recoveries.waitFor((m) => m.startsWith(`${kind} works again after `), 15_000);
  const windowMs = performance.now() - cutAt;
  const during = lines.slice(before);

  // Per kind: a first line, at most one summary per interval, one recovery line.
  const bound = Math.ceil(windowMs / intervalMs) + 2;
  const perKind = new Map<string, number>();
  for (const line of during) perKind.set(kindOf(line), (perKind.get(kindOf(line)) ?? 0) + 1);
  expect([...perKind].filter(([, count]) => count > bound)).toEqual([]);
  // The loops did fail many times: the summaries count what they did not log.
  const summaries = during.filter((line) => /^error: Claim on queue "outage-log" failed \d+ more times? in the last \d+(\.\d+)? s \(last error: /.test(line));
  expect(summaries.length).toBeGreaterThanOrEqual(1);
  const recovered = during.find((line) => line.startsWith('log: Claim on queue "outage-log" works again after '))!;
  const failures = Number(/works again after (\d+) failures?/.exec(recovered)?.[1]);
  expect(failures).toBeGreaterThan(perKind.get('Claim on queue "outage-log"')!);
  // The outcome writes of the four jobs: one kind, not one line per job.
  expect(during.filter((line) => line.includes('writing a job\'s outcome failed:'))).toHaveLength(1);
});
