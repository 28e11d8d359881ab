import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseLostError, PgQueueError } from '../../lib/engine/index.js';
import { engineFixture, waitFor, waitForStatus } from '../support/engine.js';

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
  const outcomes: string[] = [];
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
        outcomes.push('completed');
      } catch (error) {
        await client.query('ROLLBACK');
        outcomes.push(error instanceof LeaseLostError ? `lost: ${error.reason}` : `error: ${(error as Error).message}`);
      }
    } finally {
      client.release();
    }
  }, { leaseMs: 500, abortMarginMs: 240 });
  await q.start();
  const id = await q.enqueue('d6', {});
  await waitFor(() => outcomes.length === 1, 10_000);
  expect(outcomes).toEqual(['lost: lease_lost']);
  expect(await ledger(id)).toEqual([]);
  expect((await q.getJob(id))?.status).toBe('running'); // the reaper (not yet run) decides what happens next
});
