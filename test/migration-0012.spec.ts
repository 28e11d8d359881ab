import { PgQueue } from '../lib/engine/index.js';
import { migrate } from '../lib/engine/migrator.js';
import { createStore } from '../lib/engine/store/index.js';
import { migrationsBefore, migrationTestSetup } from './support/database.js';

/**
 * 0012 (unique and debounced jobs) upgrades a live database of the previous schema: every job
 * stays as it was, without keys (so outside both new indexes), statements an older process
 * prepared before the migration still run after it (its enqueue, its claim), and the new version
 * deduplicates beside the old jobs at once. The key lookups use the new unique index.
 */

const schema = 'm0012';

const setup = migrationTestSetup('migration0012', 4);

test('0012 upgrades a live database: no job changes, old statements still run, keys work at once and use their index', async () => {
  const { pool, scratch, db } = setup;
  await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0012') });
  await pool.query(`INSERT INTO ${schema}.queues (name) VALUES ('q')`);
  await pool.query(
    `INSERT INTO ${schema}.jobs (queue_name, payload, status, lease_owner, lease_expires_at, deadline_at, finished_at)
     SELECT 'q', jsonb_build_object('n', g), s::${schema}.job_status,
            CASE WHEN s = 'running' THEN 'w' END, CASE WHEN s = 'running' THEN now() + interval '1 minute' END,
            CASE WHEN s = 'running' THEN now() + interval '1 minute' END, CASE WHEN s IN ('succeeded', 'dead', 'cancelled') THEN now() END
     FROM generate_series(1, 5) g, unnest(ARRAY['pending', 'running', 'scheduled', 'succeeded', 'dead', 'cancelled']) s`,
  );
  const read = async () => (await pool.query(`SELECT id, queue_name, payload, status, lease_token, lease_owner, available_at, finished_at FROM ${schema}.jobs ORDER BY id`)).rows;
  const seen = await read();
  // An older process's enqueue and claim, prepared on its connection before the migration.
  const old = await pool.connect();
  const oldEnqueue = { name: 'old-enqueue', text: `INSERT INTO ${schema}.jobs (queue_name, payload) VALUES ('q', '{"old":true}') RETURNING id`, values: [] };
  const oldClaim = {
    name: 'old-claim',
    text: `UPDATE ${schema}.jobs SET status = 'running', lease_token = lease_token + 1, lease_owner = 'old', lease_expires_at = now() + interval '1 minute',
                  deadline_at = now() + interval '1 minute'
           WHERE id = (SELECT id FROM ${schema}.jobs WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id`,
  };
  try {
    expect((await old.query(oldEnqueue)).rowCount).toBe(1);
    // Up to this file (a later one would be applied too, and is not this test's).
    const report = await migrate(pool, { schema, migrationsDir: await migrationsBefore(scratch, '0013') });
    expect(report.applied).toEqual(['0012_unique_jobs.sql']);
    expect((await read()).slice(0, seen.length)).toEqual(seen);
    const keyed = await pool.query(`SELECT count(*)::int AS n FROM ${schema}.jobs WHERE unique_key IS NOT NULL OR debounce_key IS NOT NULL OR unique_scope IS NOT NULL OR unique_period IS NOT NULL`);
    expect(keyed.rows[0].n).toBe(0);
    // The old statements run again on the connection that prepared them.
    expect((await old.query(oldEnqueue)).rowCount).toBe(1);
    expect((await old.query(oldClaim)).rowCount).toBe(1);
  } finally {
    old.release();
  }

  const indexes = await pool.query(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname IN ('jobs_unique_key_idx', 'jobs_debounce_key_idx') ORDER BY 1`, [schema]);
  expect(indexes.rows.map((r) => r.indexname)).toEqual(['jobs_debounce_key_idx', 'jobs_unique_key_idx']);
  for (const { indexdef } of indexes.rows) expect(indexdef).toMatch(/^CREATE UNIQUE INDEX .* WHERE \(\((unique|debounce)_key IS NOT NULL\) AND/);

  // The new version deduplicates on the upgraded database, beside the old jobs.
  const engine = new PgQueue({ connectionString: db.url, schema, logger: { log() {}, warn() {}, error() {} } });
  try {
    const a = await engine.enqueue('q', {}, { unique: { key: 'k', while: 'unfinished' } });
    const b = await engine.enqueue('q', {}, { unique: { key: 'k', while: 'unfinished' } });
    expect(b).toEqual({ id: a.id, deduplicated: true });
    const c = await engine.enqueue('q', { n: 1 }, { debounce: { key: 'k', delayMs: 60_000 } });
    const d = await engine.enqueue('q', { n: 2 }, { debounce: { key: 'k', delayMs: 60_000 } });
    expect(d).toEqual({ id: c.id, deduplicated: true });
  } finally {
    await engine.stop();
  }

  // The holder lookup (the real statement) reads the unique index, not the table, whatever its size.
  const { statements } = createStore(schema);
  const client = await pool.connect();
  try {
    await client.query('SET enable_seqscan = off');
    await client.query(`PREPARE holders (jsonb) AS ${statements.uniqueHolders.text}`);
    const plan = await client.query(`EXPLAIN (FORMAT JSON) EXECUTE holders('[{"q":"q","uk":"k","pe":null}]')`);
    expect(JSON.stringify(plan.rows[0])).toContain('"Index Name":"jobs_unique_key_idx"');
    await client.query(`PREPARE held (jsonb, text, text) AS ${statements.enqueueUnique.text}`);
    const insertPlan = await client.query(
      `EXPLAIN (FORMAT JSON) EXECUTE held('[{"q":"q","p":{},"pr":0,"at":null,"d":null,"ma":null,"mr":null,"tc":null,"v":null,"g":null,"uk":"k","us":"ever","up":null}]', 'c', '*s')`,
    );
    // The lookup before the insert (not only the insert's conflict arbiter).
    expect(JSON.stringify(insertPlan.rows[0])).toContain('"Index Name":"jobs_unique_key_idx"');
  } finally {
    client.release();
  }
});
