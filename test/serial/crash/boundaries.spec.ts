import type { HandlerOptions } from '../../../lib/engine/index.js';
import { crashFixture, type CrashFixture } from '../../support/crash-harness.js';
import { waitFor } from '../../support/engine.js';

/**
 * The reference's crash tests 2-6: a real worker process is killed, paused or cut off at each
 * boundary of a job's life (after the claim, mid-job past the lease, after an external side
 * effect, while its heartbeats fail, on its last attempt), and another process recovers the job.
 * What ran where comes from the side tables the workers write (test/support/crash-tables.sql).
 */
let fx: CrashFixture;
beforeAll(async () => {
  fx = await crashFixture('crashbounds');
  // "Never a deletion": every DELETE on the jobs table is recorded, by anyone, for the whole file.
  await fx.pool.query(`
    CREATE TABLE crash_job_deletes (job_id bigint, status text, at timestamptz DEFAULT clock_timestamp());
    CREATE FUNCTION crash_record_delete() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN INSERT INTO crash_job_deletes (job_id, status) VALUES (OLD.id, OLD.status); RETURN OLD; END $$;
    CREATE TRIGGER crash_record_delete BEFORE DELETE ON pgqueue.jobs FOR EACH ROW EXECUTE FUNCTION crash_record_delete();
  `);
});
afterAll(() => fx?.close());
afterEach((context) => {
  if (context.task.result?.state === 'fail') console.log(fx.logs());
});

/** Short leases so a crash is recovered in about a second; no backoff after a lost lease. */
const fast = (extra: Partial<HandlerOptions> = {}): Partial<HandlerOptions> => ({
  concurrency: 1,
  prefetch: 0,
  leaseMs: 1_000,
  backoff: { baseMs: 0, maxMs: 0 },
  ...extra,
});

const runningOwnedBy = async (queue: string, owner: string) =>
  (
    await fx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = $1 AND status = 'running' AND lease_owner = $2`, [
      queue,
      owner,
    ])
  ).rows[0]!.n;

const eventsOf = async (id: string) => (await fx.events(id)).map((e) => ({ kind: e.kind, worker: e.worker, token: e.leaseToken, to: e.toStatus, code: e.errorCode }));

test('2. crash (SIGKILL) after the claim commits, before processing: the lease expires, another process reclaims, the job succeeds once', async () => {
  // A claims four jobs in one statement (two slots + two prefetched: before any handler has
  // finished, the buffer holds at most `concurrency`): two handlers start and hang, two wait in
  // its buffer. All four are claimed, none is processed, then A dies.
  const a = await fx.startWorker({
    name: 'claim-then-die',
    // A 3 s lease: the buffered jobs of a live worker are handed back as their lease nears its end,
    // which must not happen before the kill on a loaded machine.
    queues: [{ name: 'after-claim', behaviour: { kind: 'hang' }, options: fast({ concurrency: 2, prefetch: 2, leaseMs: 3_000 }) }],
    reaper: false,
  });
  const ids = await fx.enqueue('after-claim', 4);
  await waitFor(async () => (await runningOwnedBy('after-claim', a.workerId)) === 4 && (await fx.executions(ids)).length === 2, 10_000);
  const claimed = await Promise.all(ids.map((id) => fx.job(id)));
  await a.kill('SIGKILL');

  const b = await fx.startWorker({ name: 'rescuer', queues: [{ name: 'after-claim', behaviour: { kind: 'noop' }, options: fast() }] });
  await fx.drained('after-claim', 20_000);

  const runs = await fx.executions(ids);
  for (const [i, id] of ids.entries()) {
    const job = await fx.job(id);
    expect(job).toMatchObject({ status: 'succeeded', attemptCount: 2, leaseToken: 2 });
    // Reclaimed only after A's lease had expired by the database's clock.
    expect(job.claimedAt!).toBeGreaterThanOrEqual(claimed[i]!.leaseExpiresAt!);
    expect(await eventsOf(id)).toEqual([{ kind: 'lease_expired', worker: a.workerId, token: '1', to: 'scheduled', code: 'LEASE_EXPIRED' }]);
    const ok = runs.filter((r) => r.jobId === id && r.outcome === 'ok');
    expect(ok.map((r) => [r.worker, r.token])).toEqual([[b.workerId, 2]]);
  }
  // A started exactly two handlers (the other two never left its buffer) and finished neither.
  expect(runs.filter((r) => r.worker === a.workerId).map((r) => r.outcome)).toEqual([null, null]);
  await b.stop();
}, 60_000);

test("3. pause A (SIGSTOP) mid-job past its lease; B reclaims and finishes; A resumes and its completion changes nothing", async () => {
  // A's handler works 1 s, deaf to its signal; its lease is 2 s. Paused mid-job, it wakes long
  // after B has finished the job: its handler returns first, so the worker sends its completion.
  const options = fast({ leaseMs: 2_000, abortMarginMs: 600 });
  const a = await fx.startWorker({ name: 'paused', queues: [{ name: 'paused', behaviour: { kind: 'sleep', ms: 1_000 }, options }], reaper: false });
  const [id] = await fx.enqueue('paused', 1);
  const [started] = await waitFor(async () => {
    const runs = await fx.executions([id!]);
    return runs.length === 1 ? runs : undefined;
  }, 10_000, 5);
  // The execution row is written as the handler starts, before it sets its 1 s timer: paused at
  // once, a loaded machine could stop A between the two, and on resume A's lease timer (already
  // due) would abort a handler that has not begun its sleep, whose failure, not its completion,
  // is then refused (seen once in CI under load). 200 ms in, the handler is inside its sleep.
  await new Promise((r) => setTimeout(r, 200));
  await a.pause();
  const aLease = await fx.job(id!);
  expect((await fx.executions([id!]))[0]!.outcome).toBeNull(); // paused mid-job, not after it

  const b = await fx.startWorker({ name: 'reclaimer', queues: [{ name: 'paused', behaviour: { kind: 'noop' }, options }] });
  const done = await waitFor(async () => {
    const job = await fx.job(id!);
    return job.status === 'succeeded' ? job : undefined;
  }, 20_000);
  expect(done).toMatchObject({ leaseToken: 2 });
  expect(done.claimedAt!).toBeGreaterThanOrEqual(aLease.leaseExpiresAt!);

  await a.resume();
  const lost = await waitFor(async () => (await eventsOf(id!)).find((e) => e.kind === 'lost_fence'), 10_000);
  // A's stale completion was refused by the fence, under A's token, and recorded as such.
  expect(lost).toMatchObject({ worker: a.workerId, token: started!.token.toString(), code: 'LEASE_LOST' });
  const aOutcome = await waitFor(async () => {
    const { rows } = await fx.pool.query(`SELECT kind, detail, lease_token::int AS token FROM crash_outcomes WHERE worker = $1 AND job_id = $2`, [a.workerId, id]);
    return rows.length > 0 ? rows : undefined;
  });
  expect(aOutcome).toEqual([{ kind: 'lease_lost', detail: 'lease_lost:complete', token: 1 }]);
  // A's handler did finish (outcome ok) after B's, and B's result stands, untouched.
  const runs = await fx.executions([id!]);
  const aRun = runs.find((r) => r.worker === a.workerId)!;
  const bRun = runs.find((r) => r.worker === b.workerId)!;
  expect([aRun.token, aRun.outcome, bRun.token, bRun.outcome]).toEqual([1, 'ok', 2, 'ok']);
  expect(aRun.endedLocal!).toBeGreaterThan(bRun.endedLocal!);
  expect(await fx.job(id!)).toEqual(done);
  expect((await eventsOf(id!)).map((e) => e.kind)).toEqual(['lease_expired', 'lost_fence']);
  await Promise.all([a.stop(), b.stop()]);
}, 60_000);

test('4. crash after an external side effect, before completion: the retry carries the same idempotency key; one effect', async () => {
  const a = await fx.startWorker({ name: 'effect-then-die', queues: [{ name: 'side-effects', behaviour: { kind: 'effect-then-hang' }, options: fast() }], reaper: false });
  const [id] = await fx.enqueue('side-effects', 1);
  await waitFor(async () => (await fx.pool.query(`SELECT 1 FROM crash_service_calls WHERE job_id = $1`, [id])).rowCount === 1, 10_000);
  await a.kill('SIGKILL');

  const b = await fx.startWorker({ name: 'effect-retry', queues: [{ name: 'side-effects', behaviour: { kind: 'effect' }, options: fast() }] });
  await fx.drained('side-effects', 20_000);
  expect(await fx.job(id!)).toMatchObject({ status: 'succeeded', leaseToken: 2 });
  const calls = (
    await fx.pool.query(`SELECT idempotency_key AS key, worker, lease_token::int AS token, applied FROM crash_service_calls WHERE job_id = $1 ORDER BY at_db`, [id])
  ).rows;
  const key = `pgqueue:side-effects:${id}`;
  expect(calls).toEqual([
    { key, worker: a.workerId, token: 1, applied: true },
    { key, worker: b.workerId, token: 2, applied: false },
  ]);
  const effects = (await fx.pool.query(`SELECT idempotency_key AS key, worker FROM crash_service_effects WHERE job_id = $1`, [id])).rows;
  expect(effects).toEqual([{ key, worker: a.workerId }]);
  await b.stop();
}, 60_000);

describe('5. heartbeats lost during active work (the worker is cut off: sessions terminated, reconnection refused)', () => {
  const leaseMs = 1_500;
  const abortMarginMs = 300;
  const chunkMs = 100;
  const options = fast({ leaseMs, abortMarginMs });

  /**
   * A's handler reports progress (ctx.heartbeat()) after every 100 ms chunk. Once one renewal has
   * been written, A is cut off: its sessions are terminated and its proxy refuses new connections,
   * so every later heartbeat write fails. B (with the reaper) then recovers the job.
   */
  async function cutOffMidJob(queue: string, honour: boolean, chunks: number, partition: 'cut' | 'blackhole' = 'cut') {
    const a = await fx.startWorker({
      name: `beats-${honour ? 'honour' : 'ignore'}-${partition}`,
      queues: [{ name: queue, behaviour: { kind: 'progress', chunkMs, chunks, honour }, options }],
      reaper: false,
      viaProxy: true,
    });
    const [id] = await fx.enqueue(queue, 1);
    const b = await fx.startWorker({ name: `beats-rescuer-${honour ? 'honour' : 'ignore'}-${partition}`, queues: [{ name: queue, behaviour: { kind: 'noop' }, options }] });
    // Heartbeats work at first: the lease was renewed once by a write.
    await waitFor(async () => (await fx.pool.query(`SELECT 1 FROM pgqueue.job_rows WHERE id = $1 AND heartbeat_at IS NOT NULL`, [id])).rowCount === 1, 10_000, 5);
    let terminated = 0;
    if (partition === 'cut') {
      a.proxy!.cut();
      terminated = await fx.terminateSessions(a);
      await waitFor(async () => {
        const s = await fx.sessions(a);
        return s.queue + s.listen === 0;
      });
    } else {
      // Nothing reaches the server any more, and nothing comes back: once the statements that
      // got through before have finished, A's sessions sit idle.
      a.proxy!.blackhole();
      await waitFor(async () => {
        const { rows } = await fx.pool.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'`, [a.appName]);
        return rows.length === 0;
      });
    }
    // No write of A's can land any more: this is the lease A holds in the database.
    const held = await fx.job(id!);
    expect(held).toMatchObject({ status: 'running', leaseOwner: a.workerId, leaseToken: 1 });

    await waitFor(async () => (await fx.job(id!)).status === 'succeeded', 20_000);
    const runs = await waitFor(async () => {
      const rows = await fx.executions([id!]);
      return rows.length === 2 && rows.every((r) => r.outcome !== null) ? rows : undefined;
    }, 20_000).catch(async (error: Error) => {
      throw new Error(`${error.message}; the executions: ${JSON.stringify(await fx.executions([id!]))}`);
    });
    const first = runs.find((r) => r.worker === a.workerId)!;
    const second = runs.find((r) => r.worker === b.workerId)!;
    const after = await fx.job(id!);
    return { a, b, id: id!, held, first, second, after, terminated };
  }

  /** Local (child) time to database time. */
  const db = (localMs: number) => localMs + fx.skewMs;

  test('a handler that honours its signal has stopped before the second execution starts', async () => {
    const { a, b, held, first, second, after, terminated } = await cutOffMidJob('beats-honour', true, 100);
    // The signal aborted (LEASE_EXPIRED) while the lease was still valid in the database...
    expect(first.abortCode).toBe('LEASE_EXPIRED');
    const abortLeadMs = held.leaseExpiresAt! - db(first.abortedLocal!);
    expect(abortLeadMs).toBeGreaterThan(0);
    // ...the handler stopped, and only then did the second execution start: no overlap.
    expect(first.outcome).toBe('threw');
    const overlapMs = first.endedLocal! - second.startedLocal;
    expect(overlapMs).toBeLessThanOrEqual(0);
    expect(second.startedDb).toBeGreaterThanOrEqual(held.leaseExpiresAt!);
    expect(after).toMatchObject({ status: 'succeeded', leaseToken: 2 });
    console.log(JSON.stringify({ test: 'heartbeats-lost/honour', leaseMs, abortMarginMs, abortLeadMs: round(abortLeadMs), overlapMs: round(overlapMs) }));
    await a.kill('SIGKILL');
    await b.stop();
  }, 60_000);

  test('a handler that honours its signal stops in time even when its heartbeat writes hang (a network blackhole)', async () => {
    const { a, b, held, first, second, after } = await cutOffMidJob('beats-blackhole', true, 100, 'blackhole');
    expect(first.abortCode).toBe('LEASE_EXPIRED');
    const abortLeadMs = held.leaseExpiresAt! - db(first.abortedLocal!);
    expect(abortLeadMs).toBeGreaterThan(0);
    // Its pending ctx.heartbeat() gave way to the abort, so the handler could stop in time.
    expect(first.outcome).toBe('threw');
    expect(db(first.endedLocal!)).toBeLessThan(held.leaseExpiresAt!);
    const overlapMs = first.endedLocal! - second.startedLocal;
    expect(overlapMs).toBeLessThanOrEqual(0);
    expect(after).toMatchObject({ status: 'succeeded', leaseToken: 2 });
    console.log(JSON.stringify({ test: 'heartbeats-lost/blackhole', leaseMs, abortMarginMs, abortLeadMs: round(abortLeadMs), overlapMs: round(overlapMs) }));
    await a.kill('SIGKILL');
    await b.stop();
  }, 60_000);

  test('a handler that ignores it overlaps the second execution, within the window its configuration explains', async () => {
    // About 6 s of work, four leases: the cut-off (which waits for the sessions to be gone, slow on a
    // loaded machine) always leaves the lease to run out mid-work.
    const chunks = 60;
    const { a, b, held, first, second, after } = await cutOffMidJob('beats-ignore', false, chunks);
    expect(first.abortCode).toBe('LEASE_EXPIRED');
    const abortLeadMs = held.leaseExpiresAt! - db(first.abortedLocal!);
    expect(abortLeadMs).toBeGreaterThan(0);
    expect(first.outcome).toBe('ok'); // it worked on regardless (its completion could not be written)
    // The second execution never starts before the first's lease expired in the database, so the
    // window is at most how long the deaf handler outlived that lease, and that lease ended at
    // least one lease length after the claim (later if a heartbeat renewed it): the window is
    // bounded by the handler's run time W minus the lease L.
    expect(second.startedDb).toBeGreaterThanOrEqual(held.leaseExpiresAt!);
    const overlapMs = first.endedLocal! - second.startedLocal;
    const outlivedLeaseMs = db(first.endedLocal!) - held.leaseExpiresAt!;
    expect(overlapMs).toBeLessThanOrEqual(outlivedLeaseMs + 2); // 2 ms: the two clocks' measured skew
    expect(held.leaseExpiresAt! - held.claimedAt!).toBeGreaterThanOrEqual(leaseMs - 1);
    const workMs = first.endedLocal! - first.startedLocal;
    expect(after).toMatchObject({ status: 'succeeded', leaseToken: 2 });
    console.log(
      JSON.stringify({
        test: 'heartbeats-lost/ignore',
        leaseMs,
        abortMarginMs,
        workMs: round(workMs),
        abortLeadMs: round(abortLeadMs),
        overlapMs: round(overlapMs),
        boundMs: round(outlivedLeaseMs),
        configBoundMs: round(workMs - leaseMs),
      }),
    );
    await a.kill('SIGKILL');
    await b.stop();
  }, 60_000);
});

test('6. retries exhausted (by crashes, and by failures): a visible dead row with its history, never a deletion', async () => {
  // Attempts 1-3 each die with the process (SIGKILL mid-job); the reaper records each lost lease
  // and, after the third, the job is dead. A janitor process runs the reaper and the scheduler.
  const janitor = await fx.startWorker({ name: 'janitor', queues: [], pruner: { retentionMs: 0, intervalMs: 50 } });
  const [crashy] = await fx.enqueue('exhausted', 1, () => ({}), { maxAttempts: 3 });
  const killed: string[] = [];
  for (let attempt = 1; attempt <= 3; attempt++) {
    const w = await fx.startWorker({ name: 'doomed', queues: [{ name: 'exhausted', behaviour: { kind: 'hang' }, options: fast() }], reaper: false });
    await waitFor(async () => (await fx.executions([crashy!])).some((r) => r.attempt === attempt), 15_000);
    await w.kill('SIGKILL');
    killed.push(w.workerId);
  }
  const dead = await waitFor(async () => {
    const job = await fx.job(crashy!);
    return job.status === 'dead' ? job : undefined;
  }, 15_000);
  expect(dead).toMatchObject({ attemptCount: 3, maxAttempts: 3, leaseOwner: null, lastErrorCode: 'LEASE_EXPIRED' });
  expect(await eventsOf(crashy!)).toEqual([
    { kind: 'lease_expired', worker: killed[0], token: '1', to: 'scheduled', code: 'LEASE_EXPIRED' },
    { kind: 'lease_expired', worker: killed[1], token: '2', to: 'scheduled', code: 'LEASE_EXPIRED' },
    { kind: 'dead', worker: killed[2], token: '3', to: 'dead', code: 'LEASE_EXPIRED' },
  ]);

  // The same end by handler failures: a retryable error on every attempt.
  const failing = await fx.startWorker({ name: 'failing', queues: [{ name: 'exhausted-fail', behaviour: { kind: 'fail', error: 'retryable' }, options: fast({ maxAttempts: 3 }) }] });
  const [flaky] = await fx.enqueue('exhausted-fail', 1);
  await fx.drained('exhausted-fail', 15_000);
  expect(await fx.job(flaky!)).toMatchObject({ status: 'dead', attemptCount: 3, lastErrorCode: 'FAKE_TIMEOUT' });
  expect((await eventsOf(flaky!)).map((e) => [e.kind, e.token, e.to])).toEqual([
    ['retry_scheduled', '1', 'pending'],
    ['retry_scheduled', '2', 'pending'],
    ['dead', '3', 'dead'],
  ]);

  // A mass crash on the last attempt: 120 jobs claimed in one statement by a worker that dies.
  // The reaper kills them in one batch (one finished_at for all), and the inspection path lists
  // every one of them exactly once, in order, page after page (their ids cross 99 -> 100).
  const mass = await fx.enqueue('exhausted-mass', 120, () => ({}), { maxAttempts: 1 });
  const doomed = await fx.startWorker({
    name: 'mass-doomed',
    // No buffer: a buffered job whose lease nears its end is handed back (and claimed again) by a
    // live worker, which on a loaded machine could happen before the kill and split the batch.
    queues: [{ name: 'exhausted-mass', behaviour: { kind: 'hang' }, options: fast({ concurrency: 120, prefetch: 0 }) }],
    reaper: false,
  });
  await waitFor(async () => (await runningOwnedBy('exhausted-mass', doomed.workerId)) === 120, 15_000);
  await doomed.kill('SIGKILL');
  await fx.drained('exhausted-mass', 15_000, ['dead']);
  const listed: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await fx.producer.listDead({ queue: 'exhausted-mass', limit: 7, cursor });
    listed.push(...page.jobs.map((j) => j.id));
    cursor = page.nextCursor;
  } while (cursor);
  // The reaper usually kills them in one batch, but on a loaded machine the claim can take more
  // than one statement (the leases then expire a moment apart) and a later pass takes the rest:
  // the pages must follow listDead's own order, (finished_at, id), whatever the batches were.
  const { rows: byDeath } = await fx.pool.query<{ id: string }>(
    `SELECT j.id::text AS id FROM pgqueue.job_rows j WHERE j.queue_name = 'exhausted-mass' AND j.status = 'dead' ORDER BY j.finished_at, j.id`,
  );
  expect([...listed].sort((a, b) => Number(a) - Number(b))).toEqual([...mass].sort((a, b) => Number(a) - Number(b)));
  expect(listed).toEqual(byDeath.map((r) => r.id));

  // Still there after more reaper and retention passes (the janitor prunes with retention 0), and
  // nothing was ever deleted from the jobs table.
  const passes = (await fx.pool.query(`SELECT now() AS t`)).rows[0].t as Date;
  await waitFor(async () => (await fx.pool.query(`SELECT now() - $1::timestamptz > interval '500 ms' AS ok`, [passes])).rows[0].ok, 5_000, 100);
  for (const id of [crashy!, flaky!, ...mass]) expect((await fx.job(id)).status).toBe('dead');
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM crash_job_deletes WHERE status = 'dead'`)).rows[0].n).toBe(0);
  await Promise.all([janitor.stop(), failing.stop()]);
}, 90_000);

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
