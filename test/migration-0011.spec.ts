import { PgQueue } from '../lib/engine/index.js';
import { migrate } from '../lib/engine/migrator.js';
import { migrationsBefore, migrationTestSetup } from './support/database.js';
import { testLogger } from './support/engine.js';

/**
 * 0011 adds the queue audit trail to a live database of 0010: queues (paused ones too) and jobs stay
 * as they were, the trail starts empty, and a pause after it is recorded with who and why.
 */
const schema = 'm0011';
const setup = migrationTestSetup('migration0011', 2);

test('0011 upgrades a live database of 0010: queues and jobs unchanged, an empty trail, then pauses recorded', async () => {
  const { pool, scratch, db } = setup;
  await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0011') });
  await pool.query(`INSERT INTO ${schema}.queues (name, paused_at) VALUES ('q', NULL), ('held', now() - interval '1 hour')`);
  await pool.query(
    `INSERT INTO ${schema}.jobs (queue_name, payload, status, finished_at)
     SELECT 'q', jsonb_build_object('n', g), s::${schema}.job_status, CASE WHEN s IN ('succeeded', 'dead') THEN now() END
     FROM generate_series(1, 5) g, unnest(ARRAY['pending', 'scheduled', 'succeeded', 'dead']) s`,
  );
  const read = async () => ({
    queues: (await pool.query(`SELECT name, paused_at FROM ${schema}.queues ORDER BY name`)).rows,
    jobs: (await pool.query(`SELECT id, queue_name, payload, status, lease_token, finished_at FROM ${schema}.jobs ORDER BY id`)).rows,
  });
  const seen = await read();
  const report = await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0012') });
  expect(report.applied).toEqual(['0011_queue_audit.sql']);
  expect(await read()).toEqual(seen);
  expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.queue_audit`)).rows[0].n).toBe(0);

  const engine = new PgQueue({ connectionString: db.url, schema, logger: testLogger() });
  try {
    // A queue paused before the upgrade: its resume is recorded as a change.
    await engine.resumeQueue('held', { actor: 'ada', reason: 'after the upgrade' });
    expect(await engine.queueHistory('held')).toMatchObject([{ kind: 'resumed', wasPaused: true, actor: 'ada', reason: 'after the upgrade' }]);
    // The statements of 0010's code never name the table: their pause still works on this schema, and writes no row.
    await pool.query(`UPDATE ${schema}.queues SET paused_at = coalesce(paused_at, now()) WHERE name = 'q'`);
    expect(await engine.queueHistory('q')).toEqual([]);
  } finally {
    await engine.stop(1_000);
  }
});
