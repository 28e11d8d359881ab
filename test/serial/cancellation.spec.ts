import { setTimeout as sleep } from 'node:timers/promises';
import { createStore } from '../../lib/engine/store/index.js';
import { explainStatement } from '../support/claim-plan.js';
import { engineFixture, waitForOutcome } from '../support/engine.js';
import { attemptEnded, claimed, testSignals } from '../support/signals.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('cancellation');
});
afterAll(() => fx.close());

test("D9: cancelling a running keyed head does not let its successor overlap it: the key is held until the cancelled attempt is over", async () => {
  const q = fx.make();
  const times: Record<string, { start: number; end?: number }> = {};
  q.work<{ n: number }>('cancel-keyed', async (job) => {
    const entry: { start: number; end?: number } = (times[`n${job.payload.n}`] = { start: performance.now() });
    // The head ignores its signal: its attempt goes on for 1.5 s after the cancel.
    if (job.payload.n === 1) await sleep(1_500);
    entry.end = performance.now();
  });
  await q.start();
  const signals = testSignals(q);
  const [head, next] = await q.enqueueMany([1, 2].map((n) => ({ queue: 'cancel-keyed', payload: { n }, options: { orderingKey: 'K' } })));
  await claimed(signals, head!);
  await q.cancel(head!, { actor: 'operator' });
  expect((await q.getJob(head!))?.status).toBe('cancelled');
  await waitForOutcome(q, next!, 'succeeded', 10_000);
  await attemptEnded(signals, head!, 'cancelled');
  expect(times.n1?.end).toBeDefined();
  // The successor started only after the cancelled head's handler had ended.
  expect(times.n2!.start).toBeGreaterThanOrEqual(times.n1!.end!);
});

test('D9: a cancelled head whose worker never confirms (its handler hangs) holds its key until its lease runs out', async () => {
  const q = fx.make({ reaper: { intervalMs: 100 } });
  const started: Record<string, number> = {};
  q.work<{ n: number }>('cancel-hung', async (job) => {
    started[`n${job.payload.n}`] = Date.now();
    if (job.payload.n === 1) await new Promise(() => {}); // never settles, ignores its signal
  }, { leaseMs: 1_000 });
  await q.start();
  const [head, next] = await q.enqueueMany([1, 2].map((n) => ({ queue: 'cancel-hung', payload: { n }, options: { orderingKey: 'H' } })));
  // Real time on purpose: the lease the worker took runs out on its own clock and the database's,
  // and what holds the key until then is what is tested.
  await claimed(testSignals(q), head!);
  const { lease_expires_at: leaseEnd } = (await fx.pool.query(`SELECT lease_expires_at FROM pgqueue.job_rows WHERE id = $1`, [head])).rows[0];
  await q.cancel(head!, { actor: 'operator' });
  await waitForOutcome(q, next!, 'succeeded', 10_000);
  const { claimed_at: nextClaimedAt } = (await fx.pool.query(`SELECT claimed_at FROM pgqueue.job_rows WHERE id = $1`, [next])).rows[0];
  // By the database's clock: the successor was claimed only once the head's lease had run out.
  expect(nextClaimedAt.getTime()).toBeGreaterThanOrEqual(leaseEnd.getTime());
  const head1 = await q.getJob(head!);
  expect(head1).toMatchObject({ status: 'cancelled', leaseExpiresAt: null });
});

test('D10: a cancel reaches an obedient handler within a poll interval without NOTIFY', async () => {
  const pollIntervalMs = 300;
  // The listener cannot connect: no NOTIFY ever arrives, only polls.
  const q = fx.make({ pollIntervalMs, listenConnectionString: 'postgres://postgres@127.0.0.1:1/none' });
  let abortedAt = 0;
  q.work('cancel-poll', async (_job, ctx) => {
    for (;;) {
      if (ctx.signal.aborted) {
        abortedAt = performance.now();
        throw ctx.signal.reason;
      }
      await sleep(100);
      await ctx.heartbeat().catch(() => {}); // reports progress every 100 ms (a write only every 10 s)
    }
  });
  await q.start();
  const operator = fx.make();
  const id = await operator.enqueue('cancel-poll', {});
  await claimed(testSignals(q), id);
  const cancelledAt = performance.now();
  await operator.cancel(id, { actor: 'operator' });
  await attemptEnded(testSignals(q), id, 'cancelled', 10 * pollIntervalMs);
  expect(abortedAt).toBeGreaterThan(0);
  expect(abortedAt - cancelledAt).toBeLessThan(3 * pollIntervalMs);
});

test("a cancelled attempt's end is found by the job's primary key, even after a mass cancel with stale statistics", async () => {
  await fx.pool.query(`INSERT INTO pgqueue.queues (name) VALUES ('mass-cancel') ON CONFLICT DO NOTHING`);
  await fx.pool.query(`INSERT INTO pgqueue.jobs (queue_name, payload, status, lease_owner, lease_token, lease_expires_at, deadline_at, max_runtime_ms)
                       SELECT 'mass-cancel', '{}', 'running', 'w', 1, now() + interval '1 hour', now() + interval '1 hour', 60000 FROM generate_series(1, 50000)`);
  await fx.pool.query('ANALYZE pgqueue.jobs');
  // An operator cancels them all; no ANALYZE since: the planner thinks few are cancelled.
  await fx.pool.query(`UPDATE pgqueue.jobs SET status = 'cancelled', finished_at = now() WHERE queue_name = 'mass-cancel'`);
  const [{ id }] = (await fx.pool.query(`SELECT id::text FROM pgqueue.job_rows WHERE queue_name = 'mass-cancel' ORDER BY id DESC LIMIT 1`)).rows;
  const { endCancelledAttempt } = createStore('pgqueue').statements;
  const client = await fx.pool.connect();
  try {
    for (const mode of ['custom', 'generic'] as const) {
      const plan = await explainStatement(client, endCancelledAttempt, endCancelledAttempt.values({ id, owner: 'w', token: '1' }), 'jobs_pkey', mode);
      expect(plan.scans, mode).toEqual(['Index Scan on jobs_pkey']);
      expect(plan.jobsBuffers, mode).toBeLessThanOrEqual(10);
    }
  } finally {
    client.release();
    await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE queue_name = 'mass-cancel'; DELETE FROM pgqueue.jobs_succeeded WHERE queue_name = 'mass-cancel'`);
  }
});
