import pg from 'pg';
import { PgQueue, type EnqueueResult } from '../../lib/engine/index.js';
import { engineFixture, waitFor } from '../support/engine.js';

/**
 * Unique keys under concurrency: producers in separate engines (separate pools, as separate
 * processes would be) racing one key, and the race the unique index settles but one statement
 * cannot see through (a concurrent producer's job committed while the insert waited for it).
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('unique_races');
  await fx.make().declareQueues(['race']);
});
afterAll(() => fx.close());

/** Runs `count` calls of `call` with at most `width` at once. */
async function inParallel<T>(count: number, width: number, call: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < count) {
        const i = next++;
        results[i] = await call(i);
      }
    }),
  );
  return results;
}

/** `producers` engines, each with a small pool of its own (as many producing processes). */
function producers(n: number): PgQueue[] {
  return Array.from({ length: n }, () => fx.make({ poolSize: 3 }));
}

test("8 producers in separate engines enqueue one key ('unfinished') 1,000 times in total: one job, 999 deduplicated", async () => {
  const engines = producers(8);
  const perEngine = 125;
  const results = (
    await Promise.all(engines.map((engine, e) => inParallel(perEngine, 3, (i) => engine.enqueue('race', { e, i }, { unique: { key: 'one', while: 'unfinished' } }))))
  ).flat();
  expect(results).toHaveLength(1_000);
  const { rows } = await fx.pool.query(`SELECT id::text FROM pgqueue.job_rows WHERE queue_name = 'race' AND unique_key = 'one'`);
  expect(rows).toHaveLength(1);
  expect(results.filter((r) => !r.deduplicated)).toEqual([{ id: rows[0].id, deduplicated: false }]);
  expect(results.filter((r) => r.deduplicated)).toHaveLength(999);
  expect(new Set(results.map((r) => r.id))).toEqual(new Set([rows[0].id]));
});

test('8 producers debouncing one key 400 times leave one job, with one of their payloads and no error', async () => {
  const engines = producers(8);
  const results = (
    await Promise.all(engines.map((engine, e) => inParallel(50, 3, (i) => engine.enqueue('race', { e, i }, { debounce: { key: 'one-debounced', delayMs: 60_000 } }))))
  ).flat();
  const { rows } = await fx.pool.query(`SELECT id::text, status::text FROM pgqueue.job_rows WHERE queue_name = 'race' AND debounce_key = 'one-debounced'`);
  expect(rows).toEqual([{ id: expect.any(String), status: 'scheduled' }]);
  expect(results.filter((r) => !r.deduplicated)).toHaveLength(1);
  expect(new Set(results.map((r) => r.id))).toEqual(new Set([rows[0].id]));
});

test('batches of the same keys in opposite orders, from 4 engines at once, never deadlock', async () => {
  const engines = producers(4);
  const keys = Array.from({ length: 20 }, (_, k) => `k${k}`);
  const batch = (order: readonly string[], round: number) => order.map((key) => ({ queue: 'race', payload: { round }, options: { unique: { key: `${key}-${round}`, while: 'pending' as const } } }));
  for (let round = 0; round < 10; round++) {
    const outcomes = await Promise.all(engines.map((engine, e) => engine.enqueueMany(batch(e % 2 === 0 ? keys : [...keys].reverse(), round))));
    // Each key of the round was added once, by one of the batches.
    const added = outcomes.flatMap((ids) => ids.filter((_, k) => !ids.deduplicated[k]));
    expect(added).toHaveLength(keys.length);
  }
});

describe('a key whose holder committed while the insert waited for it', () => {
  /**
   * Waits until an insert of this database waits for another transaction (the holder's): only
   * the racing enqueue can (pg_stat_activity keeps the first 1 kB of a statement's text).
   */
  const insertWaiting = () =>
    waitFor(async () => {
      const { rows } = await fx.pool.query(
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'transactionid' AND query LIKE 'WITH input AS%'`,
      );
      return rows.length > 0 || undefined;
    });

  test('is read by a second statement: the enqueue is deduplicated to the holder', async () => {
    const engine = fx.make();
    const holder = new pg.Client({ connectionString: fx.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      const held = await engine.enqueue('race', { holder: true }, { unique: { key: 'raced', while: 'unfinished' }, client: holder });
      const racing = engine.enqueue('race', { holder: false }, { unique: { key: 'raced', while: 'unfinished' } });
      await insertWaiting();
      await holder.query('COMMIT');
      expect(await racing).toEqual({ id: held.id, deduplicated: true });
    } finally {
      await holder.end();
    }
  });

  test('is inserted again when that holder let go of the key meanwhile (claimed, for a pending key)', async () => {
    const engine = fx.make();
    const holder = new pg.Client({ connectionString: fx.url });
    await holder.connect();
    let racing: Promise<EnqueueResult> | undefined;
    try {
      await holder.query('BEGIN');
      const held = await engine.enqueue('race', { holder: true }, { unique: { key: 'raced-claimed', while: 'pending' }, client: holder });
      racing = engine.enqueue('race', { holder: false }, { unique: { key: 'raced-claimed', while: 'pending' } });
      await insertWaiting();
      // As a claim would: running, with a lease and the next token. Committed with the insert.
      await holder.query(
        `UPDATE pgqueue.jobs SET status = 'running', lease_token = lease_token + 1, lease_owner = 'test', attempt_count = 1,
                lease_expires_at = now() + interval '1 minute', deadline_at = now() + interval '1 minute' WHERE id = $1`,
        [held.id],
      );
      await holder.query('COMMIT');
      const outcome = await racing;
      expect(outcome.deduplicated).toBe(false);
      expect(outcome.id).not.toBe(held.id);
      expect((await engine.getJob(outcome.id))?.payload).toEqual({ holder: false });
    } finally {
      await racing?.catch(() => {});
      await holder.end();
    }
  });

  test('in a batch, only the raced key takes the second statement; the batch stays one transaction', async () => {
    const engine = fx.make();
    const holder = new pg.Client({ connectionString: fx.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      const held = await engine.enqueue('race', {}, { unique: { key: 'raced-batch', while: 'ever' }, client: holder });
      const racing = engine.enqueueMany([
        { queue: 'race', payload: 1, options: { unique: { key: 'raced-batch-free', while: 'ever' } } },
        { queue: 'race', payload: 2, options: { unique: { key: 'raced-batch', while: 'ever' } } },
        { queue: 'race', payload: 3 },
      ]);
      await insertWaiting();
      await holder.query('COMMIT');
      const ids = await racing;
      expect(ids.deduplicated).toEqual([false, true, false]);
      expect(ids[1]).toBe(held.id);
    } finally {
      await holder.end();
    }
  });
});
