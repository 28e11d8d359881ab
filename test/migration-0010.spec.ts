import { migrate } from '../lib/engine/migrator.js';
import { migrationsBefore, migrationTestSetup } from './support/database.js';

/**
 * 0010 (flows) upgrades a live database of 0009's schema: every job stays as it was, in no flow
 * (no parent, not waiting, no result), and the reaper's and claim's indexes are untouched.
 */
const schema = 'm0010';
const setup = migrationTestSetup('migration0010', 2);

test('0010 upgrades a live database of 0009: no job changes, none is in a flow', async () => {
  const { pool, scratch } = setup;
  await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0010') });
  await pool.query(`INSERT INTO ${schema}.queues (name) VALUES ('q')`);
  await pool.query(
    `INSERT INTO ${schema}.jobs (queue_name, payload, status, lease_owner, lease_expires_at, deadline_at, finished_at)
     SELECT 'q', jsonb_build_object('n', g), s::${schema}.job_status,
            CASE WHEN s = 'running' THEN 'w' END, CASE WHEN s = 'running' THEN now() + interval '1 minute' END,
            CASE WHEN s = 'running' THEN now() + interval '1 minute' END, CASE WHEN s IN ('succeeded', 'dead') THEN now() END
     FROM generate_series(1, 5) g, unnest(ARRAY['pending', 'running', 'scheduled', 'succeeded', 'dead']) s`,
  );
  const read = async () => (await pool.query(`SELECT id, queue_name, payload, status, lease_token, lease_owner, available_at, finished_at FROM ${schema}.jobs ORDER BY id`)).rows;
  const seen = await read();
  const report = await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0011') });
  expect(report.applied).toEqual(['0010_flows.sql']);
  expect(await read()).toEqual(seen);
  const flows = await pool.query(`SELECT count(*)::int AS n FROM ${schema}.jobs WHERE parent_id IS NULL AND NOT awaiting_children AND NOT fail_on_dead_child AND result IS NULL`);
  expect(flows.rows[0].n).toBe(25);
  const indexes = await pool.query(`SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'jobs'`, [schema]);
  expect(indexes.rows.map((r) => r.indexname)).toEqual(expect.arrayContaining(['jobs_flow_children_idx', 'jobs_flow_waiting_idx', 'jobs_running_idx', 'jobs_claimable_idx']));
});
