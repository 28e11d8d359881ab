import { readFileSync } from 'node:fs';
import type { HandlerOptions } from '../../../lib/engine/index.js';
import { crashFixture, type CrashFixture, type WorkerProcess } from '../../support/crash-harness.js';
import { waitFor } from '../../support/engine.js';

/**
 * "Side effects that happen once", across real worker processes (README, "Side effects that happen
 * once"): the reference's test 3 with a fenced transactional completion (`ctx.complete`), and its
 * test 4 with durable effect records (`ctx.effect`) against the fake external service of the crash
 * harness (crash_service_calls logs every call, crash_service_effects applies one effect per key).
 * The process that pauses or dies does it to itself at the exact point named (crash-worker.mjs,
 * behaviours 'complete-tx' and 'charge'), so no step depends on the machine's speed.
 */
let fx: CrashFixture;
beforeAll(async () => {
  fx = await crashFixture('crashsidefx');
  // The handler's own table, written only through ctx.complete.
  await fx.pool.query(`CREATE TABLE crash_tx_writes (job_id bigint NOT NULL, token bigint NOT NULL, worker text NOT NULL, at timestamptz DEFAULT clock_timestamp())`);
});
afterAll(() => fx?.close());
afterEach((context) => {
  if (context.task.result?.state === 'fail') console.log(fx.logs());
});

/** Short leases so a lost one is recovered in seconds (long enough for a loaded machine); no backoff after it. */
const fast = (extra: Partial<HandlerOptions> = {}): Partial<HandlerOptions> => ({
  concurrency: 1,
  prefetch: 0,
  leaseMs: 2_000,
  backoff: { baseMs: 0, maxMs: 0 },
  ...extra,
});

const eventsOf = async (id: string) =>
  (await fx.events(id)).map((e) => ({ kind: e.kind, worker: e.worker, token: e.leaseToken, code: e.errorCode, message: e.message }));

const outcomesOf = async (id: string, worker: string) =>
  (
    await fx.pool.query<{ kind: string; detail: string | null; token: number }>(
      `SELECT kind, detail, lease_token::int AS token FROM crash_outcomes WHERE job_id = $1 AND worker = $2 ORDER BY id`,
      [id, worker],
    )
  ).rows;

const serviceCalls = async (id: string) =>
  (
    await fx.pool.query(
      `SELECT idempotency_key AS key, worker, lease_token::int AS token, applied FROM crash_service_calls WHERE job_id = $1 ORDER BY at_db`,
      [id],
    )
  ).rows;

const serviceEffects = async (id: string) =>
  (await fx.pool.query(`SELECT idempotency_key AS key, worker, lease_token::int AS token FROM crash_service_effects WHERE job_id = $1`, [id])).rows;

/** Linux: the process is stopped (state T in /proc/<pid>/stat). */
function isStopped(worker: WorkerProcess): boolean {
  const stat = readFileSync(`/proc/${worker.pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2)[0] === 'T';
}

test("a. A is paused (SIGSTOP) right before ctx.complete; B reclaims and completes; A's resumed ctx.complete writes nothing and rejects with LeaseLostError", async () => {
  // A pauses itself after its handler has started and before it calls ctx.complete. The abort
  // margin leaves A's resumed handler 500 ms (half of it) to finish its refused call before the
  // worker would give up on it, so what A records is its own handler's outcome.
  const options = fast({ leaseMs: 3_000, abortMarginMs: 1_000 });
  const a = await fx.startWorker({
    name: 'tx-paused',
    queues: [{ name: 'tx-complete', behaviour: { kind: 'complete-tx', table: 'crash_tx_writes', pauseBeforeComplete: true }, options }],
    reaper: false,
  });
  const [id] = await fx.enqueue('tx-complete', 1);
  await waitFor(async () => (await outcomesOf(id!, a.workerId)).some((o) => o.kind === 'paused'), 10_000, 5);
  await waitFor(() => isStopped(a), 5_000, 5);
  const held = await fx.job(id!);
  expect(held).toMatchObject({ status: 'running', leaseOwner: a.workerId, leaseToken: 1 });

  const b = await fx.startWorker({ name: 'tx-reclaimer', queues: [{ name: 'tx-complete', behaviour: { kind: 'complete-tx', table: 'crash_tx_writes' }, options }] });
  const done = await waitFor(async () => {
    const job = await fx.job(id!);
    return job.status === 'succeeded' ? job : undefined;
  }, 20_000);
  // The worker that finished it stays on the row: who finished the job (it was B).
  expect(done).toMatchObject({ leaseToken: 2, leaseOwner: b.workerId });
  expect(done.claimedAt!).toBeGreaterThanOrEqual(held.leaseExpiresAt!); // B claimed after A's lease expired, by the database's clock
  expect(isStopped(a)).toBe(true); // A never ran meanwhile

  await a.resume();
  // A's ctx.complete was refused by the fence: it rejected with LeaseLostError (reason lease_lost,
  // its token superseded by B's claim), and the worker counted it as a lost fence on 'complete'.
  const aOutcomes = await waitFor(async () => {
    const rows = await outcomesOf(id!, a.workerId);
    return rows.some((o) => o.kind === 'lease_lost') && rows.some((o) => o.kind === 'ctx.complete') ? rows : undefined;
  }, 10_000);
  // (The handler's record and the worker's lease_lost event are written concurrently: any order.)
  expect(aOutcomes[0]).toEqual({ kind: 'paused', detail: 'before ctx.complete', token: 1 });
  expect(aOutcomes.slice(1)).toHaveLength(2);
  expect(aOutcomes.slice(1)).toEqual(
    expect.arrayContaining([
      { kind: 'ctx.complete', detail: 'LEASE_LOST:lease_lost', token: 1 },
      { kind: 'lease_lost', detail: 'lease_lost:complete', token: 1 },
    ]),
  );
  expect(await outcomesOf(id!, b.workerId)).toEqual([
    { kind: 'ctx.complete', detail: 'committed', token: 2 },
    { kind: 'succeeded', detail: null, token: 2 },
  ]);
  // The job is B's, untouched by A; B's write is there exactly once; A's is not there at all.
  expect(await fx.job(id!)).toEqual(done);
  const writes = (await fx.pool.query(`SELECT worker, token::int AS token FROM crash_tx_writes WHERE job_id = $1`, [id])).rows;
  expect(writes).toEqual([{ worker: b.workerId, token: 2 }]);
  // A's handler ran to its end and threw the LeaseLostError; B's ended ok.
  const runs = await fx.executions([id!]);
  expect(runs.map((r) => [r.worker, r.token, r.outcome])).toEqual([
    [a.workerId, 1, 'threw'],
    [b.workerId, 2, 'ok'],
  ]);
  expect(runs[0]!.error).toMatch(/no longer owned by this worker/);
  // The history: A's lease expired (reaped by B's process), then A's refused completion.
  expect(await eventsOf(id!)).toEqual([
    { kind: 'lease_expired', worker: a.workerId, token: '1', code: 'LEASE_EXPIRED', message: null },
    { kind: 'lost_fence', worker: a.workerId, token: '1', code: 'LEASE_LOST', message: null },
  ]);
  await Promise.all([a.stop(), b.stop()]);
}, 60_000);

describe('b. crash after the external call, before the effect is confirmed or the job completed (the reference\'s test 4, with effect records)', () => {
  /**
   * A runs ctx.effect('charge', …) and dies (SIGKILL, by its own hand) at `crash`; B, started
   * once A is dead, retries the job after A's lease expires.
   */
  async function crashThenRetry(queue: string, crash: 'after-call' | 'after-confirm', reconcile: boolean) {
    const a = await fx.startWorker({
      name: `charge-${crash}-${reconcile ? 'rec' : 'norec'}`,
      queues: [{ name: queue, behaviour: { kind: 'charge', reconcile, crash }, options: fast() }],
      reaper: false,
    });
    const [id] = await fx.enqueue(queue, 1);
    const exit = await a.exited;
    expect(exit).toEqual({ code: null, signal: 'SIGKILL' });
    const key = `pgqueue:${queue}:${id}:charge`;
    // What A left: the effect applied at the service once; its record 'started' (after-call) or 'confirmed'.
    expect(await serviceEffects(id!)).toEqual([{ key, worker: a.workerId, token: 1 }]);
    const [left] = await fx.producer.getJobEffects(id!);
    expect(left).toMatchObject({ name: 'charge', idempotencyKey: key, status: crash === 'after-call' ? 'started' : 'confirmed', attempts: 1, leaseToken: '1' });
    expect(await fx.job(id!)).toMatchObject({ status: 'running', leaseOwner: a.workerId, leaseToken: 1 });

    const b = await fx.startWorker({ name: `charge-retry-${crash}-${reconcile ? 'rec' : 'norec'}`, queues: [{ name: queue, behaviour: { kind: 'charge', reconcile }, options: fast() }] });
    await fx.drained(queue, 20_000);
    expect(await fx.job(id!)).toMatchObject({ status: 'succeeded', leaseToken: 2 });
    const effects = await fx.producer.getJobEffects(id!);
    const bResult = (await outcomesOf(id!, b.workerId)).find((o) => o.kind === 'effect_result');
    await b.stop();
    return { a, b, id: id!, key, effects, bResult: JSON.parse(bResult!.detail!) as unknown, events: await eventsOf(id!) };
  }

  test('with reconcile: the retry finds the uncertain effect, asks the service, and records it reconciled; one call, one effect', async () => {
    const { a, b, id, key, effects, bResult, events } = await crashThenRetry('charge-reconcile', 'after-call', true);
    // The service saw one call (A's) and applied one effect; B asked instead of calling.
    expect(await serviceCalls(id)).toEqual([{ key, worker: a.workerId, token: 1, applied: true }]);
    expect(await serviceEffects(id)).toEqual([{ key, worker: a.workerId, token: 1 }]);
    expect((await outcomesOf(id, b.workerId)).filter((o) => o.kind === 'reconcile')).toEqual([{ kind: 'reconcile', detail: 'found', token: 2 }]);
    expect(bResult).toEqual({ chargeId: `ch:${key}`, reconciled: true });
    expect(effects).toEqual([
      expect.objectContaining({ name: 'charge', idempotencyKey: key, status: 'confirmed', attempts: 2, leaseToken: '2', result: { chargeId: `ch:${key}`, reconciled: true } }),
    ]);
    expect(events.map((e) => [e.kind, e.worker, e.token])).toEqual([
      ['effect_started', a.workerId, '1'],
      ['lease_expired', a.workerId, '1'],
      ['effect_retried', b.workerId, '2'],
      ['effect_reconciled', b.workerId, '2'],
    ]);
    expect(events.map((e) => e.message)).toEqual(['charge (try 1)', null, 'charge (try 2)', 'charge']);
  }, 60_000);

  test('without reconcile: the retry calls again with the same key; the service applies it once', async () => {
    const { a, b, id, key, effects, bResult, events } = await crashThenRetry('charge-again', 'after-call', false);
    expect(await serviceCalls(id)).toEqual([
      { key, worker: a.workerId, token: 1, applied: true },
      { key, worker: b.workerId, token: 2, applied: false },
    ]);
    expect(await serviceEffects(id)).toEqual([{ key, worker: a.workerId, token: 1 }]);
    expect(bResult).toEqual({ chargeId: `ch:${key}` });
    expect(effects).toEqual([expect.objectContaining({ name: 'charge', idempotencyKey: key, status: 'confirmed', attempts: 2, leaseToken: '2', result: { chargeId: `ch:${key}` } })]);
    expect(events.map((e) => [e.kind, e.worker, e.token])).toEqual([
      ['effect_started', a.workerId, '1'],
      ['lease_expired', a.workerId, '1'],
      ['effect_retried', b.workerId, '2'],
      ['effect_confirmed', b.workerId, '2'],
    ]);
  }, 60_000);

  test('crash after the effect was confirmed, before completion: the retry gets the stored result and calls nothing', async () => {
    const { a, b, id, key, effects, bResult, events } = await crashThenRetry('charge-confirmed', 'after-confirm', true);
    expect(await serviceCalls(id)).toEqual([{ key, worker: a.workerId, token: 1, applied: true }]);
    expect((await outcomesOf(id, b.workerId)).filter((o) => o.kind === 'reconcile')).toEqual([]);
    expect(bResult).toEqual({ chargeId: `ch:${key}` });
    expect(effects).toEqual([expect.objectContaining({ name: 'charge', status: 'confirmed', attempts: 1, leaseToken: '1', result: { chargeId: `ch:${key}` } })]);
    expect(events.map((e) => [e.kind, e.worker, e.token])).toEqual([
      ['effect_started', a.workerId, '1'],
      ['effect_confirmed', a.workerId, '1'],
      ['lease_expired', a.workerId, '1'],
    ]);
    expect(b.alive).toBe(false);
  }, 60_000);
});
