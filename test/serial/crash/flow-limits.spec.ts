import { crashFixture, type CrashFixture } from '../../support/crash-harness.js';
import { waitFor } from '../../support/engine.js';

/**
 * Flow control across real worker processes, through crashes (docs/flow-control.md): 3 processes,
 * `globalConcurrency: 5` and `groupConcurrency: 2`, processes SIGKILLed at random and restarted.
 * Every attempt's interval [claim, end or reap] is recorded from database timestamps by a trigger
 * of this test's own (not by the engine): its start is the claim time the flow claim wrote (taken
 * after its turn on the queue's row began), its end the moment the row left 'running' (a completion,
 * a failure, or the reaper taking back a dead process's lease). The exact maximum overlap of those
 * intervals must stay within the limits, and every job must complete.
 */
let fx: CrashFixture;
beforeAll(async () => {
  fx = await crashFixture('crashflow');
  await fx.pool.query(`
    CREATE TABLE flow_attempts (job_id bigint, token bigint, group_key text, claimed_at timestamptz, ended_at timestamptz);
    CREATE FUNCTION record_flow_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'UPDATE' AND NEW.status = 'running' AND (OLD.status <> 'running' OR OLD.lease_token <> NEW.lease_token) THEN
        INSERT INTO flow_attempts VALUES (NEW.id, NEW.lease_token, NEW.group_key, NEW.claimed_at, NULL);
      END IF;
      -- A completion deletes the row (it moves to jobs_succeeded, migration 0014).
      IF OLD.status = 'running' AND (TG_OP = 'DELETE' OR NEW.status <> 'running') THEN
        UPDATE flow_attempts SET ended_at = clock_timestamp() WHERE job_id = OLD.id AND token = OLD.lease_token;
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER record_flow_attempt AFTER UPDATE OR DELETE ON pgqueue.jobs FOR EACH ROW EXECUTE FUNCTION record_flow_attempt();
  `);
});
afterAll(() => fx?.close());
afterEach((context) => {
  if (context.task.result?.state === 'fail') console.log(fx.logs());
});

interface Attempt {
  group: string;
  start: number;
  end: number;
}

/** The largest number of intervals that hold one instant (an end at the same instant as a start comes first). */
function maxOverlap(attempts: readonly Attempt[]): number {
  const points = attempts.flatMap((a) => [
    { at: a.start, delta: 1 },
    { at: a.end, delta: -1 },
  ]);
  points.sort((a, b) => a.at - b.at || a.delta - b.delta);
  let now = 0;
  let max = 0;
  for (const p of points) max = Math.max(max, (now += p.delta));
  return max;
}

test('3 processes, globalConcurrency 5, groupConcurrency 2, random SIGKILLs: never more than 5 running, never more than 2 of a group, every job completes', async () => {
  const queue = 'limited';
  const GROUPS = 6;
  const PER_GROUP = 40;
  const spec = {
    name: 'flow',
    queues: [
      {
        name: queue,
        behaviour: { kind: 'sleep' as const, ms: 40 },
        options: { concurrency: 4, prefetch: 4, leaseMs: 1_500, backoff: { baseMs: 0, maxMs: 0 }, limits: { globalConcurrency: 5, groupConcurrency: 2 } },
      },
    ],
    pollIntervalMs: 100,
    reaper: { intervalMs: 200 },
    poolSize: 4,
  };
  let workers = await Promise.all([1, 2, 3].map(() => fx.startWorker(spec)));
  await fx.producer.declareQueues([queue]);
  const jobs = Array.from({ length: GROUPS * PER_GROUP }, (_, i) => ({ queue, payload: { i }, options: { group: `tenant-${i % GROUPS}` } }));
  await fx.producer.enqueueMany(jobs);

  // Kill a random process four times while work runs, starting a new one each time.
  let kills = 0;
  for (let round = 0; round < 4; round++) {
    await waitFor(async () => ((await fx.statusCounts(queue)).succeeded ?? 0) >= ((round + 1) * jobs.length) / 6, 60_000, 20);
    const victim = workers[Math.floor(Math.random() * workers.length)]!;
    await victim.kill('SIGKILL');
    kills += 1;
    workers = [...workers.filter((w) => w !== victim), await fx.startWorker(spec)];
  }
  await fx.drained(queue, 120_000);
  expect(await fx.statusCounts(queue)).toEqual({ succeeded: jobs.length });
  expect(kills).toBe(4);

  const { rows } = await fx.pool.query<{ group_key: string; start: number; end: number | null }>(
    `SELECT group_key, (extract(epoch FROM claimed_at) * 1e6)::float8 AS start, (extract(epoch FROM ended_at) * 1e6)::float8 AS end FROM flow_attempts`,
  );
  expect(rows.every((r) => r.end !== null)).toBe(true);
  const attempts = rows.map((r) => ({ group: r.group_key, start: r.start, end: r.end! }));
  // Some attempts were cut short by the kills and recovered by the reaper (more attempts than jobs).
  expect(attempts.length).toBeGreaterThan(jobs.length);
  const overall = maxOverlap(attempts);
  expect(overall).toBeLessThanOrEqual(5);
  // The limit was reached, not merely respected by an idle queue.
  expect(overall).toBeGreaterThanOrEqual(4);
  for (let g = 0; g < GROUPS; g++) expect(maxOverlap(attempts.filter((a) => a.group === `tenant-${g}`))).toBeLessThanOrEqual(2);
  // Each attempt holds its slot from claim to end: none ends before it starts.
  expect(attempts.every((a) => a.end >= a.start)).toBe(true);
});

test('2 groups × 300 jobs at 100 claims per second per group across 3 processes: claims per rolling second never exceed the limit', async () => {
  const queue = 'rated';
  const spec = {
    name: 'rate',
    queues: [{ name: queue, behaviour: { kind: 'noop' as const }, options: { concurrency: 10, prefetch: 50, limits: { groupRateLimit: { limit: 100, windowMs: 1_000 } } } }],
    pollIntervalMs: 100,
    poolSize: 4,
  };
  await Promise.all([1, 2, 3].map(() => fx.startWorker(spec)));
  await fx.producer.declareQueues([queue]);
  await fx.producer.enqueueMany(Array.from({ length: 600 }, (_, i) => ({ queue, payload: { i }, options: { group: `g${i % 2}` } })));
  await fx.drained(queue, 60_000);
  expect(await fx.statusCounts(queue)).toEqual({ succeeded: 600 });
  const { rows } = await fx.pool.query<{ group_key: string; at: number }>(
    `SELECT a.group_key, (extract(epoch FROM a.claimed_at) * 1e6)::float8 AS at FROM flow_attempts a
     JOIN pgqueue.job_rows j ON j.id = a.job_id WHERE j.queue_name = $1 ORDER BY a.claimed_at`,
    [queue],
  );
  expect(rows).toHaveLength(600);
  for (const group of ['g0', 'g1']) {
    const times = rows.filter((r) => r.group_key === group).map((r) => r.at);
    // Every window (t - 1 s, t] that ends at a claim holds at most 100 claims (two pointers).
    let from = 0;
    let most = 0;
    for (let i = 0; i < times.length; i++) {
      while (times[from]! <= times[i]! - 1e6) from++;
      most = Math.max(most, i - from + 1);
    }
    expect(most).toBeLessThanOrEqual(100);
    expect(most).toBeGreaterThanOrEqual(90);
  }
});
