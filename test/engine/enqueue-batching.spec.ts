import pg from 'pg';
import { ENQUEUE_BATCH_MAX_CHARS } from '../../lib/engine/enqueue-batcher.js';
import { engineFixture } from '../support/engine.js';

/**
 * Concurrent enqueue() calls on the engine's pool share statements (lib/engine/enqueue-batcher.ts):
 * fewer commits than calls, each call told its own ids, and one caller's refused job never fails
 * another's call.
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('enqueue-batching');
  // A job the server refuses although the engine's checks let it through (here: a trigger of the
  // test's own), so a shared statement fails for one caller's job.
  await fx.pool.query(`
    CREATE FUNCTION pgqueue.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'poisoned payload' USING ERRCODE = 'P0001'; END $$;
    CREATE TRIGGER refuse_poison BEFORE INSERT ON pgqueue.jobs FOR EACH ROW
      WHEN (NEW.payload ? 'poison') EXECUTE FUNCTION pgqueue.refuse_poison();`);
});
afterAll(() => fx.close());

/** An engine on a pool that counts the enqueue statements it sends, and the characters of each. */
async function countingEngine(options: Parameters<typeof fx.make>[0] = {}) {
  const pool = new pg.Pool({ connectionString: fx.url, max: 10 });
  // A client still closing when the fixture drops the database WITH (FORCE) is terminated, and the
  // pool re-emits that error (see migrationTestSetup in test/support/database.ts).
  pool.on('error', () => {});
  let inserts = 0;
  const sizes: number[] = [];
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  (pool as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    const config = args[0] as { text?: string; values?: unknown[] } | string;
    const text = typeof config === 'string' ? config : (config.text ?? '');
    if (text.includes('jsonb_to_recordset') && text.includes('INSERT INTO')) {
      inserts += 1;
      const values = typeof config === 'string' ? (args[1] as unknown[] | undefined) : config.values;
      sizes.push((values ?? []).reduce<number>((sum, v) => sum + (typeof v === 'string' ? v.length : 0), 0));
    }
    return query(...args);
  };
  const engine = fx.make({ pool, connectionString: undefined, ...options });
  await engine.declareQueues(['mail', 'other']);
  return { engine, inserts: () => inserts, sizes, close: () => pool.end() };
}

test('concurrent enqueue calls share statements, and each call gets the id of its own job', async () => {
  const { engine, inserts, close } = await countingEngine();
  try {
    const before = inserts();
    const ids = await Promise.all(Array.from({ length: 64 }, (_, i) => engine.enqueue('mail', { i })));
    expect(new Set(ids).size).toBe(64);
    const jobs = await Promise.all(ids.map((id) => engine.getJob<{ i: number }>(id)));
    expect(jobs.map((j) => j?.payload.i)).toEqual(Array.from({ length: 64 }, (_, i) => i));
    // 64 calls at once: the first goes alone, the rest ride a few shared statements.
    expect(inserts() - before).toBeLessThan(16);
    // One call at a time is one statement each, written at once.
    const alone = inserts();
    for (let i = 0; i < 3; i++) await engine.enqueue('mail', { alone: i });
    expect(inserts() - alone).toBe(3);
  } finally {
    await engine.stop(1_000);
    await close();
  }
});

test("a job the server refuses fails its own call only: the others sharing its statement are written", async () => {
  const { engine, inserts, close } = await countingEngine();
  try {
    const before = inserts();
    const calls = Array.from({ length: 30 }, (_, i) =>
      i === 17
        ? engine.enqueue('mail', { poison: true, i })
        : i === 23
          ? // A call of several jobs stays all or none inside a shared statement.
            engine.enqueueMany([
              { queue: 'mail', payload: { many: 1 } },
              { queue: 'mail', payload: { poison: true, many: 2 } },
            ])
          : engine.enqueue('mail', { i }),
    );
    const settled = await Promise.allSettled(calls);
    const failed = settled.flatMap((s, i) => (s.status === 'rejected' ? [i] : []));
    expect(failed).toEqual([17, 23]);
    expect(String((settled[17] as PromiseRejectedResult).reason)).toMatch(/poisoned payload/);
    const ok = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value as string] : []));
    const jobs = await Promise.all(ok.map((id) => engine.getJob(id)));
    expect(jobs.every((j) => j?.status === 'pending')).toBe(true);
    const { rows } = await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE payload ? 'many' OR payload ? 'poison'`);
    expect(rows[0].n).toBe(0);
    // The refused shared statement was written again call by call (the test's point: it was shared).
    expect(inserts() - before).toBeGreaterThan(30);
  } finally {
    await engine.stop(1_000);
    await close();
  }
});

test('a keyed enqueue blocked on its key (held by an open transaction) does not hold up the plain calls behind it', async () => {
  // Review of the batcher: keyed calls lock their key's row; two of them blocked filled both
  // statements in flight, and every plain call of the process waited behind them until the
  // statement timeout (they then failed, and only then did the plain call go out).
  const { engine, close } = await countingEngine({ statementTimeoutMs: 3_000 });
  const client = await fx.pool.connect();
  try {
    await client.query('BEGIN');
    await engine.enqueue('mail', { tx: 1 }, { client, orderingKey: 'K' }); // holds K's row lock
    const settled: string[] = [];
    const blocked = [1, 2].map((k) =>
      engine.enqueue('mail', { k }, { orderingKey: 'K' }).then(
        () => settled.push(`ok ${k}`),
        (error: Error) => settled.push(`failed ${k}: ${error.message}`),
      ),
    );
    // Both keyed statements are waiting on the lock before the plain call is made.
    await expect
      .poll(async () => (await fx.pool.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%jsonb_to_recordset%'`)).rows[0].n)
      .toBe(2);
    const id = await engine.enqueue('other', { plain: true });
    // The plain call was written while the key is still held: the keyed calls still wait.
    expect(settled).toEqual([]);
    expect((await engine.getJob(id))?.status).toBe('pending');
    await client.query('COMMIT');
    await Promise.all(blocked);
    expect(settled.sort()).toEqual(['ok 1', 'ok 2']);
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
    await engine.stop(1_000);
    await close();
  }
});

test('calls share a statement only up to a bound of payload characters, so large payloads never fail together', async () => {
  // Review of the batcher: batches were bounded by rows only; calls each within maxPayloadBytes
  // could together build a document past V8's string limit (or jsonb's 256 MB) and all fail.
  const { engine, sizes, close } = await countingEngine({ maxPayloadBytes: 4 * 1024 * 1024 });
  try {
    const big = 'x'.repeat(3 * 1024 * 1024);
    sizes.length = 0;
    const ids = await Promise.all(Array.from({ length: 6 }, (_, i) => engine.enqueue('mail', { i, big })));
    expect(new Set(ids).size).toBe(6);
    expect(sizes.length).toBeGreaterThan(0);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(ENQUEUE_BATCH_MAX_CHARS + 1024);
    const jobs = await Promise.all(ids.map((id) => engine.getJob<{ i: number; big: string }>(id)));
    expect(jobs.map((j) => j?.payload.i)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(jobs.every((j) => j?.payload.big.length === big.length)).toBe(true);
  } finally {
    await engine.stop(1_000);
    await close();
  }
});
