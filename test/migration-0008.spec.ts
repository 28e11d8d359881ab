import pg from 'pg';
import { migrate } from '../lib/engine/migrator.js';
import { migrationsBefore, migrationTestSetup } from './support/database.js';

/** 0008 adds payload_version to a live database: no row changes, jobs queued before it have no version (version 1 to a handler). */
const schema = 'm0008';

const setup = migrationTestSetup('migration0008', 2);

test('0008 upgrades a live database of 0007: every job stays as it was, with no version', async () => {
  const { pool, scratch } = setup;
  const before = await migrationsBefore(scratch, '0008');
  await migrate(pool, { schema, migrationsDir: before });
  await pool.query(`INSERT INTO ${schema}.queues (name) VALUES ('q')`);
  await pool.query(
    `INSERT INTO ${schema}.jobs (queue_name, payload, status, lease_owner, lease_expires_at, deadline_at, finished_at)
     SELECT 'q', jsonb_build_object('n', g), s::${schema}.job_status,
            CASE WHEN s = 'running' THEN 'w' END, CASE WHEN s = 'running' THEN now() + interval '1 minute' END,
            CASE WHEN s = 'running' THEN now() + interval '1 minute' END, CASE WHEN s IN ('succeeded', 'dead') THEN now() END
     FROM generate_series(1, 5) g, unnest(ARRAY['pending', 'running', 'scheduled', 'succeeded', 'dead']) s`,
  );
  const read = async () => (await pool.query(`SELECT id, queue_name, payload, status, lease_token, lease_owner, finished_at FROM ${schema}.jobs ORDER BY id`)).rows;
  const seen = await read();
  // Up to 0008 only: later migrations have tests of their own.
  const report = await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0009') });
  expect(report.applied).toEqual(['0008_payload_versions.sql']);
  expect(await read()).toEqual(seen);
  expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.jobs WHERE payload_version IS NULL`)).rows[0].n).toBe(25);
});
