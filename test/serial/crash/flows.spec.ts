import { crashFixture, type CrashFixture } from '../../support/crash-harness.js';
import { waitFor } from '../../support/engine.js';

/**
 * Flows across real worker processes, through crashes (docs/flows.md): a parent with 1,000
 * children over 3 processes, two of them SIGKILLed mid-run and replaced. The parent is claimed only
 * after its last child succeeded (database times), succeeds exactly once, and its handler sees all
 * 1,000 results.
 */
let fx: CrashFixture;
beforeAll(async () => {
  fx = await crashFixture('crashflows');
});
afterAll(() => fx?.close());
afterEach((context) => {
  if (context.task.result?.state === 'fail') console.log(fx.logs());
});

test('a parent with 1,000 children across 3 processes with kills: claimed after the last child succeeded, succeeds once, sees all 1,000 results', async () => {
  const CHILDREN = 1_000;
  const spec = {
    name: 'flows',
    queues: [
      { name: 'fl-child', behaviour: { kind: 'child' as const, ms: 15 }, options: { concurrency: 4, prefetch: 4, leaseMs: 1_500, backoff: { baseMs: 0, maxMs: 0 } } },
      { name: 'fl-parent', behaviour: { kind: 'parent' as const }, options: { concurrency: 1, leaseMs: 1_500 } },
    ],
    pollIntervalMs: 100,
    reaper: { intervalMs: 200 },
    poolSize: 4,
  };
  let workers = await Promise.all([1, 2, 3].map(() => fx.startWorker(spec)));
  await fx.producer.declareQueues(['fl-child', 'fl-parent']);
  const flow = await fx.producer.enqueueFlow({
    queue: 'fl-parent',
    payload: {},
    children: Array.from({ length: CHILDREN }, (_, n) => ({ queue: 'fl-child', payload: { n } })),
  });

  for (const share of [0.3, 0.6]) {
    await waitFor(async () => ((await fx.statusCounts('fl-child')).succeeded ?? 0) >= CHILDREN * share, 60_000, 20);
    const victim = workers[Math.floor(Math.random() * workers.length)]!;
    await victim.kill('SIGKILL');
    workers = [...workers.filter((w) => w !== victim), await fx.startWorker(spec)];
  }
  await fx.drained('fl-child', 90_000);
  await fx.drained('fl-parent', 60_000);
  expect(await fx.statusCounts('fl-child')).toEqual({ succeeded: CHILDREN });
  expect(await fx.statusCounts('fl-parent')).toEqual({ succeeded: 1 });

  const { rows: times } = await fx.pool.query<{ last_child: number; parent_claimed: number }>(
    `SELECT (SELECT (extract(epoch FROM max(finished_at)) * 1e6)::float8 FROM pgqueue.job_rows WHERE parent_id = $1) AS last_child,
            (SELECT (extract(epoch FROM min(started_db)) * 1e6)::float8 FROM crash_executions WHERE job_id = $1) AS parent_claimed`,
    [flow.id],
  );
  // Every execution of the parent started after the last child's success was written.
  expect(times[0]!.parent_claimed).toBeGreaterThan(times[0]!.last_child);
  const { rows: claims } = await fx.pool.query<{ claimed: number }>(`SELECT (extract(epoch FROM claimed_at) * 1e6)::float8 AS claimed FROM pgqueue.job_rows WHERE id = $1`, [flow.id]);
  expect(claims[0]!.claimed).toBeGreaterThan(times[0]!.last_child);

  // It succeeded once: one execution under its final token ended ok, and that one saw every result.
  const { rows: finalToken } = await fx.pool.query<{ token: number }>(`SELECT lease_token::int AS token FROM pgqueue.job_rows WHERE id = $1`, [flow.id]);
  const runs = await fx.executions([flow.id]);
  const final = runs.filter((r) => r.token === finalToken[0]!.token);
  expect(final).toHaveLength(1);
  expect(final[0]!.outcome).toBe('ok');
  const { rows: seen } = await fx.pool.query<{ detail: string }>(`SELECT detail FROM crash_outcomes WHERE job_id = $1 AND lease_token = $2 AND kind = 'children'`, [
    flow.id,
    finalToken[0]!.token,
  ]);
  expect(seen).toHaveLength(1);
  expect(JSON.parse(seen[0]!.detail)).toEqual({ count: CHILDREN, distinct: CHILDREN, sum: (CHILDREN * (CHILDREN - 1)) / 2, allSucceeded: true });
  // The kills hit children at work: some ran more than once.
  const { rows: childRuns } = await fx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM crash_executions WHERE queue = 'fl-child'`);
  expect(childRuns[0]!.n).toBeGreaterThan(CHILDREN);
});
