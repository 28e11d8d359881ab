import pg from 'pg';
import { InvalidJobError, PermanentJobError, PgQueue, RetryableJobError, defineJob, type EnqueueResult } from '../../lib/engine/index.js';
import { engineFixture, waitFor, waitForOutcome, waitForStatus } from '../support/engine.js';
import { claimed } from '../support/signals.js';
import { testSignals } from '../support/signals.js';

/**
 * Unique jobs and debounced jobs (docs/unique-jobs.md): one job per key in the scope its producer
 * named, enforced by the database's unique index, across producers and processes.
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
let q: PgQueue;
beforeAll(async () => {
  fx = await engineFixture('unique');
  q = fx.make();
  await q.declareQueues(['u', 'd']);
});
afterAll(() => fx.close());

/** The jobs of `queue` holding unique key `key` (any state), oldest first. */
async function jobsOfKey(queue: string, key: string, column = 'unique_key') {
  const { rows } = await fx.pool.query(
    `SELECT id::text, status::text, payload, unique_period, available_at, created_at FROM pgqueue.job_rows WHERE queue_name = $1 AND ${column} = $2 ORDER BY id`,
    [queue, key],
  );
  return rows as { id: string; status: string; payload: unknown; unique_period: Date; available_at: Date; created_at: Date }[];
}

describe('enqueue with unique', () => {
  test('returns { id, deduplicated }: the second enqueue of a held key adds nothing and names the holder', async () => {
    const first = await q.enqueue('u', { n: 1 }, { unique: { key: 'basic', while: 'pending' } });
    const second = await q.enqueue('u', { n: 2 }, { unique: { key: 'basic', while: 'pending' } });
    expect(first).toEqual({ id: expect.any(String), deduplicated: false });
    expect(second).toEqual({ id: first.id, deduplicated: true });
    expect((await q.getJob(first.id))?.payload).toEqual({ n: 1 });
    expect(await jobsOfKey('u', 'basic')).toHaveLength(1);
    // The plain enqueue still returns the id alone.
    const plain: string = await q.enqueue('u', { n: 3 });
    expect(typeof plain).toBe('string');
  });

  test('keys are per queue, and a key with a period is another key than the same text without one', async () => {
    await q.declareQueues(['u2']);
    const a = await q.enqueue('u', {}, { unique: { key: 'per-queue', while: 'ever' } });
    const b = await q.enqueue('u2', {}, { unique: { key: 'per-queue', while: 'ever' } });
    const c = await q.enqueue('u', {}, { unique: { key: 'per-queue', while: 'ever', periodMs: 3_600_000 } });
    expect([a.deduplicated, b.deduplicated, c.deduplicated]).toEqual([false, false, false]);
    expect(new Set([a.id, b.id, c.id]).size).toBe(3);
  });

  test('a delayed or scheduled job holds its key too (runAt and delayMs combine with unique)', async () => {
    const later = await q.enqueue('u', {}, { unique: { key: 'delayed', while: 'pending' }, delayMs: 60_000 });
    expect((await q.getJob(later.id))?.status).toBe('scheduled');
    const again = await q.enqueue('u', {}, { unique: { key: 'delayed', while: 'pending' }, runAt: new Date(Date.now() + 5_000) });
    expect(again).toEqual({ id: later.id, deduplicated: true });
  });

  test('enqueueMany reports deduplicated per job: duplicates inside the batch, against a held key, and plain jobs beside them', async () => {
    const held = await q.enqueue('u', { held: true }, { unique: { key: 'batch-held', while: 'unfinished' } });
    const ids = await q.enqueueMany([
      { queue: 'u', payload: { i: 0 }, options: { unique: { key: 'batch-a', while: 'unfinished' } } },
      { queue: 'u', payload: { i: 1 } },
      { queue: 'u', payload: { i: 2 }, options: { unique: { key: 'batch-a', while: 'pending' } } },
      { queue: 'u', payload: { i: 3 }, options: { unique: { key: 'batch-held', while: 'unfinished' } } },
      { queue: 'u', payload: { i: 4 }, options: { unique: { key: 'batch-b', while: 'ever' } } },
      { queue: 'u', payload: { i: 5 } },
    ]);
    expect(ids.deduplicated).toEqual([false, false, true, true, false, false]);
    expect(ids[2]).toBe(ids[0]);
    expect(ids[3]).toBe(held.id);
    expect(new Set([ids[0], ids[1], ids[4], ids[5], held.id]).size).toBe(5);
    const payloads = await Promise.all([ids[0], ids[1], ids[4], ids[5]].map(async (id) => (await q.getJob(id!))?.payload));
    expect(payloads).toEqual([{ i: 0 }, { i: 1 }, { i: 4 }, { i: 5 }]);
    // Without unique, the flags are there and false.
    const plain = await q.enqueueMany([{ queue: 'u', payload: 1 }, { queue: 'u', payload: 2 }]);
    expect(plain.deduplicated).toEqual([false, false]);
    // Still the plain array of ids to equality and JSON (the flags are not enumerable).
    expect(plain).toEqual([plain[0], plain[1]]);
    expect(JSON.stringify(ids)).toBe(JSON.stringify([...ids]));
  });

  test("with a client, the key is checked in the caller's transaction: a rolled-back job frees it, one in the same transaction holds it", async () => {
    const client = new pg.Client({ connectionString: fx.url });
    await client.connect();
    try {
      await client.query('BEGIN');
      const inside = await q.enqueue('u', {}, { unique: { key: 'tx', while: 'pending' }, client });
      expect(await q.enqueue('u', {}, { unique: { key: 'tx', while: 'pending' }, client })).toEqual({ id: inside.id, deduplicated: true });
      await client.query('ROLLBACK');
      const after = await q.enqueue('u', {}, { unique: { key: 'tx', while: 'pending' } });
      expect(after.deduplicated).toBe(false);
      expect(await q.getJob(inside.id)).toBeUndefined();
      // A batch on the client is in its transaction too.
      await client.query('BEGIN');
      const batch = await q.enqueueMany([{ queue: 'u', payload: 1, options: { unique: { key: 'tx', while: 'pending' } } }, { queue: 'u', payload: 2 }], { client });
      await client.query('COMMIT');
      expect(batch[0]).toBe(after.id);
      expect(batch.deduplicated).toEqual([true, false]);
    } finally {
      await client.end();
    }
  });

  test('a definition (defineJob) validates the payload and its version is stored, unique or not', async () => {
    const Defined = defineJob<{ n: number }>('u', { version: 3 });
    const first = await q.enqueue(Defined, { n: 1 }, { unique: { key: 'defined', while: 'pending' } });
    const again = await q.enqueue(Defined, { n: 2 }, { unique: { key: 'defined', while: 'pending' } });
    expect(again).toEqual({ id: first.id, deduplicated: true });
    const { rows } = await fx.pool.query(`SELECT payload, payload_version FROM pgqueue.job_rows WHERE id = $1`, [first.id]);
    expect(rows).toEqual([{ payload: { n: 1 }, payload_version: 3 }]);
  });
});

describe('scopes: how long a job holds its key', () => {
  test("'pending' frees the key when the job is claimed, and a retry of that job does not take it back", async () => {
    const w = fx.make();
    await w.declareQueues(['scope-pending']);
    let second: EnqueueResult | undefined;
    w.work(
      'scope-pending',
      async (job) => {
        if (job.attempt === 1 && (job.payload as { first?: boolean }).first) {
          // Running: the key is free, so this adds a second job.
          second = await w.enqueue('scope-pending', { second: true }, { unique: { key: 'p', while: 'pending' } });
          throw new RetryableJobError('again', { retryAfterMs: 0 });
        }
      },
      { concurrency: 1 },
    );
    const first = await w.enqueue('scope-pending', { first: true }, { unique: { key: 'p', while: 'pending' } });
    await w.start();
    // The retry went back to scheduled/pending beside the second job without a unique violation.
    await waitForOutcome(w, first.id, 'succeeded');
    expect(second?.deduplicated).toBe(false);
    expect(second?.id).not.toBe(first.id);
    await waitForOutcome(w, second!.id, 'succeeded');
    const jobs = await jobsOfKey('scope-pending', 'p');
    expect(jobs.map((j) => j.status)).toEqual(['succeeded', 'succeeded']);
  });

  test("'unfinished' holds the key through running and dead, and through a replay; success or a discard frees it", async () => {
    const w = fx.make();
    await w.declareQueues(['scope-unfinished']);
    const key = { unique: { key: 'uf', while: 'unfinished' as const } };
    const seenWhileRunning: EnqueueResult[] = [];
    let fail = true;
    w.work('scope-unfinished', async () => {
      seenWhileRunning.push(await w.enqueue('scope-unfinished', {}, key));
      if (fail) throw new PermanentJobError('no');
    });
    const job = await w.enqueue('scope-unfinished', {}, key);
    await w.start();
    await waitForOutcome(w, job.id, 'dead');
    expect(seenWhileRunning).toEqual([{ id: job.id, deduplicated: true }]);
    expect(await w.enqueue('scope-unfinished', {}, key)).toEqual({ id: job.id, deduplicated: true });
    // Replayed, it holds the key still, and succeeds.
    fail = false;
    await w.replay(job.id);
    await waitForOutcome(w, job.id, 'succeeded');
    expect(seenWhileRunning[1]).toEqual({ id: job.id, deduplicated: true });
    const next = await w.enqueue('scope-unfinished', {}, key);
    expect(next.deduplicated).toBe(false);
    // A discarded dead job frees its key.
    fail = true;
    await waitForOutcome(w, next.id, 'dead');
    await w.discard(next.id);
    expect((await w.enqueue('scope-unfinished', {}, key)).deduplicated).toBe(false);
  });

  test("'ever' holds the key after success, until the pruner deletes the job", async () => {
    const w = fx.make({ pruner: { retentionMs: 3_600_000 } });
    await w.declareQueues(['scope-ever']);
    w.work('scope-ever', async () => {});
    const key = { unique: { key: 'ev', while: 'ever' as const } };
    const job = await w.enqueue('scope-ever', {}, key);
    await w.start();
    await waitForOutcome(w, job.id, 'succeeded');
    expect(await w.enqueue('scope-ever', {}, key)).toEqual({ id: job.id, deduplicated: true });
    // Past retention (its finish moved an hour back, rather than waiting), the pruner deletes it.
    await fx.pool.query(`UPDATE pgqueue.jobs SET finished_at = finished_at - interval '2 hours' WHERE id = $1`, [job.id]);
    // The pruner takes its rows FOR UPDATE SKIP LOCKED: a row another transaction holds at that
    // instant is left for a later pass (seen once in CI), so a few passes, not exactly one.
    let pruned = 0;
    for (let pass = 0; pass < 50 && (await w.getJob(job.id)) !== undefined; pass++) {
      pruned += await w.pruneOnce();
      if ((await w.getJob(job.id)) !== undefined) await new Promise((r) => setTimeout(r, 100));
    }
    expect(await w.getJob(job.id)).toBeUndefined();
    expect(pruned).toBeGreaterThan(0);
    expect((await w.enqueue('scope-ever', {}, key)).deduplicated).toBe(false);
  });

  test("cancelling a waiting job frees its 'pending' and 'unfinished' keys; an 'ever' key stays held by the kept row", async () => {
    for (const scope of ['pending', 'unfinished'] as const) {
      const job = await q.enqueue('u', {}, { unique: { key: `cancel-${scope}`, while: scope } });
      await q.cancel(job.id);
      expect((await q.enqueue('u', {}, { unique: { key: `cancel-${scope}`, while: scope } })).deduplicated).toBe(false);
    }
    const ever = await q.enqueue('u', {}, { unique: { key: 'cancel-ever', while: 'ever' } });
    await q.cancel(ever.id);
    expect(await q.enqueue('u', {}, { unique: { key: 'cancel-ever', while: 'ever' } })).toEqual({ id: ever.id, deduplicated: true });
  });
});

describe('period buckets (throttle)', () => {
  test("a key with periodMs is held per bucket: one job per bucket with while 'ever', buckets aligned on the epoch by database time", async () => {
    const periodMs = 250;
    const results: EnqueueResult[] = [];
    // Enqueue until a second bucket starts (database time decides, not a timer here).
    await waitFor(async () => {
      results.push(await q.enqueue('u', { at: results.length }, { unique: { key: 'throttled', while: 'ever', periodMs } }));
      return new Set(results.map((r) => r.id)).size >= 2 || undefined;
    });
    const jobs = await jobsOfKey('u', 'throttled');
    expect(jobs.length).toBe(new Set(results.map((r) => r.id)).size);
    for (const job of jobs) expect(job.unique_period.getTime() % periodMs).toBe(0);
    // Each bucket's first enqueue added its job; every later one in the bucket was deduplicated to it.
    expect(results.filter((r) => !r.deduplicated).map((r) => r.id)).toEqual(jobs.map((j) => j.id));
    const firstOf = new Map<string, number>();
    results.forEach((r, k) => firstOf.has(r.id) || firstOf.set(r.id, k));
    results.forEach((r, k) => expect(r.deduplicated).toBe(firstOf.get(r.id) !== k));
    // Jobs were added in bucket order.
    const starts = jobs.map((j) => j.unique_period.getTime());
    expect(starts).toEqual([...starts].sort((a, b) => a - b));
  });
});

describe('debounce', () => {
  test('with no worker running, a burst of 100 within the delay leaves one scheduled job with the last payload, its run time moved', async () => {
    const results: EnqueueResult[] = [];
    for (let i = 0; i < 100; i++) results.push(await q.enqueue('d', { i }, { debounce: { key: 'burst', delayMs: 10_000 } }));
    const jobs = await jobsOfKey('d', 'burst', 'debounce_key');
    expect(jobs).toHaveLength(1);
    expect(jobs[0]).toMatchObject({ status: 'scheduled', payload: { i: 99 } });
    expect(results[0]).toEqual({ id: jobs[0]!.id, deduplicated: false });
    expect(results.slice(1).every((r) => r.id === jobs[0]!.id && r.deduplicated)).toBe(true);
    // The run time is the last enqueue's (10 s after it), later than the first's.
    expect(jobs[0]!.available_at.getTime() - jobs[0]!.created_at.getTime()).toBeGreaterThan(10_000);
  });

  test('with merge, a concurrent burst of 100 is merged into one job: every payload is in it', async () => {
    const merge = (previous: { ids: number[] }, next: { ids: number[] }) => ({ ids: [...previous.ids, ...next.ids] });
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => q.enqueue<{ ids: number[] }>('d', { ids: [i] }, { debounce: { key: 'merged', delayMs: 10_000, merge } })),
    );
    const jobs = await jobsOfKey('d', 'merged', 'debounce_key');
    expect(jobs).toHaveLength(1);
    expect([...(jobs[0]!.payload as { ids: number[] }).ids].sort((a, b) => a - b)).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(results.filter((r) => !r.deduplicated)).toHaveLength(1);
    expect(new Set(results.map((r) => r.id))).toEqual(new Set([jobs[0]!.id]));
  });

  test('maxWaitMs bounds the run time from the first enqueue, whatever comes after', async () => {
    const first = await q.enqueue('d', { n: 1 }, { debounce: { key: 'bounded', delayMs: 5_000, maxWaitMs: 5_000 } });
    // A moment later (database time moves on): the next enqueue would run it 5 s after itself.
    await fx.pool.query('SELECT pg_sleep(0.05)');
    const again = await q.enqueue('d', { n: 2 }, { debounce: { key: 'bounded', delayMs: 5_000, maxWaitMs: 5_000 } });
    expect(again).toEqual({ id: first.id, deduplicated: true });
    const [job] = await jobsOfKey('d', 'bounded', 'debounce_key');
    expect(job!.payload).toEqual({ n: 2 });
    expect(job!.available_at.getTime() - job!.created_at.getTime()).toBe(5_000);
  });

  test('a due job that is moved goes back to scheduled; in a batch, the last payload wins and the rest are deduplicated', async () => {
    const due = await q.enqueue('d', { n: 0 }, { debounce: { key: 'due', delayMs: 0 } });
    expect((await q.getJob(due.id))?.status).toBe('pending');
    const ids = await q.enqueueMany([
      { queue: 'd', payload: { n: 1 }, options: { debounce: { key: 'due', delayMs: 60_000 } } },
      { queue: 'd', payload: { n: 2 }, options: { debounce: { key: 'fresh', delayMs: 60_000 } } },
      { queue: 'd', payload: { n: 3 }, options: { debounce: { key: 'due', delayMs: 60_000 } } },
      { queue: 'd', payload: { n: 4 }, options: { debounce: { key: 'fresh', delayMs: 60_000 } } },
    ]);
    expect([ids[0], ids[2]]).toEqual([due.id, due.id]);
    expect(ids[3]).toBe(ids[1]);
    expect(ids.deduplicated).toEqual([true, false, true, true]);
    expect(await q.getJob(due.id)).toMatchObject({ status: 'scheduled', payload: { n: 3 } });
    expect((await q.getJob(ids[1]!))?.payload).toEqual({ n: 4 });
  });

  test('a debounced job already claimed is not changed: the next enqueue of its key starts a new one', async () => {
    const w = fx.make();
    await w.declareQueues(['d-running']);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    w.work('d-running', async () => held);
    const first = await w.enqueue('d-running', { n: 1 }, { debounce: { key: 'r', delayMs: 0 } });
    await w.start();
    await claimed(testSignals(w), first.id);
    const second = await w.enqueue('d-running', { n: 2 }, { debounce: { key: 'r', delayMs: 0 } });
    expect(second.deduplicated).toBe(false);
    expect((await w.getJob(first.id))?.payload).toEqual({ n: 1 });
    release();
    await waitForOutcome(w, first.id, 'succeeded');
    await waitForOutcome(w, second.id, 'succeeded');
  });

  test("a merge's result is validated as a payload (the definition's schema too): refused, nothing changes", async () => {
    const Counted = defineJob('d', { schema: { '~standard': { version: 1, vendor: 'test', validate: (v: unknown) => (typeof (v as { n?: unknown }).n === 'number' ? { value: v as { n: number } } : { issues: [{ message: 'n must be a number', path: ['n'] }] }) } } });
    const merge = (a: { n: number }, b: { n: number }) => ({ n: a.n + b.n });
    const first = await q.enqueue(Counted, { n: 1 }, { debounce: { key: 'validated', delayMs: 60_000, merge } });
    await expect(q.enqueue(Counted, { n: 2 }, { debounce: { key: 'validated', delayMs: 60_000, merge: () => ({ n: 'x' }) as never } })).rejects.toMatchObject({
      code: 'INVALID_PAYLOAD',
    });
    expect(await q.enqueue(Counted, { n: 2 }, { debounce: { key: 'validated', delayMs: 60_000, merge } })).toEqual({ id: first.id, deduplicated: true });
    expect((await q.getJob(first.id))?.payload).toEqual({ n: 3 });
  });

  test('merge with a client needs that client inside a transaction, and is written in it', async () => {
    const client = new pg.Client({ connectionString: fx.url });
    await client.connect();
    const merge = (a: number[], b: number[]) => [...a, ...b];
    try {
      const refused = q.enqueue<number[]>('d', [1], { debounce: { key: 'tx-merge', delayMs: 60_000, merge }, client });
      await expect(refused).rejects.toMatchObject({ code: 'INVALID_JOB_OPTION', message: expect.stringMatching(/inside a transaction/) });
      expect(await jobsOfKey('d', 'tx-merge', 'debounce_key')).toHaveLength(0);
      await client.query('BEGIN');
      const a = await q.enqueue<number[]>('d', [1], { debounce: { key: 'tx-merge', delayMs: 60_000, merge }, client });
      const b = await q.enqueue<number[]>('d', [2], { debounce: { key: 'tx-merge', delayMs: 60_000, merge }, client });
      await client.query('COMMIT');
      expect(b).toEqual({ id: a.id, deduplicated: true });
      expect((await q.getJob(a.id))?.payload).toEqual([1, 2]);
    } finally {
      await client.end();
    }
  });
});

describe('bad input is refused with INVALID_JOB_OPTION naming the option, and nothing is written', () => {
  const cases: [string, () => Promise<unknown>, RegExp][] = [
    ['unique not an object', () => q.enqueue('u', {}, { unique: 'k' as never }), /"unique" is "k"/],
    ['an empty key', () => q.enqueue('u', {}, { unique: { key: '', while: 'pending' } }), /"unique\.key"/],
    ['a long key', () => q.enqueue('u', {}, { unique: { key: 'k'.repeat(257), while: 'pending' } }), /"unique\.key"/],
    ['no while', () => q.enqueue('u', {}, { unique: { key: 'k' } as never }), /"unique\.while" is undefined/],
    ['an unknown while', () => q.enqueue('u', {}, { unique: { key: 'k', while: 'running' as never } }), /"unique\.while" is "running"/],
    ['a zero period', () => q.enqueue('u', {}, { unique: { key: 'k', while: 'ever', periodMs: 0 } }), /"unique\.periodMs" is 0/],
    ['a fractional period', () => q.enqueue('u', {}, { unique: { key: 'k', while: 'ever', periodMs: 1.5 } }), /"unique\.periodMs"/],
    ['unique with orderingKey', () => q.enqueue('u', {}, { unique: { key: 'k', while: 'pending' }, orderingKey: 'o' }), /"unique" cannot be combined with "orderingKey".*groupConcurrency: 1/],
    ['unique with debounce', () => q.enqueue('u', {}, { unique: { key: 'k', while: 'pending' }, debounce: { key: 'k', delayMs: 1 } } as never), /"unique" cannot be combined with "debounce"/],
    ['debounce without a delay', () => q.enqueue('d', {}, { debounce: { key: 'k' } as never }), /"debounce\.delayMs" is undefined/],
    ['a negative delay', () => q.enqueue('d', {}, { debounce: { key: 'k', delayMs: -1 } }), /"debounce\.delayMs" is -1/],
    ['maxWaitMs below delayMs', () => q.enqueue('d', {}, { debounce: { key: 'k', delayMs: 100, maxWaitMs: 50 } }), /"debounce\.maxWaitMs" is 50.*>= debounce\.delayMs/],
    ['a merge that is no function', () => q.enqueue('d', {}, { debounce: { key: 'k', delayMs: 1, merge: 1 as never } }), /"debounce\.merge" is 1/],
    ['debounce with runAt', () => q.enqueue('d', {}, { debounce: { key: 'k', delayMs: 1 }, runAt: new Date() }), /"debounce" cannot be combined with "runAt"/],
    ['debounce with delayMs', () => q.enqueue('d', {}, { debounce: { key: 'k', delayMs: 1 }, delayMs: 5 }), /"debounce" cannot be combined with "delayMs"/],
    ['debounce with orderingKey', () => q.enqueue('d', {}, { debounce: { key: 'k', delayMs: 1 }, orderingKey: 'o' }), /"debounce" cannot be combined with "orderingKey"/],
    [
      'one bad job of a batch',
      () => q.enqueueMany([{ queue: 'u', payload: 1, options: { unique: { key: 'bad-batch', while: 'ever' } } }, { queue: 'u', payload: 2, options: { unique: { key: 'x', while: 'never' as never } } }]),
      /jobs\[1\]: option "unique\.while"/,
    ],
  ];
  test.each(cases)('%s', async (_label, call, message) => {
    const before = (await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n;
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidJobError);
    expect(error).toMatchObject({ code: 'INVALID_JOB_OPTION', message: expect.stringMatching(message) });
    expect((error as Error).message).toMatch(/Nothing was enqueued\./);
    expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n).toBe(before);
  });
});
