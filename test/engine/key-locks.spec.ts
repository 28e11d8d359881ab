import { engineFixture, waitFor } from '../support/engine.js';
import { allEnded, attemptEnded, testSignals } from '../support/signals.js';

// Finishing a keyed job never waits for a transaction that holds the key's row (a producer adding
// to the key), and key rows are locked in one order, so nothing deadlocks on them.

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('keylocks');
});
afterAll(() => fx.close());

/** A promise per name, resolved from the test. */
function gates() {
  const open = new Map<string, () => void>();
  const wait = new Map<string, Promise<void>>();
  const get = (name: string) => {
    if (!wait.has(name)) wait.set(name, new Promise<void>((resolve) => open.set(name, resolve)));
    return wait.get(name)!;
  };
  return { wait: get, open: (name: string) => (get(name), open.get(name)!()) };
}

test("D4: a producer's open transaction on a key stalls neither that key's completion nor any other queue's", async () => {
  const q = fx.make();
  const signals = testSignals(q);
  const gate = gates();
  const started: string[] = [];
  q.work<{ name: string }>('d4-keyed', async (job) => {
    started.push(job.payload.name);
    if (started.length === 2) gate.open('both started');
    await gate.wait(job.payload.name);
  });
  q.work('d4-plain', async () => {});
  await q.start();
  const [a1, b1] = await q.enqueueMany([
    { queue: 'd4-keyed', payload: { name: 'a1' }, options: { orderingKey: 'A' } },
    { queue: 'd4-keyed', payload: { name: 'b1' }, options: { orderingKey: 'B' } },
  ]);
  await gate.wait('both started');

  // A producer adds to both keys and keeps its transaction open: it holds both key rows.
  const producer = await fx.pool.connect();
  try {
    await producer.query('BEGIN');
    const [a2, b2] = await q.enqueueMany(
      [
        { queue: 'd4-keyed', payload: { name: 'a2' }, options: { orderingKey: 'A' } },
        { queue: 'd4-keyed', payload: { name: 'b2' }, options: { orderingKey: 'B' } },
      ],
      { client: producer },
    );
    // The heads finish, one after the other (two completion statements).
    gate.open('a1');
    await attemptEnded(signals, a1!, 'succeeded', 5_000);
    gate.open('b1');
    await attemptEnded(signals, b1!, 'succeeded', 5_000);
    // Every other queue's jobs keep completing.
    const plain = await q.enqueueMany(Array.from({ length: 20 }, () => ({ queue: 'd4-plain', payload: {} })));
    await allEnded(signals, plain, 'succeeded', 5_000);

    await producer.query('COMMIT');
    // The keys move on once the producer is done: its jobs run, after their heads.
    gate.open('a2');
    gate.open('b2');
    await allEnded(signals, [a2!, b2!]);
    expect(started).toEqual(['a1', 'b1', ...started.slice(2)]);
    expect(started.slice(2).sort()).toEqual(['a2', 'b2']);
    expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.key_handoffs`)).rows[0].n).toBe(0);
  } finally {
    await producer.query('ROLLBACK').catch(() => {});
    producer.release();
  }
});

test("D17: two handlers that enqueue follow-ups to each other's keys inside ctx.complete do not deadlock", async () => {
  const q = fx.make();
  const signals = testSignals(q);
  const gate = gates();
  const errors: string[] = [];
  q.work<{ key: string; other: string; step: number }>('d17', async (job, ctx) => {
    if (job.payload.step > 1) return;
    try {
      await ctx.complete(async (tx) => {
        // Holds the other key's row until this transaction commits...
        await q.enqueue('d17', { key: job.payload.other, other: job.payload.key, step: 2 }, { orderingKey: job.payload.other, client: tx });
        gate.open(`enqueued-${job.payload.key}`);
        await gate.wait(`enqueued-${job.payload.other}`);
        // ...and now finishes its own key, which the other handler's transaction holds.
      });
    } catch (error) {
      errors.push(`${(error as { code?: string }).code ?? ''} ${(error as Error).message}`);
      throw error;
    }
  }, { concurrency: 2 });
  await q.start();
  const [x1, y1] = await q.enqueueMany([
    { queue: 'd17', payload: { key: 'X', other: 'Y', step: 1 }, options: { orderingKey: 'X' } },
    { queue: 'd17', payload: { key: 'Y', other: 'X', step: 1 }, options: { orderingKey: 'Y' } },
  ]);
  await allEnded(signals, [x1!, y1!]);
  expect(errors).toEqual([]);
  expect((await q.getJob(x1!))?.attemptCount).toBe(1);
  expect((await q.getJob(y1!))?.attemptCount).toBe(1);
  // The follow-ups run once their keys are handed on.
  const followUps = (await fx.pool.query(`SELECT id::text FROM pgqueue.job_rows WHERE queue_name = 'd17' AND id NOT IN ($1, $2)`, [x1, y1])).rows;
  expect(followUps).toHaveLength(2);
  await allEnded(signals, followUps.map((r) => r.id as string));
});

async function keyCount(queue: string, key: string): Promise<number | null> {
  const { rows } = await fx.pool.query(`SELECT unfinished FROM pgqueue.ordering_keys WHERE queue_name = $1 AND ordering_key = $2`, [queue, key]);
  return rows[0]?.unfinished ?? null;
}

test("a producer that commits between a completion's snapshot and its lock of the key's row does not wedge the key", async () => {
  const q = fx.make();
  const signals = testSignals(q);
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let started!: () => void;
  const a1Started = new Promise<void>((r) => (started = r));
  q.work<{ n: string }>('lost-decrement', async (job) => {
    if (job.payload.n !== 'a1') return;
    started();
    await gate;
  });
  await q.start();
  const a1 = await q.enqueue('lost-decrement', { n: 'a1' }, { orderingKey: 'A' });
  await a1Started;
  // Someone holds the head's row for a moment (an operator's cancel waiting, a reaper pass): it
  // widens the window between the completion statement's snapshot and its lock of A's row.
  const holder = await fx.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM pgqueue.jobs WHERE id = $1 FOR UPDATE', [a1]);
    release(); // the completion's statement starts, and waits for the head's row
    // PostgreSQL's own view of the lock wait: no engine event says "my statement is waiting".
    await waitFor(
      // The completion's DELETE (it moves the row to jobs_succeeded, migration 0014): matched in the
      // statement's first kilobyte, all pg_stat_activity keeps of its text (track_activity_query_size).
      async () => (await fx.pool.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM%.jobs AS j%'`)).rows[0].n > 0,
      5_000,
    );
    // A producer adds to key A and commits meanwhile (A's row is free: it does not wait).
    const a2 = await q.enqueue('lost-decrement', { n: 'a2' }, { orderingKey: 'A' });
    await holder.query('COMMIT');
    await allEnded(signals, [a1, a2], 'succeeded', 5_000);
    expect(await keyCount('lost-decrement', 'A')).toBeNull(); // forgotten: nothing left of the key
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    holder.release();
  }
});

test('producers racing completions of a few hot keys: every job runs and the key counts stay exact', async () => {
  const q = fx.make({ pollIntervalMs: 100 });
  const signals = testSignals(q);
  q.work('hot-keys', async () => {}, { concurrency: 8 });
  await q.start();
  const keys = ['A', 'B', 'C', 'D'];
  let enqueued = 0;
  const ids: string[] = [];
  for (let round = 0; round < 150; round++) {
    ids.push(...(await Promise.all(Array.from({ length: 3 }, () => q.enqueue('hot-keys', {}, { orderingKey: keys[enqueued++ % keys.length] })))));
  }
  await allEnded(signals, ids, 'succeeded', 30_000);
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'hot-keys' AND status <> 'succeeded'`)).rows[0].n).toBe(0);
  const { rows } = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.ordering_keys WHERE queue_name = 'hot-keys'`);
  expect(rows[0].n).toBe(0); // every key forgotten: no count was left one too high
});

test('handoffs of keys a producer still holds do not hide a free key behind them', async () => {
  const q = fx.make({ keyHandoffs: { batchSize: 2, intervalMs: 100, retryMs: 50 } });
  const signals = testSignals(q);
  // One at a time, so the heads finish (and their keys are handed off) in the order A, B, C.
  q.work('hol', async () => {}, { concurrency: 1, prefetch: 0 });
  await q.start();
  const holder = await fx.pool.connect();
  const other = await fx.pool.connect();
  try {
    await q.pauseQueue('hol');
    const heads = await q.enqueueMany(['A', 'B', 'C'].map((k) => ({ queue: 'hol', payload: {}, options: { orderingKey: k } })));
    // A long producer transaction (a bulk import) holds A's and B's rows; another briefly holds C's.
    await holder.query('BEGIN');
    await q.enqueueMany(['A', 'B'].map((k) => ({ queue: 'hol', payload: {}, options: { orderingKey: k } })), { client: holder });
    await other.query('BEGIN');
    const [c2] = await q.enqueueMany([{ queue: 'hol', payload: {}, options: { orderingKey: 'C' } }], { client: other });
    await q.resumeQueue('hol');
    await allEnded(signals, heads, 'succeeded', 5_000);
    await other.query('COMMIT'); // C's row is free again; A's and B's are not
    await attemptEnded(signals, c2!, 'succeeded', 5_000);
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    await other.query('ROLLBACK').catch(() => {});
    holder.release();
    other.release();
  }
});
