import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseLostError, RetryableJobError } from '../../lib/engine/index.js';
import { engineFixture, waitForOutcome } from '../support/engine.js';
import { attemptEnded, localSignal, nextValues, testSignals } from '../support/signals.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('sideeffects');
  await fx.pool.query(`CREATE TABLE ledger (job_id bigint, token bigint, note text)`);
  await fx.pool.query(`CREATE TABLE gateway (key text PRIMARY KEY, calls int NOT NULL DEFAULT 1)`);
});
afterAll(() => fx.close());

/** A fake payment gateway that deduplicates by idempotency key, and counts calls. */
async function charge(key: string): Promise<{ chargeId: string }> {
  await fx.pool.query(`INSERT INTO gateway (key) VALUES ($1) ON CONFLICT (key) DO UPDATE SET calls = gateway.calls + 1`, [key]);
  return { chargeId: `ch_${key.length}` };
}

test("ctx.complete commits the handler's writes with the job's success, atomically", async () => {
  const q = fx.make();
  q.work('tx-ok', async (job, ctx) => {
    const note = await ctx.complete(async (tx) => {
      await tx.query({ text: `INSERT INTO ledger VALUES ($1, $2, 'ok')`, values: [job.id, job.leaseToken] });
      return 'written';
    });
    expect(note).toBe('written');
  });
  await q.start();
  const id = await q.enqueue('tx-ok', {});
  await waitForOutcome(q, id, 'succeeded');
  expect((await fx.pool.query(`SELECT note FROM ledger WHERE job_id = $1`, [id])).rows).toEqual([{ note: 'ok' }]);
});

test('ctx.complete rolls back with the work when the work throws, and the job is retried', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  q.work('tx-throw', async (job, ctx) => {
    await ctx.complete(async (tx) => {
      await tx.query({ text: `INSERT INTO ledger VALUES ($1, $2, 'attempt')`, values: [job.id, job.attempt] });
      if (job.attempt === 1) throw new RetryableJobError('downstream said no', { retryAfterMs: 10 });
    });
  });
  await q.start();
  const id = await q.enqueue('tx-throw', {});
  await waitForOutcome(q, id, 'succeeded');
  expect((await fx.pool.query(`SELECT token::int FROM ledger WHERE job_id = $1`, [id])).rows).toEqual([{ token: 2 }]);
});

test("a stale worker's ctx.complete writes nothing and learns it; the new owner's write is there once", async () => {
  const q = fx.make({ reaper: { intervalMs: 20 }, scheduler: { intervalMs: 20 } });
  const signals = testSignals(q);
  const outcomes = localSignal<string>('tx-stale.outcomes');
  q.work('tx-stale', async (job, ctx) => {
    if (job.attempt === 1) {
      // Ignore the signal and outlive the lease; the job is reaped and runs again meanwhile, to
      // its success (its ledger row committed with it).
      await attemptEnded(signals, job.id, 'succeeded', 10_000);
    }
    try {
      await ctx.complete(async (tx) => {
        await tx.query({ text: `INSERT INTO ledger VALUES ($1, $2, 'from attempt ' || $3)`, values: [job.id, job.leaseToken, job.attempt] });
      });
      outcomes.signal(`attempt ${job.attempt}: completed`);
    } catch (error) {
      outcomes.signal(`attempt ${job.attempt}: ${(error as LeaseLostError).code}/${(error as LeaseLostError).reason}`);
    }
  }, { leaseMs: 300, abortMarginMs: 100, backoff: { baseMs: 0, maxMs: 0 } });
  await q.start();
  const id = await q.enqueue('tx-stale', {});
  // Attempt 1's token was superseded by attempt 2's claim: a lost lease, not "finished" (that is for our own token).
  expect(await nextValues(outcomes, 2, 15_000)).toEqual(['attempt 2: completed', 'attempt 1: LEASE_LOST/lease_lost']);
  expect((await fx.pool.query(`SELECT note FROM ledger WHERE job_id = $1`, [id])).rows).toEqual([{ note: 'from attempt 2' }]);
  const job = await q.getJob(id);
  expect(job).toMatchObject({ status: 'succeeded', leaseToken: '2' });
});

test("ctx.complete waits at most lockTimeoutMs for a row someone else holds, writes nothing, and the attempt is retried", async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  const holder = await fx.pool.connect();
  const outcomes: string[] = [];
  try {
    q.work('tx-locked', async (job, ctx) => {
      if (job.attempt === 1) {
        // An operator's statement holds the job's row (as a cancellation waiting on it would).
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM pgqueue.jobs WHERE id = $1 FOR UPDATE`, [job.id]);
      }
      const started = performance.now();
      try {
        await ctx.complete(async (tx) => {
          await tx.query({ text: `INSERT INTO ledger VALUES ($1, $2, 'locked')`, values: [job.id, job.attempt] });
        }, { lockTimeoutMs: 200 });
        outcomes.push(`attempt ${job.attempt}: completed`);
      } catch (error) {
        const waited = performance.now() - started;
        outcomes.push(`attempt ${job.attempt}: ${(error as RetryableJobError).code} after ${waited >= 190 && waited < 2_000 ? '~200 ms' : `${waited} ms`}`);
        await holder.query('ROLLBACK');
        throw error;
      }
    }, { backoff: { baseMs: 0, maxMs: 0 } });
    await q.start();
    const id = await q.enqueue('tx-locked', {});
    await waitForOutcome(q, id, 'succeeded');
    expect(outcomes).toEqual(['attempt 1: FENCE_LOCK_TIMEOUT after ~200 ms', 'attempt 2: completed']);
    expect((await fx.pool.query(`SELECT token::int AS attempt FROM ledger WHERE job_id = $1`, [id])).rows).toEqual([{ attempt: 2 }]);
    expect((await q.getJob(id))?.lastErrorCode).toBe('FENCE_LOCK_TIMEOUT');
  } finally {
    holder.release();
  }
});

test('a confirmed effect is not repeated on a later attempt; its stored result is returned', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  const results: unknown[] = [];
  q.work('pay', async (_job, ctx) => {
    results.push(await ctx.effect('charge', charge));
    if (ctx.attempt === 1) throw new RetryableJobError('crashed after the charge', { retryAfterMs: 10 });
  });
  await q.start();
  const id = await q.enqueue('pay', {});
  await waitForOutcome(q, id, 'succeeded');
  const key = `pgqueue:pay:${id}:charge`;
  expect((await fx.pool.query(`SELECT calls FROM gateway WHERE key = $1`, [key])).rows).toEqual([{ calls: 1 }]);
  expect(results).toEqual([{ chargeId: `ch_${key.length}` }, { chargeId: `ch_${key.length}` }]);
  expect(await q.getJobEffects(id)).toEqual([expect.objectContaining({ name: 'charge', idempotencyKey: key, status: 'confirmed', attempts: 1 })]);
  expect((await q.getJobEvents(id)).map((e) => e.kind)).toEqual(['effect_started', 'effect_confirmed', 'retry_scheduled']);
});

test('an uncertain effect (started, never confirmed) is reconciled at the destination instead of repeated', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  q.work('pay-reconcile', async (_job, ctx) => {
    await ctx.effect(
      'charge',
      async (key) => {
        const result = await charge(key);
        if (ctx.attempt === 1) throw new RetryableJobError('connection reset after the charge was sent', { retryAfterMs: 10 });
        return result;
      },
      {
        reconcile: async (key) => {
          const { rows } = await fx.pool.query(`SELECT 1 FROM gateway WHERE key = $1`, [key]);
          return rows.length ? { done: true, result: { chargeId: `ch_${key.length}`, reconciled: true } } : { done: false };
        },
      },
    );
  });
  await q.start();
  const id = await q.enqueue('pay-reconcile', {});
  await waitForOutcome(q, id, 'succeeded');
  expect((await fx.pool.query(`SELECT calls FROM gateway WHERE key = $1`, [`pgqueue:pay-reconcile:${id}:charge`])).rows).toEqual([{ calls: 1 }]);
  const [effect] = await q.getJobEffects(id);
  expect(effect).toMatchObject({ status: 'confirmed', attempts: 2, result: { reconciled: true } });
  expect((await q.getJobEvents(id)).map((e) => e.kind)).toEqual(['effect_started', 'retry_scheduled', 'effect_retried', 'effect_reconciled']);
});

test('without reconcile, an uncertain effect is called again with the same key', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  q.work('pay-retry', async (_job, ctx) => {
    await ctx.effect('charge', async (key) => {
      await charge(key);
      if (ctx.attempt === 1) throw new RetryableJobError('timed out', { retryAfterMs: 10 });
      return 'ok';
    });
  });
  await q.start();
  const id = await q.enqueue('pay-retry', {});
  await waitForOutcome(q, id, 'succeeded');
  // Two calls reached the gateway, with one key: it deduplicates, so one charge.
  expect((await fx.pool.query(`SELECT count(*)::int AS charges, sum(calls)::int AS calls FROM gateway WHERE key = $1`, [`pgqueue:pay-retry:${id}:charge`])).rows).toEqual([{ charges: 1, calls: 2 }]);
});

test('an ordering key moves on when its head completes transactionally', async () => {
  const q = fx.make();
  const order: string[] = [];
  q.work<{ n: number }>('tx-keyed', async (job, ctx) => {
    await sleep(5);
    await ctx.complete(async () => void order.push(`n${job.payload.n}`));
  });
  await q.start();
  const ids = await q.enqueueMany([1, 2, 3].map((n) => ({ queue: 'tx-keyed', payload: { n }, options: { orderingKey: 'T' } })));
  await waitForOutcome(q, ids[2]!, 'succeeded');
  expect(order).toEqual(['n1', 'n2', 'n3']);
});

test("ctx.complete inside the caller's own transaction: committed with it; rolled back, the job is retried", async () => {
  const q = fx.make({ reaper: { intervalMs: 20 }, scheduler: { intervalMs: 20 } });
  q.work('tx-own', async (job, ctx) => {
    const client = await fx.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO ledger VALUES ($1, $2, 'own transaction')`, [job.id, job.leaseToken]);
      await ctx.complete(async () => {}, { client });
      await client.query(job.attempt === 1 ? 'ROLLBACK' : 'COMMIT');
    } finally {
      client.release();
    }
  }, { leaseMs: 300, abortMarginMs: 50, backoff: { baseMs: 0, maxMs: 0 } });
  await q.start();
  const id = await q.enqueue('tx-own', {});
  const job = await waitForOutcome(q, id, 'succeeded');
  expect(job.attemptCount).toBe(2);
  expect((await fx.pool.query(`SELECT token::int FROM ledger WHERE job_id = $1`, [id])).rows).toEqual([{ token: 2 }]);
  // Rolled back: recorded as a failed attempt as soon as the handler returns, not a lease later (D14).
  expect((await q.getJobEvents(id)).map((e) => [e.kind, e.errorCode])).toEqual([['retry_scheduled', 'COMPLETION_NOT_COMMITTED']]);
});

test('D8: an effect whose result cannot be stored is recorded as happened, the job fails permanently, and no attempt calls again', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  q.work<{ shape: 'huge' | 'bigint' }>('pay-unstorable', async (job, ctx) => {
    await ctx.effect('charge', async (key) => {
      await charge(key);
      return job.payload.shape === 'huge' ? { receipt: 'x'.repeat(20_000) } : { amount: 10n };
    });
  }, { backoff: { baseMs: 0, maxMs: 0 } });
  await q.start();
  for (const shape of ['huge', 'bigint'] as const) {
    const id = await q.enqueue('pay-unstorable', { shape });
    const dead = await waitForOutcome(q, id, 'dead');
    expect(dead).toMatchObject({ attemptCount: 1, lastErrorCode: 'EFFECT_RESULT_NOT_STORED' });
    const key = `pgqueue:pay-unstorable:${id}:charge`;
    expect((await fx.pool.query(`SELECT calls FROM gateway WHERE key = $1`, [key])).rows).toEqual([{ calls: 1 }]);
    expect(await q.getJobEffects(id)).toEqual([expect.objectContaining({ status: 'confirmed', resultStored: false, result: null })]);
    // A replay (after a fix elsewhere) does not call the destination again either.
    await q.replay(id, { actor: 'test' });
    await waitForOutcome(q, id, 'dead');
    expect((await q.getJobEvents(id)).filter((e) => e.kind === 'dead')).toHaveLength(2);
    expect((await fx.pool.query(`SELECT calls FROM gateway WHERE key = $1`, [key])).rows).toEqual([{ calls: 1 }]);
  }
});

test('D8: with reconcile, a replay asks the destination for the result an earlier attempt could not store', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  const results: unknown[] = [];
  q.work('pay-unstorable-rec', async (_job, ctx) => {
    results.push(
      await ctx.effect(
        'charge',
        async (key) => {
          await charge(key);
          return { receipt: 'x'.repeat(20_000) };
        },
        { reconcile: async (key) => ({ done: true, result: { receipt: `short:${key.length}` } }) },
      ),
    );
  });
  await q.start();
  const id = await q.enqueue('pay-unstorable-rec', {});
  await waitForOutcome(q, id, 'dead');
  await q.replay(id, { actor: 'test' });
  await waitForOutcome(q, id, 'succeeded');
  const key = `pgqueue:pay-unstorable-rec:${id}:charge`;
  expect((await fx.pool.query(`SELECT calls FROM gateway WHERE key = $1`, [key])).rows).toEqual([{ calls: 1 }]);
  expect(results).toEqual([{ receipt: `short:${key.length}` }]);
  expect(await q.getJobEffects(id)).toEqual([expect.objectContaining({ status: 'confirmed', resultStored: true, result: { receipt: `short:${key.length}` } })]);
});

test('ctx.effect inside ctx.complete is refused before anything is called', async () => {
  const q = fx.make();
  const errors: unknown[] = [];
  q.work('effect-in-tx', async (_job, ctx) => {
    await ctx.complete(async () => {
      await ctx.effect('charge', charge).catch((error: unknown) => {
        errors.push(error);
      });
    });
  });
  await q.start();
  const id = await q.enqueue('effect-in-tx', {});
  await waitForOutcome(q, id, 'succeeded');
  expect(errors).toEqual([expect.objectContaining({ code: 'EFFECT_INSIDE_COMPLETE' })]);
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM gateway WHERE key LIKE $1`, [`pgqueue:effect-in-tx:${id}:%`])).rows).toEqual([{ n: 0 }]);
});
