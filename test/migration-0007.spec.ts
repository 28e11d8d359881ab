import { copyFile, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { MIGRATIONS_DIR, migrate } from '../lib/engine/migrator.js';
import { createStore } from '../lib/engine/store/index.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * 0007 moves the queue-name rule of jobs from a CHECK (evaluated on every UPDATE of a job) to
 * triggers that run when queue_name is written. It upgrades a live database of 0006's schema:
 * the jobs of every state stay as they were, a claim prepared before it still runs after it (an
 * older process's statements), and a bad name written past the engine is still refused.
 */

let db: TestDatabase;
let pool: pg.Pool;
let scratch: string;
const schema = 'm0007';
const store = createStore(schema);
const claimOf = (owner: string) =>
  ({ queue: 'mq', owner, limit: 1, leaseMs: 60_000, maxRuntimeMs: 60_000, maxAttempts: 5, backoffBaseMs: 0, backoffMaxMs: 0, oldestFirst: 0 }) as const;

beforeAll(async () => {
  db = await createTestDatabase('migration0007');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  scratch = await mkdtemp(join(tmpdir(), 'pgq-m0007-'));
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

async function errorOf(promise: Promise<unknown>): Promise<pg.DatabaseError> {
  try {
    await promise;
  } catch (error) {
    return error as pg.DatabaseError;
  }
  throw new Error('expected the statement to fail');
}

test('0007 upgrades a live database of the previous schema: no job lost, old statements still run, bad names still refused', async () => {
  // Today's schema up to 0006, from a copy of the package's files without 0007 and later.
  const before = await mkdtemp(join(scratch, 'migrations-'));
  for (const name of await readdir(MIGRATIONS_DIR)) if (name.endsWith('.sql') && name < '0007') await copyFile(join(MIGRATIONS_DIR, name), join(before, name));
  await migrate(pool, { schema, migrationsDir: before });
  expect((await pool.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${schema}.jobs'::regclass AND conname = 'jobs_queue_name_check'`)).rowCount).toBe(1);

  // A queue at work: a running job (claimed on a connection that keeps its prepared claim), a
  // succeeded one, a pending one, a keyed one waiting behind its key's head, a delayed one.
  await store.declareQueues(pool, { queues: ['mq'] });
  const row = (k: string | null, d: number | null = null) => ({ q: 'mq', json: '{}', pr: 0, at: null, d, ma: null, mr: null, tc: null, k });
  const ids = await store.enqueue(pool, { jobs: [row(null), row(null), row(null), row('key'), row('key'), row(null, 3_600_000)], channel: 'c', schedulerTopic: 't' });
  const old = await pool.connect();
  try {
    const [done] = await store.claim(old, claimOf('w1'));
    const completed = await store.completeMany(old, { ids: [done!.id], tokens: [done!.leaseToken], owner: 'w1' });
    expect(completed.rows).toEqual([{ id: done!.id, token: done!.leaseToken, status: 'running', ok: true }]);
    const [running] = await store.claim(old, claimOf('w1'));
    const states = async () => (await pool.query(`SELECT id::text, status, key_waiting, lease_token::text FROM ${schema}.jobs ORDER BY id`)).rows;
    const seen = await states();
    expect(seen.map((r) => r.status)).toEqual(['succeeded', 'running', 'pending', 'pending', 'pending', 'scheduled']);
    expect(seen.map((r) => r.key_waiting)).toEqual([false, false, false, false, true, false]);

    const report = await migrate(pool, { schema });
    expect(report.applied).toEqual(['0007_queue_name_rule_at_write.sql']);
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

  // No CHECK runs on a job's updates any more; the rule runs where queue_name is written.
  expect((await pool.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${schema}.jobs'::regclass AND conname = 'jobs_queue_name_check'`)).rowCount).toBe(0);
  const inserted = await errorOf(pool.query(`INSERT INTO ${schema}.jobs (queue_name, payload) VALUES ('bad name!', '{}')`));
  expect(inserted).toMatchObject({ code: '23514', constraint: 'jobs_queue_name_check', table: 'jobs', column: 'queue_name' });
  expect(inserted.detail).toMatch(/'bad name!' is not a valid queue name/);
  const updated = await errorOf(pool.query(`UPDATE ${schema}.jobs SET queue_name = '-dash-first' WHERE id = $1`, [ids[0]]));
  expect(updated).toMatchObject({ code: '23514', constraint: 'jobs_queue_name_check' });
  // A good name is written as before.
  await pool.query(`UPDATE ${schema}.jobs SET queue_name = 'mq.other' WHERE id = $1`, [ids[0]]);
  await pool.query(`INSERT INTO ${schema}.jobs (queue_name, payload) VALUES ('mq:2', '{}')`);
});
