import pg from 'pg';
import { createQueries } from '../../lib/engine/sql.js';
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

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Relation Name'?: string;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

/** EXPLAIN (ANALYZE, BUFFERS) of the real claim statement, rolled back so nothing changes. */
async function explainClaim(queue: string, limit: number) {
  await client.query('BEGIN');
  try {
    const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${queries.claim.text}`, [
      queue, 'explainer', limit, 30_000, 60_000, 5, 1_000, 60_000,
    ]);
    const [{ Plan, 'Execution Time': ms }] = rows[0]['QUERY PLAN'] as [{ Plan: PlanNode; 'Execution Time': number }];
    const all = nodes(Plan);
    const scans = all.filter((n) => n['Relation Name'] === 'jobs' && n['Node Type'] !== 'ModifyTable');
    return {
      ms,
      scans: scans.map((n) => `${n['Node Type']}${n['Index Name'] ? ` on ${n['Index Name']}` : ''}`),
      // Buffers of the walk of the claimable index (index pages plus the candidates' heap pages).
      claimableBuffers: scans
        .filter((n) => n['Index Name'] === 'jobs_claimable_idx')
        .reduce((sum, n) => sum + n['Shared Hit Blocks'] + n['Shared Read Blocks'], 0),
    };
  } finally {
    await client.query('ROLLBACK');
  }
}

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
  const baseline = await explainClaim('small', 20);

  // The inverted case: 1,000,000 delayed jobs at a higher priority than 1,000 due ones.
  const started = Date.now();
  await fx.insertJobs('big', 1_000);
  await fx.insertJobs('big', 1_000_000, { status: 'scheduled', priority: 10, availableInSeconds: 3_600 });
  await client.query('ANALYZE pgqueue.jobs');
  const insertMs = Date.now() - started;

  const inverted = await explainClaim('big', 20);
  // A queue with nothing due beside the delayed million: an empty claim.
  await fx.insertJobs('idle', 1, { status: 'scheduled', priority: 10, availableInSeconds: 3_600 });
  const empty = await explainClaim('idle', 20);

  console.log(JSON.stringify({ insertMs, baseline, inverted, empty }));
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
