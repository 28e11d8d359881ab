import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidJobError, InvalidOptionError, JobStateError, RateLimitedError, type PgQueue } from '../../lib/engine/index.js';
import { createStore, transaction, type ClaimedJob } from '../../lib/engine/store/index.js';
import { FLOW_MAX_GROUPS_PER_CLAIM, FLOW_UNGROUPED_WINDOW } from '../../lib/engine/flow-control.js';
import { claimParams } from '../support/claim-plan.js';
import { engineFixture, waitFor, waitForStatus } from '../support/engine.js';

/**
 * Flow control (docs/flow-control.md): global and per-group concurrency, rate limits, throttles
 * reported by handlers, and fairness between groups. The crash test with real processes is
 * test/serial/crash/flow-limits.spec.ts; these check each rule in one process.
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
const store = createStore('pgqueue');
beforeAll(async () => {
  fx = await engineFixture('flow');
});
afterAll(() => fx.close());

/** Handlers running at once, per key, and the most ever seen. */
function overlapMeter() {
  const now = new Map<string, number>();
  const max = new Map<string, number>();
  return {
    max,
    async run(keys: string[], ms: number) {
      for (const k of keys) {
        now.set(k, (now.get(k) ?? 0) + 1);
        max.set(k, Math.max(max.get(k) ?? 0, now.get(k)!));
      }
      await sleep(ms);
      for (const k of keys) now.set(k, now.get(k)! - 1);
    },
  };
}

async function succeeded(queue: string): Promise<number> {
  const { rows } = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = $1 AND status = 'succeeded'`, [queue]);
  return rows[0].n;
}

/** One flow claim as a worker makes it: the queue's turn, then the claim. */
function flowClaim(queue: string, limit: number, owner = 'test'): Promise<ClaimedJob[]> {
  return transaction(
    fx.pool,
    async (client) => {
      const lock = await store.flowLock(client, { queue });
      expect(lock.flow).toBe(true);
      return store.flowClaim(client, { ...claimParams(queue, limit, { owner }), cursor: lock.cursor, maxGroups: FLOW_MAX_GROUPS_PER_CLAIM, ungroupedWindow: FLOW_UNGROUPED_WINDOW });
    },
    { statementTimeoutMs: 10_000 },
  );
}

async function completeAll(jobs: readonly ClaimedJob[], owner = 'test') {
  if (jobs.length > 0) await store.completeMany(fx.pool, { ids: jobs.map((j) => j.id), tokens: jobs.map((j) => j.leaseToken), owner });
}

test('globalConcurrency holds across two engines: never more running than the limit, prefetched jobs included', async () => {
  const meter = overlapMeter();
  const engines: PgQueue[] = [];
  for (let i = 0; i < 2; i++) {
    const q = fx.make({ pollIntervalMs: 50 });
    q.work('global', () => meter.run(['all'], 15), { concurrency: 5, prefetch: 5, limits: { globalConcurrency: 3 } });
    engines.push(q);
  }
  await engines[0]!.declareQueues(['global']);
  await engines[0]!.enqueueMany(Array.from({ length: 60 }, (_, n) => ({ queue: 'global', payload: { n } })));
  let maxRunning = 0;
  const sampling = (async () => {
    while ((await succeeded('global')) < 60) {
      const { rows } = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'global' AND status = 'running'`);
      maxRunning = Math.max(maxRunning, rows[0].n);
      await sleep(5);
    }
  })();
  await Promise.all(engines.map((q) => q.start()));
  await waitFor(async () => (await succeeded('global')) === 60, 30_000, 50);
  await sampling;
  expect(meter.max.get('all')).toBeLessThanOrEqual(3);
  expect(meter.max.get('all')).toBeGreaterThanOrEqual(2);
  expect(maxRunning).toBeLessThanOrEqual(3);
  expect(await engines[0]!.getLimits('global')).toEqual({ globalConcurrency: 3, groupConcurrency: null, rateLimit: null, groupRateLimit: null, groupFairness: false });
});

test('groupConcurrency holds per group, and a group override set at run time holds a group (0) and lets it go (null)', async () => {
  const meter = overlapMeter();
  const q = fx.make({ pollIntervalMs: 50 });
  q.work<{ g: string }>('grouped', (job) => meter.run([job.payload.g], 10), { concurrency: 8, prefetch: 8, limits: { groupConcurrency: 2 } });
  await q.declareQueues(['grouped']);
  await q.setGroupLimits('grouped', 'held', { concurrency: 0 });
  const jobs = ['a', 'b', 'c', 'held'].flatMap((g) => Array.from({ length: 12 }, () => ({ queue: 'grouped', payload: { g }, options: { group: g } })));
  await q.enqueueMany(jobs);
  await q.start();
  await waitFor(async () => (await succeeded('grouped')) === 36, 30_000, 50);
  for (const g of ['a', 'b', 'c']) expect(meter.max.get(g)).toBeLessThanOrEqual(2);
  expect(meter.max.get('a')).toBe(2);
  expect(meter.max.get('held')).toBeUndefined();
  expect(await q.listGroupLimits('grouped')).toEqual([{ group: 'held', concurrency: 0, weight: 1, rateLimit: null, throttledUntil: null }]);

  await q.setGroupLimits('grouped', 'held', { concurrency: null });
  await waitFor(async () => (await succeeded('grouped')) === 48, 30_000, 50);
  expect(meter.max.get('held')).toBeLessThanOrEqual(2);
  // Back to every default: the group's row is gone.
  expect(await q.listGroupLimits('grouped')).toEqual([]);
});

test('a rate limit holds over every sliding window of claim times, by database time', async () => {
  const q = fx.make({ pollIntervalMs: 50 });
  q.work('rated', async () => {}, { concurrency: 4, prefetch: 4, limits: { rateLimit: { limit: 5, windowMs: 400 } } });
  await q.declareQueues(['rated']);
  await q.enqueueMany(Array.from({ length: 16 }, (_, n) => ({ queue: 'rated', payload: { n } })));
  await q.start();
  await waitFor(async () => (await succeeded('rated')) === 16, 30_000, 50);
  const { rows } = await fx.pool.query(`SELECT (extract(epoch FROM claimed_at) * 1000)::float8 AS at FROM pgqueue.job_rows WHERE queue_name = 'rated' ORDER BY claimed_at`);
  const times = rows.map((r) => r.at as number);
  for (let i = 0; i < times.length; i++) {
    // Claims in the window (t - 400 ms, t] ending at each claim.
    const inWindow = times.filter((t) => t > times[i]! - 400 && t <= times[i]!).length;
    expect(inWindow).toBeLessThanOrEqual(5);
  }
  // It ran at the limit, not at the poll: 16 jobs at 5 per 400 ms take at least 3 windows.
  expect(times.at(-1)! - times[0]!).toBeGreaterThanOrEqual(3 * 400 - 50);
});

test('RateLimitedError throttles the group, retries without charging the attempt, and charges past maxRateLimitedRetries', async () => {
  const q = fx.make({ pollIntervalMs: 50 });
  const attempts: { id: string; attempt: number; group: string | null }[] = [];
  q.work<{ limited: number }>('throttled', (job) => {
    attempts.push({ id: job.id, attempt: job.attempt, group: job.group });
    if (attempts.filter((a) => a.id === job.id).length <= job.payload.limited) throw new RateLimitedError('429 from the API', { retryAfterMs: 150 });
  }, { concurrency: 2, prefetch: 0, maxRateLimitedRetries: 2, maxAttempts: 3 });
  await q.declareQueues(['throttled']);
  const [free] = await q.enqueue('throttled', { limited: 2 }, { group: 'acct:1' }).then((id) => [id]);
  await q.start();
  const done = await waitForStatus(q, free!, 'succeeded', 15_000);
  // Two throttles given back: the third run is still attempt 1.
  expect(attempts.filter((a) => a.id === free).map((a) => a.attempt)).toEqual([1, 1, 1]);
  expect(done.attemptCount).toBe(1);
  const history = await q.getJobEvents(free!);
  expect(history.filter((e) => e.kind === 'rate_limited')).toHaveLength(2);
  expect(attempts[0]!.group).toBe('acct:1');
  const groups = await q.listGroupLimits('throttled');
  expect(groups).toEqual([expect.objectContaining({ group: 'acct:1', concurrency: null, weight: 1 })]);
  expect(groups[0]!.throttledUntil).toBeInstanceOf(Date);

  // Past the bound, attempts count: 2 free, then attempts 1 → 2 → 3 charged, dead with RATE_LIMITED.
  const charged = await q.enqueue('throttled', { limited: 99 }, { group: 'acct:2' });
  const dead = await waitForStatus(q, charged, 'dead', 15_000);
  expect(dead.lastErrorCode).toBe('RATE_LIMITED');
  expect(attempts.filter((a) => a.id === charged).map((a) => a.attempt)).toEqual([1, 1, 1, 2, 3]);
});

test('a throttled group claims nothing until its throttle ends; the other groups go on', async () => {
  await fx.pool.query(`INSERT INTO pgqueue.queues (name) VALUES ('thr2') ON CONFLICT DO NOTHING`);
  const q = fx.make();
  await q.declareQueues(['thr2']);
  await q.setLimits('thr2', { groupFairness: true });
  await q.enqueueMany(['x', 'x', 'y', 'y'].map((g) => ({ queue: 'thr2', payload: {}, options: { group: g } })));
  await fx.pool.query(`INSERT INTO pgqueue.job_groups (queue_name, group_key, throttled_until) VALUES ('thr2', 'x', now() + interval '1 hour')`);
  const first = await flowClaim('thr2', 10);
  expect(first.map((j) => j.group)).toEqual(['y', 'y']);
  await completeAll(first);
  await fx.pool.query(`UPDATE pgqueue.job_groups SET throttled_until = now() - interval '1 second' WHERE queue_name = 'thr2'`);
  expect((await flowClaim('thr2', 10)).map((j) => j.group)).toEqual(['x', 'x']);
});

test('fairness: a flood of 10,000 jobs of one group does not hold back 20 groups of 10 that come after it; without fairness they wait for the flood', async () => {
  const FLOOD = 10_000;
  const SMALL = 20;
  const EACH = 10;
  const prepare = async (queue: string, fair: boolean) => {
    await fx.pool.query(`INSERT INTO pgqueue.queues (name) VALUES ($1) ON CONFLICT DO NOTHING`, [queue]);
    const q = fx.make();
    // Fairness off but a limit on: the flow claim, in the claim's plain order.
    await q.setLimits(queue, fair ? { groupFairness: true } : { globalConcurrency: 1_000_000 });
    for (let from = 0; from < FLOOD; from += 5_000) {
      await q.enqueueMany(Array.from({ length: 5_000 }, (_, n) => ({ queue, payload: { n: from + n }, options: { group: 'flood' } })));
    }
    await q.enqueueMany(Array.from({ length: SMALL * EACH }, (_, n) => ({ queue, payload: { n }, options: { group: `small-${n % SMALL}` } })));
  };
  /** Claims until `done` says so; the groups of the claimed jobs, batch by batch. */
  const claimUntil = async (queue: string, batchSize: number, done: (order: string[]) => boolean) => {
    const order: string[] = [];
    while (!done(order)) {
      const batch = await flowClaim(queue, batchSize);
      expect(batch.length).toBeGreaterThan(0);
      order.push(...batch.map((j) => j.group!));
      await completeAll(batch);
    }
    return order;
  };
  const smallDone = (order: string[]) => order.filter((g) => g !== 'flood').length === SMALL * EACH;
  // The bound (docs/flow-control.md): the k-th job of a group is dealt within k turns of the
  // round-robin, a turn being the weights of the groups with work (here 21): the 10th job of each
  // small group within 10 × 21 = 210 claimed jobs; a batch claim takes it with its batch (at most
  // batch - 1 more). Counted up to the end of the batch that held each small group's last job.
  const bound = EACH * (SMALL + 1);
  for (const batchSize of [1, 10]) {
    const queue = `fair-on-${batchSize}`;
    await prepare(queue, true);
    const order = await claimUntil(queue, batchSize, smallDone);
    for (let g = 0; g < SMALL; g++) {
      const claimed = (Math.floor(order.lastIndexOf(`small-${g}`) / batchSize) + 1) * batchSize;
      expect(claimed).toBeLessThanOrEqual(bound + batchSize - 1);
    }
  }
  // Without fairness, the first small job comes after the whole flood.
  await prepare('fair-off', false);
  const order = await claimUntil('fair-off', 100, (o) => o.some((g) => g !== 'flood'));
  expect(order.indexOf(order.find((g) => g !== 'flood')!)).toBeGreaterThanOrEqual(FLOOD);
}, 120_000);

test('weights: a group of weight 3 gets three jobs per turn', async () => {
  const queue = 'weighted';
  await fx.pool.query(`INSERT INTO pgqueue.queues (name) VALUES ($1) ON CONFLICT DO NOTHING`, [queue]);
  const q = fx.make();
  await q.setLimits(queue, { groupFairness: true });
  await q.setGroupLimits(queue, 'heavy', { weight: 3 });
  await q.enqueueMany(['heavy', 'light'].flatMap((g) => Array.from({ length: 30 }, () => ({ queue, payload: {}, options: { group: g } }))));
  const batch = await flowClaim(queue, 8);
  expect(batch.filter((j) => j.group === 'heavy')).toHaveLength(6);
  expect(batch.filter((j) => j.group === 'light')).toHaveLength(2);
  await completeAll(batch);
});

test('jobs without a group take their turn as one more group', async () => {
  const queue = 'mixed';
  await fx.pool.query(`INSERT INTO pgqueue.queues (name) VALUES ($1) ON CONFLICT DO NOTHING`, [queue]);
  const q = fx.make();
  await q.setLimits(queue, { groupFairness: true });
  await q.enqueueMany(Array.from({ length: 20 }, () => ({ queue, payload: {}, options: { group: 'g' } })));
  await q.enqueueMany(Array.from({ length: 3 }, () => ({ queue, payload: {} })));
  const batch = await flowClaim(queue, 6);
  expect(batch.filter((j) => j.group === null)).toHaveLength(3);
  expect(batch.filter((j) => j.group === 'g')).toHaveLength(3);
  await completeAll(batch);
});

test('a limit set at run time reaches a running worker: the plain claim refuses the queue and the worker switches', async () => {
  const meter = overlapMeter();
  const q = fx.make({ pollIntervalMs: 50 });
  q.work('switch', () => meter.run(['all'], 20), { concurrency: 6, prefetch: 0 });
  await q.declareQueues(['switch']);
  const plain = await store.claim(fx.pool, claimParams('switch', 1));
  expect(plain.gate).toEqual({ flow: false, waitMs: null });
  await q.setLimits('switch', { globalConcurrency: 1 });
  expect((await store.claim(fx.pool, claimParams('switch', 1))).gate.flow).toBe(true);
  await q.start();
  await q.enqueueMany(Array.from({ length: 12 }, () => ({ queue: 'switch', payload: {} })));
  await waitFor(async () => (await succeeded('switch')) === 12, 20_000, 50);
  expect(meter.max.get('all')).toBe(1);
  // Off again: the worker goes back to the plain claim and to its own concurrency.
  await q.setLimits('switch', { globalConcurrency: null });
  await q.enqueueMany(Array.from({ length: 12 }, () => ({ queue: 'switch', payload: {} })));
  await waitFor(async () => (await succeeded('switch')) === 24, 20_000, 50);
  expect(meter.max.get('all')).toBeGreaterThan(1);
  expect((await store.claim(fx.pool, claimParams('switch', 0))).gate.flow).toBe(false);
});

test('bad limits and groups are refused with what to do; nothing is written', async () => {
  const q = fx.make();
  await q.declareQueues(['refusals']);
  const refusal = async (call: Promise<unknown>) => call.then(() => undefined, (error: Error) => error);
  const bad = await refusal(q.setLimits('refusals', { globalConcurrency: 0 }));
  expect(bad).toBeInstanceOf(InvalidOptionError);
  expect((bad as Error).message).toMatch(/limits\.globalConcurrency.*integer from 1/);
  expect(await refusal(q.setLimits('refusals', { rateLimit: { limit: 5 } as never }))).toBeInstanceOf(InvalidOptionError);
  expect(await refusal(q.setLimits('refusals', { typo: 1 } as never))).toBeInstanceOf(InvalidOptionError);
  expect(await refusal(q.setGroupLimits('refusals', '', { weight: 2 }))).toBeInstanceOf(InvalidOptionError);
  expect(await refusal(q.setGroupLimits('refusals', 'g', { weight: 0 }))).toBeInstanceOf(InvalidOptionError);
  const missing = await refusal(q.setLimits('no-such-queue', { globalConcurrency: 2 }));
  expect(missing).toBeInstanceOf(JobStateError);
  expect((missing as JobStateError).code).toBe('QUEUE_NOT_FOUND');
  const group = await refusal(q.enqueue('refusals', {}, { group: 'x'.repeat(257) }));
  expect(group).toBeInstanceOf(InvalidJobError);
  expect((group as Error).message).toMatch(/group/);
  expect(() => new RateLimitedError('x', { retryAfterMs: -1 })).toThrow(InvalidOptionError);
  expect(await q.getLimits('refusals')).toEqual({ globalConcurrency: null, groupConcurrency: null, rateLimit: null, groupRateLimit: null, groupFairness: false });
  expect(() => fx.make().work('refusals', async () => {}, { limits: { groupConcurrency: -1 } })).toThrow(/limits\.groupConcurrency/);
});

test('stats() shows what flow control holds back: slots against the limit, groups (top N), jobs held by a rate limit or throttle', async () => {
  const queue = 'flow-stats';
  const q = fx.make();
  await q.declareQueues([queue]);
  await q.setLimits(queue, { globalConcurrency: 4, groupConcurrency: 1, groupRateLimit: { limit: 2, windowMs: 60_000 } });
  await q.enqueueMany(['a', 'a', 'a', 'b', 'b', 'c'].map((g) => ({ queue, payload: {}, options: { group: g } })));
  await fx.pool.query(`INSERT INTO pgqueue.job_groups (queue_name, group_key, throttled_until) VALUES ($1, 'c', now() + interval '1 hour')`, [queue]);
  const claimed = await flowClaim(queue, 10);
  expect(claimed.map((j) => j.group).sort()).toEqual(['a', 'b']);
  const flow = (await q.stats({ topGroups: 2 })).queues.find((s) => s.queue === queue)!.flow!;
  expect(flow).toMatchObject({ running: 2, groupCount: 3, claimsInWindow: null, heldByRateLimit: 1, throttledUntil: null });
  expect(flow.limits).toEqual({ globalConcurrency: 4, groupConcurrency: 1, rateLimit: null, groupRateLimit: { limit: 2, windowMs: 60_000 }, groupFairness: false });
  expect(flow.topGroups).toEqual([
    { group: 'a', waiting: 2, running: 1, concurrency: 1, rateLimit: 2, claimsInWindow: 1, throttledUntil: null },
    { group: 'b', waiting: 1, running: 1, concurrency: 1, rateLimit: 2, claimsInWindow: 1, throttledUntil: null },
  ]);
  // A queue without flow control has none, and reads nothing for it.
  expect((await q.stats()).queues.find((s) => s.queue === 'refusals')?.flow).toBeUndefined();
  const text = await q.prometheus();
  expect(text).toContain(`pgqueue_flow_running{queue="${queue}"} 2`);
  expect(text).toContain(`pgqueue_flow_held_by_rate_limit{queue="${queue}"} 1`);
  await completeAll(claimed);
});

test('a spent group rate budget tells the worker when the next claim can take more (the limit is used, not the poll pace)', async () => {
  const queue = 'rate-hint';
  const q = fx.make();
  await q.declareQueues([queue]);
  await q.setLimits(queue, { groupRateLimit: { limit: 2, windowMs: 800 } });
  await q.enqueueMany(['a', 'a', 'a', 'b', 'b', 'b'].map((g) => ({ queue, payload: {}, options: { group: g } })));
  const first = await flowClaim(queue, 10);
  expect(first.map((j) => j.group).sort()).toEqual(['a', 'a', 'b', 'b']);
  const spent = await transaction(fx.pool, async (client) => {
    const lock = await store.flowLock(client, { queue });
    return store.flowClaim(client, { ...claimParams(queue, 10), cursor: lock.cursor, maxGroups: FLOW_MAX_GROUPS_PER_CLAIM, ungroupedWindow: FLOW_UNGROUPED_WINDOW });
  }, { statementTimeoutMs: 10_000 });
  expect(spent).toHaveLength(0);
  // Both groups spent: the first slot frees when the first claims leave the 800 ms window.
  expect(spent.gate.waitMs).toBeGreaterThan(0);
  expect(spent.gate.waitMs).toBeLessThanOrEqual(800);
  await completeAll(first);
});
