#!/usr/bin/env node
// Probe: the plan of the statements that finish a batch of keyed jobs (complete-many, then
// promote-key-heads in the same transaction) with many ordering keys in the queue. Their cost must
// grow with the batch, not with the number of keys or of waiting jobs (docs/claim-plans.md).
//
//   DATABASE_URL=postgres://… node bench/probes/key-promotion-plan.mjs [keys=10000] [jobs=100000] [batch=20]
//
// Jobs go round-robin over the keys (jobs = keys: every key is forgotten when its job finishes).
// Statistics are taken after the enqueue; STALE=1 takes them before it, while the queue was empty.
// Uses a database of its own (dropped at the end) and the statement texts of dist/engine/sql.js.
import { createQueries } from '../../dist/engine/sql.js';
import { withClient } from '../lib/db.mjs';
import { PROBE_QUEUE, PROBE_SCHEMA as schema, withProbeQueue } from '../lib/probe.mjs';

const [keys, jobs, batch] = [Number(process.argv[2] ?? 10_000), Number(process.argv[3] ?? 100_000), Number(process.argv[4] ?? 20)];
const fill = { jobs, optionsOf: (i) => ({ orderingKey: `k${i % keys}` }), analyzeBeforeFill: Boolean(process.env.STALE) };
await withProbeQueue(fill, async (db) => {
  const queries = createQueries(schema);
  await withClient(db.url, async (c) => {
    await c.query('BEGIN');
    // The worker's claim, then the completer's statements, as the engine sends them; rolled back.
    const { rows: claimed } = await c.query(queries.claim.text, [PROBE_QUEUE, 'probe', batch, 30_000, 900_000, 5, 1_000, 600_000, 0]);
    const explain = async (label, statement, values) => {
      const started = performance.now();
      const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) ${statement.text}`, values);
      console.log(`=== ${label}: ${(performance.now() - started).toFixed(1)} ms round trip`);
      console.log(rows.map((r) => r['QUERY PLAN']).join('\n'));
    };
    const completion = [claimed.map((r) => r.id), claimed.map((r) => r.lease_token), 'probe'];
    await explain(`complete-many of ${claimed.length}`, queries.completeMany, completion);
    // EXPLAIN ANALYZE ran it: the keys it released are the claimed jobs' keys.
    const { rows: released } = await c.query(`SELECT array_agg(queue_name) AS q, array_agg(ordering_key) AS k FROM ${schema}.jobs WHERE id = ANY ($1)`, [completion[0]]);
    await explain(`promote-key-heads of ${claimed.length} keys (${keys} keys, ${jobs} jobs)`, queries.promoteKeyHeads, [released[0].q, released[0].k, 'probe']);
    await c.query('ROLLBACK');
  });
});
