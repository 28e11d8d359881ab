#!/usr/bin/env node
// Probe: the plan and time of the engine's batched completion (complete-many) when many jobs are
// running and the statistics are from a moment when none were (as after a bulk enqueue + ANALYZE),
// under a generic plan (what a prepared statement uses after 5 executions) and a custom one.
//
//   DATABASE_URL=postgres://… node bench/probes/complete-many-plan.mjs [jobs=40000] [running=30000] [batch=400]
//
// Uses a database of its own (dropped at the end) and the completeMany text of dist/engine/store/.
import { createStore } from '../../dist/engine/store/index.js';
import { withClient } from '../lib/db.mjs';
import { PROBE_SCHEMA as schema, withProbeQueue } from '../lib/probe.mjs';

const [jobs, running, batch] = [Number(process.argv[2] ?? 40_000), Number(process.argv[3] ?? 30_000), Number(process.argv[4] ?? 400)];
// Statistics: every job pending, none running.
await withProbeQueue({ jobs }, async (db) => {
  await withClient(db.url, async (c) => {
    // Claim `running` jobs the way the claim does (status, owner, token, lease, deadline), in one go.
    const { rows } = await c.query(
      `UPDATE ${schema}.jobs SET status = 'running', lease_owner = 'probe', lease_token = lease_token + 1,
              attempt_count = attempt_count + 1, claimed_at = now(), max_attempts = 5, max_runtime_ms = 900000,
              backoff_base_ms = 1000, backoff_max_ms = 600000,
              deadline_at = now() + interval '15 minutes', lease_expires_at = now() + interval '30 seconds'
       WHERE id IN (SELECT id FROM ${schema}.jobs ORDER BY id LIMIT $1)
       RETURNING id::text AS id, lease_token::text AS token`,
      [running],
    );
    const sample = rows.slice(0, batch);
    const args = `'{${sample.map((r) => r.id).join(',')}}', '{${sample.map((r) => r.token).join(',')}}', 'probe'`;
    const text = createStore(schema).statements.completeMany.text;
    console.log(`jobs=${jobs} running=${running} batch=${batch}; statistics taken while every job was pending`);
    for (const mode of ['force_generic_plan', 'force_custom_plan']) {
      await c.query(`SET plan_cache_mode = ${mode}`);
      await c.query('BEGIN');
      await c.query(`PREPARE complete_many AS ${text}`);
      const t0 = performance.now();
      const plan = await c.query(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE complete_many(${args})`);
      const ms = performance.now() - t0;
      await c.query('ROLLBACK');
      await c.query('DEALLOCATE complete_many');
      console.log(`\n=== ${mode}: ${ms.toFixed(1)} ms`);
      console.log(plan.rows.map((r) => r['QUERY PLAN']).join('\n'));
    }
  });
});
