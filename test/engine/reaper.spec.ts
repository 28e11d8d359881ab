import { backoffDelayMs, decideRetry } from '../../lib/engine/retry.js';
import { engineFixture } from '../support/engine.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('reaper');
});
afterAll(() => fx.close());

/** A running job of `queue` whose lease ran out a second ago, as a crashed worker leaves it. */
async function expiredJob(queue: string, fields: { attempt?: number; maxAttempts?: number; baseMs?: number; maxMs?: number } = {}): Promise<string> {
  await fx.pool.query(`INSERT INTO pgqueue.queues (name) VALUES ($1) ON CONFLICT DO NOTHING`, [queue]);
  const { rows } = await fx.pool.query<{ id: string }>(
    `INSERT INTO pgqueue.jobs (queue_name, payload, status, attempt_count, max_attempts, backoff_base_ms, backoff_max_ms,
                               lease_owner, lease_token, lease_expires_at, deadline_at, claimed_at)
     VALUES ($1, '{}', 'running', $2, $3, $4, $5, 'crashed-worker', 1, now() - interval '1 second', now() + interval '1 hour', now() - interval '2 seconds')
     RETURNING id::text`,
    [queue, fields.attempt ?? 1, fields.maxAttempts ?? 5, fields.baseMs ?? 1_000, fields.maxMs ?? 600_000],
  );
  return rows[0]!.id;
}

const status = async (id: string) => (await fx.pool.query(`SELECT status::text, last_error_code FROM pgqueue.job_rows WHERE id = $1`, [id])).rows[0];

describe('D1: backoff is bounded for any attempt', () => {
  test('in JS: a huge attempt number gives a finite delay within the cap, even with a zero base', () => {
    for (const attempt of [1_016, 1_025, 5_000, 1_000_000]) {
      for (const backoff of [{ baseMs: 1_000, maxMs: 600_000 }, { baseMs: 0, maxMs: 600_000 }, { baseMs: 2_147_483_647, maxMs: 2_147_483_647 }]) {
        const delay = backoffDelayMs(attempt, backoff, () => 0.5);
        expect(Number.isInteger(delay)).toBe(true);
        expect(delay).toBeGreaterThanOrEqual(0);
        expect(delay).toBeLessThanOrEqual(backoff.maxMs);
      }
    }
    const failure = { class: 'transient' as const, code: 'X', message: 'x', retryAfterMs: undefined };
    expect(Number.isFinite(decideRetry(failure, 999_999, 1_000_000, 3, { baseMs: 0, maxMs: 10 }).delayMs)).toBe(true);
  });

  test('in SQL: an expired lease at attempt 2,000 is reaped, and so are the other queues\' expired leases in the same pass', async () => {
    const q = fx.make();
    const huge = await expiredJob('d1-huge', { attempt: 2_000, maxAttempts: 1_000_000 });
    const hugeZeroBase = await expiredJob('d1-huge', { attempt: 999_999, maxAttempts: 1_000_000, baseMs: 0 });
    const other = await expiredJob('d1-other');
    const result = await q.reapOnce();
    expect(result.reaped).toBe(3);
    expect(await status(huge)).toEqual({ status: 'scheduled', last_error_code: 'LEASE_EXPIRED' });
    expect(await status(hugeZeroBase)).toEqual({ status: 'scheduled', last_error_code: 'LEASE_EXPIRED' });
    expect(await status(other)).toEqual({ status: 'scheduled', last_error_code: 'LEASE_EXPIRED' });
    const { rows } = await fx.pool.query(`SELECT available_at - now() <= interval '600 seconds' AS bounded FROM pgqueue.job_rows WHERE id = ANY($1::bigint[])`, [[huge, hugeZeroBase]]);
    expect(rows).toEqual([{ bounded: true }, { bounded: true }]);
  });
});

describe('one row never fails a maintenance pass', () => {
  test('a row the reaper cannot update is set aside (logged, dead when that works); every other expired lease is reaped', async () => {
    const logger = { lines: [] as string[], log: () => {}, warn: (m: string) => void logger.lines.push(m), error: (m: string) => void logger.lines.push(m) };
    const q = fx.make({ logger, reaper: { intervalMs: 100, batchSize: 10 } });
    const poison = await expiredJob('d1-poison');
    const others = await Promise.all(Array.from({ length: 12 }, () => expiredJob('d1-poison')));
    // Stands for any row-specific failure of the batch statement (a constraint, a trigger, an
    // arithmetic error nobody foresaw): this row cannot be moved out of 'running' at all.
    await fx.pool.query(`
      CREATE FUNCTION pgqueue.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF OLD.id = ${Number(poison)} THEN RAISE EXCEPTION 'row % is poisoned', OLD.id; END IF; RETURN NEW; END $$;
      CREATE TRIGGER refuse_poison BEFORE UPDATE ON pgqueue.jobs FOR EACH ROW EXECUTE FUNCTION pgqueue.refuse_poison();`);
    try {
      const first = await q.reapOnce();
      expect(first.reaped).toBe(12);
      for (const id of others) expect((await status(id)).status).toBe('scheduled');
      expect((await status(poison)).status).toBe('running');
      expect(logger.lines.filter((l) => l.includes(`job ${poison}`))).toHaveLength(1);
      // Later passes skip it without failing (and without logging it again).
      const second = await q.reapOnce();
      expect(second.reaped).toBe(0);
      expect(logger.lines.filter((l) => l.includes(`job ${poison}`))).toHaveLength(1);
    } finally {
      await fx.pool.query(`DROP TRIGGER refuse_poison ON pgqueue.jobs; DROP FUNCTION pgqueue.refuse_poison()`);
      await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE id = $1`, [poison]);
    }
  });

  test('a row whose normal recovery fails but which can still be marked dead is marked dead with REAP_FAILED', async () => {
    const logger = { lines: [] as string[], log: () => {}, warn: (m: string) => void logger.lines.push(m), error: (m: string) => void logger.lines.push(m) };
    const q = fx.make({ logger });
    const poison = await expiredJob('d1-poison-dead');
    const other = await expiredJob('d1-poison-dead');
    // Only the way back to 'scheduled' is refused for this row.
    await fx.pool.query(`
      CREATE FUNCTION pgqueue.refuse_retry() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF OLD.id = ${Number(poison)} AND NEW.status = 'scheduled' THEN RAISE EXCEPTION 'no retry for %', OLD.id; END IF; RETURN NEW; END $$;
      CREATE TRIGGER refuse_retry BEFORE UPDATE ON pgqueue.jobs FOR EACH ROW EXECUTE FUNCTION pgqueue.refuse_retry();`);
    try {
      const result = await q.reapOnce();
      expect(result).toMatchObject({ reaped: 2, dead: 1 });
      expect(await status(other)).toEqual({ status: 'scheduled', last_error_code: 'LEASE_EXPIRED' });
      expect(await status(poison)).toEqual({ status: 'dead', last_error_code: 'REAP_FAILED' });
      const [event] = await q.getJobEvents(poison);
      expect(event).toMatchObject({ kind: 'dead', errorCode: 'REAP_FAILED' });
      expect(event!.message).toMatch(/no retry for/);
    } finally {
      await fx.pool.query(`DROP TRIGGER refuse_retry ON pgqueue.jobs; DROP FUNCTION pgqueue.refuse_retry()`);
    }
  });
});
