import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { createStore } from '../../../lib/engine/store/index.js';
import { median } from '../../support/crash-harness.js';
import { explainClaim, explainStatement, timeClaims, type ClaimPlan } from '../../support/claim-plan.js';
import { engineFixture } from '../../support/engine.js';

/**
 * The reference's crash test 10: a backlog large enough to matter. In a database of its own, a
 * million ready jobs beside a million delayed ones of a higher priority (the case the obvious index
 * cannot range-scan past): the claim's plan and buffers against a 10,000-job backlog, an empty
 * claim beside the delayed million, and the recovery of 10,000 expired leases through the reaper's
 * bounded passes. (docs/claim-plans.md shows the full plans.)
 */
let fx: Awaited<ReturnType<typeof engineFixture>>;
const store = createStore('pgqueue');
let client: pg.Client;

beforeAll(async () => {
  fx = await engineFixture('crashbacklog');
  client = new pg.Client({ connectionString: fx.url });
  await client.connect();
}, 120_000);
afterAll(async () => {
  await client?.end();
  await fx?.close();
});

const LIMIT = 20; // a claim's batch: concurrency + prefetch of the default handler
const REPEATS = 31;

const summary = (plan: ClaimPlan, times: number[]) => ({
  claimableBuffers: plan.claimableBuffers,
  jobsBuffers: plan.jobsBuffers,
  explainMs: round(plan.ms),
  medianClaimMs: round(median(times)),
  p90ClaimMs: round([...times].sort((a, b) => a - b)[Math.floor(times.length * 0.9)]!),
});

test('10. a backlog of 1,000,000 ready + 1,000,000 delayed jobs: flat claims on the claimable index, and 10,000 expired leases recovered in bounded batches', async () => {
  // Baseline: a 10,000-job ready backlog.
  await fx.insertJobs('backlog', 10_000);
  await client.query('ANALYZE pgqueue.jobs');
  const smallPlan = await explainClaim(client, store, 'backlog', LIMIT);
  const smallTimes = await timeClaims(client, store, 'backlog', LIMIT, REPEATS);

  // Two million more rows in one generate_series insert: every other one ready now (priority 0),
  // the rest delayed by an hour at a *higher* priority, the case an index on (queue, priority,
  // available_at) cannot range-scan past.
  let started = performance.now();
  await fx.pool.query(
    `INSERT INTO pgqueue.jobs (queue_name, payload, status, priority, available_at)
     SELECT 'backlog', jsonb_build_object('n', g),
            CASE WHEN g % 2 = 0 THEN 'pending' ELSE 'scheduled' END::pgqueue.job_status,
            CASE WHEN g % 2 = 0 THEN 0 ELSE 10 END,
            CASE WHEN g % 2 = 0 THEN now() ELSE now() + interval '1 hour' END
     FROM generate_series(1, 2000000) g`,
  );
  const insertMs = performance.now() - started;
  started = performance.now();
  await client.query('ANALYZE pgqueue.jobs');
  const analyzeMs = performance.now() - started;
  const counts = (await fx.pool.query<{ status: string; n: number }>(`SELECT status::text, count(*)::int AS n FROM pgqueue.job_rows GROUP BY 1`)).rows;
  expect(Object.fromEntries(counts.map((r) => [r.status, r.n]))).toEqual({ pending: 1_010_000, scheduled: 1_000_000 });

  const bigPlan = await explainClaim(client, store, 'backlog', LIMIT);
  const bigTimes = await timeClaims(client, store, 'backlog', LIMIT, REPEATS);

  for (const plan of [smallPlan, bigPlan]) {
    // The claim walks the claimable index; no sequential scan, and the delayed rows (outside the
    // index) are never read: the scan returns just the batch and filters nothing out.
    expect(plan.scans).toContain('Index Scan on jobs_claimable_idx');
    expect(plan.scans.some((s) => s.startsWith('Seq Scan'))).toBe(false);
    expect(plan.scans.some((s) => s.includes('jobs_scheduled_idx'))).toBe(false);
    expect(plan.indexRows).toBe(LIMIT);
    expect(plan.rowsRemovedByFilter).toBe(0);
  }
  // A queue with nothing due beside the delayed million (all of the higher priority): an empty
  // claim reads a handful of index buffers, not the delayed rows.
  await fx.insertJobs('idle', 1, { status: 'scheduled', priority: 10, availableInSeconds: 3_600 });
  const emptyPlan = await explainClaim(client, store, 'idle', LIMIT);
  expect(emptyPlan.indexRows).toBe(0);
  expect(emptyPlan.claimableBuffers).toBeLessThanOrEqual(10);
  expect(emptyPlan.ms).toBeLessThan(5);

  // Flat: a million ready and a million delayed rows cost the claim what 10,000 did, in buffers
  // (the steady measure; at most a deeper index level) and in median time (noisy: a generous bound).
  expect(bigPlan.claimableBuffers).toBeLessThanOrEqual(smallPlan.claimableBuffers + 5);
  expect(median(bigTimes)).toBeLessThan(Math.max(3 * median(smallTimes), median(smallTimes) + 5));

  // Recovery: 10,000 of the ready jobs were claimed by workers that then vanished; their leases
  // expired a second ago. The reaper recovers them in passes of at most batchSize x maxBatchesPerPass.
  await fx.pool.query(
    `UPDATE pgqueue.jobs SET status = 'running', attempt_count = 1, lease_token = lease_token + 1, lease_owner = 'vanished-' || (id % 8),
       claimed_at = now() - interval '1 minute', lease_expires_at = now() - interval '1 second', deadline_at = now() + interval '1 hour',
       max_attempts = 5, backoff_base_ms = 1000, backoff_max_ms = 60000
     WHERE id IN (SELECT id FROM pgqueue.jobs WHERE status = 'pending' ORDER BY id DESC LIMIT 10000)`,
  );
  const reapPlan = await explainStatement(client, store.statements.reapExpired, store.statements.reapExpired.values({ limit: 500, setAside: [], only: null }), 'jobs_running_idx');
  expect(reapPlan.scans).toContain('Index Scan on jobs_running_idx');
  expect(reapPlan.scans.some((s) => s.startsWith('Seq Scan'))).toBe(false);

  const reaper = { batchSize: 500, maxBatchesPerPass: 5 };
  const engine = fx.make({ reaper });
  const passes: { reaped: number; batches: number; ms: number }[] = [];
  const recoveryStarted = performance.now();
  for (;;) {
    const passStarted = performance.now();
    const { reaped, batches } = await engine.reapOnce();
    passes.push({ reaped, batches, ms: round(performance.now() - passStarted) });
    if (reaped === 0 || passes.length > 20) break;
  }
  const recoveryMs = performance.now() - recoveryStarted;
  const perPass = reaper.batchSize * reaper.maxBatchesPerPass;
  expect(passes.map((p) => p.reaped)).toEqual([perPass, perPass, perPass, perPass, 0]);
  for (const pass of passes) expect(pass.batches).toBeLessThanOrEqual(reaper.maxBatchesPerPass);
  const events = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_events WHERE kind = 'lease_expired'`);
  expect(events.rows[0].n).toBe(10_000);
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE status = 'running'`)).rows[0].n).toBe(0);

  console.log(
    JSON.stringify({
      test: 'backlog',
      rows: { ready: 1_010_000, delayed: 1_000_000 },
      insertMs: Math.round(insertMs),
      analyzeMs: Math.round(analyzeMs),
      claim: {
        limit: LIMIT,
        repeats: REPEATS,
        backlog10k: summary(smallPlan, smallTimes),
        backlog2M: summary(bigPlan, bigTimes),
        emptyBeside2M: { claimableBuffers: emptyPlan.claimableBuffers, explainMs: round(emptyPlan.ms) },
      },
      recovery: {
        expiredLeases: 10_000,
        ...reaper,
        planBuffers: reapPlan.jobsBuffers,
        passes,
        maxBatchMs: round(Math.max(...passes.filter((p) => p.batches > 0).map((p) => p.ms / p.batches))),
        totalMs: Math.round(recoveryMs),
      },
    }),
  );
  // Each bounded pass is short: a pass of 5 batches of 500 well under the default 5 s interval.
  for (const pass of passes) expect(pass.ms).toBeLessThan(5_000);
}, 600_000);

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}
