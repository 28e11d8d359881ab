import pg from 'pg';
import { InvalidJobError, PgQueue } from '../../lib/engine/index.js';
import { engineFixture, waitFor, waitForOutcome } from '../support/engine.js';
import { engineInternals } from '../../lib/engine/internals.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
let q: PgQueue;
beforeAll(async () => {
  fx = await engineFixture('enqueue');
  q = fx.make({ maxPayloadBytes: 1_024 });
  await q.declareQueues(['mail', 'other']);
});
afterAll(() => fx.close());

test('enqueue and enqueueMany return ids in order, and due jobs are pending, delayed ones scheduled', async () => {
  const ids = await q.enqueueMany([
    { queue: 'mail', payload: { n: 1 } },
    { queue: 'mail', payload: { n: 2 }, options: { delayMs: 60_000 } },
    { queue: 'other', payload: { n: 3 }, options: { runAt: new Date(Date.now() - 1_000), priority: 7, maxAttempts: 2 } },
  ]);
  expect(ids.map(Number)).toEqual([...ids.map(Number)].sort((a, b) => a - b));
  const jobs = await Promise.all(ids.map((id) => q.getJob<{ n: number }>(id)));
  expect(jobs.map((j) => [j?.payload.n, j?.status, j?.priority, j?.maxAttempts])).toEqual([
    [1, 'pending', 0, null],
    [2, 'scheduled', 0, null],
    [3, 'pending', 7, 2],
  ]);
  expect(await q.getJob('999999999')).toBeUndefined();
  expect(await q.getJob('not-a-number')).toBeUndefined();
});

test("enqueue inside the caller's transaction exists only if that transaction commits", async () => {
  const client = new pg.Client({ connectionString: fx.url });
  await client.connect();
  try {
    await client.query('BEGIN');
    const rolledBack = await q.enqueue('mail', { tx: 'rollback' }, { client });
    await client.query('ROLLBACK');
    await client.query('BEGIN');
    const committed = await q.enqueue('mail', { tx: 'commit' }, { client });
    expect(await q.getJob(committed)).toBeUndefined(); // not visible before commit
    await client.query('COMMIT');
    expect(await q.getJob(rolledBack)).toBeUndefined();
    expect((await q.getJob(committed))?.status).toBe('pending');
  } finally {
    await client.end();
  }
});

test('a delayed job is promoted when due and then runs', async () => {
  const worker = fx.make({ scheduler: { intervalMs: 5_000 } });
  const ran: number[] = [];
  worker.work('later', async () => void ran.push(Date.now()));
  await worker.start();
  const sent = Date.now();
  const id = await worker.enqueue('later', {}, { delayMs: 300 });
  expect((await worker.getJob(id))?.status).toBe('scheduled');
  await waitForOutcome(worker, id, 'succeeded');
  // Not early; and on time although the scheduler's interval is 5 s (it sleeps until the next due job).
  expect(ran[0]! - sent).toBeGreaterThanOrEqual(290);
  expect(ran[0]! - sent).toBeLessThan(2_000);
});

describe('bad input is refused before any SQL runs, with a clear error, and nothing is written', () => {
  const cycle: Record<string, unknown> = {};
  cycle.self = cycle;
  const cases: [string, () => Promise<unknown>, string, RegExp][] = [
    ['an empty queue name', () => q.enqueue('', {}), 'INVALID_QUEUE_NAME', /queue name "" is not valid/],
    ['a queue name with a quote', () => q.enqueue(`x'; drop table jobs; --`, {}), 'INVALID_QUEUE_NAME', /not valid/],
    ['an unknown queue', () => q.enqueue('nobody-handles-this', {}), 'UNKNOWN_QUEUE', /"nobody-handles-this" is not declared/],
    ['a BigInt payload', () => q.enqueue('mail', { amount: 10n }), 'INVALID_PAYLOAD', /payload\.amount is a BigInt/],
    ['a cyclic payload', () => q.enqueue('mail', cycle), 'INVALID_PAYLOAD', /payload\.self is a cycle/],
    ['a function in the payload', () => q.enqueue('mail', { f: () => 1 }), 'INVALID_PAYLOAD', /payload\.f is a function/],
    ['NaN in the payload', () => q.enqueue('mail', { n: Number.NaN }), 'INVALID_PAYLOAD', /payload\.n is NaN, not a finite number/],
    ['an undefined payload', () => q.enqueue('mail', undefined), 'INVALID_PAYLOAD', /payload is undefined: pass null/],
    ['an oversized payload', () => q.enqueue('mail', { s: 'x'.repeat(2_000) }), 'PAYLOAD_TOO_LARGE', /over the limit of 1024/],
    ['a negative delay', () => q.enqueue('mail', {}, { delayMs: -5 }), 'INVALID_JOB_OPTION', /"delayMs" is -5/],
    ['a NaN delay', () => q.enqueue('mail', {}, { delayMs: Number.NaN }), 'INVALID_JOB_OPTION', /"delayMs" is NaN/],
    ['an invalid date', () => q.enqueue('mail', {}, { runAt: new Date('nope') }), 'INVALID_JOB_OPTION', /"runAt"/],
    ['priority out of range', () => q.enqueue('mail', {}, { priority: 5_000 }), 'INVALID_JOB_OPTION', /from -1000 to 1000/],
    ['max attempts 0', () => q.enqueue('mail', {}, { maxAttempts: 0 }), 'INVALID_JOB_OPTION', /"maxAttempts" is 0/],
    ['a string for priority', () => q.enqueue('mail', {}, { priority: '5' as unknown as number }), 'INVALID_JOB_OPTION', /"priority" is "5"/],
  ];
  test.each(cases)('%s', async (_name, call, code, message) => {
    const before = (await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n;
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidJobError);
    expect(error).toMatchObject({ code, message: expect.stringMatching(message) });
    expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n).toBe(before);
  });

  test('one bad job in a batch rejects the whole batch', async () => {
    const before = (await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n;
    await expect(
      q.enqueueMany([
        { queue: 'mail', payload: { ok: true } },
        { queue: 'mail', payload: { bad: 1n } },
      ]),
    ).rejects.toThrow(/jobs\[1\] .*BigInt/);
    expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n).toBe(before);
  });
});

test('options are validated at construction, naming the option', () => {
  expect(() => new PgQueue({ connectionString: fx.url, schema: 'x"; drop table y; --' })).toThrow(/Invalid option "schema"/);
  expect(() => new PgQueue({} as never)).toThrow(/connectionString/);
  expect(() => new PgQueue({ connectionString: fx.url, pollIntervalMs: -1 })).toThrow(/"pollIntervalMs"/);
  expect(() => new PgQueue({ connectionString: fx.url, handlerDefaults: { leaseMs: 'soon' as never } })).toThrow(/"handlerDefaults.leaseMs"/);
  const engine = new PgQueue({ connectionString: fx.url });
  expect(() => engine.work('mail', async () => {}, { concurrency: 0 })).toThrow(/"mail.concurrency"/);
  expect(() => engine.work('mail', async () => {}, { leaseMs: 1_000, abortMarginMs: 600 })).toThrow(/more than half the lease/);
  return engine.stop();
});

test('D25: every option name and bound is checked by the engine, nested ones included', async () => {
  const make = (options: object) => () => new PgQueue({ connectionString: fx.url, ...options } as never);
  expect(make({ pollIntervallMs: 100 })).toThrow(/Invalid option "pollIntervallMs": it is not an option of PgQueue/);
  expect(make({ reaper: { intervallMs: 100 } })).toThrow(/Invalid option "reaper.intervallMs": it is not an option of the reaper/);
  expect(make({ scheduler: { batchsize: 5 } })).toThrow(/Invalid option "scheduler.batchsize"/);
  expect(make({ pruner: { retention: 5 } })).toThrow(/Invalid option "pruner.retention"/);
  expect(make({ notifier: { probeEveryMs: 5 } })).toThrow(/Invalid option "notifier.probeEveryMs"/);
  expect(make({ handlerDefaults: { backoff: { base: 5 } } })).toThrow(/Invalid option "handlerDefaults.backoff.base"/);
  // Timers cannot wait past 2^31-1 ms (Node would fire them every millisecond instead).
  for (const option of [{ pollIntervalMs: 2 ** 31 }, { reaper: { intervalMs: 2 ** 31 } }, { scheduler: { intervalMs: 2 ** 31 } }, { pruner: { intervalMs: 2 ** 31 } }, { notifier: { probeIntervalMs: 2 ** 31 } }]) {
    expect(make(option)).toThrow(/is not an integer from \d+ to 2147483647/);
  }
  // Bounds the code relies on: the client-side timeout adds a second to statementTimeoutMs, and
  // release_count is an int4.
  expect(make({ statementTimeoutMs: 2_147_483_647 })).toThrow(/Invalid option "statementTimeoutMs"/);
  expect(make({ maxFreeReleases: 10_000_000_000 })).toThrow(/Invalid option "maxFreeReleases"/);
  // A deprecated name still works, with a warning naming its replacement.
  const logger = { lines: [] as string[], log: () => {}, warn: (m: string) => void logger.lines.push(m), error: () => {} };
  const engine = new PgQueue({ connectionString: fx.url, logger, notifier: { pingIntervalMs: 20_000 } as never });
  expect(engineInternals(engine).notifier.config.probeIntervalMs).toBe(20_000);
  expect(logger.lines).toEqual([expect.stringMatching(/"notifier.pingIntervalMs" is deprecated .* use "notifier.probeIntervalMs"/)]);
  await engine.stop();
});

test('a job stays claimable for whoever handles it: waitFor sanity', async () => {
  await expect(waitFor(() => false, 50)).rejects.toThrow(/not met/);
});
