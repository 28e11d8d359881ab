import { setTimeout as sleep } from 'node:timers/promises';
import type { JobEvent } from '../../lib/engine/index.js';
import { engineFixture, waitForOutcome } from '../support/engine.js';
import { allEnded, attemptEnded, localSignal, testSignals } from '../support/signals.js';
import { expireLease } from '../support/time-travel.js';

// Most of these tests are real time on purpose: what they check is the worker's own lease clock
// (a heartbeat's throttle, the abort margin, an abandoned handler, a lease running out in the
// buffer), which moving a row's times by SQL would not exercise. They wait for the end on signals;
// the one about the reaper and a silent worker moves the lease into the past instead.

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('leases');
});
afterAll(() => fx.close());

const leaseOf = async (id: string) =>
  (
    await fx.pool.query<{ status: string; lease_expires_at: Date | null; deadline_at: Date | null; lease_token: string; now: Date }>(
      `SELECT status, lease_expires_at, deadline_at, lease_token::text, now() FROM pgqueue.job_rows WHERE id = $1`,
      [id],
    )
  ).rows[0]!;

test('a heartbeat after progress extends the lease', async () => {
  const q = fx.make();
  let release!: () => void;
  const done = new Promise<void>((r) => (release = r));
  let beats = 0;
  const sixBeats = localSignal<void>('hb-extend.sixBeats');
  q.work('hb-extend', async (_job, ctx) => {
    // Progress every 400 ms over 2.4 s, two leases: the job outlives its first lease only because
    // of the renewals (a write once a third of the lease has passed).
    for (let i = 0; i < 6; i++) {
      await sleep(400);
      await ctx.heartbeat();
      beats++;
    }
    sixBeats.signal();
    await done;
  }, { leaseMs: 1_200, abortMarginMs: 300 });
  await q.start();
  const id = await q.enqueue('hb-extend', {});
  await sixBeats.next();
  expect(beats).toBe(6);
  const row = await leaseOf(id);
  expect(row.status).toBe('running');
  expect(row.lease_expires_at!.getTime()).toBeGreaterThan(row.now.getTime());
  release();
  expect((await waitForOutcome(q, id, 'succeeded')).status).toBe('succeeded');
  expect(q.metrics.count('heartbeats', { queue: 'hb-extend' })).toBeGreaterThanOrEqual(2);
});

test('without heartbeats the lease runs out: the signal aborts before expiry and the attempt fails LEASE_EXPIRED', async () => {
  const q = fx.make();
  let abortedAt = 0;
  let leaseAtAbort: Awaited<ReturnType<typeof leaseOf>> | undefined;
  q.work('hb-none', async (job, ctx) => {
    await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    abortedAt = Date.now();
    leaseAtAbort = await leaseOf(job.id);
    throw ctx.signal.reason;
  }, { leaseMs: 1_000, abortMarginMs: 400, maxAttempts: 1 });
  await q.start();
  const id = await q.enqueue('hb-none', {});
  const row = await waitForOutcome(q, id, 'dead');
  expect(abortedAt).toBeGreaterThan(0);
  // The handler was told while the lease was still valid in the database.
  expect(leaseAtAbort!.status).toBe('running');
  expect(leaseAtAbort!.lease_expires_at!.getTime()).toBeGreaterThan(leaseAtAbort!.now.getTime());
  expect(row.lastErrorCode).toBe('LEASE_EXPIRED');
});

test('no heartbeat can push the lease past the maximum runtime; the attempt then fails MAX_RUNTIME', async () => {
  const q = fx.make();
  const seen: { expires: number; deadline: number }[] = [];
  q.work('hb-deadline', async (job, ctx) => {
    try {
      for (;;) {
        await sleep(100);
        await ctx.heartbeat();
        const row = await leaseOf(job.id);
        if (row.status !== 'running') return;
        seen.push({ expires: row.lease_expires_at!.getTime(), deadline: row.deadline_at!.getTime() });
      }
    } catch (error) {
      expect(ctx.signal.aborted).toBe(true);
      throw error;
    }
  }, { leaseMs: 600, abortMarginMs: 150, maxRuntimeMs: 1_800, maxAttempts: 1 });
  await q.start();
  const id = await q.enqueue('hb-deadline', {});
  const job = await waitForOutcome(q, id, 'dead');
  expect(job.lastErrorCode).toBe('MAX_RUNTIME');
  expect(seen.length).toBeGreaterThan(5);
  for (const s of seen) expect(s.expires).toBeLessThanOrEqual(s.deadline);
  // The lease did reach the deadline (heartbeats extended it as far as allowed).
  expect(seen.some((s) => s.expires === s.deadline)).toBe(true);
});

test('a handler that ignores its aborted signal is abandoned: its slot frees and its attempt is failed', async () => {
  const q = fx.make();
  let calls = 0;
  q.work('stuck', async () => {
    calls++;
    if (calls === 1) await new Promise(() => {}); // never settles
    // Margins wide enough for a loaded machine: abandoned 300 ms after the abort, which leaves
    // 300 ms of lease for the fenced failure to land before the database would expire it.
  }, { leaseMs: 2_000, abortMarginMs: 600, concurrency: 1, backoff: { baseMs: 0, maxMs: 0 } });
  await q.start();
  const id = await q.enqueue('stuck', {});
  await waitForOutcome(q, id, 'succeeded');
  const events = await q.getJobEvents(id);
  expect(events.map((e) => [e.kind, e.errorCode])).toEqual([['retry_scheduled', 'LEASE_EXPIRED']]);
  expect(calls).toBe(2);
});

test('the reaper recovers a lease whose worker went silent, with backoff, then dead when attempts run out', async () => {
  const q = fx.make({ reaper: { intervalMs: 50 } });
  const signals = testSignals(q);
  await q.declareQueues(['orphans']);
  const id = await q.enqueue('orphans', {}, { maxAttempts: 2 });
  // Claim as a worker that will never come back, then let its lease run out by SQL (the reaper
  // judges the row, not anyone's clock; no worker here holds the job).
  const claimOnce = async () => {
    const { rowCount } = await fx.pool.query(
      `UPDATE pgqueue.jobs SET status = 'running', attempt_count = attempt_count + 1, lease_token = lease_token + 1,
         lease_owner = 'ghost', lease_expires_at = now() + interval '1 hour', deadline_at = now() + interval '1 hour',
         max_attempts = coalesce(max_attempts, 5), backoff_base_ms = 10, backoff_max_ms = 10
       WHERE id = $1 AND status = 'pending'`,
      [id],
    );
    expect(rowCount).toBe(1);
    await expireLease(fx.pool, id);
  };
  await claimOnce();
  await q.start();
  await signals.reaper.passRan.waitFor((p) => p.reaped > 0);
  // Scheduled for its 10 ms backoff; pending once the scheduler promoted it.
  await signals.scheduler.passRan.waitFor((p) => p.promoted > 0);
  await claimOnce();
  await signals.reaper.passRan.waitFor((p) => p.dead > 0);
  const dead = (await q.getJob(id))!;
  expect(dead).toMatchObject({ attemptCount: 2, lastErrorCode: 'LEASE_EXPIRED', leaseOwner: null });
  const events = await q.getJobEvents(id);
  expect(events.map((e) => [e.kind, e.worker, e.toStatus])).toEqual([
    ['lease_expired', 'ghost', 'scheduled'],
    ['dead', 'ghost', 'dead'],
  ]);
});

test('events stream: a lost fence on heartbeat is reported with its reason and aborts the handler', async () => {
  const q = fx.make();
  const events: JobEvent[] = [];
  q.onJobEvent((e) => events.push(e));
  let outcome = '';
  q.work('cancel-me', async (job, ctx) => {
    // Past a third of the lease, so the heartbeat writes (and meets the cancellation), and far from
    // its end, so the local abort cannot come first on a loaded machine. Real time on purpose: the
    // heartbeat's throttle reads the worker's clock, which no SQL moves.
    await sleep(1_100);
    await fx.pool.query(`UPDATE pgqueue.jobs SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL WHERE id = $1`, [job.id]);
    try {
      await ctx.heartbeat();
      outcome = 'renewed';
    } catch (error) {
      outcome = `${(error as { code: string }).code}:${(error as { reason: string }).reason}:${ctx.signal.aborted}`;
    }
  }, { leaseMs: 3_000, abortMarginMs: 300 });
  await q.start();
  const id = await q.enqueue('cancel-me', {});
  await attemptEnded(testSignals(q), id);
  expect(outcome).toBe('LEASE_LOST:cancelled:true');
  expect(events).toContainEqual(expect.objectContaining({ type: 'lease_lost', jobId: id, reason: 'cancelled', operation: 'heartbeat' }));
  expect((await q.getJob(id))?.status).toBe('cancelled');
});

test('D12: a job whose maxRuntimeMs is below the lease\'s abort margin is not aborted at once: the margin is sized per attempt', async () => {
  const q = fx.make();
  const seen: string[] = [];
  // The handler's lease is 30 s, so its default margin is 3 s; this job may run 1 s at most.
  q.work('short-runtime', async (_job, ctx) => {
    await sleep(200);
    seen.push(ctx.signal.aborted ? `aborted: ${(ctx.signal.reason as { code: string }).code}` : 'not aborted');
  });
  await q.start();
  const id = await q.enqueue('short-runtime', {}, { maxRuntimeMs: 1_000 });
  const job = await waitForOutcome(q, id, 'succeeded');
  expect(seen).toEqual(['not aborted']);
  expect(job.attemptCount).toBe(1);
});

test('D12: an explicit abort margin over half the maximum runtime is refused when the handler is registered', () => {
  const q = fx.make();
  expect(() => q.work('bad-margin', async () => {}, { maxRuntimeMs: 1_000, abortMarginMs: 600 })).toThrow(/abortMarginMs.*more than half the lease.*maxRuntimeMs/);
});

test('D3: prefetched jobs do not spend their lease or an attempt in the buffer (prefetch = concurrency, 2 s handler, 3 s lease)', async () => {
  const q = fx.make();
  let runs = 0;
  const deadlines: string[] = [];
  q.work('buffered', async (job, ctx) => {
    runs += 1;
    // The handler sees the deadline its attempt really has (a start renewal moves it).
    const { rows } = await fx.pool.query(`SELECT deadline_at FROM pgqueue.job_rows WHERE id = $1`, [job.id]);
    if (rows[0].deadline_at.getTime() !== job.deadlineAt.getTime()) deadlines.push(`${job.id}: ${job.deadlineAt.toISOString()} vs ${rows[0].deadline_at.toISOString()}`);
    await sleep(2_000);
    if (ctx.signal.aborted) throw ctx.signal.reason;
  }, { concurrency: 10, prefetch: 10, leaseMs: 3_000, maxAttempts: 3 });
  await q.start();
  const ids = await q.enqueueMany(Array.from({ length: 20 }, () => ({ queue: 'buffered', payload: {} })));
  await allEnded(testSignals(q), ids, 'succeeded', 30_000);
  // Every job ran once, on its first attempt: none was aborted, retried or reaped for the time it waited.
  expect(runs).toBe(20);
  expect(deadlines).toEqual([]);
  const { rows } = await fx.pool.query(`SELECT attempt_count, count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'buffered' GROUP BY 1`);
  expect(rows).toEqual([{ attempt_count: 1, n: 20 }]);
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_events e JOIN pgqueue.job_rows j ON j.id = e.job_id WHERE j.queue_name = 'buffered'`)).rows[0].n).toBe(0);
}, 60_000);

test('D3: a buffered job whose lease runs out before a slot frees is released without charging its attempt', async () => {
  const q = fx.make();
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const ran: string[] = [];
  q.work<{ n: number }>('stuck-slot', async (job) => {
    ran.push(`n${job.payload.n}`);
    if (job.payload.n === 1) await held; // the one slot stays busy for two leases
  }, { concurrency: 1, prefetch: 1, leaseMs: 1_000 });
  await q.start();
  const [first, second] = await q.enqueueMany([1, 2].map((n) => ({ queue: 'stuck-slot', payload: { n } })));
  // The first job heartbeats nothing but is not checked here; the second waits in the buffer until
  // its lease runs out on the worker's clock (real time on purpose: that timer is what is tested).
  await attemptEnded(testSignals(q), second!, 'released', 10_000);
  expect((await q.getJobEvents(second!)).map((e) => e.kind)).toContain('released');
  release();
  await waitForOutcome(q, second!, 'succeeded', 10_000);
  const job = await q.getJob(second!);
  // Its one real run is its first attempt: the release gave back the attempt the buffer took.
  expect(job?.attemptCount).toBe(1);
  expect(job?.releaseCount).toBe(0);
  expect(ran.filter((r) => r === 'n2')).toEqual(['n2']);
  void first;
});
