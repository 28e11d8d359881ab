import pg from 'pg';
import { createQueries } from '../../lib/engine/sql.js';
import { explainClaim } from '../support/claim-plan.js';
import { engineFixture } from '../support/engine.js';

/**
 * Claim cost must not depend on the delayed backlog. The obvious index,
 * (queue_name, priority DESC, available_at, id) WHERE status = 'pending', cannot range-scan
 * `available_at <= now()` across priorities: with a million delayed jobs at a higher priority,
 * every claim would walk them all. Here delayed jobs are 'scheduled', outside that index.
 */
let fx: Awaited<ReturnType<typeof engineFixture>>;
const queries = createQueries('pgqueue');
let client: pg.Client;

/** EXPLAIN (ANALYZE, BUFFERS) of the real claim statement, rolled back (test/support/claim-plan.ts). */
const explain = (queue: string, limit: number) => explainClaim(client, queries, queue, limit);

beforeAll(async () => {
  fx = await engineFixture('backlog');
  client = new pg.Client({ connectionString: fx.url });
  await client.connect();
}, 120_000);
afterAll(async () => {
  await client.end();
  await fx.close();
});

test('claims read only claimable rows: 10k ready vs 1,000 ready beside 1,000,000 delayed jobs of higher priority', async () => {
  // Baseline: a 10,000-job ready backlog.
  await fx.insertJobs('small', 10_000);
  await client.query('ANALYZE pgqueue.jobs');
  const baseline = await explain('small', 20);

  // The inverted case: 1,000,000 delayed jobs at a higher priority than 1,000 due ones.
  const started = Date.now();
  await fx.insertJobs('big', 1_000);
  await fx.insertJobs('big', 1_000_000, { status: 'scheduled', priority: 10, availableInSeconds: 3_600 });
  await client.query('ANALYZE pgqueue.jobs');
  const insertMs = Date.now() - started;

  const inverted = await explain('big', 20);
  // A queue with nothing due beside the delayed million: an empty claim.
  await fx.insertJobs('idle', 1, { status: 'scheduled', priority: 10, availableInSeconds: 3_600 });
  const empty = await explain('idle', 20);

  console.log(JSON.stringify({ insertMs, baseline, inverted, empty }, (key, value) => (key === 'nodes' ? undefined : value)));
  for (const plan of [baseline, inverted, empty]) {
    expect(plan.scans).toContain('Index Scan on jobs_claimable_idx');
    expect(plan.scans.some((s) => s.startsWith('Seq Scan'))).toBe(false);
  }
  // Flat: the same order of buffers as the small backlog, and an empty claim reads a handful.
  expect(inverted.claimableBuffers).toBeLessThanOrEqual(baseline.claimableBuffers + 5);
  expect(inverted.claimableBuffers).toBeLessThanOrEqual(2 * 20 + 5);
  expect(empty.claimableBuffers).toBeLessThanOrEqual(10);
  expect(empty.ms).toBeLessThan(5);
}, 300_000);
