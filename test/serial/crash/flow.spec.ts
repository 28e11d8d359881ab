import { crashFixture, overlappingExecutions, type CrashFixture } from '../../support/crash-harness.js';
import { waitFor } from '../../support/engine.js';

/**
 * The reference's crash tests 1, 7, 8 and 9 (test/serial/crash/boundaries.spec.ts has 2-6,
 * backlog.spec.ts 10): work keeps flowing between real worker processes, through a locked row,
 * under a priority flood, and with every listener gone.
 */
let fx: CrashFixture;
beforeAll(async () => {
  fx = await crashFixture('crashflow');
});
afterAll(() => fx?.close());
afterEach((context) => {
  if (context.task.result?.state === 'fail') console.log(fx.logs());
});

test('1. concurrent claimers in 4 processes: every (job id, lease token) is unique and no job runs twice at once', async () => {
  const spec = { name: 'claimer', queues: [{ name: 'claims', options: { concurrency: 4, prefetch: 4 } }] };
  const workers = await Promise.all([1, 2, 3, 4].map(() => fx.startWorker(spec)));
  // Enqueued after all four are listening, so they all wake to the same backlog and contend.
  const ids = await fx.enqueue('claims', 2_000, (i) => ({ behaviour: { kind: 'sleep', ms: i % 4 } }));
  await fx.drained('claims', 60_000);

  const runs = await fx.executions(ids);
  const pairs = new Set(runs.map((r) => `${r.jobId}:${r.token}`));
  expect(pairs.size).toBe(runs.length);
  expect(new Set(runs.map((r) => r.jobId)).size).toBe(ids.length);
  expect(overlappingExecutions(runs)).toEqual([]);
  // Nothing was lost or run twice here (no crash): one successful run per job, under the job's final token.
  expect(runs.length).toBe(ids.length);
  expect(runs.every((r) => r.outcome === 'ok')).toBe(true);
  const { rows } = await fx.pool.query<{ mismatched: number }>(
    `SELECT count(*)::int AS mismatched FROM pgqueue.jobs j JOIN crash_executions e ON e.job_id = j.id
     WHERE j.queue_name = 'claims' AND (j.status <> 'succeeded' OR j.lease_token <> e.lease_token)`,
  );
  expect(rows[0]!.mismatched).toBe(0);
  const perWorker = Object.fromEntries(workers.map((w) => [w.workerId, runs.filter((r) => r.worker === w.workerId).length]));
  console.log(JSON.stringify({ test: 'concurrent-claimers', jobs: ids.length, perWorker }));
  // The claims were really spread over the processes.
  for (const w of workers) expect(perWorker[w.workerId]).toBeGreaterThan(0);
  await Promise.all(workers.map((w) => w.stop()));
}, 90_000);

test('7. one job locked by another session: unrelated jobs keep flowing through SKIP LOCKED, for claims and for the reaper', async () => {
  const ids = await fx.enqueue('locked', 300, () => ({ behaviour: { kind: 'sleep', ms: 1 } }));
  // 50 more jobs whose worker vanished: running, lease already expired, for the reaper.
  const orphans = await fx.enqueue('locked', 50);
  await fx.pool.query(
    `UPDATE pgqueue.jobs SET status = 'running', attempt_count = 1, lease_token = lease_token + 1, lease_owner = 'vanished',
       claimed_at = now() - interval '1 minute', lease_expires_at = now() - interval '1 second', deadline_at = now() + interval '1 hour',
       max_attempts = 5, backoff_base_ms = 0, backoff_max_ms = 0
     WHERE id = ANY($1)`,
    [orphans],
  );
  // Another session holds row locks on the first job in claim order and on one orphan, and keeps
  // its transaction open for the whole test (an operator's psql, a stuck migration, ...).
  const [lockedJob, lockedOrphan] = [ids[0]!, orphans[0]!];
  const holder = await fx.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query(`SELECT id FROM pgqueue.jobs WHERE id = ANY($1) FOR UPDATE`, [[lockedJob, lockedOrphan]]);
    const spec = { name: 'skipper', queues: [{ name: 'locked', options: { concurrency: 4, prefetch: 4 } }] };
    const workers = await Promise.all([fx.startWorker(spec), fx.startWorker(spec)]);

    // Everything else is claimed, reaped and finished around the two locked rows.
    await waitFor(async () => (await fx.statusCounts('locked')).succeeded === 348, 30_000, 50);
    expect(await fx.statusCounts('locked')).toEqual({ succeeded: 348, pending: 1, running: 1 });
    expect(await fx.job(lockedJob)).toMatchObject({ status: 'pending', attemptCount: 0, leaseToken: 0 });
    expect(await fx.job(lockedOrphan)).toMatchObject({ status: 'running', leaseOwner: 'vanished' });
    expect(await fx.executions([lockedJob, lockedOrphan])).toEqual([]);
    const reaped = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_events WHERE kind = 'lease_expired' AND job_id = ANY($1)`, [orphans]);
    expect(reaped.rows[0].n).toBe(49);

    // Once the lock is gone, both are processed like any other job.
    await holder.query('ROLLBACK');
    await fx.drained('locked', 15_000);
    expect((await fx.job(lockedJob)).status).toBe('succeeded');
    expect((await fx.job(lockedOrphan)).status).toBe('succeeded');
    await Promise.all(workers.map((w) => w.stop()));
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    holder.release();
  }
}, 90_000);

/**
 * 8. Fairness. DESIGN.md (invariant 9) asks for a stated, tested policy under which a flood of
 * high-priority work cannot starve lower priorities forever. That policy arrives with a later
 * issue (a share of each claim taken oldest-first, the handler option `fairShare`). What holds
 * today, and stays as that issue's `fairShare: 0`, is *strict priority*: `priority DESC,
 * available_at, id` among due jobs, so a lower-priority job runs only once every due job of a
 * higher priority has been claimed, however long it has waited. This test pins that, measured in
 * claims (not milliseconds), with `fairShare: 0` asked for explicitly (an engine without the
 * option ignores it). When the fairness issue lands, it adds here the default policy's
 * expectation: "the oldest low job is claimed within ceil(1 / fairShare) claims of the flood".
 */
test('8. a flood of high-priority jobs against the fairness policy: strict priority today, measured in claims', async () => {
  // Low-priority jobs first (older: the earliest available_at), then a flood of high-priority ones.
  const low = await fx.enqueue('flood', 5, () => ({ class: 'low' }), { priority: 0 });
  const high = await fx.enqueue('flood', 200, () => ({ class: 'high' }), { priority: 10 });
  // One slot, no prefetch: every claim takes exactly one job, so the order of runs is the order of claims.
  const strictPriority = { concurrency: 1, prefetch: 0, fairShare: 0 };
  const w = await fx.startWorker({ name: 'fair', queues: [{ name: 'flood', options: strictPriority }] });
  // The flood keeps coming while the worker is busy with it: two more waves.
  for (const after of [100, 250]) {
    await waitFor(async () => (await fx.executions()).filter((r) => r.queue === 'flood').length >= after, 30_000, 20);
    high.push(...(await fx.enqueue('flood', 100, () => ({ class: 'high' }), { priority: 10 })));
  }
  await fx.drained('flood', 60_000);
  const order = (await fx.executions([...low, ...high])).map((r) => (low.includes(r.jobId) ? 'low' : 'high'));
  expect(order).toHaveLength(low.length + high.length);
  const claimsBeforeFirstLow = order.indexOf('low');
  console.log(JSON.stringify({ test: 'priority-flood', policy: 'strict-priority', highJobs: high.length, lowJobs: low.length, claimsBeforeFirstLow }));
  // Strict priority: every high-priority job (all 400, including the waves that arrived later)
  // was claimed before the first low-priority one, and the low ones then ran in age order.
  expect(claimsBeforeFirstLow).toBe(high.length);
  expect(order.slice(high.length)).toEqual(low.map(() => 'low'));
  expect((await fx.executions(low)).map((r) => r.jobId)).toEqual(low);
  await w.stop();
}, 90_000);

describe('9. every listener disconnected: periodic polling still drains all committed jobs', () => {
  const pollIntervalMs = 300;

  /** Enqueues waves of jobs (committed transactions, each with its NOTIFY) and waits for each to drain. */
  async function waves(queue: string, during?: () => Promise<void>) {
    const latencies: number[] = [];
    for (let wave = 0; wave < 4; wave++) {
      const ids = await fx.enqueue(queue, 25);
      await during?.();
      await fx.drained(queue, 20_000);
      const { rows } = await fx.pool.query<{ ms: number }>(
        `SELECT extract(epoch FROM e.started_db - j.created_at) * 1000 AS ms FROM crash_executions e JOIN pgqueue.jobs j ON j.id = e.job_id WHERE j.id = ANY($1)`,
        [ids],
      );
      latencies.push(...rows.map((r) => Number(r.ms)));
    }
    return latencies;
  }

  test('workers whose listener cannot connect at all', async () => {
    const spec = { name: 'deaf', queues: [{ name: 'deaf' }], pollIntervalMs, listen: 'unreachable' as const };
    const workers = await Promise.all([fx.startWorker(spec), fx.startWorker(spec)]);
    for (const w of workers) expect(await fx.sessions(w)).toMatchObject({ listen: 0 });
    const latencies = await waves('deaf');
    expect(latencies).toHaveLength(100);
    expect(await fx.statusCounts('deaf')).toEqual({ succeeded: 100 });
    for (const w of workers) expect(await fx.sessions(w)).toMatchObject({ listen: 0 });
    const maxPickupMs = Math.max(...latencies);
    console.log(JSON.stringify({ test: 'listeners-unreachable', pollIntervalMs, jobs: latencies.length, maxPickupMs: Math.round(maxPickupMs) }));
    // Found by the poll: within a poll interval (plus the claim and a loaded machine's slack).
    expect(maxPickupMs).toBeLessThan(pollIntervalMs + 1_000);
    await Promise.all(workers.map((w) => w.stop()));
  }, 60_000);

  test('listen sessions terminated over and over while jobs arrive', async () => {
    const spec = { name: 'cut-listener', queues: [{ name: 'cut-listener' }], pollIntervalMs, notifier: { reconnectMinMs: 20, reconnectMaxMs: 200 } };
    const workers = await Promise.all([fx.startWorker(spec), fx.startWorker(spec)]);
    let terminated = 0;
    let cutting = true;
    const cutter = (async () => {
      while (cutting) {
        for (const w of workers) terminated += await fx.terminateSessions(w, 'listen');
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    try {
      const latencies = await waves('cut-listener');
      expect(await fx.statusCounts('cut-listener')).toEqual({ succeeded: 100 });
      console.log(JSON.stringify({ test: 'listeners-terminated', pollIntervalMs, jobs: latencies.length, listenSessionsTerminated: terminated, maxPickupMs: Math.round(Math.max(...latencies)) }));
      expect(terminated).toBeGreaterThan(4);
      expect(Math.max(...latencies)).toBeLessThan(pollIntervalMs + 1_000);
    } finally {
      cutting = false;
      await cutter;
    }
    await Promise.all(workers.map((w) => w.stop()));
  }, 60_000);
});
