import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidJobError, type ChildResult } from '../../lib/engine/index.js';
import { createStore } from '../../lib/engine/store/index.js';
import { claimParams } from '../support/claim-plan.js';
import { engineFixture, waitFor, waitForStatus } from '../support/engine.js';

/**
 * Flows (docs/flows.md): a parent runs only once every child has succeeded (or was discarded),
 * reads their results, is held by a dead child (or fails, with failOnDeadChild), and cancelling it
 * cancels what it waits for. The crash test with real processes is test/serial/crash/flows.spec.ts.
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
const store = createStore('pgqueue');
beforeAll(async () => {
  fx = await engineFixture('flows');
});
afterAll(() => fx.close());

async function statusOf(id: string): Promise<string> {
  const { rows } = await fx.pool.query(`SELECT status::text AS status FROM pgqueue.job_rows WHERE id = $1`, [id]);
  return rows[0].status;
}

test('a parent runs after all its children (and grandchildren) succeeded, and reads their results', async () => {
  const q = fx.make({ flows: { intervalMs: 100 } });
  const order: string[] = [];
  let seen: ChildResult<{ n: number }>[] = [];
  q.work<{ n: number }>('flow-leaf', async (job) => {
    order.push(`leaf:${job.payload.n}`);
    await sleep(5);
    return { n: job.payload.n };
  });
  q.work<{ n: number }>('flow-mid', async (job, ctx) => {
    const results = await ctx.childResults<{ n: number }>();
    order.push(`mid:${job.payload.n}`);
    return { n: job.payload.n, sum: results.reduce((a, r) => a + r.result!.n, 0) };
  });
  q.work('flow-root', async (_job, ctx) => {
    seen = await ctx.childResults<{ n: number }>();
    order.push('root');
  });
  await q.declareQueues(['flow-leaf', 'flow-mid', 'flow-root']);
  const flow = await q.enqueueFlow({
    queue: 'flow-root',
    payload: {},
    children: [
      { queue: 'flow-mid', payload: { n: 1 }, children: [1, 2, 3].map((n) => ({ queue: 'flow-leaf', payload: { n } })) },
      { queue: 'flow-mid', payload: { n: 2 }, children: [4, 5].map((n) => ({ queue: 'flow-leaf', payload: { n } })) },
      { queue: 'flow-leaf', payload: { n: 6 } },
    ],
  });
  expect(flow.children).toHaveLength(3);
  expect(flow.children[0]!.children).toHaveLength(3);
  expect(await statusOf(flow.id)).toBe('scheduled');
  await q.start();
  await waitForStatus(q, flow.id, 'succeeded', 20_000);
  // Every leaf before its mid, both mids before the root.
  expect(order.at(-1)).toBe('root');
  expect(order.indexOf('mid:1')).toBeGreaterThan(Math.max(order.indexOf('leaf:1'), order.indexOf('leaf:2'), order.indexOf('leaf:3')));
  expect(order.indexOf('mid:2')).toBeGreaterThan(Math.max(order.indexOf('leaf:4'), order.indexOf('leaf:5')));
  expect(seen.map((r) => r.result)).toEqual([{ n: 1, sum: 6 }, { n: 2, sum: 9 }, { n: 6 }]);
  expect(seen.every((r) => r.status === 'succeeded' && !r.discarded)).toBe(true);
  const history = await q.getJobEvents(flow.id);
  expect(history.map((e) => e.kind)).toContain('children_resolved');
});

test('a dead child holds its parent, in stats and in the parent history; discarding it lets the parent run with a null result', async () => {
  const q = fx.make({ flows: { intervalMs: 100 } });
  let seen: ChildResult[] = [];
  q.work<{ fail?: boolean }>('hold-child', async (job) => {
    if (job.payload.fail) throw new Error('boom');
    return 'ok';
  }, { maxAttempts: 1 });
  q.work('hold-parent', async (_job, ctx) => {
    seen = await ctx.childResults();
  });
  await q.declareQueues(['hold-child', 'hold-parent']);
  const flow = await q.enqueueFlow({ queue: 'hold-parent', payload: {}, children: [{ queue: 'hold-child', payload: {} }, { queue: 'hold-child', payload: { fail: true } }] });
  await q.start();
  const dead = flow.children[1]!.id;
  await waitForStatus(q, dead, 'dead', 10_000);
  await sleep(400);
  expect(await statusOf(flow.id)).toBe('scheduled');
  const stats = (await q.stats()).queues.find((s) => s.queue === 'hold-parent')!;
  expect(stats.blockedFlows).toBe(1);
  const history = await q.getJobEvents(flow.id);
  expect(history).toContainEqual(expect.objectContaining({ kind: 'dead', childId: dead }));

  await q.discard(dead, { actor: 'ops', reason: 'not needed' });
  await waitForStatus(q, flow.id, 'succeeded', 10_000);
  expect(seen.map((r) => [r.result, r.discarded])).toEqual([['ok', false], [null, true]]);
});

test('failOnDeadChild fails the parent at once (CHILD_DEAD) instead', async () => {
  const q = fx.make({ flows: { intervalMs: 100 } });
  q.work('fod-child', async () => {
    throw new Error('boom');
  }, { maxAttempts: 1 });
  q.work('fod-parent', async () => {});
  await q.declareQueues(['fod-child', 'fod-parent']);
  const flow = await q.enqueueFlow({ queue: 'fod-parent', payload: {}, failOnDeadChild: true, children: [{ queue: 'fod-child', payload: {} }] });
  await q.start();
  const parent = await waitForStatus(q, flow.id, 'dead', 10_000);
  expect(parent.lastErrorCode).toBe('CHILD_DEAD');
});

test('cancelling the parent cancels its unfinished children and grandchildren; finished ones stay', async () => {
  const q = fx.make();
  await q.declareQueues(['cx-child', 'cx-parent']);
  const flow = await q.enqueueFlow({
    queue: 'cx-parent',
    payload: {},
    children: [{ queue: 'cx-child', payload: {}, children: [{ queue: 'cx-child', payload: {} }] }, { queue: 'cx-child', payload: {} }],
  });
  // One child already succeeded.
  const [done] = await store.claim(fx.pool, claimParams('cx-child', 1));
  await store.completeChild(fx.pool, { id: done!.id, owner: 'explainer', token: done!.leaseToken, result: '"x"' });
  await q.cancel(flow.id, { actor: 'ops', reason: 'wrong order' });
  const statuses = await fx.pool.query(`SELECT id::text, status::text FROM pgqueue.job_rows WHERE id = ANY($1) ORDER BY id`, [
    [flow.id, flow.children[0]!.id, flow.children[0]!.children[0]!.id, flow.children[1]!.id],
  ]);
  const byId = new Map(statuses.rows.map((r) => [r.id, r.status]));
  expect(byId.get(flow.id)).toBe('cancelled');
  expect(byId.get(done!.id)).toBe('succeeded');
  expect([...byId.values()].filter((s) => s === 'cancelled')).toHaveLength(3);
});

test('fan-in of 10,000 children: no child completion waits on its parent row (D4), and settling the parent reads a bounded number of buffers', async () => {
  const q = fx.make({ flows: { intervalMs: 100 } });
  await q.declareQueues(['fan-child', 'fan-parent', 'fan-other']);
  const CHILDREN = 10_000;
  const flow = await q.enqueueFlow({ queue: 'fan-parent', payload: {}, children: Array.from({ length: CHILDREN }, (_, n) => ({ queue: 'fan-child', payload: { n } })) });
  await q.enqueueMany(Array.from({ length: 100 }, () => ({ queue: 'fan-other', payload: {} })));
  // D4's stall: a transaction holds the parent's row (here, an operator's open transaction).
  const holder = await fx.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query(`SELECT id FROM pgqueue.jobs WHERE id = $1 FOR UPDATE`, [flow.id]);
    q.work<{ n: number }>('fan-child', async (job) => job.payload.n, { concurrency: 20, prefetch: 200 });
    q.work('fan-other', async () => {}, { concurrency: 5 });
    q.work('fan-parent', async () => {});
    await q.start();
    // Every child and every other queue's job completes while the parent's row is held.
    await waitFor(async () => {
      const { rows } = await fx.pool.query(
        `SELECT count(*) FILTER (WHERE queue_name = 'fan-child' AND status = 'succeeded')::int AS children,
                count(*) FILTER (WHERE queue_name = 'fan-other' AND status = 'succeeded')::int AS others
         FROM pgqueue.job_rows WHERE queue_name IN ('fan-child', 'fan-other')`,
      );
      return rows[0].children === CHILDREN && rows[0].others === 100;
    }, 60_000, 100);
    expect(await statusOf(flow.id)).toBe('scheduled');
  } finally {
    await holder.query('ROLLBACK');
    holder.release();
  }
  // Released: the flows pass settles it.
  await waitForStatus(q, flow.id, 'succeeded', 10_000);

  // One settle of a parent with 10,000 children (one unresolved) reads a few index pages, not the children.
  const other = await q.enqueueFlow({ queue: 'fan-parent', payload: {}, children: Array.from({ length: CHILDREN }, (_, n) => ({ queue: 'fan-child', payload: { n } })) });
  await fx.pool.query(`UPDATE pgqueue.jobs SET status = 'succeeded', finished_at = now() WHERE parent_id = $1 AND id <> $2`, [other.id, other.children[0]!.id]);
  await fx.pool.query('ANALYZE pgqueue.jobs');
  const client = await fx.pool.connect();
  try {
    await client.query('BEGIN');
    const plan = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${store.statements.settleParents.text.replace(/\$1::bigint\[\]/, `ARRAY[${other.id}]::bigint[]`).replace(/\$2/, `'none'`)}`);
    await client.query('ROLLBACK');
    const root = plan.rows[0]['QUERY PLAN'][0].Plan;
    const buffers = root['Shared Hit Blocks'] + root['Shared Read Blocks'];
    expect(buffers).toBeLessThan(60);
  } finally {
    client.release();
  }
}, 120_000);

test('bad flows are refused whole, with what to do; nothing is written', async () => {
  const q = fx.make();
  await q.declareQueues(['bad-flow']);
  const before = (await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n;
  const refusal = (call: Promise<unknown>) => call.then(() => undefined, (error: Error) => error);
  const keyed = await refusal(q.enqueueFlow({ queue: 'bad-flow', payload: {}, children: [{ queue: 'bad-flow', payload: {}, options: { orderingKey: 'k' } as never }] }));
  expect(keyed).toBeInstanceOf(InvalidJobError);
  expect((keyed as Error).message).toMatch(/flow\.children\[0\].*orderingKey/);
  expect(await refusal(q.enqueueFlow({ queue: 'bad-flow', payload: {}, children: [{ queue: 'no such queue!', payload: {} }] }))).toBeInstanceOf(InvalidJobError);
  expect(await refusal(q.enqueueFlow({ queue: 'bad-flow', payload: {}, children: [{ queue: 'undeclared-q', payload: {} }] }))).toBeInstanceOf(InvalidJobError);
  expect(await refusal(q.enqueueFlow({ queue: 'bad-flow', payload: new Date() }))).toBeInstanceOf(InvalidJobError);
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows`)).rows[0].n).toBe(before);
});

test('a result that is not JSON or over 16 KiB fails the child permanently (INVALID_RESULT)', async () => {
  const q = fx.make();
  q.work('big-child', async () => 'x'.repeat(20_000));
  await q.declareQueues(['big-child', 'big-parent']);
  const flow = await q.enqueueFlow({ queue: 'big-parent', payload: {}, children: [{ queue: 'big-child', payload: {} }] });
  await q.start();
  const child = await waitForStatus(q, flow.children[0]!.id, 'dead', 10_000);
  expect(child.lastErrorCode).toBe('INVALID_RESULT');
});

test('a waiting parent is no job the scheduler waits for: its passes keep working beside it', async () => {
  const q = fx.make({ scheduler: { intervalMs: 50 } });
  await q.declareQueues(['sched-parent', 'sched-child']);
  const flow = await q.enqueueFlow({ queue: 'sched-parent', payload: {}, children: [{ queue: 'sched-child', payload: {} }] });
  // Only the waiting parent is scheduled (the other files' jobs are in their own queues, maybe none scheduled).
  await fx.pool.query(`UPDATE pgqueue.jobs SET status = 'cancelled', finished_at = now() WHERE status = 'scheduled' AND id <> $1`, [flow.id]);
  expect(await store.nextScheduledInMs(fx.pool)).toBeUndefined();
  // A delayed job alongside is promoted on time.
  const delayed = await q.enqueue('sched-child', {}, { delayMs: 100 });
  await q.start();
  await waitForStatus(q, delayed, 'pending', 5_000);
});
