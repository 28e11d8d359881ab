import { createStore } from '../../lib/engine/store/index.js';
import { claimParams, planNodes, type PlanNode } from '../support/claim-plan.js';
import { engineFixture } from '../support/engine.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
const store = createStore('pgqueue');
beforeAll(async () => {
  fx = await engineFixture('completemany');
});
afterAll(() => fx.close());

/**
 * A batch completion reads jobs again only for the rows it refused: an applied row's outcome and
 * status come from the UPDATE itself. Before, the audit CTE and the report each probed jobs once
 * per input row, applied or not (three probes per completed job instead of one).
 */
test('complete-many probes jobs once per applied row and once more per refused row, and records each refusal', async () => {
  const batch = 40;
  // A table of some size, analyzed: its plans probe by primary key, as in production.
  await fx.insertJobs('cm-other', 5_000);
  await fx.insertJobs('cm', batch);
  await fx.pool.query(`ANALYZE pgqueue.jobs`);
  const client = await fx.pool.connect();
  try {
    await client.query('BEGIN');
    const claimed = await store.claim(client, claimParams('cm', batch));
    expect(claimed).toHaveLength(batch);
    // One stale token among them: refused, audited, reported as a lost lease with the row's status.
    const tokens = claimed.map((r, i) => (i === 7 ? String(Number(r.leaseToken) - 1) : r.leaseToken));
    const ids = claimed.map((r) => r.id);
    const complete = store.statements.completeMany;
    const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${complete.text}`, complete.values({ ids, tokens, owner: 'explainer' }));
    const nodes = planNodes(rows[0]['QUERY PLAN'][0].Plan as PlanNode);
    const probes = nodes
      .filter((n) => n['Relation Name'] === 'jobs' && n['Node Type'] !== 'ModifyTable')
      .reduce((sum, n) => sum + (n['Actual Loops'] ?? 1), 0);
    // The DELETE's probes (one per id, a single = ANY scan), the kept-in-place UPDATE's (a single
    // scan of the ids the DELETE did not take: here the stale one) and one per refused row.
    expect(probes).toBeLessThanOrEqual(3);
    const read = nodes
      .filter((n) => n['Relation Name'] === 'jobs' && n['Node Type'] !== 'ModifyTable')
      .reduce((sum, n) => sum + (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1) + (n['Rows Removed by Filter'] ?? 0), 0);
    expect(read).toBeLessThanOrEqual(batch + 2);
    await client.query('ROLLBACK');

    await client.query('BEGIN');
    const again = await store.claim(client, claimParams('cm', batch));
    const stale = again.map((r, i) => (i === 7 ? String(Number(r.leaseToken) - 1) : r.leaseToken));
    const done = await store.completeMany(client, { ids: again.map((r) => r.id), tokens: stale, owner: 'explainer' });
    expect(done.rows).toHaveLength(batch);
    const refused = done.rows.filter((r) => !r.ok);
    expect(refused).toEqual([{ id: again[7]!.id, token: stale[7], status: 'running', ok: false, reason: 'lease_lost' }]);
    expect(done.rows.filter((r) => r.ok).every((r) => r.status === 'running')).toBe(true);
    const events = await client.query(`SELECT job_id::text, kind, from_status::text, lease_token::text, error_code FROM pgqueue.job_events WHERE worker = 'explainer'`);
    expect(events.rows).toEqual([{ job_id: again[7]!.id, kind: 'lost_fence', from_status: 'running', lease_token: stale[7], error_code: 'LEASE_LOST' }]);
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
});
