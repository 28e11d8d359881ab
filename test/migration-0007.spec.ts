import pg from 'pg';
import { migrate } from '../lib/engine/migrator.js';
import { createStore } from '../lib/engine/store/index.js';
import { migrationsBefore, migrationTestSetup } from './support/database.js';

/**
 * 0007 rewrites the queue-name CHECK of jobs (evaluated on every UPDATE of a job) without the
 * bounded repetition that made each evaluation cost microseconds. It upgrades a live database of
 * 0006's schema: the jobs of every state stay as they were, a claim prepared before it still runs
 * after it (an older process's statements), and the rule is the same as before.
 */

const schema = 'm0007';
const store = createStore(schema);
const claimOf = (owner: string) =>
  ({ queue: 'mq', owner, limit: 1, leaseMs: 60_000, maxRuntimeMs: 60_000, maxAttempts: 5, backoffBaseMs: 0, backoffMaxMs: 0, oldestFirst: 0 }) as const;

const setup = migrationTestSetup('migration0007', 4);

async function errorOf(promise: Promise<unknown>): Promise<pg.DatabaseError> {
  try {
    await promise;
  } catch (error) {
    return error as pg.DatabaseError;
  }
  throw new Error('expected the statement to fail');
}

test('0007 upgrades a live database of the previous schema: no job lost, old statements still run, bad names still refused', async () => {
  const { pool, scratch } = setup;
  // Today's schema up to 0006, from a copy of the package's files without 0007 and later.
  const before = await migrationsBefore(scratch, '0007');
  await migrate(pool, { schema, migrationsDir: before });
  // Today's statements stand in for an older process's; they read payload_version (0008), the
  // group and flow-control columns (0009), the flow and unique columns (0010, 0012), and the
  // completion moves a job to jobs_succeeded (0014) with every column of jobs, so those are added
  // ahead here as the later migrations add them.
  await pool.query(
    `ALTER TABLE ${schema}.jobs ADD COLUMN payload_version integer, ADD COLUMN group_key text,
       ADD COLUMN rate_limited_count integer NOT NULL DEFAULT 0, ADD COLUMN parent_id bigint,
       ADD COLUMN awaiting_children boolean NOT NULL DEFAULT false, ADD COLUMN fail_on_dead_child boolean NOT NULL DEFAULT false,
       ADD COLUMN result jsonb, ADD COLUMN unique_key text, ADD COLUMN unique_scope text, ADD COLUMN unique_period timestamptz,
       ADD COLUMN debounce_key text;
     CREATE TABLE ${schema}.jobs_succeeded (LIKE ${schema}.jobs INCLUDING DEFAULTS, PRIMARY KEY (id));
     CREATE VIEW ${schema}.job_rows AS SELECT * FROM ${schema}.jobs UNION ALL SELECT * FROM ${schema}.jobs_succeeded;`,
  );
  await pool.query(`ALTER TABLE ${schema}.queues ADD COLUMN flow boolean NOT NULL DEFAULT false, ADD COLUMN throttled_until timestamptz`);
  expect((await pool.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${schema}.jobs'::regclass AND conname = 'jobs_queue_name_check'`)).rowCount).toBe(1);

  // A queue at work: a running job (claimed on a connection that keeps its prepared claim), a
  // succeeded one, a pending one, a keyed one waiting behind its key's head, a delayed one.
  await store.declareQueues(pool, { queues: ['mq'] });
  const row = (k: string | null, d: number | null = null) => ({ q: 'mq', json: '{}', pr: 0, at: null, d, ma: null, mr: null, tc: null, k, v: null, g: null });
  const ids = await store.enqueue(pool, { jobs: [row(null), row(null), row(null), row('key'), row('key'), row(null, 3_600_000)], channel: 'c', schedulerTopic: 't' });
  const old = await pool.connect();
  try {
    const [done] = await store.claim(old, claimOf('w1'));
    const completed = await store.completeMany(old, { ids: [done!.id], tokens: [done!.leaseToken], owner: 'w1' });
    expect(completed.rows).toEqual([{ id: done!.id, token: done!.leaseToken, status: 'running', ok: true }]);
    const [running] = await store.claim(old, claimOf('w1'));
    const states = async () => (await pool.query(`SELECT id::text, status, key_waiting, lease_token::text FROM ${schema}.job_rows ORDER BY id`)).rows;
    const seen = await states();
    expect(seen.map((r) => r.status)).toEqual(['succeeded', 'running', 'pending', 'pending', 'pending', 'scheduled']);
    expect(seen.map((r) => r.key_waiting)).toEqual([false, false, false, false, true, false]);

    const upTo0007 = await migrationsBefore(scratch, '0008');
    const report = await migrate(pool, { schema, migrationsDir: upTo0007 });
    expect(report.applied).toEqual(['0007_cheaper_queue_name_check.sql']);
    expect(await states()).toEqual(seen);
    expect(seen.map((r) => r.id)).toEqual(ids);

    // The connection that prepared the claim and the completion before the migration runs them again.
    const [next] = await store.claim(old, claimOf('w1'));
    expect(next).toMatchObject({ id: ids[2], queue: 'mq', attempt: 1 });
    const finished = await store.completeMany(old, { ids: [running!.id, next!.id], tokens: [running!.leaseToken, next!.leaseToken], owner: 'w1' });
    expect(finished.rows.every((r) => r.ok)).toBe(true);
  } finally {
    old.release();
  }

  // The same rule, without a bounded repetition ({0,127}: PostgreSQL's regex engine expands it).
  const defs = await pool.query(`SELECT conrelid::regclass::text AS rel, pg_get_constraintdef(oid) AS def FROM pg_constraint
                                 WHERE conname IN ('jobs_queue_name_check', 'queues_name_check') AND connamespace = '${schema}'::regnamespace`);
  expect(defs.rows).toHaveLength(2);
  for (const { def } of defs.rows) expect(def).not.toMatch(/\{/);
  const cases: [string, boolean][] = [
    ['a', true], ['mq.other', true], ['Q_1:x-y', true], ['9', true], ['a'.repeat(128), true],
    ['a'.repeat(129), false], ['', false], ['-dash-first', false], ['_under', false], ['bad name!', false], ['é', false], ['a\nb', false],
  ];
  for (const [name, ok] of cases) {
    for (const write of [
      () => pool.query(`INSERT INTO ${schema}.jobs (queue_name, payload) VALUES ($1, '{}')`, [name]),
      () => pool.query(`UPDATE ${schema}.jobs SET queue_name = $1 WHERE id = $2`, [name, ids[5]]),
      () => pool.query(`INSERT INTO ${schema}.queues (name) VALUES ($1) ON CONFLICT DO NOTHING`, [name]),
    ]) {
      if (ok) await write();
      else expect(await errorOf(write())).toMatchObject({ code: '23514', constraint: expect.stringMatching(/^(jobs_queue_name_check|queues_name_check)$/) });
    }
  }
});
