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
    `SELECT count(*)::int AS mismatched FROM pgqueue.job_rows j JOIN crash_executions e ON e.job_id = j.id
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
 * 8. Fairness (README "Fairness: `fairShare`", docs/decisions.md). A producer floods a queue with
 * high-priority jobs while 3 worker processes drain it; 5 low-priority jobs are enqueued early in
 * the flood. The same flood runs against the default policy (fairShare 0.1), an explicit one (0.25)
 * and strict priority (0). Waits are counted in claims (jobs.claimed_at, the database's clock at the
 * start of each claim statement), never in milliseconds, so the bound holds on any machine.
 *
 * The bound asserted, for P processes. T is a moment after the low job J's enqueue committed (every
 * claim statement that starts after T sees J); the window is every claim that started after T and
 * before J's claim Y; W(J) counts the jobs they took. A = claimable jobs older than J at T (by
 * `available_at, id`, the order of the oldest-first walk), k = ceil(1 / fairShare), B = concurrency
 * + prefetch (the largest batch). A process claims one batch at a time, so of its claims in the
 * window only its last can overlap Y; every earlier one ran while J was claimable and unlocked, so
 * it came back full, and each of its oldest-first picks took J or an older job, not J (J is Y's),
 * hence an older one. The share is a credit carried across claims, so p's non-overlapping claims in
 * the window, n_p jobs, hold a_p >= floor(n_p / k') oldest-first picks (k' = 1 / fairShare <= k),
 * i.e. n_p <= (a_p + 1) * k - 1, with sum(a_p) <= A. Y's own process has no overlapping claim; the
 * P - 1 others at most one batch each:
 *
 *     W(J) <= (A + P) * k - P + (P - 1) * B
 *
 * (README's per-process statement, "(A + 1) * k claims per process", summed over processes, plus
 * the claims in flight on the other processes when J is taken.) Strict priority is checked in the
 * same terms: a low job is claimed only once the producer has stopped, and at most the P - 1 other
 * processes' in-flight batches of high-priority jobs are claimed after it (their rows were locked
 * by those claims when it was taken).
 */
test('8. a flood of high-priority jobs against the fairness policy: fairShare bounds the wait in claims; fairShare 0 waits for the flood to drain', async () => {
  const P = 3;
  const concurrency = 3;
  const prefetch = 3;
  const B = concurrency + prefetch;
  const settings = [
    { queue: 'flood-default', fairShare: undefined, share: 0.1 }, // the default, not passed
    { queue: 'flood-quarter', fairShare: 0.25, share: 0.25 },
    { queue: 'flood-strict', fairShare: 0, share: 0 },
  ];
  const spec = {
    name: 'fair',
    poolSize: 4,
    queues: settings.map((s) => ({
      name: s.queue,
      options: { concurrency, prefetch, ...(s.fairShare === undefined ? {} : { fairShare: s.fairShare }) },
    })),
  };
  const workers = await Promise.all(Array.from({ length: P }, () => fx.startWorker(spec)));
  const HIGH = 10;
  const LOW = 0;
  const FIRST_WAVE = 30;
  const LOWS = 5;
  const TOTAL_HIGH = 1_000;
  const WAVE = 300;
  const KEEP = 300; // the producer tops the claimable high backlog up whenever it falls below this

  const dbNow = async () => (await fx.pool.query<{ t: string }>(`SELECT clock_timestamp()::text AS t`)).rows[0]!.t;
  const pendingHigh = async (queue: string) =>
    (await fx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = $1 AND status = 'pending' AND priority = $2`, [queue, HIGH]))
      .rows[0]!.n;

  const measured: { queue: string; share: number; minBacklog: number; rows: { waited: number; older: number; highAfter: number; afterFlood: boolean }[] }[] = [];
  for (const { queue, share } of settings) {
    // The flood starts; the low jobs arrive early in it, committed together with its next wave (so
    // high-priority work is claimable at every moment from then on), and the flood goes on, topped
    // up in waves. Within that statement the low jobs come first: older by id, same available_at.
    let highs = (await fx.enqueue(queue, FIRST_WAVE, () => ({ class: 'high' }), { priority: HIGH })).length;
    const mixed = await fx.producer.enqueueMany([
      ...Array.from({ length: LOWS }, () => ({ queue, payload: { class: 'low' }, options: { priority: LOW } })),
      ...Array.from({ length: WAVE }, () => ({ queue, payload: { class: 'high' }, options: { priority: HIGH } })),
    ]);
    const t = await dbNow();
    const lows = mixed.slice(0, LOWS);
    highs += WAVE;
    let minBacklog = Number.POSITIVE_INFINITY;
    while (highs < TOTAL_HIGH) {
      const backlog = await pendingHigh(queue);
      minBacklog = Math.min(minBacklog, backlog);
      if (backlog < KEEP) highs += (await fx.enqueue(queue, Math.min(WAVE, TOTAL_HIGH - highs), () => ({ class: 'high' }), { priority: HIGH })).length;
      else await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const floodEnded = await dbNow();
    await fx.drained(queue, 60_000);
    expect(await fx.statusCounts(queue)).toEqual({ succeeded: TOTAL_HIGH + LOWS });
    // One claim per job (no retries), so claimed_at is the claim that ran it.
    const { rows: retried } = await fx.pool.query(`SELECT id FROM pgqueue.job_rows WHERE queue_name = $1 AND attempt_count <> 1`, [queue]);
    expect(retried).toEqual([]);

    // Per low job J: waited = W(J); older = A (jobs older than J claimed after T: claimable at T,
    // or locked then by a claim that started after T); highAfter = high jobs claimed after J.
    const { rows } = await fx.pool.query<{ id: string; waited: number; older: number; highAfter: number; afterFlood: boolean }>(
      `SELECT j.id::text,
              (SELECT count(*) FROM pgqueue.job_rows o WHERE o.queue_name = j.queue_name AND o.claimed_at > $2::timestamptz AND o.claimed_at < j.claimed_at)::int AS waited,
              (SELECT count(*) FROM pgqueue.job_rows o WHERE o.queue_name = j.queue_name AND (o.available_at, o.id) < (j.available_at, j.id)
                 AND o.claimed_at > $2::timestamptz)::int AS older,
              (SELECT count(*) FROM pgqueue.job_rows o WHERE o.queue_name = j.queue_name AND o.priority > j.priority AND o.claimed_at > j.claimed_at)::int AS "highAfter",
              j.claimed_at > $3::timestamptz AS "afterFlood"
       FROM pgqueue.job_rows j WHERE j.id = ANY($1) ORDER BY j.id`,
      [lows, t, floodEnded],
    );
    expect(rows).toHaveLength(LOWS);
    measured.push({ queue, share, minBacklog, rows });
  }

  const bound = (share: number, older: number) => (older + P) * Math.ceil(1 / share) - P + (P - 1) * B;
  const worstWait = Object.fromEntries(measured.map((m) => [m.queue, Math.max(...m.rows.map((r) => r.waited))]));
  console.log(
    JSON.stringify({
      test: 'priority-flood',
      processes: P,
      concurrency,
      prefetch,
      highJobs: TOTAL_HIGH,
      lowJobs: LOWS,
      worstWait,
      settings: measured.map(({ queue, share, minBacklog, rows }) => ({
        queue,
        fairShare: share,
        minBacklog,
        lows: rows.map((r) => ({ waited: r.waited, older: r.older, ...(share > 0 ? { bound: bound(share, r.older) } : {}), highAfter: r.highAfter, afterFlood: r.afterFlood })),
      })),
    }),
  );
  for (const { share, rows } of measured) {
    for (const r of rows) {
      if (share > 0) {
        expect(r.waited).toBeLessThanOrEqual(bound(share, r.older));
        // Served during the flood, long before its end: most of the flood was claimed after it.
        expect(r.afterFlood).toBe(false);
        expect(r.highAfter).toBeGreaterThan(TOTAL_HIGH / 2);
      } else {
        // Strict priority: only once the flood had stopped and drained, but for the high jobs
        // locked by the other processes' claims in flight when the low one was taken.
        expect(r.afterFlood).toBe(true);
        expect(r.highAfter).toBeLessThanOrEqual((P - 1) * B);
      }
    }
  }
  // Under strict priority every low job waited longer than the default policy's bound allowed any of them.
  const strict = measured.find((m) => m.share === 0)!;
  const defaults = measured.find((m) => m.queue === 'flood-default')!;
  expect(Math.min(...strict.rows.map((r) => r.waited))).toBeGreaterThan(Math.max(...defaults.rows.map((r) => bound(0.1, r.older))));
  await Promise.all(workers.map((w) => w.stop()));
}, 120_000);

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
        `SELECT extract(epoch FROM e.started_db - j.created_at) * 1000 AS ms FROM crash_executions e JOIN pgqueue.job_rows j ON j.id = e.job_id WHERE j.id = ANY($1)`,
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
