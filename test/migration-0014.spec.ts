import { PgQueue } from '../lib/engine/index.js';
import { migrate } from '../lib/engine/migrator.js';
import { testLogger } from './support/engine.js';
import { migrationsBefore, migrationTestSetup } from './support/database.js';

/**
 * 0014 (the succeeded history) upgrades a live database of the previous schema: every job is still
 * there after it, in the same state, the succeeded ones moved to jobs_succeeded except those that
 * must stay in jobs (a unique key of scope 'ever', a flow child), and readable through the public
 * API. Their events and effects stay with them (the foreign keys are gone). An older process's
 * completion (an UPDATE, prepared before the migration) still runs after it; its row stays in jobs,
 * where the new reads see it and the new pruner deletes it.
 */

const schema = 'm0014';

const setup = migrationTestSetup('migration0014', 4);

test('0014 upgrades a live database with jobs in every state: none lost, succeeded ones moved and readable, old completions still work', async () => {
  const { pool, scratch, db } = setup;
  await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0014') });
  await pool.query(`INSERT INTO ${schema}.queues (name) VALUES ('q')`);
  // Three of each state, finished two hours ago where finished; a running one has a live lease.
  await pool.query(
    `INSERT INTO ${schema}.jobs (queue_name, payload, status, finished_at, lease_owner, lease_token, lease_expires_at, deadline_at)
     SELECT 'q', jsonb_build_object('n', g, 's', s), s::${schema}.job_status,
            CASE WHEN s IN ('succeeded', 'dead', 'cancelled') THEN now() - interval '2 hours' END,
            CASE WHEN s IN ('running', 'succeeded') THEN 'old-worker' END,
            CASE WHEN s IN ('running', 'succeeded') THEN 1 ELSE 0 END,
            CASE WHEN s = 'running' THEN now() + interval '1 hour' END,
            CASE WHEN s = 'running' THEN now() + interval '1 hour' END
     FROM generate_series(1, 3) g, unnest(ARRAY['pending', 'scheduled', 'running', 'succeeded', 'dead', 'cancelled']) s`,
  );
  // Succeeded jobs that must stay in jobs: a unique key of scope 'ever', and a flow child (of a succeeded parent).
  const ever = (
    await pool.query(
      `INSERT INTO ${schema}.jobs (queue_name, payload, status, finished_at, unique_key, unique_scope, unique_period)
       VALUES ('q', '{"ever": true}', 'succeeded', now() - interval '2 hours', 'k', 'ever', '-infinity') RETURNING id::text`,
    )
  ).rows[0].id as string;
  const parent = (await pool.query(`SELECT min(id)::text AS id FROM ${schema}.jobs WHERE status = 'succeeded' AND unique_key IS NULL`)).rows[0].id as string;
  const child = (
    await pool.query(
      `INSERT INTO ${schema}.jobs (queue_name, payload, status, finished_at, parent_id, result)
       VALUES ('q', '{"child": true}', 'succeeded', now() - interval '2 hours', $1, '"r"') RETURNING id::text`,
      [parent],
    )
  ).rows[0].id as string;
  // A trail on a succeeded job that moves: an event and an effect.
  await pool.query(`INSERT INTO ${schema}.job_events (job_id, kind, error_code) VALUES ($1, 'lost_fence', 'LEASE_LOST')`, [parent]);
  await pool.query(`INSERT INTO ${schema}.job_effects (job_id, name, idempotency_key, status, lease_token) VALUES ($1, 'mail', 'key', 'confirmed', 1)`, [parent]);

  const columns = `id::text, queue_name, payload, status::text, lease_token::text, lease_owner, finished_at, unique_key, parent_id::text, result`;
  const before = (await pool.query(`SELECT ${columns} FROM ${schema}.jobs ORDER BY id`)).rows;
  expect(before).toHaveLength(20);

  // An older process: its completion (by UPDATE, as before 0014), prepared before the migration.
  const old = await pool.connect();
  const running = (await pool.query(`SELECT id::text FROM ${schema}.jobs WHERE status = 'running' ORDER BY id LIMIT 1`)).rows[0].id as string;
  const oldComplete = (id: string) => ({
    name: 'old-complete',
    text: `UPDATE ${schema}.jobs SET status = 'succeeded', finished_at = now() - interval '2 hours', lease_expires_at = NULL
           WHERE id = $1 AND lease_owner = 'old-worker' AND lease_token = 1 AND status = 'running' AND lease_expires_at > now() RETURNING id::text`,
    values: [id],
  });
  const oldGet = { name: 'old-get', text: `SELECT id::text FROM ${schema}.jobs WHERE id = $1`, values: [running] };
  try {
    await old.query(oldGet);
    const report = await migrate(pool, { schema });
    expect(report.applied).toEqual(['0014_succeeded_history.sql']);

    // Every job is still there, unchanged, through job_rows.
    expect((await pool.query(`SELECT ${columns} FROM ${schema}.job_rows ORDER BY id`)).rows).toEqual(before);
    const where = async (table: string) => (await pool.query(`SELECT id::text FROM ${schema}.${table} WHERE status = 'succeeded' ORDER BY id`)).rows.map((r) => r.id);
    const succeeded = before.filter((r) => r.status === 'succeeded').map((r) => r.id as string);
    expect(await where('jobs')).toEqual([ever, child]);
    expect(await where('jobs_succeeded')).toEqual(succeeded.filter((id) => id !== ever && id !== child));
    // The trail stayed with the moved job; no foreign key refuses rows of a moved job.
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.job_events WHERE job_id = $1`, [parent])).rows[0].n).toBe(1);
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.job_effects WHERE job_id = $1`, [parent])).rows[0].n).toBe(1);
    const fks = await pool.query(`SELECT conname FROM pg_constraint WHERE contype = 'f' AND conrelid IN ($1::regclass, $2::regclass)`, [
      `${schema}.job_events`,
      `${schema}.job_effects`,
    ]);
    expect(fks.rows).toEqual([]);

    // The older process's statements still run: its completion leaves the row in jobs.
    await old.query(oldGet);
    expect((await old.query(oldComplete(running))).rows).toEqual([{ id: running }]);
    expect((await pool.query(`SELECT status::text FROM ${schema}.jobs WHERE id = $1`, [running])).rows[0].status).toBe('succeeded');

    // The new version reads every succeeded job, wherever it is, and prunes both tables.
    const engine = new PgQueue({ connectionString: db.url, schema, logger: testLogger(), migrations: 'verify', pruner: { retentionMs: 3_600_000 } });
    try {
      await engine.migrate();
      for (const id of [...succeeded, running]) expect((await engine.getJob(id))?.status).toBe('succeeded');
      expect((await engine.getJob(parent))?.payload).toEqual({ n: 1, s: 'succeeded' });
      const listed = await engine.listJobs({ queue: 'q', status: 'succeeded', limit: 100 });
      expect(listed.jobs.map((j) => j.id).sort()).toEqual([...succeeded, running].sort());
      for (const status of ['pending', 'scheduled', 'dead', 'cancelled'] as const) {
        expect((await engine.listJobs({ queue: 'q', status, limit: 100 })).jobs).toHaveLength(3);
      }
      expect((await engine.listJobs({ queue: 'q', status: 'running', limit: 100 })).jobs).toHaveLength(2);

      // Past retention: every succeeded job goes, from both tables (the flow child too: its parent
      // has finished), with its trail; nothing else is touched.
      await engine.pruneOnce();
      for (const id of [...succeeded, running]) expect(await engine.getJob(id)).toBeUndefined();
      expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.job_events WHERE job_id = $1`, [parent])).rows[0].n).toBe(0);
      expect((await pool.query(`SELECT count(*)::int AS n FROM ${schema}.job_effects WHERE job_id = $1`, [parent])).rows[0].n).toBe(0);
      const left = (await pool.query(`SELECT status::text AS status, count(*)::int AS n FROM ${schema}.job_rows GROUP BY 1 ORDER BY 1`)).rows;
      expect(left).toEqual([
        { status: 'cancelled', n: 3 },
        { status: 'dead', n: 3 },
        { status: 'pending', n: 3 },
        { status: 'running', n: 2 },
        { status: 'scheduled', n: 3 },
      ]);
    } finally {
      await engine.stop();
    }
  } finally {
    old.release();
  }
});
