import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseLostError, PgQueueError } from '../../lib/engine/index.js';
import { engineFixture, waitForOutcome } from '../support/engine.js';
import { localSignal, nextValues, testSignals } from '../support/signals.js';

// ctx.complete off the happy path: a caller's transaction that is old, not a transaction at all,
// or fails to commit; refusals while every pool connection is taken; the caller's settings.

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('txcomplete');
  await fx.pool.query(`CREATE TABLE ledger (job_id bigint, attempt int, note text)`);
  // Violated only at COMMIT: the way a caller's own COMMIT fails after ctx.complete ran.
  await fx.pool.query(`CREATE TABLE once (job_id bigint, CONSTRAINT once_unique UNIQUE (job_id) DEFERRABLE INITIALLY DEFERRED)`);
});
afterAll(() => fx.close());

const ledger = async (id: string) => (await fx.pool.query(`SELECT attempt, note FROM ledger WHERE job_id = $1 ORDER BY attempt`, [id])).rows;

test("D6: ctx.complete({ client }) refuses a lease that expired while the caller's transaction was open (its now() is old)", async () => {
  // The reaper is far away: only the fence's own clock can refuse the stale completion.
  const q = fx.make({ reaper: { intervalMs: 60_000 } });
  const outcomes = localSignal<string>('d6.outcomes');
  q.work('d6', async (job, ctx) => {
    const client = await fx.pool.connect();
    try {
      await client.query('BEGIN'); // now() is frozen here, while the lease is still live
      await client.query(`SELECT 1`);
      // The whole process stalls past the 500 ms lease, as under SIGSTOP or a long GC pause: no
      // timer runs meanwhile (so no local abort gets in first), and the handler resumes straight
      // into ctx.complete.
      const until = Date.now() + 900;
      while (Date.now() < until);
      try {
        await ctx.complete(async (tx) => {
          await tx.query({ text: `INSERT INTO ledger VALUES ($1, $2, 'stale')`, values: [job.id, job.attempt] });
        }, { client });
        await client.query('COMMIT');
        outcomes.signal('completed');
      } catch (error) {
        await client.query('ROLLBACK');
        outcomes.signal(error instanceof LeaseLostError ? `lost: ${error.reason}` : `error: ${(error as Error).message}`);
      }
    } finally {
      client.release();
    }
  }, { leaseMs: 500, abortMarginMs: 240 });
  await q.start();
  // The reaper's first pass runs at start. Let it end before the job exists: under load its
  // connection could still be opening when the handler's busy loop starts, and its reap statement
  // would then go out after the lease ran out and retry the job (seen once in CI as 'scheduled').
  await testSignals(q).reaper.passRan.next();
  const id = await q.enqueue('d6', {});
  expect(await outcomes.next()).toBe('lost: lease_lost');
  expect(await ledger(id)).toEqual([]);
  expect((await q.getJob(id))?.status).toBe('running'); // the reaper (not yet run) decides what happens next
});

test('D7: ctx.complete({ client }) with a client outside a transaction is refused before any work runs', async () => {
  const q = fx.make();
  const errors = localSignal<unknown>('d7.errors');
  let workRan = false;
  q.work('d7', async (job, ctx) => {
    const client = await fx.pool.connect();
    try {
      await ctx.complete(async (tx) => {
        workRan = true;
        await tx.query({ text: `INSERT INTO ledger VALUES ($1, $2, 'autocommitted')`, values: [job.id, job.attempt] });
        // While the work runs, an operator cancels the job: with no transaction, nothing held the
        // row, so the cancel goes through and the completion is refused, after the insert committed.
        await q.cancel(job.id, { actor: 'test' });
      }, { client });
    } catch (error) {
      errors.signal(error);
      throw error;
    } finally {
      client.release();
    }
  }, { maxAttempts: 1 });
  await q.start();
  const id = await q.enqueue('d7', {});
  const error = await errors.next();
  expect(workRan).toBe(false);
  expect(await ledger(id)).toEqual([]);
  expect(error).toBeInstanceOf(PgQueueError);
  expect(error).toMatchObject({ code: 'CLIENT_NOT_IN_TRANSACTION' });
  expect((error as Error).message).toMatch(/BEGIN/);
  await waitForOutcome(q, id, 'dead');
  expect(errors.unread()).toEqual([]);
});

test("D19: ctx.complete restores the caller's lock_timeout", async () => {
  const q = fx.make();
  const seen: string[] = [];
  q.work('d19', async (_job, ctx) => {
    const client = await fx.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL lock_timeout = '7s'`);
      await ctx.complete(async () => {}, { client, lockTimeoutMs: 250 });
      seen.push((await client.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout);
      await client.query('COMMIT');
      await client.query('BEGIN');
      await ctx.complete(async () => {}, { client }).catch(() => {}); // refused (finished): the setting is restored anyway
      seen.push((await client.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows[0]!.lock_timeout);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
  });
  await q.start();
  const id = await q.enqueue('d19', {});
  await waitForOutcome(q, id, 'succeeded');
  // The handler returned before its attempt ended: both settings were read by then.
  expect(seen).toEqual(['7s', '0']);
});

test("D14: when the caller's COMMIT after ctx.complete({ client }) fails, the attempt is recorded as an ordinary failure", async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 }, reaper: { intervalMs: 60_000 } });
  q.work('d14', async (job, ctx) => {
    const client = await fx.pool.connect();
    try {
      await client.query('BEGIN');
      await ctx.complete(async (tx) => {
        await tx.query({ text: `INSERT INTO once VALUES ($1)`, values: [job.id] });
        // The first attempt breaks a deferred constraint: its COMMIT fails.
        if (job.attempt === 1) await tx.query({ text: `INSERT INTO once VALUES ($1)`, values: [job.id] });
      }, { client });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  }, { leaseMs: 30_000, backoff: { baseMs: 0, maxMs: 0 } });
  await q.start();
  const id = await q.enqueue('d14', {});
  const job = await waitForOutcome(q, id, 'succeeded');
  expect(job.attemptCount).toBe(2);
  expect((await q.getJobEvents(id)).map((e) => [e.kind, e.attempt, e.errorCode])).toEqual([['retry_scheduled', 1, 'SQLSTATE_23505']]);
});

test('D14: a handler that rolls back after ctx.complete({ client }) and returns is recorded as failed at once, not left to the reaper', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 }, reaper: { intervalMs: 60_000 } });
  q.work('d14-rollback', async (job, ctx) => {
    const client = await fx.pool.connect();
    try {
      await client.query('BEGIN');
      await ctx.complete(async (tx) => {
        await tx.query({ text: `INSERT INTO ledger VALUES ($1, $2, 'rolled back?')`, values: [job.id, job.attempt] });
      }, { client });
      await client.query(job.attempt === 1 ? 'ROLLBACK' : 'COMMIT');
    } finally {
      client.release();
    }
  }, { leaseMs: 30_000, backoff: { baseMs: 0, maxMs: 0 } });
  await q.start();
  const id = await q.enqueue('d14-rollback', {});
  const job = await waitForOutcome(q, id, 'succeeded');
  expect(job.attemptCount).toBe(2);
  expect(await ledger(id)).toEqual([{ attempt: 2, note: 'rolled back?' }]);
  expect((await q.getJobEvents(id)).map((e) => [e.kind, e.errorCode])).toEqual([['retry_scheduled', 'COMPLETION_NOT_COMMITTED']]);
});

test('D2: ten refused ctx.complete calls at once (pool 10, concurrency 10) do not wedge the process', async () => {
  const q = fx.make({ poolSize: 10 });
  let go!: () => void;
  const released = new Promise<void>((resolve) => (go = resolve));
  const running = localSignal<string>('d2.running');
  const refusals = localSignal<string>('d2.refusals');
  q.work<{ n: number }>('d2', async (job, ctx) => {
    if (job.payload.n === 0) return; // the job enqueued afterwards: must still run
    running.signal(job.id);
    await released; // ignores its signal: it goes on to ctx.complete after the cancel
    try {
      await ctx.complete(async () => {});
    } catch (error) {
      refusals.signal((error as LeaseLostError).reason);
    }
  }, { concurrency: 10, prefetch: 0 });
  await q.start();
  const ids = await q.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ queue: 'd2', payload: { n: i + 1 } })));
  expect(new Set(await nextValues(running, 10))).toEqual(new Set(ids));
  for (const id of ids) await q.cancel(id, { actor: 'operator' }); // an operator cancels all ten
  go();
  expect(await nextValues(refusals, 10)).toEqual(Array.from({ length: 10 }, () => 'cancelled'));
  // The process still enqueues, claims and completes.
  const after = await q.enqueue('d2', { n: 0 });
  await waitForOutcome(q, after, 'succeeded', 10_000);
  // Each refusal is in its job's history.
  for (const id of ids) expect((await q.getJobEvents(id)).map((e) => [e.kind, e.errorCode])).toContainEqual(['lost_fence', 'CANCELLED']);
});

test('D18: retryable SQLSTATEs from a handler (inside ctx.complete too) are transient; others keep the unknown budget, with the SQLSTATE as code', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  const raise = (state: string) => `DO $$ BEGIN RAISE EXCEPTION 'raised %', '${state}' USING ERRCODE = '${state}'; END $$`;
  q.work<{ state: string; inside: boolean }>('d18', async (job, ctx) => {
    if (job.attempt >= 3) return;
    if (job.payload.inside) await ctx.complete(async (tx) => void (await tx.query({ text: raise(job.payload.state) })));
    else await fx.pool.query(raise(job.payload.state));
  }, { maxAttempts: 5, unknownErrorAttempts: 1, backoff: { baseMs: 0, maxMs: 0 } });
  await q.start();
  const cases = [
    { state: '40001', inside: false, end: 'succeeded' },
    { state: '40P01', inside: true, end: 'succeeded' },
    { state: '55P03', inside: true, end: 'succeeded' },
    { state: '57P01', inside: false, end: 'succeeded' },
    { state: '22012', inside: false, end: 'dead' },
    { state: '23505', inside: true, end: 'dead' },
  ];
  const ids = await q.enqueueMany(cases.map(({ state, inside }) => ({ queue: 'd18', payload: { state, inside } })));
  for (const [i, c] of cases.entries()) {
    const ended = await testSignals(q).worker.attemptEnded.waitFor((e) => e.jobId === ids[i] && (e.outcome === 'succeeded' || e.outcome === 'dead'));
    expect([c.state, ended.outcome, (await q.getJob(ids[i]!))?.status]).toEqual([c.state, c.end, c.end]);
    const codes = (await q.getJobEvents(ids[i]!)).map((e) => e.errorCode);
    expect(codes[0]).toBe(`SQLSTATE_${c.state}`);
  }
});

test('a heartbeat inside ctx.complete whose transaction rolls back does not extend the local lease', async () => {
  const q = fx.make({ reaper: { intervalMs: 50 }, scheduler: { intervalMs: 20 } });
  let running = 0;
  let maxRunning = 0;
  const problems: string[] = [];
  q.work('hb-rollback', async (job, ctx) => {
    running += 1;
    maxRunning = Math.max(maxRunning, running);
    try {
      if (ctx.attempt > 1) return;
      await sleep(450); // past a third of the lease: the heartbeat writes
      await ctx
        .complete(async () => {
          await ctx.heartbeat(); // through the completion's transaction
          throw new Error('the work failed'); // the transaction rolls back, and the renewal with it
        })
        .catch(() => {});
      // The handler goes on (a fallback path), honouring its signal: it must be aborted before
      // the database's lease (not renewed) runs out.
      while (!ctx.signal.aborted) {
        const { rows } = await fx.pool.query(`SELECT lease_expires_at < clock_timestamp() AS expired, status FROM pgqueue.job_rows WHERE id = $1`, [job.id]);
        if (rows[0].expired || rows[0].status !== 'running') problems.push(JSON.stringify(rows[0]));
        await sleep(25);
      }
    } finally {
      running -= 1;
    }
  }, { leaseMs: 1_000, abortMarginMs: 200, concurrency: 2, backoff: { baseMs: 0, maxMs: 0 } });
  await q.start();
  const id = await q.enqueue('hb-rollback', {});
  // Real time on purpose: the worker's own lease clock (1 s, not renewed) must abort the handler
  // before the database's lease runs out, which no SQL can stand in for. Only the end is awaited.
  await waitForOutcome(q, id, 'succeeded', 10_000);
  expect(running).toBe(0);
  expect(problems).toEqual([]);
  expect(maxRunning).toBe(1);
});

test('an enqueue inside ctx.complete to a queue this process has not seen reads on the transaction, not on a second pool connection', async () => {
  await fx.pool.query(`INSERT INTO pgqueue.queues (name) VALUES ('declared-elsewhere')`);
  const errors: string[] = [];
  const q = fx.make({ poolSize: 2, statementTimeoutMs: 1_000 });
  // Each handler says it is inside its transaction and waits (2 s at most) for the other's word.
  const inside = localSignal<string>('enqueue-in-tx.inside');
  q.work('enqueue-in-tx', async (job, ctx) => {
    try {
      await ctx.complete(async (tx) => {
        inside.signal(job.id);
        await inside.waitFor((other) => other !== job.id, 2_000).catch(() => {}); // both handlers hold their connection
        await q.enqueue('declared-elsewhere', {}, { client: tx });
      });
    } catch (error) {
      errors.push((error as Error).message);
      throw error;
    }
  }, { concurrency: 2 });
  await q.start();
  const ids = await q.enqueueMany([{ queue: 'enqueue-in-tx', payload: {} }, { queue: 'enqueue-in-tx', payload: {} }]);
  for (const id of ids) await waitForOutcome(q, id, 'succeeded', 10_000);
  expect(errors).toEqual([]);
});
