import { PgQueue } from '../lib/engine/index.js';
import { engineInternals } from '../lib/engine/internals.js';
import { migrate } from '../lib/engine/migrator.js';
import { testLogger } from './support/engine.js';
import { migrationsBefore, migrationTestSetup } from './support/database.js';

/**
 * 0013 (recurring jobs) upgrades a live database of the previous schema: it only adds tables, so
 * every job stays as it was, a statement an older process prepared before the migration still
 * runs after it, and the first tick's job takes its id from the jobs' own identity sequence, after
 * the ids the older process gave.
 */

const schema = 'm0013';

const setup = migrationTestSetup('migration0013', 4);

test('0013 upgrades a live database: no job changes, old statements still run, a schedule ticks into the same id sequence', async () => {
  const { pool, scratch, db } = setup;
  await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0013') });
  await pool.query(`INSERT INTO ${schema}.queues (name) VALUES ('q')`);
  await pool.query(
    `INSERT INTO ${schema}.jobs (queue_name, payload, status, finished_at)
     SELECT 'q', jsonb_build_object('n', g), s::${schema}.job_status, CASE WHEN s IN ('succeeded', 'dead') THEN now() END
     FROM generate_series(1, 5) g, unnest(ARRAY['pending', 'scheduled', 'succeeded', 'dead']) s`,
  );
  const read = async () => (await pool.query(`SELECT id, queue_name, payload, status, lease_token, finished_at FROM ${schema}.jobs ORDER BY id`)).rows;
  const seen = await read();
  // An older process's enqueue, prepared on its connection before the migration.
  const old = await pool.connect();
  const oldEnqueue = { name: 'old-enqueue', text: `INSERT INTO ${schema}.jobs (queue_name, payload) VALUES ('q', $1) RETURNING id::text`, values: [{ old: true }] };
  try {
    await old.query(oldEnqueue);
    const report = await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0014') });
    expect(report.applied).toEqual(['0013_schedules.sql']);
    const after = await read();
    expect(after.slice(0, seen.length)).toEqual(seen);
    const { rows } = await old.query(oldEnqueue);
    const lastOldId = Number(rows[0].id);

    // The new tables, empty; the jobs table untouched (no column, no index of its own).
    const tables = await pool.query(`SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, [schema]);
    expect(tables.rows.map((r) => r.tablename)).toEqual(expect.arrayContaining(['schedules', 'schedule_ticks', 'schedule_declarations']));
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.schedules`)).rows[0].n).toBe(0);

    // A schedule on the upgraded database: its tick's job follows the older process's ids.
    // 'auto': the engine applies the later migrations (0014 on) itself.
    const engine = new PgQueue({ connectionString: db.url, schema, logger: testLogger(), migrations: 'auto' });
    try {
      await engine.migrate();
      await engine.schedules.upsert({ name: 'upgraded', queue: 'q', cron: '* * * * * *' });
      await pool.query(`UPDATE ${schema}.schedules SET next_tick_at = date_trunc('second', now()) WHERE name = 'upgraded'`);
      await engineInternals(engine).ticker!.runOnce();
      const ticked = await pool.query(`SELECT job_id::text FROM ${schema}.schedule_ticks WHERE schedule_name = 'upgraded'`);
      expect(ticked.rows).toHaveLength(1);
      expect(Number(ticked.rows[0].job_id)).toBeGreaterThan(lastOldId);
      // And the older process goes on enqueueing after it, without a clash of ids.
      const again = await old.query(oldEnqueue);
      expect(Number(again.rows[0].id)).toBeGreaterThan(Number(ticked.rows[0].job_id));
    } finally {
      await engine.stop();
    }
  } finally {
    old.release();
  }
});
