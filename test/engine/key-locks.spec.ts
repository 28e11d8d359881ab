import { engineFixture, waitFor, waitForStatus } from '../support/engine.js';

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
  const gate = gates();
  const started: string[] = [];
  q.work<{ name: string }>('d4-keyed', async (job) => {
    started.push(job.payload.name);
    await gate.wait(job.payload.name);
  });
  q.work('d4-plain', async () => {});
  await q.start();
  const [a1, b1] = await q.enqueueMany([
    { queue: 'd4-keyed', payload: { name: 'a1' }, options: { orderingKey: 'A' } },
    { queue: 'd4-keyed', payload: { name: 'b1' }, options: { orderingKey: 'B' } },
  ]);
  await waitFor(() => started.length === 2);

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
    await waitForStatus(q, a1!, 'succeeded', 5_000);
    gate.open('b1');
    await waitForStatus(q, b1!, 'succeeded', 5_000);
    // Every other queue's jobs keep completing.
    const plain = await q.enqueueMany(Array.from({ length: 20 }, () => ({ queue: 'd4-plain', payload: {} })));
    for (const id of plain) await waitForStatus(q, id, 'succeeded', 5_000);

    await producer.query('COMMIT');
    // The keys move on once the producer is done: its jobs run, after their heads.
    gate.open('a2');
    gate.open('b2');
    await waitForStatus(q, a2!, 'succeeded', 10_000);
    await waitForStatus(q, b2!, 'succeeded', 10_000);
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
  await waitForStatus(q, x1!, 'succeeded', 10_000);
  await waitForStatus(q, y1!, 'succeeded', 10_000);
  expect(errors).toEqual([]);
  expect((await q.getJob(x1!))?.attemptCount).toBe(1);
  expect((await q.getJob(y1!))?.attemptCount).toBe(1);
  // The follow-ups run once their keys are handed on.
  const followUps = (await fx.pool.query(`SELECT id::text FROM pgqueue.jobs WHERE queue_name = 'd17' AND id NOT IN ($1, $2)`, [x1, y1])).rows;
  expect(followUps).toHaveLength(2);
  for (const { id } of followUps) await waitForStatus(q, id, 'succeeded', 10_000);
});
