import { Completer } from '../../lib/engine/completer.js';
import { createStore } from '../../lib/engine/store/index.js';
import { engineFixture } from '../support/engine.js';
import { expireLease } from '../support/time-travel.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
const store = createStore('pgqueue');
beforeAll(async () => {
  fx = await engineFixture('fencing');
});
afterAll(() => fx.close());

const claim = (owner: string, leaseMs: number, limit = 1) =>
  store.claim(fx.pool, { queue: 'fence', owner, limit, leaseMs, maxRuntimeMs: 60_000, maxAttempts: 5, backoffBaseMs: 0, backoffMaxMs: 0, oldestFirst: 0 });
const reap = () => store.reapExpired(fx.pool, { limit: 100, setAside: [], only: null });

test("a stale worker's completion, failure and heartbeat change nothing once another worker holds the job", async () => {
  await fx.insertJobs('fence', 1);
  const [{ id }] = (await fx.pool.query<{ id: string }>(`UPDATE pgqueue.jobs SET lease_token = 6 WHERE queue_name = 'fence' RETURNING id::text`)).rows as [{ id: string }];

  const [a] = await claim('worker-a', 30_000);
  expect(a).toMatchObject({ id, leaseToken: '7' });

  // A's lease expires (by the database's clock); the reaper returns the job; B claims it with the next token.
  await expireLease(fx.pool, id);
  const reaped = await reap();
  expect(reaped).toEqual([expect.objectContaining({ id, status: 'scheduled' })]);
  await store.promoteScheduled(fx.pool, { limit: 100, channel: 'pgqueue:wake' });
  const [b] = await claim('worker-b', 30_000);
  expect(b).toMatchObject({ id, leaseToken: '8' });

  const bDone = await new Completer(fx.pool, store, 'worker-b', 'pgqueue:wake').complete(id, '8');
  expect(bDone).toEqual({ ok: true });
  const before = (await fx.pool.query(`SELECT * FROM pgqueue.job_rows WHERE id = $1`, [id])).rows[0];

  // A wakes up late. Every fenced write it attempts is refused and recorded.
  const aDone = await new Completer(fx.pool, store, 'worker-a', 'pgqueue:wake').complete(id, '7');
  expect(aDone).toEqual({ ok: false, reason: 'lease_lost' });
  const aFail = await store.fail(fx.pool, { id, owner: 'worker-a', token: '7', dead: false, delayMs: 0, code: 'X', message: 'late' });
  expect(aFail).toEqual({ ok: false, reason: 'lease_lost' });
  const aBeat = await store.heartbeat(fx.pool, { id, owner: 'worker-a', token: '7', leaseMs: 30_000 });
  expect(aBeat).toEqual({ ok: false, reason: 'lease_lost' });

  const after = (await fx.pool.query(`SELECT * FROM pgqueue.job_rows WHERE id = $1`, [id])).rows[0];
  expect(after).toEqual(before);
  expect(after.status).toBe('succeeded');
  expect(after.lease_token).toBe('8');

  const events = (await fx.pool.query(`SELECT kind, worker, lease_token::text, error_code FROM pgqueue.job_events WHERE job_id = $1 ORDER BY id`, [id])).rows;
  expect(events).toEqual([
    { kind: 'lease_expired', worker: 'worker-a', lease_token: '7', error_code: 'LEASE_EXPIRED' },
    { kind: 'lost_fence', worker: 'worker-a', lease_token: '7', error_code: 'LEASE_LOST' },
    { kind: 'lost_fence', worker: 'worker-a', lease_token: '7', error_code: 'LEASE_LOST' },
    { kind: 'lost_fence', worker: 'worker-a', lease_token: '7', error_code: 'LEASE_LOST' },
  ]);
});

test('a second completion under the same token is refused as "finished"; a cancelled job as "cancelled"', async () => {
  await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE queue_name = 'fence'; DELETE FROM pgqueue.jobs_succeeded WHERE queue_name = 'fence'`);
  await fx.insertJobs('fence', 2);
  const [first, second] = await claim('worker-c', 30_000, 2);
  const completer = new Completer(fx.pool, store, 'worker-c', 'pgqueue:wake');
  expect(await completer.complete(first!.id, first!.leaseToken)).toEqual({ ok: true });
  expect(await completer.complete(first!.id, first!.leaseToken)).toEqual({ ok: false, reason: 'finished' });
  await fx.pool.query(`UPDATE pgqueue.jobs SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL WHERE id = $1`, [second!.id]);
  expect(await completer.complete(second!.id, second!.leaseToken)).toEqual({ ok: false, reason: 'cancelled' });
});

test('a batch with one stale row still completes the others, and reports each row', async () => {
  await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE queue_name = 'fence'; DELETE FROM pgqueue.jobs_succeeded WHERE queue_name = 'fence'`);
  await fx.insertJobs('fence', 5);
  const claimed = await claim('worker-d', 30_000, 5);
  const stale = claimed[2]!;
  const completer = new Completer(fx.pool, store, 'worker-d', 'pgqueue:wake');
  const outcomes = await Promise.all(
    claimed.map((job) => completer.complete(job.id, job === stale ? String(Number(job.leaseToken) - 1) : job.leaseToken)),
  );
  expect(outcomes.filter((o) => o.ok)).toHaveLength(4);
  expect(outcomes[2]).toEqual({ ok: false, reason: 'lease_lost' });
  const statuses = (await fx.pool.query(`SELECT status, count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'fence' GROUP BY status ORDER BY status`)).rows;
  expect(statuses).toEqual([
    { status: 'running', n: 1 },
    { status: 'succeeded', n: 4 },
  ]);
});

test('a fenced write needs an unexpired lease by database time, even for the rightful owner', async () => {
  await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE queue_name = 'fence'; DELETE FROM pgqueue.jobs_succeeded WHERE queue_name = 'fence'`);
  await fx.insertJobs('fence', 1);
  const [job] = await claim('worker-e', 30_000);
  await expireLease(fx.pool, job!.id);
  const outcome = await new Completer(fx.pool, store, 'worker-e', 'pgqueue:wake').complete(job!.id, job!.leaseToken);
  expect(outcome).toEqual({ ok: false, reason: 'lease_lost' });
});

test('D16: a stale and a current completion of one job in one batch: only the current one is applied', async () => {
  await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE queue_name = 'fence'; DELETE FROM pgqueue.jobs_succeeded WHERE queue_name = 'fence'`);
  await fx.insertJobs('fence', 2);
  const [other, job] = await claim('worker-f', 30_000, 2);
  // One statement in flight at a time: the first completion goes alone, the next two ride one batch.
  const completer = new Completer(fx.pool, store, 'worker-f', 'pgqueue:wake', { maxInFlight: 1 });
  const [first, stale, current] = await Promise.all([
    completer.complete(other!.id, other!.leaseToken),
    completer.complete(job!.id, String(Number(job!.leaseToken) - 1)),
    completer.complete(job!.id, job!.leaseToken),
  ]);
  expect(first).toEqual({ ok: true });
  expect(stale).toEqual({ ok: false, reason: 'lease_lost' });
  expect(current).toEqual({ ok: true });
  const events = (await fx.pool.query(`SELECT kind, lease_token::text, error_code FROM pgqueue.job_events WHERE job_id = $1`, [job!.id])).rows;
  expect(events).toEqual([{ kind: 'lost_fence', lease_token: String(Number(job!.leaseToken) - 1), error_code: 'LEASE_LOST' }]);
});

test('D15: a late completion of a job the reaper killed is a lost lease, not "finished"', async () => {
  await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE queue_name = 'fence'; DELETE FROM pgqueue.jobs_succeeded WHERE queue_name = 'fence'`);
  await fx.insertJobs('fence', 1);
  await fx.pool.query(`UPDATE pgqueue.jobs SET max_attempts = 1 WHERE queue_name = 'fence'`);
  const [job] = await claim('worker-g', 30_000);
  await expireLease(fx.pool, job!.id);
  const [reaped] = await reap();
  expect(reaped).toMatchObject({ status: 'dead' });
  const completer = new Completer(fx.pool, store, 'worker-g', 'pgqueue:wake');
  expect(await completer.complete(job!.id, job!.leaseToken)).toEqual({ ok: false, reason: 'lease_lost' });
  const fail = await store.fail(fx.pool, { id: job!.id, owner: 'worker-g', token: job!.leaseToken, dead: false, delayMs: 0, code: 'X', message: 'late' });
  expect(fail).toEqual({ ok: false, reason: 'lease_lost' });
  const events = (await fx.pool.query(`SELECT kind, error_code FROM pgqueue.job_events WHERE job_id = $1 ORDER BY id`, [job!.id])).rows;
  expect(events).toEqual([
    { kind: 'dead', error_code: 'LEASE_EXPIRED' },
    { kind: 'lost_fence', error_code: 'LEASE_LOST' },
    { kind: 'lost_fence', error_code: 'LEASE_LOST' },
  ]);
});

test('D15: a retried completion write counts as applied only when it is known to have committed (not when the job is dead)', async () => {
  await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE queue_name = 'fence'; DELETE FROM pgqueue.jobs_succeeded WHERE queue_name = 'fence'`);
  await fx.insertJobs('fence', 2);
  await fx.pool.query(`UPDATE pgqueue.jobs SET max_attempts = 1 WHERE queue_name = 'fence'`);
  const [committed, killed] = await claim('worker-h', 30_000, 2);
  // A pool whose first statement's reply is lost after the server ran it (a connection cut at the
  // worst moment). For `committed` the completion really happened; for `killed` the job meanwhile
  // died under the same token (the reaper) and the completion did not happen.
  const lossy = (before: () => Promise<void>) => {
    let calls = 0;
    return {
      query: async (config: unknown) => {
        calls += 1;
        if (calls === 1) {
          await before();
          throw Object.assign(new Error('Connection terminated unexpectedly'), {});
        }
        return fx.pool.query(config as never);
      },
    } as unknown as import('pg').Pool;
  };
  const retrying = {};
  const afterCommit = new Completer(
    lossy(async () => {
      await store.completeMany(fx.pool, { ids: [committed!.id], tokens: [committed!.leaseToken], owner: 'worker-h' });
    }),
    store,
    'worker-h',
    'pgqueue:wake',
    retrying,
  );
  expect(await afterCommit.complete(committed!.id, committed!.leaseToken)).toEqual({ ok: true });
  const afterDeath = new Completer(
    lossy(async () => {
      await expireLease(fx.pool, killed!.id);
      await reap();
    }),
    store,
    'worker-h',
    'pgqueue:wake',
    retrying,
  );
  expect(await afterDeath.complete(killed!.id, killed!.leaseToken)).toEqual({ ok: false, reason: 'lease_lost' });
  expect((await fx.pool.query(`SELECT status::text FROM pgqueue.job_rows WHERE id = $1`, [killed!.id])).rows).toEqual([{ status: 'dead' }]);
});

test('a retried failure or release whose first try committed is known to have happened (its reply was lost), not a lost lease', async () => {
  await fx.pool.query(`DELETE FROM pgqueue.jobs WHERE queue_name = 'fence'; DELETE FROM pgqueue.jobs_succeeded WHERE queue_name = 'fence'`);
  await fx.insertJobs('fence', 3);
  const [retried, died, released] = await claim('worker-i', 30_000, 3);
  const fail = (job: typeof retried, dead: boolean, owner = 'worker-i') =>
    store.fail(fx.pool, { id: job!.id, owner, token: job!.leaseToken, dead, delayMs: 0, code: 'X', message: 'x' });
  // `already`: refused, but this very write had committed (an earlier try whose reply was lost).
  expect(await fail(retried, false)).toEqual({ ok: true, already: false });
  expect(await fail(retried, false)).toEqual({ ok: true, already: true });
  expect(await fail(died, true)).toEqual({ ok: true, already: false });
  expect(await fail(died, true)).toEqual({ ok: true, already: true });
  const release = () => store.release(fx.pool, { id: released!.id, owner: 'worker-i', token: released!.leaseToken, started: true, maxFreeReleases: 3 });
  expect(await release()).toEqual({ ok: true, already: false });
  expect(await release()).toEqual({ ok: true, already: true });
  // Another worker's refused write under another token is not mistaken for one that happened.
  expect(await fail(retried, false, 'worker-j')).toEqual({ ok: false, reason: 'lease_lost' });
});
