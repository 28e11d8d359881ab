import pg from 'pg';
import { migrate } from '../lib/engine/migrator.js';
import { migrationsBefore, migrationTestSetup } from './support/database.js';

/**
 * 0009 (flow control) upgrades a live database of 0008's schema: every job stays as it was, with no
 * group and no limits (so every queue keeps the plain claim), the reaper's index is replaced by one
 * that serves the same scan, and a statement an older process prepared before the migration still
 * runs after it.
 */

const schema = 'm0009';

const setup = migrationTestSetup('migration0009', 4);

test('0009 upgrades a live database of 0008: no job changes, no queue gets flow control, old statements still run', async () => {
  const { pool, scratch } = setup;
  await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0009') });
  await pool.query(`INSERT INTO ${schema}.queues (name) VALUES ('q'), ('paused')`);
  await pool.query(`UPDATE ${schema}.queues SET paused_at = now() WHERE name = 'paused'`);
  await pool.query(
    `INSERT INTO ${schema}.jobs (queue_name, payload, status, lease_owner, lease_expires_at, deadline_at, finished_at)
     SELECT 'q', jsonb_build_object('n', g), s::${schema}.job_status,
            CASE WHEN s = 'running' THEN 'w' END, CASE WHEN s = 'running' THEN now() - interval '1 minute' END,
            CASE WHEN s = 'running' THEN now() + interval '1 minute' END, CASE WHEN s IN ('succeeded', 'dead') THEN now() END
     FROM generate_series(1, 5) g, unnest(ARRAY['pending', 'running', 'scheduled', 'succeeded', 'dead']) s`,
  );
  const read = async () =>
    (await pool.query(`SELECT id, queue_name, payload, status, lease_token, lease_owner, lease_expires_at, finished_at FROM ${schema}.jobs ORDER BY id`)).rows;
  const seen = await read();
  // An older process's reaper scan, prepared on its connection before the migration.
  const old = await pool.connect();
  const reaperScan = {
    name: 'old-reaper-scan',
    text: `SELECT id FROM ${schema}.jobs WHERE status = 'running' AND lease_expires_at <= now() ORDER BY lease_expires_at LIMIT 10 FOR UPDATE SKIP LOCKED`,
  };
  try {
    expect((await old.query(reaperScan)).rowCount).toBe(5);

    // Up to 0009 only: later files are their own tests' (as 0008's test stops before 0009).
    const report = await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0010') });
    expect(report.applied).toEqual(['0009_flow_control.sql']);
    expect(await read()).toEqual(seen);
    const columns = await pool.query(`SELECT count(*)::int AS n FROM ${schema}.jobs WHERE group_key IS NULL AND rate_limited_count = 0`);
    expect(columns.rows[0].n).toBe(25);
    const queues = await pool.query(`SELECT name, flow, paused_at IS NOT NULL AS paused, global_concurrency, group_fairness FROM ${schema}.queues ORDER BY name`);
    expect(queues.rows).toEqual([
      { name: 'paused', flow: false, paused: true, global_concurrency: null, group_fairness: false },
      { name: 'q', flow: false, paused: false, global_concurrency: null, group_fairness: false },
    ]);

    // The old statement runs again on the connection that prepared it.
    expect((await old.query(reaperScan)).rowCount).toBe(5);
  } finally {
    old.release();
  }
  const indexes = await pool.query(`SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'jobs' ORDER BY 1`, [schema]);
  const names = indexes.rows.map((r) => r.indexname as string);
  expect(names).toContain('jobs_running_idx');
  expect(names).toContain('jobs_claimable_group_idx');
  expect(names).not.toContain('jobs_expired_lease_idx');
  // The reaper's scan can be served by the running jobs' index (25 rows: the planner would rather
  // read the table; test/serial/crash/backlog-recovery.spec.ts checks the plan at scale).
  const client = await pool.connect();
  try {
    await client.query('SET enable_seqscan = off');
    const plan = await client.query(`EXPLAIN (FORMAT JSON) SELECT id FROM ${schema}.jobs WHERE status = 'running' AND lease_expires_at <= now() ORDER BY lease_expires_at LIMIT 10`);
    expect(JSON.stringify(plan.rows[0])).toContain('jobs_running_idx');
  } finally {
    client.release();
  }
});
