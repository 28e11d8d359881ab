import { performance } from 'node:perf_hooks';
import { PermanentJobError, RetryableJobError } from '../../lib/engine/index.js';
import { createStore } from '../../lib/engine/store/index.js';
import { claimParams, planNodes, type PlanNode } from '../support/claim-plan.js';
import { engineFixture, waitFor, waitForOutcome } from '../support/engine.js';
import { nextClaims, testSignals } from '../support/signals.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('ordering');
});
afterAll(() => fx.close());

test('per-key order holds with 8 concurrent workers over 1,000 keys × 20 jobs, with transient failures mid-sequence', async () => {
  const keys = 1_000;
  const perKey = 20;
  interface Run { key: number; seq: number; attempt: number; start: number; end: number; ok: boolean }
  const runs: Run[] = [];
  const engines = Array.from({ length: 8 }, () => {
    const q = fx.make({ poolSize: 4, scheduler: { intervalMs: 20 } });
    q.work<{ key: number; seq: number }>('ordered', async (job) => {
      const start = performance.now();
      // Every 7th job fails on its first attempt: its successor must still wait for it.
      const fail = job.payload.seq % 7 === 3 && job.attempt === 1;
      await new Promise((r) => setImmediate(r));
      runs.push({ key: job.payload.key, seq: job.payload.seq, attempt: job.attempt, start, end: performance.now(), ok: !fail });
      if (fail) throw new RetryableJobError('transient', { retryAfterMs: 5 });
    }, { concurrency: 8, prefetch: 8, fairShare: 0 });
    return q;
  });
  await engines[0]!.declareQueues(['ordered']);
  // Interleave keys, as producers would: seq n of every key before seq n+1 of any.
  for (let seq = 0; seq < perKey; seq++) {
    await engines[0]!.enqueueMany(
      Array.from({ length: keys }, (_, key) => ({ queue: 'ordered', payload: { key, seq }, options: { orderingKey: `key-${key}` } })),
    );
  }
  await Promise.all(engines.map((q) => q.start()));
  await waitFor(async () => {
    const { rows } = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'ordered' AND status = 'succeeded'`);
    return rows[0].n === keys * perKey;
  }, 120_000, 200);

  const byKey = new Map<number, Run[]>();
  for (const run of runs) byKey.set(run.key, [...(byKey.get(run.key) ?? []), run]);
  expect(byKey.size).toBe(keys);
  let retried = 0;
  for (const [, list] of byKey) {
    list.sort((a, b) => a.start - b.start);
    // Executions of one key never overlap, and follow the sequence: a job runs again (retry)
    // or the next one runs only after the previous execution ended, and never skips ahead.
    let expected = 0;
    for (let i = 0; i < list.length; i++) {
      const run = list[i]!;
      if (i > 0) expect(run.start).toBeGreaterThanOrEqual(list[i - 1]!.end);
      expect(run.seq).toBe(expected);
      if (run.ok) expected++;
      else retried++;
    }
    expect(expected).toBe(perKey);
  }
  expect(retried).toBeGreaterThan(keys); // ~3 of every 20 jobs failed once
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.ordering_keys`)).rows[0].n).toBe(0);
  await Promise.all(engines.map((q) => q.stop()));
}, 180_000);

test('a poisoned (dead) job blocks exactly its own key until it is replayed; stats show the blocked key', async () => {
  const q = fx.make();
  const done: string[] = [];
  let healed = false;
  q.work<{ name: string; poison?: boolean }>('poison', async (job) => {
    if (job.payload.poison && !healed) throw new PermanentJobError('poisoned');
    done.push(job.payload.name);
  });
  await q.start();
  const [a1, a2, a3] = await q.enqueueMany([
    { queue: 'poison', payload: { name: 'a1', poison: true }, options: { orderingKey: 'A' } },
    { queue: 'poison', payload: { name: 'a2' }, options: { orderingKey: 'A' } },
    { queue: 'poison', payload: { name: 'a3' }, options: { orderingKey: 'A' } },
  ]);
  const [b1, b2] = await q.enqueueMany([
    { queue: 'poison', payload: { name: 'b1' }, options: { orderingKey: 'B' } },
    { queue: 'poison', payload: { name: 'b2' }, options: { orderingKey: 'B' } },
  ]);
  const free = await q.enqueue('poison', { name: 'free' });
  await waitForOutcome(q, a1!, 'dead');
  for (const id of [b1!, b2!, free]) await waitForOutcome(q, id, 'succeeded');
  // Two more claims (polls) ran, and neither took the dead head's successors.
  expect(await nextClaims(testSignals(q), 'poison', 2)).toEqual([]);
  expect((await q.getJob(a2!))?.status).toBe('pending');
  expect((await q.getJob(a3!))?.status).toBe('pending');
  expect(done).toEqual(expect.arrayContaining(['b1', 'b2', 'free']));
  expect(done).not.toContain('a2');
  expect(done.indexOf('b1')).toBeLessThan(done.indexOf('b2'));
  expect((await q.stats()).queues.find((s) => s.queue === 'poison')?.blockedKeys).toBe(1);

  healed = true;
  await q.replay(a1!, { actor: 'ops', reason: 'fixed' });
  for (const id of [a1!, a2!, a3!]) await waitForOutcome(q, id, 'succeeded');
  expect(done.slice(-3)).toEqual(['a1', 'a2', 'a3']);
  expect((await q.stats()).queues.find((s) => s.queue === 'poison')?.blockedKeys).toBe(0);
});

test('a gap (a cancelled job) does not block its key; discarding a dead head unblocks it too', async () => {
  const q = fx.make();
  await q.declareQueues(['gaps']);
  await q.pauseQueue('gaps');
  const [g1, g2, g3] = await q.enqueueMany(
    ['g1', 'g2', 'g3'].map((name) => ({ queue: 'gaps', payload: { name }, options: { orderingKey: 'G' } })),
  );
  await q.cancel(g2!, { reason: 'not needed' }); // a waiting job in the middle
  await q.cancel(g1!, { reason: 'not needed either' }); // the head
  const done: string[] = [];
  const worker = fx.make();
  worker.work<{ name: string; die?: boolean }>('gaps', async (job) => {
    if (job.payload.die) throw new PermanentJobError('dies');
    done.push(job.payload.name);
  });
  await worker.start();
  await q.resumeQueue('gaps');
  await waitForOutcome(worker, g3!, 'succeeded');
  expect(done).toEqual(['g3']);

  const [d1, d2] = await q.enqueueMany([
    { queue: 'gaps', payload: { name: 'd1', die: true }, options: { orderingKey: 'D' } },
    { queue: 'gaps', payload: { name: 'd2' }, options: { orderingKey: 'D' } },
  ]);
  await waitForOutcome(worker, d1!, 'dead');
  await q.discard(d1!, { reason: 'give up on it' });
  await waitForOutcome(worker, d2!, 'succeeded');
});

test('a delayed retry keeps its key: the successor waits for the retry to succeed', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  const order: string[] = [];
  q.work<{ name: string }>('retry-key', async (job) => {
    order.push(`${job.payload.name}#${job.attempt}`);
    if (job.payload.name === 'r1' && job.attempt < 3) throw new RetryableJobError('later', { retryAfterMs: 150 });
  });
  await q.start();
  const ids = await q.enqueueMany(['r1', 'r2'].map((name) => ({ queue: 'retry-key', payload: { name }, options: { orderingKey: 'R' } })));
  await waitForOutcome(q, ids[1]!, 'succeeded');
  expect(order).toEqual(['r1#1', 'r1#2', 'r1#3', 'r2#1']);
});

test('concurrent producers of one key: ids follow commit order and exactly one head exists', async () => {
  const producers = Array.from({ length: 6 }, () => fx.make({ poolSize: 3 }));
  await producers[0]!.declareQueues(['race']);
  await Promise.all(producers.map((p, i) => Promise.all(Array.from({ length: 10 }, (_, j) => p.enqueue('race', { i, j }, { orderingKey: 'K' })))));
  const { rows } = await fx.pool.query(`SELECT count(*) FILTER (WHERE NOT key_waiting)::int AS heads, count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'race'`);
  expect(rows[0]).toEqual({ heads: 1, n: 60 });
  const head = (await fx.pool.query(`SELECT id FROM pgqueue.job_rows WHERE queue_name = 'race' AND NOT key_waiting`)).rows[0].id;
  const min = (await fx.pool.query(`SELECT min(id) AS id FROM pgqueue.job_rows WHERE queue_name = 'race'`)).rows[0].id;
  expect(head).toBe(min);
  expect((await fx.pool.query(`SELECT unfinished FROM pgqueue.ordering_keys WHERE queue_name = 'race'`)).rows[0].unfinished).toBe(60);
});

test('fair claims: under a flood of high-priority jobs a low-priority job waits a bounded number of claimed jobs; strict priority starves it', async () => {
  const flood = 2_000;
  const measure = async (queue: string, fairShare: number) => {
    await fx.insertJobs(queue, 1, { priority: 0 }); // the old low-priority job
    await fx.pool.query(`UPDATE pgqueue.jobs SET available_at = now() - interval '1 minute' WHERE queue_name = $1`, [queue]);
    await fx.insertJobs(queue, flood, { priority: 100 });
    const q = fx.make();
    const order: number[] = [];
    q.work(queue, async (job) => void order.push(job.priority), { concurrency: 1, prefetch: 0, fairShare });
    await q.start();
    await waitFor(() => order.length === flood + 1, 60_000);
    await q.stop();
    return order.indexOf(0); // jobs claimed before the low-priority one
  };
  const fairWait = await measure('fair', 0.1);
  const strictWait = await measure('strict', 0);
  // Stated bound: one job in every ceil(1 / fairShare) claimed is the oldest claimable one.
  expect(fairWait).toBeLessThan(Math.ceil(1 / 0.1));
  expect(strictWait).toBe(flood);
}, 120_000);

test("finishing a batch of keyed jobs reads only the batch's keys: promotion and forgetting probe each key, whatever the statistics say", async () => {
  const keys = 5_000;
  const batch = 40;
  const store = createStore('pgqueue');
  const q = fx.make();
  await q.declareQueues(['promo']);
  // Statistics taken while nothing waited: the trap for a join-shaped statement.
  await fx.pool.query(`ANALYZE pgqueue.jobs, pgqueue.ordering_keys`);
  for (let seq = 0; seq < 2; seq++) {
    await q.enqueueMany(Array.from({ length: keys }, (_, key) => ({ queue: 'promo', payload: {}, options: { orderingKey: `p-${key}` } })));
  }
  const client = await fx.pool.connect();
  try {
    await client.query('BEGIN');
    const claimed = await store.claim(client, claimParams('promo', batch));
    expect(claimed).toHaveLength(batch);
    const done = await store.completeMany(client, { ids: claimed.map((r) => r.id), tokens: claimed.map((r) => r.leaseToken), owner: 'explainer' });
    expect(done.keys.names).toHaveLength(batch);
    const promote = store.statements.promoteKeyHeads;
    const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${promote.text}`, promote.values({ keys: done.keys, channel: 'pgqueue_test' }));
    const nodes = planNodes(rows[0]['QUERY PLAN'][0].Plan as PlanNode);
    const read = (relation: string) =>
      nodes
        .filter((n) => n['Relation Name'] === relation && n['Node Type'] !== 'ModifyTable')
        .reduce((sum, n) => sum + (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1) + (n['Rows Removed by Filter'] ?? 0), 0);
    // Each of the 40 keys: its key row, its next waiting job and its head check; never the 5,000 keys.
    expect(read('ordering_keys')).toBeLessThanOrEqual(2 * batch);
    expect(read('jobs')).toBeLessThanOrEqual(3 * batch);
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
});
