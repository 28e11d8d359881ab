import pg from 'pg';
import { checkHealth, PgQueue, PgQueueError } from '../../lib/engine/index.js';
import { migrationLockKey } from '../../lib/engine/migrator.js';
import { createTestDatabase } from '../support/database.js';
import { engineFixture, testLogger, waitFor } from '../support/engine.js';
import { closedPort } from '../support/tcp-proxy.js';

// What a caller of the engine sees when its database cannot be reached, or a statement does not
// finish in time: one library error with a code, never the driver's raw error.

const PASSWORD = 'pw-secret-4821';


let port: number;
let engine: PgQueue;
beforeAll(async () => {
  port = await closedPort();
  engine = new PgQueue({ connectionString: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/shop_queue`, logger: testLogger(), statementTimeoutMs: 1_000 });
});
afterAll(() => engine.stop(1_000));

async function rejection(call: Promise<unknown>): Promise<Error> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(Error);
  return error as Error;
}

function expectUnavailable(error: Error, target: string) {
  expect(error).toBeInstanceOf(PgQueueError);
  expect(error).toMatchObject({ name: 'DatabaseUnavailableError', code: 'DATABASE_UNAVAILABLE' });
  expect(error.message).toContain(target);
  expect(error.message).toMatch(/cannot be reached/);
  expect(error.message).not.toContain(PASSWORD);
  // The driver's error is kept for whoever needs it.
  expect((error.cause as { code?: string } | undefined)?.code).toBe('ECONNREFUSED');
}

const calls: [string, (q: PgQueue) => Promise<unknown>][] = [
  ['migrate', (q) => q.migrate()],
  ['declareQueues', (q) => q.declareQueues(['orders'])],
  ['enqueue', (q) => q.enqueue('orders', { n: 1 })],
  ['enqueueMany', (q) => q.enqueueMany([{ queue: 'orders', payload: { n: 1 } }])],
  ['getJob', (q) => q.getJob('1')],
  ['getJobEvents', (q) => q.getJobEvents('1')],
  ['getJobEffects', (q) => q.getJobEffects('1')],
  ['unfinished', (q) => q.unfinished(['orders'])],
  ['replay', (q) => q.replay('1')],
  ['replayMany', (q) => q.replayMany(['1'])],
  ['replayDead', (q) => q.replayDead({ queue: 'orders' })],
  ['cancel', (q) => q.cancel('1')],
  ['discard', (q) => q.discard('1')],
  ['discard with delete', (q) => q.discard('1', { delete: true })],
  ['listDead', (q) => q.listDead()],
  ['purgeDead', (q) => q.purgeDead({ olderThan: new Date() })],
  ['pauseQueue', (q) => q.pauseQueue('orders')],
  ['resumeQueue', (q) => q.resumeQueue('orders')],
  ['stats', (q) => q.stats()],
  ['reapOnce', (q) => q.reapOnce()],
  ['pruneOnce', (q) => q.pruneOnce()],
  ['checkHealth', (q) => checkHealth(q)],
];

test.each(calls)('%s rejects with DATABASE_UNAVAILABLE naming host:port/database, never the password', async (_name, call) => {
  expectUnavailable(await rejection(call(engine)), `127.0.0.1:${port}/shop_queue`);
});

test('start rejects with DATABASE_UNAVAILABLE too', async () => {
  const q = new PgQueue({ connectionString: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/shop_queue`, logger: testLogger(), startupRetryMs: 0 });
  q.work('orders', async () => {});
  try {
    expectUnavailable(await rejection(q.start()), `127.0.0.1:${port}/shop_queue`);
  } finally {
    await q.stop(1_000);
  }
});

test('a pool passed in is named by its own settings (host, port, database)', async () => {
  const pool = new pg.Pool({ host: '127.0.0.1', port, database: 'billing', user: 'app', password: PASSWORD });
  pool.on('error', () => {});
  const q = new PgQueue({ pool, logger: testLogger() });
  try {
    expectUnavailable(await rejection(q.getJob('1')), `127.0.0.1:${port}/billing`);
  } finally {
    await q.stop(1_000);
    await pool.end();
  }
});

test('errors that are not about the connection keep their own class', async () => {
  const error = await rejection(engine.replayMany(['not-an-id']));
  expect(error).toMatchObject({ code: 'INVALID_OPTION' });
});

test('a migration whose connection is lost fails with DATABASE_UNAVAILABLE, not MIGRATION_FAILED ("fix the file")', async () => {
  const database = await createTestDatabase('dberrors-migrate');
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  const q = new PgQueue({ connectionString: database.url, logger: testLogger() });
  try {
    // The migrator waits for the schema's lock, held here, until its connection is terminated.
    // A poll on purpose: only the server knows when a session of its waits on a lock (no signal
    // of the engine's can say so).
    await admin.query('SELECT pg_advisory_lock($1::bigint)', [migrationLockKey('pgqueue')]);
    const migrating = q.migrate().then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    const pid = await waitFor(async () => {
      const { rows } = await admin.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%'",
      );
      return rows[0]?.pid;
    });
    await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    const error = await migrating;
    expect(error).toMatchObject({ name: 'DatabaseUnavailableError', code: 'DATABASE_UNAVAILABLE' });
    expect(error!.message).toContain(`/${database.name}`);
  } finally {
    await q.stop(1_000);
    await admin.end();
    await database.drop();
  }
});

describe('a statement that does not finish within statementTimeoutMs', () => {
  let fx: Awaited<ReturnType<typeof engineFixture>>;
  beforeAll(async () => {
    fx = await engineFixture('dberrors');
  });
  afterAll(() => fx.close());

  /** A dead job whose row another session holds (FOR UPDATE) until `release()`. */
  async function heldDeadJob(queue: string) {
    await fx.insertJobs(queue, 1, { status: 'dead' });
    const { rows } = await fx.pool.query<{ id: string }>('SELECT max(id)::text AS id FROM pgqueue.job_rows WHERE queue_name = $1', [queue]);
    const id = rows[0]!.id;
    const holder = await fx.pool.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM pgqueue.jobs WHERE id = $1 FOR UPDATE', [id]);
    return {
      id,
      async release() {
        await holder.query('ROLLBACK');
        holder.release();
      },
    };
  }

  test('a cancel that waits on a held row fails with DATABASE_TIMEOUT (the server cancelled it: nothing changed)', async () => {
    const q = fx.make({ statementTimeoutMs: 300 });
    const held = await heldDeadJob('held-cancel');
    try {
      const error = await rejection(q.discard(held.id));
      expect(error).toBeInstanceOf(PgQueueError);
      expect(error).toMatchObject({ name: 'DatabaseTimeoutError', code: 'DATABASE_TIMEOUT' });
      expect(error.message).toMatch(/did not finish within statementTimeoutMs \(300 ms\)/);
      expect(error.message).toMatch(/a transaction may hold the job's row/);
      expect((error.cause as { code?: string }).code).toBe('57014');
    } finally {
      await held.release();
    }
    expect((await q.getJob(held.id))?.status).toBe('dead');
  });

  test('a replay that waits on a held row fails with DATABASE_TIMEOUT when the client gives up', async () => {
    const q = fx.make({ statementTimeoutMs: 300 });
    const held = await heldDeadJob('held-replay');
    try {
      const error = await rejection(q.replay(held.id));
      expect(error).toBeInstanceOf(PgQueueError);
      expect(error).toMatchObject({ name: 'DatabaseTimeoutError', code: 'DATABASE_TIMEOUT' });
      expect(error.message).toMatch(/did not answer within statementTimeoutMs \(300 ms\)/);
      expect(error.message).toMatch(/a transaction may hold the job's row/);
      expect((error.cause as Error).message).toBe('Query read timeout');
    } finally {
      await held.release();
    }
    // What the message warns of: the statement was still waiting on the server, and ran. A poll on
    // purpose: the client gave up on that statement, so nothing in the engine hears of its end.
    await waitFor(async () => (await q.getJob(held.id))?.status === 'pending', 5_000);
  });
});
