import pg from 'pg';
import { InvalidJobError, InvalidOptionError, PgQueue, type Job, type JobContext } from '../../../lib/engine/index.js';
import { migrate } from '../../../lib/engine/migrator.js';
import { createStore } from '../../../lib/engine/store/index.js';
import { engineFixture, testLogger, waitFor } from '../../support/engine.js';

/**
 * The bad-input catalogue: every way a caller or a handler can get it wrong gets a clear error
 * or a defined outcome, and no other job is affected. test/engine/enqueue.spec.ts checks that
 * each bad enqueue is refused before any SQL runs; this file runs them against a *running* queue
 * (alone, inside a batch beside a healthy job, and inside a caller's transaction), adds the cases
 * it does not have, then the handler side (what a handler throws, returns or never does), wrong
 * option types, and schema names with quotes. Healthy jobs run alongside throughout, and must
 * all succeed.
 */
let fx: Awaited<ReturnType<typeof engineFixture>>;
let q: PgQueue;
const healthy: string[] = [];
const handled: string[] = [];

/** What a handler of the catalogue queue does, by the job's payload.case. */
const handlerCases: Record<string, (job: Job<{ case: string }>, ctx: JobContext) => unknown> = {
  healthy: async () => {},
  'throws a string': async () => {
    throw 'a plain string';
  },
  'throws undefined': async () => {
    throw undefined;
  },
  'throws null': async () => {
    throw null;
  },
  'throws an object whose toString throws': async () => {
    throw {
      toString() {
        throw new Error('no string for you');
      },
    };
  },
  'throws an object without a prototype': async () => {
    throw Object.assign(Object.create(null), { reason: 'dictionary' });
  },
  'returns a rejected non-Error': () => Promise.reject(42),
  'returns a thenable that rejects': () => ({ then: (_: unknown, reject: (e: unknown) => void) => reject(new Error('thenable says no')) }),
  'throws synchronously (not async)': () => {
    throw new Error('sync failure');
  },
  'returns a plain value (not a promise)': () => 'done',
  'throws an Error with a huge multi-line message': async () => {
    throw new Error(`line one\n${'x'.repeat(50_000)}\nsecret payload bits`);
  },
  'throws an Error with a malformed code': async () => {
    throw Object.assign(new Error('weird code'), { code: 'not a code!' });
  },
  'never settles': () => new Promise(() => {}),
  'calls heartbeat after its lease was lost': async (job, ctx) => {
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    await ctx.heartbeat(); // rejects: the signal already aborted
  },
};

beforeAll(async () => {
  fx = await engineFixture('badinput');
  q = fx.make({ maxPayloadBytes: 2_048, scheduler: { intervalMs: 20 } });
  q.work<{ case: string }>(
    'catalogue',
    async (job, ctx) => {
      handled.push(job.payload.case);
      return handlerCases[job.payload.case]!(job, ctx);
    },
    { concurrency: 4, prefetch: 0, leaseMs: 600, abortMarginMs: 100, maxAttempts: 2, unknownErrorAttempts: 2, backoff: { baseMs: 0, maxMs: 0 } },
  );
  await q.start();
});
afterAll(async () => {
  await fx?.close();
});

/** A healthy job enqueued right after each case: it must succeed like any other. */
async function healthyJob(): Promise<void> {
  healthy.push(await q.enqueue('catalogue', { case: 'healthy' }));
}

const jobCount = async () => (await fx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0]!.n;

async function refusal(call: () => Promise<unknown>): Promise<unknown> {
  return call().then(
    () => {
      throw new Error('expected a refusal');
    },
    (error: unknown) => error,
  );
}

describe('enqueue: refused with a clear error, nothing written, the running queue unaffected', () => {
  const cycle: Record<string, unknown> = {};
  cycle.me = cycle;
  const cases: [string, string, unknown, Record<string, unknown> | undefined, string, RegExp][] = [
    // [name, queue, payload, options, code, message]
    ['an empty queue name', '', {}, undefined, 'INVALID_QUEUE_NAME', /queue name "" is not valid/],
    ['a queue name of spaces', '   ', {}, undefined, 'INVALID_QUEUE_NAME', /not valid/],
    ['a queue name of 129 characters', `q${'x'.repeat(128)}`, {}, undefined, 'INVALID_QUEUE_NAME', /not valid/],
    ['a queue name that is a number', 42 as unknown as string, {}, undefined, 'INVALID_QUEUE_NAME', /queue name 42 is not valid/],
    ['a queue name that is null', null as unknown as string, {}, undefined, 'INVALID_QUEUE_NAME', /queue name null is not valid/],
    ['an unknown queue', 'nobody-declared-this', {}, undefined, 'UNKNOWN_QUEUE', /"nobody-declared-this" is not declared/],
    ['a BigInt payload', 'catalogue', { amount: 10n }, undefined, 'INVALID_PAYLOAD', /payload\.amount is a BigInt/],
    ['a BigInt deep in an array', 'catalogue', { items: [1, { n: 2n }] }, undefined, 'INVALID_PAYLOAD', /payload\.items\[1\]\.n is a BigInt/],
    ['a cyclic payload', 'catalogue', cycle, undefined, 'INVALID_PAYLOAD', /payload\.me is a cycle/],
    ['a Symbol in the payload', 'catalogue', { s: Symbol('x') }, undefined, 'INVALID_PAYLOAD', /payload\.s is a symbol/],
    ['a Map payload', 'catalogue', new Map([['a', 1]]), undefined, 'INVALID_PAYLOAD', /payload is a Map/],
    ['Infinity in the payload', 'catalogue', { n: Number.POSITIVE_INFINITY }, undefined, 'INVALID_PAYLOAD', /payload\.n is Infinity, not a finite number/],
    ['a Date in the payload', 'catalogue', { at: new Date() }, undefined, 'INVALID_PAYLOAD', /payload\.at is a Date: convert it to a string \(date\.toISOString\(\)\)/],
    ['U+0000 in a string', 'catalogue', { s: 'a\u0000b' }, undefined, 'INVALID_PAYLOAD', /payload\.s is a string that contains U\+0000/],
    ['an oversized payload', 'catalogue', { s: 'x'.repeat(3_000) }, undefined, 'PAYLOAD_TOO_LARGE', /over the limit of 2048/],
    ['a negative delay', 'catalogue', {}, { delayMs: -1 }, 'INVALID_JOB_OPTION', /"delayMs" is -1/],
    ['a NaN delay', 'catalogue', {}, { delayMs: Number.NaN }, 'INVALID_JOB_OPTION', /"delayMs" is NaN/],
    ['an infinite delay', 'catalogue', {}, { delayMs: Number.POSITIVE_INFINITY }, 'INVALID_JOB_OPTION', /"delayMs" is Infinity/],
    ['a delay given as a string', 'catalogue', {}, { delayMs: '1000' }, 'INVALID_JOB_OPTION', /"delayMs" is "1000"/],
    ['runAt given as a string', 'catalogue', {}, { runAt: '2030-01-01' }, 'INVALID_JOB_OPTION', /"runAt"/],
    ['both runAt and delayMs', 'catalogue', {}, { runAt: new Date(), delayMs: 5 }, 'INVALID_JOB_OPTION', /pick one/],
    ['priority above the range', 'catalogue', {}, { priority: 1_001 }, 'INVALID_JOB_OPTION', /from -1000 to 1000/],
    ['priority below the range', 'catalogue', {}, { priority: -1_001 }, 'INVALID_JOB_OPTION', /from -1000 to 1000/],
    ['a fractional priority', 'catalogue', {}, { priority: 1.5 }, 'INVALID_JOB_OPTION', /"priority" is 1.5/],
    ['max attempts 0', 'catalogue', {}, { maxAttempts: 0 }, 'INVALID_JOB_OPTION', /"maxAttempts" is 0/],
    ['max attempts negative', 'catalogue', {}, { maxAttempts: -3 }, 'INVALID_JOB_OPTION', /"maxAttempts" is -3/],
    ['max attempts as a string', 'catalogue', {}, { maxAttempts: '3' }, 'INVALID_JOB_OPTION', /"maxAttempts" is "3"/],
    ['max runtime 0', 'catalogue', {}, { maxRuntimeMs: 0 }, 'INVALID_JOB_OPTION', /"maxRuntimeMs" is 0/],
  ];

  test.each(cases)('%s', async (_name, queue, payload, options, code, message) => {
    const before = await jobCount();
    // Alone, in a batch beside a healthy job, and inside a caller's transaction: the same refusal.
    const alone = await refusal(() => q.enqueue(queue, payload, options as never));
    expect(alone).toBeInstanceOf(InvalidJobError);
    expect(alone).toMatchObject({ code, message: expect.stringMatching(message) });
    const batch = await refusal(() =>
      q.enqueueMany([
        { queue: 'catalogue', payload: { case: 'healthy' } },
        { queue, payload, options: options as never },
      ]),
    );
    expect(batch).toMatchObject({ code, message: expect.stringMatching(/^jobs\[1\]|Queue "/) });
    const client = new pg.Client({ connectionString: fx.url });
    await client.connect();
    try {
      await client.query('BEGIN');
      await client.query(`CREATE TEMP TABLE mine (x int) ON COMMIT DROP`);
      expect(await refusal(() => q.enqueue(queue, payload, { ...(options as object), client }))).toMatchObject({ code });
      // The caller's transaction was not touched: it can go on and commit.
      await client.query(`INSERT INTO mine VALUES (1)`);
      await client.query('COMMIT');
    } finally {
      await client.end();
    }
    expect(await jobCount()).toBe(before);
    await healthyJob();
  });

  test('malformed calls: a batch that is not an array, a null job, options that are not an object', async () => {
    const before = await jobCount();
    expect(await refusal(() => q.enqueueMany('nope' as never))).toMatchObject({ code: 'INVALID_JOB_OPTION', message: expect.stringMatching(/expects an array/) });
    expect(await refusal(() => q.enqueueMany([null as never]))).toMatchObject({ code: 'INVALID_JOB_OPTION', message: expect.stringMatching(/must be an object/) });
    expect(await refusal(() => q.enqueueMany([{ queue: 'catalogue', payload: {}, options: 'urgent' as never }]))).toMatchObject({
      code: 'INVALID_JOB_OPTION',
      message: expect.stringMatching(/options must be an object/),
    });
    expect(await jobCount()).toBe(before);
    // The boundary: a payload of exactly the limit is accepted, one byte more is not.
    const exact = { case: 'healthy', s: 'x'.repeat(2_048 - JSON.stringify({ case: 'healthy', s: '' }).length) };
    expect(JSON.stringify(exact).length).toBe(2_048);
    healthy.push(await q.enqueue('catalogue', exact));
    expect(await refusal(() => q.enqueue('catalogue', { ...exact, s: `${exact.s}x` }))).toMatchObject({ code: 'PAYLOAD_TOO_LARGE' });
  });
});

describe('handlers: what a handler throws, returns or never does has a defined outcome', () => {
  // [case, final status, attempts, last_error_code, message pattern]
  const outcomes: [string, string, number, string | null, RegExp | null][] = [
    ['throws a string', 'dead', 2, 'NON_ERROR_THROWN', /non-Error value \(string\): a plain string/],
    ['throws undefined', 'dead', 2, 'NON_ERROR_THROWN', /non-Error value \(undefined\)/],
    ['throws null', 'dead', 2, 'NON_ERROR_THROWN', /non-Error value \(object\): null/],
    ['throws an object whose toString throws', 'dead', 2, 'NON_ERROR_THROWN', /non-Error value \(object\)/],
    ['throws an object without a prototype', 'dead', 2, 'NON_ERROR_THROWN', /non-Error value \(object\): \[object Object\]/],
    ['returns a rejected non-Error', 'dead', 2, 'NON_ERROR_THROWN', /non-Error value \(number\): 42/],
    ['returns a thenable that rejects', 'dead', 2, 'UNKNOWN', /Error: thenable says no/],
    ['throws synchronously (not async)', 'dead', 2, 'UNKNOWN', /Error: sync failure/],
    ['returns a plain value (not a promise)', 'succeeded', 1, null, null],
    ['throws an Error with a huge multi-line message', 'dead', 2, 'UNKNOWN', /^Error: line one x+…$/],
    ['throws an Error with a malformed code', 'dead', 2, 'UNKNOWN', /Error: weird code/],
    ['never settles', 'dead', 2, 'LEASE_EXPIRED', /did not settle/],
    ['calls heartbeat after its lease was lost', 'dead', 2, 'LEASE_EXPIRED', /lease was about to expire/],
  ];

  test.each(outcomes)('%s', async (name, status, attempts, code, message) => {
    const id = await q.enqueue('catalogue', { case: name });
    await healthyJob();
    const job = await waitFor(async () => {
      const row = await q.getJob(id);
      return row && ['succeeded', 'dead'].includes(row.status) ? row : undefined;
    }, 15_000);
    expect(job).toMatchObject({ status, attemptCount: attempts, lastErrorCode: code });
    if (message) expect(job.lastErrorMessage).toMatch(message);
    // Bounded, one line, and nothing from the payload's secrets or a stack trace.
    expect((job.lastErrorMessage ?? '').length).toBeLessThanOrEqual(1_000);
    expect(job.lastErrorMessage ?? '').not.toMatch(/\n|secret payload|at .*\.ts:\d+/);
    // Dead is a visible state with its history, oldest first (event ids here cross 9 -> 10).
    if (status === 'dead') {
      const events = await q.getJobEvents(id);
      expect(events.map((e) => e.kind).at(-1)).toBe('dead');
      expect(events.map((e) => Number(e.id))).toEqual(events.map((e) => Number(e.id)).sort((a, b) => a - b));
    }
  });

  test('every healthy job enqueued alongside the bad input succeeded, once', async () => {
    await waitFor(async () => {
      const { rows } = await fx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE id = ANY($1) AND status = 'succeeded'`, [healthy]);
      return rows[0]!.n === healthy.length;
    }, 15_000);
    expect(healthy.length).toBeGreaterThan(30);
    const { rows } = await fx.pool.query(`SELECT attempt_count, lease_token::int AS token FROM pgqueue.job_rows WHERE id = ANY($1) AND (attempt_count <> 1 OR lease_token <> 1)`, [healthy]);
    expect(rows).toEqual([]);
    expect(handled.filter((c) => c === 'healthy')).toHaveLength(healthy.length);
  });
});

describe('options of the wrong type: a clear error naming the option, before anything runs', () => {
  const url = () => fx.url;
  const construct: [string, () => unknown, RegExp][] = [
    ['poolSize as a string', () => new PgQueue({ connectionString: url(), poolSize: '10' as never }), /Invalid option "poolSize"/],
    ['a workerId with a space', () => new PgQueue({ connectionString: url(), workerId: 'my worker' }), /Invalid option "workerId"/],
    ['pollIntervalMs NaN', () => new PgQueue({ connectionString: url(), pollIntervalMs: Number.NaN }), /Invalid option "pollIntervalMs"/],
    ['reaper.batchSize 0', () => new PgQueue({ connectionString: url(), reaper: { batchSize: 0 } }), /Invalid option "reaper.batchSize"/],
    ['scheduler.intervalMs as a string', () => new PgQueue({ connectionString: url(), scheduler: { intervalMs: 'fast' as never } }), /Invalid option "scheduler.intervalMs"/],
    ['notifier.reconnectMinMs negative', () => new PgQueue({ connectionString: url(), notifier: { reconnectMinMs: -1 } }), /Invalid option "notifier.reconnectMinMs"/],
    ['notifier.probeTimeoutMs 0', () => new PgQueue({ connectionString: url(), notifier: { probeTimeoutMs: 0 } }), /Invalid option "notifier.probeTimeoutMs"/],
    ['completer.maxBatch fractional', () => new PgQueue({ connectionString: url(), completer: { maxBatch: 1.5 } }), /Invalid option "completer.maxBatch"/],
    ['a pool that is not a pg.Pool', () => new PgQueue({ pool: {} as never }), /Invalid option "pool"/],
    ['both pool and connectionString', () => new PgQueue({ connectionString: url(), pool: new pg.Pool() }), /both pool and connectionString/],
    ['handlerDefaults.maxAttempts 0', () => new PgQueue({ connectionString: url(), handlerDefaults: { maxAttempts: 0 } }), /"handlerDefaults.maxAttempts"/],
  ];
  test.each(construct)('PgQueue: %s', (_name, make, message) => {
    expect(make).toThrow(InvalidOptionError);
    expect(make).toThrow(message);
  });

  const handlerOptions: [string, unknown, RegExp][] = [
    ['concurrency as a string', { concurrency: '5' }, /"jobs.concurrency"/],
    ['leaseMs NaN', { leaseMs: Number.NaN }, /"jobs.leaseMs"/],
    ['a lease shorter than 200 ms', { leaseMs: 50 }, /"jobs.leaseMs"/],
    ['backoff.baseMs negative', { backoff: { baseMs: -1 } }, /"jobs.backoff.baseMs"/],
    ['abortMarginMs over half the lease', { leaseMs: 1_000, abortMarginMs: 501 }, /more than half the lease/],
    ['maxRuntimeMs 0', { maxRuntimeMs: 0 }, /"jobs.maxRuntimeMs"/],
  ];
  test.each(handlerOptions)('work(): %s', async (_name, options, message) => {
    const engine = new PgQueue({ connectionString: fx.url, logger: testLogger() });
    try {
      expect(() => engine.work('jobs', async () => {}, options as never)).toThrow(message);
    } finally {
      await engine.stop();
    }
  });

  test('work(): a handler that is not a function, an invalid queue name, a second handler, a handler after start', async () => {
    const engine = new PgQueue({ connectionString: fx.url, logger: testLogger() });
    try {
      expect(() => engine.work('jobs', 'handler' as never)).toThrow(/"jobs.handler": it is not a function/);
      expect(() => engine.work('no spaces please', async () => {})).toThrow(/not a valid queue name/);
      engine.work('jobs', async () => {});
      expect(() => engine.work('jobs', async () => {})).toThrow(/already has a handler/);
    } finally {
      await engine.stop();
    }
    expect(() => q.work('late', async () => {})).toThrow(/registered after start\(\)/);
  });

  test('a migration mode that does not exist: refused at construction, naming the option', () => {
    const make = () => new PgQueue({ connectionString: fx.url, logger: testLogger(), migrations: 'sometimes' as never });
    expect(make).toThrow(InvalidOptionError);
    expect(make).toThrow(/Invalid option "migrations": "sometimes" is not one of "auto", "verify", "off"/);
  });
});

describe('schema names with quotes (or anything else that is not a plain lower-case identifier) are refused before any SQL', () => {
  const names: [string, unknown][] = [
    ['a double quote', 'a"b'],
    ['a quote-and-drop', 'x"; DROP TABLE pgqueue.jobs; --'],
    ['a single quote', "o'brien"],
    ['upper case', 'PgQueue'],
    ['a leading digit', '1queue'],
    ['58 characters', `q${'x'.repeat(57)}`],
    ['an empty string', ''],
    ['a number', 42],
  ];
  test.each(names)('%s', async (_name, schema) => {
    expect(() => new PgQueue({ connectionString: fx.url, schema: schema as string })).toThrow(/Invalid option "schema"/);
    expect(() => createStore(schema as string)).toThrow(/Invalid option "schema"/);
    await expect(migrate(fx.url, { schema: schema as string })).rejects.toThrow(/Invalid option "schema"/);
    // Nothing was created, and the queue's own tables are intact.
    const { rows } = await fx.pool.query(`SELECT nspname FROM pg_namespace WHERE nspname NOT IN ('pgqueue', 'public', 'information_schema') AND nspname NOT LIKE 'pg\\_%'`);
    expect(rows).toEqual([]);
    expect(await jobCount()).toBeGreaterThan(0);
  });

  test('ids that are not ids: getJob and getJobEvents answer "no such job", never an SQL error', async () => {
    for (const id of ['1; DROP TABLE pgqueue.jobs', '-1', '1e3', '', '99999999999999999999', ' 1']) {
      expect(await q.getJob(id)).toBeUndefined();
      expect(await q.getJobEvents(id)).toEqual([]);
    }
  });
});
