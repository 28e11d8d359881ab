import { createStore } from '../../lib/engine/store/index.js';
import { JOB_COLUMNS } from '../../lib/engine/store/finish.js';
import { claimParams } from '../support/claim-plan.js';
import { engineFixture, waitForOutcome } from '../support/engine.js';

/**
 * Migration 0014: a completion moves the job from jobs to jobs_succeeded in one fenced statement;
 * the jobs that must stay (a unique key of scope 'ever', a flow child) complete in place; every
 * read that must see a succeeded job (get, browse, stats, loss reporting) reads both; the pruner
 * deletes the history past retention with its events and effects.
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
const store = createStore('pgqueue');
beforeAll(async () => {
  fx = await engineFixture('succeededhistory');
});
afterAll(() => fx.close());

const where = async (id: string) => {
  const { rows } = await fx.pool.query(
    `SELECT (SELECT status::text FROM pgqueue.jobs WHERE id = $1) AS in_jobs, (SELECT status::text FROM pgqueue.jobs_succeeded WHERE id = $1) AS in_history`,
    [id],
  );
  return rows[0] as { in_jobs: string | null; in_history: string | null };
};

test('a completion moves the job to jobs_succeeded; get, browse, stats, events and throughput still see it', async () => {
  const q = fx.make();
  await q.declareQueues(['moved']);
  q.work('moved', async () => {});
  const job = { id: await q.enqueue('moved', { n: 1 }) };
  await q.start();
  const done = await waitForOutcome(q, job.id, 'succeeded');
  expect(done).toMatchObject({ id: job.id, status: 'succeeded', payload: { n: 1 }, attemptCount: 1 });
  expect(done.finishedAt).toBeInstanceOf(Date);
  // The worker's owner stays on the row (who finished it), the lease does not.
  expect(done.leaseOwner).not.toBeNull();
  expect(done.leaseExpiresAt).toBeNull();
  expect(await where(job.id)).toEqual({ in_jobs: null, in_history: 'succeeded' });

  const page = await q.listJobs({ queue: 'moved', status: 'succeeded' });
  expect(page.jobs.map((j) => j.id)).toEqual([job.id]);
  const stats = await q.stats();
  expect(stats.queues.find((s) => s.queue === 'moved')?.counts.recent.succeeded).toBe(1);
  expect(await q.getJobEvents(job.id)).toEqual([]);
  const throughput = await q.throughput();
  expect(JSON.stringify(throughput)).toContain('moved');
});

test('the fence still refuses stale, foreign and expired completions, reports why as before, and moves only the current one', async () => {
  await fx.insertJobs('fenced', 4);
  const client = await fx.pool.connect();
  try {
    const claimed = await store.claim(client, claimParams('fenced', 4));
    expect(claimed).toHaveLength(4);
    const [a, b, c, d] = [...claimed] as [(typeof claimed)[number], (typeof claimed)[number], (typeof claimed)[number], (typeof claimed)[number]];
    // c's lease ran out (database time decides); d is completed by someone else's name.
    await fx.pool.query(`UPDATE pgqueue.jobs SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [c.id]);
    const stale = String(Number(b.leaseToken) - 1);
    const first = await store.completeMany(client, { ids: [a.id, b.id, c.id], tokens: [a.leaseToken, stale, c.leaseToken], owner: 'explainer' });
    const byId = new Map(first.rows.map((r) => [r.id, r]));
    expect(byId.get(a.id)).toEqual({ id: a.id, token: a.leaseToken, status: 'running', ok: true });
    expect(byId.get(b.id)).toEqual({ id: b.id, token: stale, status: 'running', ok: false, reason: 'lease_lost' });
    expect(byId.get(c.id)).toEqual({ id: c.id, token: c.leaseToken, status: 'running', ok: false, reason: 'lease_lost' });
    const foreign = await store.completeMany(client, { ids: [d.id], tokens: [d.leaseToken], owner: 'someone-else' });
    expect(foreign.rows).toEqual([{ id: d.id, token: d.leaseToken, status: 'running', ok: false, reason: 'lease_lost' }]);

    expect(await where(a.id)).toEqual({ in_jobs: null, in_history: 'succeeded' });
    for (const refused of [b, c, d]) expect(await where(refused.id)).toEqual({ in_jobs: 'running', in_history: null });

    // The same completion again (a retried write whose reply was lost): refused, and reported as
    // finished by this very claim, read from the history.
    const again = await store.completeMany(client, { ids: [a.id], tokens: [a.leaseToken], owner: 'explainer' });
    expect(again.rows).toEqual([{ id: a.id, token: a.leaseToken, status: 'succeeded', ok: false, reason: 'finished' }]);
    // A heartbeat and a failure after the move are refused as finished, never as a missing job.
    expect(await store.heartbeat(client, { id: a.id, owner: 'explainer', token: a.leaseToken, leaseMs: 30_000 })).toEqual({ ok: false, reason: 'finished' });
    const fenceLoss = await store.fenceLoss(client, { id: a.id, owner: 'explainer', token: a.leaseToken });
    expect(fenceLoss).toMatchObject({ reason: 'finished', status: 'succeeded', finishedByThisClaim: true });

    // Every refusal is in the history of its job, including the moved one's.
    const events = await fx.pool.query(`SELECT job_id::text, error_code FROM pgqueue.job_events WHERE kind = 'lost_fence' ORDER BY id`);
    expect(events.rows).toEqual(
      expect.arrayContaining([
        { job_id: b.id, error_code: 'LEASE_LOST' },
        { job_id: c.id, error_code: 'LEASE_LOST' },
        { job_id: d.id, error_code: 'LEASE_LOST' },
        { job_id: a.id, error_code: 'FINISHED' },
      ]),
    );
  } finally {
    client.release();
  }
});

test("a job with a unique key of scope 'ever' stays in jobs when it succeeds: the key stays held", async () => {
  const q = fx.make();
  await q.declareQueues(['stays']);
  q.work('stays', async () => {});
  const key = { unique: { key: 'once', while: 'ever' as const } };
  const ever = await q.enqueue('stays', {}, key);
  const plain = await q.enqueue('stays', {}, { unique: { key: 'brief', while: 'unfinished' as const } });
  await q.start();
  await waitForOutcome(q, ever.id, 'succeeded');
  await waitForOutcome(q, plain.id, 'succeeded');
  expect(await where(ever.id)).toEqual({ in_jobs: 'succeeded', in_history: null });
  expect(await where(plain.id)).toEqual({ in_jobs: null, in_history: 'succeeded' });
  expect(await q.enqueue('stays', {}, key)).toEqual({ id: ever.id, deduplicated: true });
});

test('a flow child stays in jobs when it succeeds; its parent, done, moves', async () => {
  const q = fx.make();
  await q.declareQueues(['flow-parent', 'flow-child']);
  q.work('flow-child', async () => 'child result');
  q.work('flow-parent', async () => {});
  const flow = await q.enqueueFlow({ queue: 'flow-parent', payload: {}, children: [{ queue: 'flow-child', payload: {} }] });
  await q.start();
  const parent = await waitForOutcome(q, flow.id, 'succeeded');
  expect(parent.status).toBe('succeeded');
  const [child] = await q.listChildren(flow.id);
  expect(child).toBeDefined();
  expect(await where(flow.id)).toEqual({ in_jobs: null, in_history: 'succeeded' });
  expect(await where(child!.id)).toEqual({ in_jobs: 'succeeded', in_history: null });
});

test('the pruner deletes history past retention from both tables, with its events and effects, and keeps the recent', async () => {
  const q = fx.make({ pruner: { retentionMs: 3_600_000, batchSize: 2, maxBatchesPerPass: 10 } });
  await q.declareQueues(['pruned']);
  q.work('pruned', async () => {});
  const jobs = await Promise.all([1, 2, 3, 4].map(async (n) => ({ id: await q.enqueue('pruned', { n }) })));
  await q.start();
  for (const job of jobs) await waitForOutcome(q, job.id, 'succeeded');
  // One succeeded row as an older version leaves it (completed in place, in jobs).
  await fx.insertJobs('pruned', 1, { status: 'succeeded', finishedAgoSeconds: 7_200 });
  const { rows: inPlace } = await fx.pool.query(`SELECT id::text FROM pgqueue.jobs WHERE queue_name = 'pruned' AND status = 'succeeded'`);
  expect(inPlace).toHaveLength(1);
  const old = [jobs[0]!.id, jobs[1]!.id, jobs[2]!.id];
  await fx.pool.query(`UPDATE pgqueue.jobs_succeeded SET finished_at = now() - interval '2 hours' WHERE id = ANY($1::bigint[])`, [old]);
  const doomed = [...old, inPlace[0].id];
  // A trail for each: an event and an effect (no foreign key deletes them any more).
  await fx.pool.query(
    `INSERT INTO pgqueue.job_events (job_id, kind) SELECT unnest($1::bigint[]), 'lost_fence';
     `.trim(),
    [doomed],
  );
  await fx.pool.query(`INSERT INTO pgqueue.job_effects (job_id, name, idempotency_key, status, lease_token) SELECT id, 'e', 'k', 'confirmed', 1 FROM unnest($1::bigint[]) id`, [
    [...doomed, jobs[3]!.id],
  ]);

  expect(await q.pruneOnce()).toBe(4);
  for (const id of doomed) expect(await q.getJob(id)).toBeUndefined();
  expect((await q.getJob(jobs[3]!.id))?.status).toBe('succeeded');
  const trail = await fx.pool.query(
    `SELECT (SELECT count(*)::int FROM pgqueue.job_events WHERE job_id = ANY($1::bigint[])) AS events,
            (SELECT count(*)::int FROM pgqueue.job_effects WHERE job_id = ANY($1::bigint[])) AS effects,
            (SELECT count(*)::int FROM pgqueue.job_effects WHERE job_id = $2) AS kept_effects`,
    [doomed, jobs[3]!.id],
  );
  expect(trail.rows[0]).toEqual({ events: 0, effects: 0, kept_effects: 1 });
  expect(await q.pruneOnce()).toBe(0);
});

test("an operator's delete of a moved job removes it with its trail; cancel and replay report it as succeeded", async () => {
  const q = fx.make();
  await q.declareQueues(['operated']);
  q.work('operated', async () => {});
  const job = { id: await q.enqueue('operated', {}) };
  const other = { id: await q.enqueue('operated', {}) };
  await q.start();
  await waitForOutcome(q, job.id, 'succeeded');
  await waitForOutcome(q, other.id, 'succeeded');
  await expect(q.cancel(job.id)).rejects.toMatchObject({ code: expect.not.stringMatching(/NOT_FOUND/) });
  const replayed = await q.replayMany([job.id]);
  expect(replayed).toEqual([{ id: job.id, replayed: false, status: 'succeeded' }]);
  await fx.pool.query(`INSERT INTO pgqueue.job_events (job_id, kind) VALUES ($1, 'lost_fence')`, [job.id]);
  await q.discard(job.id, { delete: true });
  expect(await q.getJob(job.id)).toBeUndefined();
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_events WHERE job_id = $1`, [job.id])).rows[0].n).toBe(0);
  expect((await q.getJob(other.id))?.status).toBe('succeeded');
});

test("completion's column list is every column of jobs and of jobs_succeeded, in order (a migration that adds one must add it to all three)", async () => {
  const columns = async (table: string) =>
    (await fx.pool.query<{ c: string }>(`SELECT column_name AS c FROM information_schema.columns WHERE table_schema = 'pgqueue' AND table_name = $1 ORDER BY ordinal_position`, [table])).rows.map((r) => r.c);
  expect(await columns('jobs')).toEqual([...JOB_COLUMNS]);
  expect(await columns('jobs_succeeded')).toEqual([...JOB_COLUMNS]);
  expect(await columns('job_rows')).toEqual([...JOB_COLUMNS]);
});
