#!/usr/bin/env node
// Probe: the plan of the statements that finish a batch of keyed jobs (complete-many, then
// promote-key-heads in the same transaction) with many ordering keys in the queue. Their cost must
// grow with the batch, not with the number of keys or of waiting jobs (docs/claim-plans.md).
//
//   DATABASE_URL=postgres://… node bench/probes/key-promotion-plan.mjs [keys=10000] [jobs=100000] [batch=20]
//
// Jobs go round-robin over the keys (jobs = keys: every key is forgotten when its job finishes).
// Statistics are taken after the enqueue; STALE=1 takes them before it, while the queue was empty.
// Uses a database of its own (dropped at the end) and the statements of dist/engine/store/.
import { createStore } from '../../dist/engine/store/index.js';
import { withClient } from '../lib/db.mjs';
import { PROBE_QUEUE, PROBE_SCHEMA as schema, withProbeQueue } from '../lib/probe.mjs';

const [keys, jobs, batch] = [Number(process.argv[2] ?? 10_000), Number(process.argv[3] ?? 100_000), Number(process.argv[4] ?? 20)];
const fill = { jobs, optionsOf: (i) => ({ orderingKey: `k${i % keys}` }), analyzeBeforeFill: Boolean(process.env.STALE) };
await withProbeQueue(fill, async (db) => {
  const { statements } = createStore(schema);
  await withClient(db.url, async (c) => {
    await c.query('BEGIN');
    // The worker's claim, then the completer's statements, as the engine sends them; rolled back.
    const claim = { queue: PROBE_QUEUE, owner: 'probe', limit: batch, leaseMs: 30_000, maxRuntimeMs: 900_000, maxAttempts: 5, backoffBaseMs: 1_000, backoffMaxMs: 600_000, oldestFirst: 0 };
    const { rows: claimed } = await c.query(statements.claim.text, statements.claim.values(claim));
    const explain = async (label, statement, values) => {
      const started = performance.now();
      const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) ${statement.text}`, values);
      console.log(`=== ${label}: ${(performance.now() - started).toFixed(1)} ms round trip`);
      console.log(rows.map((r) => r['QUERY PLAN']).join('\n'));
    };
    const ids = claimed.map((r) => r.id);
    await explain(`complete-many of ${claimed.length}`, statements.completeMany, statements.completeMany.values({ ids, tokens: claimed.map((r) => r.lease_token), owner: 'probe' }));
    // EXPLAIN ANALYZE ran it: the keys it released are the claimed jobs' keys.
    const { rows: released } = await c.query(`SELECT array_agg(queue_name) AS q, array_agg(ordering_key) AS k FROM ${schema}.jobs WHERE id = ANY ($1)`, [ids]);
    await explain(`promote-key-heads of ${claimed.length} keys (${keys} keys, ${jobs} jobs)`, statements.promoteKeyHeads, statements.promoteKeyHeads.values({ keys: { queues: released[0].q, names: released[0].k, deferred: 0 }, channel: 'probe' }));
    await c.query('ROLLBACK');
  });
});
