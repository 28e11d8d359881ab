import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { engineFixture } from '../support/engine.js';
import { engineInternals } from '../../lib/engine/internals.js';
import { attemptEnded, localSignal, nextValues, testSignals } from '../support/signals.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('claims');
});
afterAll(() => fx.close());

test('8 concurrent claimers over 5,000 jobs: every (id, lease token) is unique and no job runs twice at once', async () => {
  const total = 5_000;
  await fx.insertJobs('crowd', total);
  const executions: { id: string; token: string; engine: number; start: number; end: number }[] = [];
  const allRan = localSignal<void>('crowd.allRan');
  const engines = Array.from({ length: 8 }, (_, n) => {
    const q = fx.make({ poolSize: 4 });
    q.work('crowd', async (job) => {
      const start = performance.now();
      await sleep(Math.random() < 0.1 ? 1 : 0);
      executions.push({ id: job.id, token: job.leaseToken, engine: n, start, end: performance.now() });
      if (executions.length === total) allRan.signal();
    }, { concurrency: 5, prefetch: 5 });
    return q;
  });
  await Promise.all(engines.map((q) => q.start()));
  await allRan.next(60_000);
  // A stop waits for the outcome writes still in flight: after it, every completion is in the table.
  await Promise.all(engines.map((q) => q.stop()));
  const succeeded = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'crowd' AND status = 'succeeded'`);
  expect(succeeded.rows[0].n).toBe(total);

  const pairs = new Set(executions.map((e) => `${e.id}/${e.token}`));
  expect(pairs.size).toBe(executions.length);
  // Nothing expired or failed here, so every job ran exactly once, under token 1.
  expect(new Set(executions.map((e) => e.id)).size).toBe(total);
  expect(executions).toHaveLength(total);
  expect(executions.every((e) => e.token === '1')).toBe(true);
  // All eight claimers took part.
  expect(new Set(executions.map((e) => e.engine)).size).toBe(8);
  const { rows } = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'crowd' AND lease_token <> 1`);
  expect(rows[0].n).toBe(0);
}, 90_000);

test('a job held locked by an open transaction does not stop other jobs from being claimed', async () => {
  await fx.insertJobs('locked', 20);
  const locker = new pg.Client({ connectionString: fx.url });
  await locker.connect();
  try {
    await locker.query('BEGIN');
    const { rows } = await locker.query<{ id: string }>(
      `SELECT id::text FROM pgqueue.jobs WHERE queue_name = 'locked' ORDER BY priority DESC, available_at, id LIMIT 1 FOR UPDATE`,
    );
    const lockedId = rows[0]!.id;
    const q = fx.make();
    const done = localSignal<string>('locked.done');
    q.work('locked', async (job) => void done.signal(job.id));
    await q.start();
    expect(await nextValues(done, 19)).not.toContain(lockedId);
    await locker.query('ROLLBACK');
    expect(await done.next()).toBe(lockedId);
    await q.stop();
  } finally {
    await locker.end();
  }
});

test('with LISTEN disconnected the poll still drains every committed job; with LISTEN up pickup is fast', async () => {
  const pollIntervalMs = 1_000;
  const q = fx.make({ pollIntervalMs, notifier: { reconnectMinMs: 60_000, reconnectMaxMs: 60_000 } });
  const signals = testSignals(q);
  const pickedUp = new Map<string, number>();
  const picked = localSignal<string>('wake.picked');
  q.work('wake', async (job) => {
    pickedUp.set(job.id, performance.now());
    picked.signal(job.id);
  });
  await q.start();
  await signals.notifier.listening.next();
  await signals.worker.batchClaimed.next(); // the start's own claim (nothing there yet)

  // Listening: a single job is picked up in far less than a poll interval.
  const latencies: number[] = [];
  for (let i = 0; i < 10; i++) {
    const sent = performance.now();
    const id = await q.enqueue('wake', { i });
    await picked.waitFor((p) => p === id, 5_000);
    latencies.push(pickedUp.get(id)! - sent);
  }
  latencies.sort((a, b) => a - b);
  expect(latencies[5]!).toBeLessThan(pollIntervalMs / 4);

  // Listener gone (and not coming back within the test): only the poll can find the jobs.
  await engineInternals(q).notifier.disconnectForTest();
  await signals.notifier.lost.next();
  expect(engineInternals(q).notifier.listening).toBe(false);
  const ids = await q.enqueueMany(Array.from({ length: 200 }, (_, i) => ({ queue: 'wake', payload: { i } })));
  await Promise.all(ids.map((id) => picked.waitFor((p) => p === id, pollIntervalMs * 5)));
  expect(engineInternals(q).notifier.listening).toBe(false);
  await q.stop();
});

test('a burst of notifications is coalesced into few claims', async () => {
  const claims: number[] = [];
  const q = fx.make({ pollIntervalMs: 60_000, wakeCooldownMs: 25 });
  let handled = 0;
  const allHandled = localSignal<void>('burst.allHandled');
  q.work('burst', async () => {
    if (++handled === 1_000) allHandled.signal();
  }, { concurrency: 10, prefetch: 40 }, { claimed: (n) => claims.push(n) });
  await q.start();
  await testSignals(q).notifier.listening.next();
  claims.length = 0;
  // 1,000 jobs committed silently, then 1,000 separate NOTIFYs in one burst.
  await fx.insertJobs('burst', 1_000);
  const notifier = new pg.Client({ connectionString: fx.url });
  await notifier.connect();
  await Promise.all(Array.from({ length: 1_000 }, () => notifier.query(`SELECT pg_notify('pgqueue:wake', 'burst')`)));
  await notifier.end();
  await allHandled.next(20_000);
  // One claim in flight, one more queued behind it, and after a claim that drained the queue at
  // most one per cooldown: the claims follow the batches and the burst's duration, not the
  // 1,000 notifications.
  expect(claims.length).toBeLessThan(200);
  await q.stop();
});

test('the listener reconnects with backoff after its connection is cut, and wakes the loops', async () => {
  const q = fx.make({ pollIntervalMs: 60_000, notifier: { reconnectMinMs: 50, reconnectMaxMs: 200 } });
  const signals = testSignals(q);
  q.work('relisten', async () => {});
  await q.start();
  await signals.notifier.listening.next();
  // Cut the listener's session from the server side, as a failover or an idle-kill would.
  await fx.pool.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'nestjs-pg-queue:listen' AND datname = current_database()`);
  expect(await signals.notifier.lost.next(5_000)).toEqual({ why: 'dropped' });
  await signals.notifier.listening.next(5_000);
  expect(engineInternals(q).notifier.listening).toBe(true);
  // Polling is a minute away: only the listener's wake-up can pick the job up in time.
  const id = await q.enqueue('relisten', {});
  await attemptEnded(signals, id, 'succeeded', 2_000);
  await q.stop();
});
