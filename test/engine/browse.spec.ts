import { BROWSE_WALK_MAX } from '../../lib/engine/store/index.js';
import { InvalidOptionError } from '../../lib/engine/index.js';
import { engineFixture } from '../support/engine.js';

/** The operator's reads behind the dashboard: jobs by status a page at a time, dead jobs by code, throughput. */
let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('browse');
});
afterAll(() => fx.close());

/** Every page of listJobs, followed to the end. */
async function allPages(q: ReturnType<typeof fx.make>, filter: Parameters<ReturnType<typeof fx.make>['listJobs']>[0]) {
  const pages = [];
  let cursor: string | undefined;
  do {
    const page = await q.listJobs({ ...filter, cursor });
    pages.push(page);
    cursor = page.nextCursor;
  } while (cursor !== undefined && pages.length < 100);
  return pages;
}

test('listJobs pages through each status of a queue by its order, with a cursor, and filters by error code', async () => {
  const q = fx.make();
  await fx.insertJobs('browse-a', 7, { status: 'pending' });
  await fx.insertJobs('browse-a', 5, { status: 'scheduled', availableInSeconds: 60 });
  await fx.insertJobs('browse-a', 6, { status: 'dead', errorCodes: ['BAD', 'WORSE'] });
  await fx.insertJobs('browse-a', 4, { status: 'succeeded', finishedAgoSeconds: 5 });
  await fx.insertJobs('browse-b', 9, { status: 'succeeded' });

  const pending = await allPages(q, { queue: 'browse-a', status: 'pending', limit: 3 });
  expect(pending.map((p) => p.jobs.length)).toEqual([3, 3, 1]);
  const ids = pending.flatMap((p) => p.jobs.map((j) => j.id));
  expect(new Set(ids).size).toBe(7);
  expect(pending.flatMap((p) => p.jobs).every((j) => j.status === 'pending')).toBe(true);

  const succeeded = (await allPages(q, { queue: 'browse-a', status: 'succeeded', limit: 50 })).flatMap((p) => p.jobs);
  expect(succeeded).toHaveLength(4); // not browse-b's
  const finished = succeeded.map((j) => j.finishedAt!.getTime());
  expect([...finished].sort((a, b) => b - a)).toEqual(finished); // newest first

  const worse = (await allPages(q, { queue: 'browse-a', status: 'dead', errorCode: 'WORSE', limit: 2 })).flatMap((p) => p.jobs);
  expect(worse).toHaveLength(3);
  expect(worse.every((j) => j.lastErrorCode === 'WORSE')).toBe(true);
  expect((await q.listJobs({ queue: 'browse-a', status: 'scheduled' })).jobs).toHaveLength(5);
  expect((await q.listJobs({ queue: 'no-such-queue', status: 'running' })).jobs).toEqual([]);

  await expect(q.listJobs({ queue: 'browse-a', status: 'sleeping' as never })).rejects.toBeInstanceOf(InvalidOptionError);
  await expect(q.listJobs({ queue: 'browse-a', status: 'pending', cursor: 'nope' })).rejects.toBeInstanceOf(InvalidOptionError);
  await expect(q.listJobs({ queue: 'browse-a', status: 'pending', limit: 201 })).rejects.toBeInstanceOf(InvalidOptionError);
});

test('a page walks a bounded part of an index that holds every queue: a quiet queue behind a busy one gets short pages with a cursor, and all its jobs', async () => {
  const q = fx.make();
  // Older than the quiet queue's jobs, so newest-first walks meet the quiet ones after more than a walk of busy ones.
  await fx.insertJobs('browse-quiet', 3, { status: 'succeeded', finishedAgoSeconds: 3_600 });
  await fx.insertJobs('browse-busy', BROWSE_WALK_MAX + 500, { status: 'succeeded', finishedAgoSeconds: 60 });
  const pages = await allPages(q, { queue: 'browse-quiet', status: 'succeeded', limit: 10 });
  expect(pages[0]).toMatchObject({ jobs: [], walkedOut: true });
  expect(pages[0]!.nextCursor).toBeDefined();
  expect(pages.flatMap((p) => p.jobs)).toHaveLength(3);
  expect(pages.at(-1)!.nextCursor).toBeUndefined();
});

test('deadGroups counts a queue\'s dead jobs per error code with the newest message; throughput counts finished jobs per bucket, capped', async () => {
  const q = fx.make();
  await fx.insertJobs('browse-dead', 10, { status: 'dead', errorCodes: ['A', 'A', 'B'] });
  await fx.insertJobs('browse-other', 4, { status: 'dead', errorCodes: ['A'] });
  const groups = await q.deadGroups('browse-dead');
  expect(groups.map((g) => [g.errorCode, g.count])).toEqual([
    ['A', 7],
    ['B', 3],
  ]);
  expect(groups[0]!.oldestAt.getTime()).toBeLessThanOrEqual(groups[0]!.newestAt.getTime());

  await fx.insertJobs('browse-tp', 6, { status: 'succeeded', finishedAgoSeconds: 1 });
  await fx.insertJobs('browse-tp', 4, { status: 'succeeded', finishedAgoSeconds: 150 });
  await fx.insertJobs('browse-tp', 5, { status: 'succeeded', finishedAgoSeconds: 7_200 }); // history: outside the window
  const tp = await q.throughput({ windowMs: 300_000, bucketMs: 60_000 });
  const queue = tp.queues.find((x) => x.queue === 'browse-tp')!;
  expect(queue.succeeded).toHaveLength(5);
  expect(queue.succeeded.at(-1)).toBe(6); // the newest minute
  expect(queue.succeeded[2]).toBe(4); // two and a half minutes ago
  expect(queue.succeeded.reduce((a, b) => a + b)).toBe(10);
  expect(tp.completeForMs).toBeNull();
  expect(tp.total.dead.reduce((a, b) => a + b)).toBeGreaterThanOrEqual(14);
  const capped = await q.throughput({ windowMs: 300_000, bucketMs: 60_000, maxRows: 8 });
  expect(capped.total.succeeded.reduce((a, b) => a + b)).toBe(8);
  expect(capped.completeForMs).not.toBeNull();
  await expect(q.throughput({ windowMs: 999 })).rejects.toBeInstanceOf(InvalidOptionError);
});

test('a page of a status beside 200,000 retained jobs reads what one walk reads, on the first page and 150,000 rows deep', async () => {
  const { createStore } = await import('../../lib/engine/store/index.js');
  await fx.pool.query(`INSERT INTO pgqueue.queues (name) VALUES ('history'), ('rare') ON CONFLICT DO NOTHING`);
  // Distinct timestamps, ten jobs a millisecond: finished as a busy queue finishes them.
  await fx.pool.query(
    `INSERT INTO pgqueue.jobs (queue_name, payload, status, finished_at) SELECT 'history', '{}', 'succeeded', now() - interval '1 day' - (g / 10) * interval '1 ms' FROM generate_series(1, 200000) g`,
  );
  await fx.pool.query('ANALYZE pgqueue.jobs');
  const { rows } = await fx.pool.query(
    `SELECT finished_at::text AS ts, id::text FROM pgqueue.job_rows WHERE queue_name = 'history' ORDER BY finished_at DESC, id DESC OFFSET 150000 LIMIT 1`,
  );
  const statement = createStore('pgqueue').statements.browseSucceeded;
  const buffers = async (after: { sortAt: string; id: string } | null) => {
    const plan = await fx.pool.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, FORMAT JSON) ${statement.text}`, statement.values({ queue: 'rare', after, code: null, limit: 50, walk: BROWSE_WALK_MAX }));
    const root = (plan.rows[0]['QUERY PLAN'] as [{ Plan: Record<string, unknown> }])[0].Plan;
    const nodes: Record<string, unknown>[] = [];
    const visit = (node: Record<string, unknown>) => {
      nodes.push(node);
      for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) visit(child);
    };
    visit(root);
    expect(nodes.filter((n) => n['Node Type'] === 'Seq Scan')).toEqual([]);
    return root['Shared Hit Blocks'] as number;
  };
  const first = await buffers(null);
  const deep = await buffers({ sortAt: rows[0].ts, id: rows[0].id });
  // One walk: 2,000 index entries and their rows, about 45 buffers here; never the 150,000 before the cursor.
  expect(first).toBeLessThan(200);
  expect(deep).toBeLessThan(first + 10);
}, 60_000);
