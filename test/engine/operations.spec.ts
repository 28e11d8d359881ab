import { InvalidOptionError, JobStateError, PermanentJobError, type PgQueue } from '../../lib/engine/index.js';
import { engineFixture, waitForOutcome } from '../support/engine.js';
import { allEnded, attemptEnded, claimed, nextClaims, testSignals } from '../support/signals.js';
import { engineInternals } from '../../lib/engine/internals.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('operations');
});
afterAll(() => fx.close());

/** A worker whose handler dies permanently until `healed` is set: a source of dead jobs. */
function poisonWorker(queue: string) {
  const state = { healed: false, runs: 0 };
  const q = fx.make();
  q.work(queue, async (job) => {
    state.runs++;
    if (!state.healed) throw new PermanentJobError(`bad input in job ${job.id}`, { code: (job.payload as { code?: string }).code ?? 'BAD_INPUT' });
  });
  return { q, state };
}

async function refusal(call: Promise<unknown>): Promise<JobStateError> {
  const error = await call.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(JobStateError);
  return error as JobStateError;
}

test('replay keeps the id, appends to the history with who and why, resets the budget, and the job runs again', async () => {
  const { q, state } = poisonWorker('replay');
  await q.start();
  const id = await q.enqueue('replay', {}, { maxAttempts: 3 });
  const dead = await waitForOutcome(q, id, 'dead');
  expect(dead.attemptCount).toBe(1);

  state.healed = true;
  await q.replay(id, { actor: 'ops:ada', reason: 'fixed the parser (INC-42)' });
  const done = await waitForOutcome(q, id, 'succeeded');
  expect(done.id).toBe(id);
  expect(done.attemptCount).toBe(1);
  expect(Number(done.leaseToken)).toBe(2); // the token kept growing across the replay
  const history = await q.getJobEvents(id);
  expect(history.map((e) => [e.kind, e.fromStatus, e.toStatus, e.actor, e.message])).toEqual([
    ['dead', 'running', 'dead', null, 'bad input in job ' + id],
    ['replayed', 'dead', 'pending', 'ops:ada', 'fixed the parser (INC-42)'],
  ]);
});

test('replay of a job that is not dead is refused clearly; so is one that does not exist', async () => {
  const q = fx.make();
  await q.declareQueues(['idle-q']);
  const id = await q.enqueue('idle-q', {});
  const error = await refusal(q.replay(id));
  expect(error.code).toBe('JOB_NOT_DEAD');
  expect(error.message).toMatch(new RegExp(`Job ${id} is pending, not dead: only dead jobs can be replayed`));
  expect((await refusal(q.replay('987654321'))).code).toBe('JOB_NOT_FOUND');
  expect(await q.replayMany([id, '987654321'])).toEqual([
    { id, replayed: false, status: 'pending' },
    { id: '987654321', replayed: false, status: undefined },
  ]);
});

test('dead jobs are listed by queue and error code with paging, and replayed by filter in bounded batches', async () => {
  const { q, state } = poisonWorker('many-dead');
  await q.start();
  const ids = await q.enqueueMany(
    Array.from({ length: 7 }, (_, i) => ({ queue: 'many-dead', payload: { code: i % 2 === 0 ? 'EVEN' : 'ODD' } })),
  );
  await allEnded(testSignals(q), ids, 'dead');

  const first = await q.listDead({ queue: 'many-dead', errorCode: 'EVEN', limit: 3 });
  expect(first.jobs).toHaveLength(3);
  expect(first.nextCursor).toBeDefined();
  const second = await q.listDead({ queue: 'many-dead', errorCode: 'EVEN', limit: 3, cursor: first.nextCursor });
  expect(second.jobs).toHaveLength(1);
  expect(second.nextCursor).toBeUndefined();
  expect([...first.jobs, ...second.jobs].every((j) => j.lastErrorCode === 'EVEN' && j.queue === 'many-dead')).toBe(true);
  expect(new Set([...first.jobs, ...second.jobs].map((j) => j.id)).size).toBe(4);

  state.healed = true;
  const replayed = await q.replayDead({ queue: 'many-dead', errorCode: 'ODD', limit: 2, actor: 'ops', reason: 'retry odd ones' });
  expect(replayed.filter((r) => r.replayed)).toHaveLength(2);
  for (const r of replayed) await waitForOutcome(q, r.id, 'succeeded');
  expect((await q.listDead({ queue: 'many-dead', errorCode: 'ODD' })).jobs).toHaveLength(1);
  await expect(q.listDead({ cursor: 'garbage' })).rejects.toThrow(/not a cursor/);
});

test('cancel a pending job; a finished one is refused; discard keeps a dead job for the record; delete only when asked', async () => {
  const { q } = poisonWorker('cancels');
  await q.start();
  await q.pauseQueue('cancels');
  const pending = await q.enqueue('cancels', {});
  await q.cancel(pending, { actor: 'ops', reason: 'duplicate request' });
  expect((await q.getJob(pending))?.status).toBe('cancelled');
  expect((await q.getJobEvents(pending)).map((e) => [e.kind, e.fromStatus, e.actor])).toEqual([['cancelled', 'pending', 'ops']]);
  expect((await refusal(q.cancel(pending))).code).toBe('JOB_NOT_CANCELLABLE');

  await q.resumeQueue('cancels');
  const doomed = await q.enqueue('cancels', {});
  await waitForOutcome(q, doomed, 'dead');
  expect((await refusal(q.cancel(doomed))).message).toMatch(/is dead: only scheduled, pending, running jobs can be cancelled/);
  await q.discard(doomed, { actor: 'ops', reason: 'not worth fixing' });
  expect((await q.getJob(doomed))?.status).toBe('cancelled');
  expect((await q.getJobEvents(doomed)).map((e) => e.kind)).toEqual(['dead', 'discarded']);

  const pendingAgain = await q.enqueue('cancels', {}, { delayMs: 60_000 });
  expect((await refusal(q.discard(pendingAgain, { delete: true }))).code).toBe('JOB_NOT_FINISHED');
  await q.discard(doomed, { delete: true, actor: 'ops', reason: 'GDPR erasure' });
  expect(await q.getJob(doomed)).toBeUndefined();
  const { rows } = await fx.pool.query(`SELECT actor, reason, removed, removed_ids::text[] AS ids FROM pgqueue.purges WHERE $1 = ANY(removed_ids)`, [doomed]);
  expect(rows).toEqual([{ actor: 'ops', reason: 'GDPR erasure', removed: 1, ids: [doomed] }]);
});

test('cancelling a running job aborts its handler on the process that runs it; the late completion is refused as "cancelled"', async () => {
  const worker = fx.make();
  let late = '';
  worker.work('long', async (_job, ctx) => {
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    late = (ctx.signal.reason as { code: string }).code;
    // A handler that finishes anyway: its success must not count.
  });
  await worker.start();
  const operator = fx.make(); // another node: its own pool and listener
  const id = await operator.enqueue('long', {});
  await claimed(testSignals(worker), id);
  await operator.cancel(id, { actor: 'ops' });
  // Ends once the handler returned and its refused write was recorded.
  await attemptEnded(testSignals(worker), id, 'cancelled', 5_000);
  expect(late).toBe('CANCELLED');
  expect(worker.metrics.count('lease_lost', { reason: 'cancelled' })).toBe(1);
  const job = await operator.getJob(id);
  expect(job?.status).toBe('cancelled');
  const history = await operator.getJobEvents(id);
  expect(history.map((e) => [e.kind, e.errorCode])).toEqual([
    ['cancelled', null],
    ['lost_fence', 'CANCELLED'],
  ]);
});

test('pause stops claims in every process (running jobs finish) and shows in stats; resume starts them again', async () => {
  const a = fx.make();
  const b = fx.make();
  const ran: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  a.work('pausable', async (job) => {
    if ((job.payload as { slow?: boolean }).slow) await gate;
    ran.push(job.id);
  });
  await a.start();
  const slow = await b.enqueue('pausable', { slow: true });
  await claimed(testSignals(a), slow);
  await b.pauseQueue('pausable');
  const queued = await b.enqueueMany(Array.from({ length: 5 }, () => ({ queue: 'pausable', payload: {} })));
  release();
  await waitForOutcome(a, slow, 'succeeded'); // running work finishes while paused
  expect(await nextClaims(testSignals(a), 'pausable', 3)).toEqual([]); // three claims (polls) of the worker took nothing
  expect(ran).toEqual([slow]);
  const stats = await b.stats();
  expect(stats.queues.find((s) => s.queue === 'pausable')).toMatchObject({ paused: true, counts: { pending: 5 } });
  await b.resumeQueue('pausable');
  await allEnded(testSignals(a), queued, 'succeeded', 5_000);
  expect(ran).toHaveLength(6);
  expect((await b.stats()).queues.find((s) => s.queue === 'pausable')?.paused).toBe(false);
  await expect(b.pauseQueue('no-such-queue')).rejects.toThrow(/not declared/);
});

test('pause and resume record who asked and why in the queue\'s audit trail, newest first, paged; without a note they still work', async () => {
  const q = fx.make();
  await q.declareQueues(['audited', 'other']);
  await q.pauseQueue('audited'); // the call of older code: no note
  await q.pauseQueue('audited', { actor: 'ada', reason: 'the importer writes garbage' });
  await q.resumeQueue('audited', { actor: 'grace', reason: 'importer fixed' });
  await q.pauseQueue('other', { actor: 'linus' });
  const trail = await q.queueHistory('audited');
  expect(trail.map(({ kind, wasPaused, actor, reason, queue }) => ({ kind, wasPaused, actor, reason, queue }))).toEqual([
    { kind: 'resumed', wasPaused: true, actor: 'grace', reason: 'importer fixed', queue: 'audited' },
    { kind: 'paused', wasPaused: true, actor: 'ada', reason: 'the importer writes garbage', queue: 'audited' },
    { kind: 'paused', wasPaused: false, actor: null, reason: null, queue: 'audited' },
  ]);
  expect(trail[0]!.at).toBeInstanceOf(Date);
  const [first, ...rest] = trail;
  expect(await q.queueHistory('audited', { limit: 1 })).toEqual([first]);
  expect(await q.queueHistory('audited', { before: first!.id })).toEqual(rest);
  expect((await q.stats()).queues.find((s) => s.queue === 'audited')?.paused).toBe(false);
  expect(await q.queueHistory('no-such-queue')).toEqual([]);
  // Refused before any SQL: an actor that does not fit, a page out of bounds; an unknown queue writes nothing.
  await expect(q.pauseQueue('audited', { actor: 'x'.repeat(201) })).rejects.toBeInstanceOf(InvalidOptionError);
  await expect(q.queueHistory('audited', { limit: 0 })).rejects.toBeInstanceOf(InvalidOptionError);
  expect((await refusal(q.resumeQueue('no-such-queue', { actor: 'ada' }))).code).toBe('QUEUE_NOT_FOUND');
  expect(await q.queueHistory('audited')).toHaveLength(3);
});

test('retention prunes succeeded jobs in bounded batches and never touches dead, running, pending or scheduled ones', async () => {
  const q: PgQueue = fx.make({ pruner: { retentionMs: 60_000, batchSize: 2, maxBatchesPerPass: 3 } });
  await fx.insertJobs('retention', 10, { status: 'succeeded' });
  for (const status of ['dead', 'running', 'pending', 'scheduled', 'cancelled']) {
    await fx.insertJobs('retention', 2, { status, availableInSeconds: status === 'scheduled' ? 3_600 : 0 });
  }
  await q.pauseQueue('retention'); // no worker may take the pending ones meanwhile
  await fx.pool.query(
    `UPDATE pgqueue.jobs SET finished_at = now() - interval '1 day', lease_owner = 'x', lease_expires_at = now() + interval '1 hour', deadline_at = now() + interval '1 hour'
     WHERE queue_name = 'retention'`,
  );
  // Two recent successes stay.
  await fx.pool.query(`UPDATE pgqueue.jobs SET finished_at = now() WHERE id IN (SELECT id FROM pgqueue.jobs WHERE queue_name = 'retention' AND status = 'succeeded' LIMIT 2)`);
  expect(await q.pruneOnce()).toBe(6); // bounded: 3 batches of 2
  expect(await q.pruneOnce()).toBe(2);
  expect(await q.pruneOnce()).toBe(0);
  const { rows } = await fx.pool.query(`SELECT status, count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'retention' GROUP BY status ORDER BY status`);
  expect(rows).toEqual([
    { status: 'scheduled', n: 2 },
    { status: 'pending', n: 2 },
    { status: 'running', n: 2 },
    { status: 'succeeded', n: 2 },
    { status: 'dead', n: 2 },
    { status: 'cancelled', n: 2 },
  ]);
});

test('dead jobs go only by an explicit purge, which records what it removed', async () => {
  const q = fx.make();
  await fx.insertJobs('purge', 5, { status: 'dead' });
  await fx.pool.query(`UPDATE pgqueue.jobs SET finished_at = now() - interval '40 days' WHERE queue_name = 'purge'`);
  await fx.pool.query(`UPDATE pgqueue.jobs SET finished_at = now() WHERE id = (SELECT max(id) FROM pgqueue.jobs WHERE queue_name = 'purge')`);
  expect(await q.pruneOnce()).toBe(0);
  const removed = await q.purgeDead({ olderThan: new Date(Date.now() - 30 * 86_400_000), queue: 'purge', batchSize: 3, actor: 'ops', reason: 'quarterly cleanup' });
  expect(removed).toBe(4);
  const { rows } = await fx.pool.query(`SELECT removed, actor, reason, cardinality(removed_ids)::int AS ids FROM pgqueue.purges WHERE queue_name = 'purge' ORDER BY id`);
  expect(rows).toEqual([
    { removed: 3, actor: 'ops', reason: 'quarterly cleanup', ids: 3 },
    { removed: 1, actor: 'ops', reason: 'quarterly cleanup', ids: 1 },
  ]);
  expect((await fx.pool.query(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'purge'`)).rows[0].n).toBe(1);
});

test('stats report live counts, recently finished ones, the oldest claimable job, dead age, near-expiry, slots, listener, pool and database', async () => {
  const q = fx.make();
  q.work('stats', async () => {}, { concurrency: 4 });
  await fx.insertJobs('stats', 3, { status: 'dead' });
  // History: counted only when it finished within the window.
  await fx.insertJobs('stats', 2, { status: 'succeeded', finishedAgoSeconds: 5 });
  await fx.insertJobs('stats', 4, { status: 'succeeded', finishedAgoSeconds: 3_600 });
  await fx.insertJobs('stats', 1, { status: 'cancelled', finishedAgoSeconds: 5 });
  await q.start();
  await q.pauseQueue('stats');
  await fx.insertJobs('stats', 2);
  await fx.pool.query(`UPDATE pgqueue.jobs SET available_at = now() - interval '90 seconds' WHERE queue_name = 'stats' AND status = 'pending'`);
  await fx.pool.query(`UPDATE pgqueue.jobs SET finished_at = now() - interval '1 hour' WHERE queue_name = 'stats' AND status = 'dead'`);
  await testSignals(q).notifier.listening.next();
  const stats = await q.stats();
  const s = stats.queues.find((x) => x.queue === 'stats')!;
  expect(s.counts).toEqual({ scheduled: 0, pending: 2, running: 0, dead: 3, recent: { succeeded: 2, cancelled: 1 } });
  expect(stats.recentWindowMs).toBe(60_000);
  expect(s.oldestClaimableAgeMs).toBeGreaterThanOrEqual(90_000);
  expect(s.oldestDeadAgeMs).toBeGreaterThanOrEqual(3_600_000);
  expect(s.slots).toEqual({ busy: 0, total: 4 });
  expect(stats.listener.listening).toBe(true);
  expect(stats.database.connections).toBeGreaterThan(0);
  expect(stats.pool.total).toBeGreaterThan(0);
  const wider = await q.stats({ recentWindowMs: 2 * 3_600_000 });
  expect(wider.queues.find((x) => x.queue === 'stats')!.counts.recent).toEqual({ succeeded: 6, cancelled: 1 });
  await expect(q.stats({ recentWindowMs: 0 })).rejects.toThrow(InvalidOptionError);
  await expect(q.stats({ recentWindowMs: 86_400_001 })).rejects.toThrow(/recentWindowMs.*from 1 to 86400000/);
});
