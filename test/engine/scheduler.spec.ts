import { engineFixture, waitForStatus } from '../support/engine.js';
import { engineInternals } from '../../lib/engine/internals.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('scheduler');
});
afterAll(() => fx.close());

test('D24: a due row another session holds locked does not make the scheduler spin', async () => {
  const q = fx.make({ scheduler: { intervalMs: 1_000 } });
  q.work('sched', async () => {});
  await q.start();
  const id = await q.enqueue('sched', {}, { delayMs: 50 });
  const holder = await fx.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM pgqueue.jobs WHERE id = $1 FOR UPDATE`, [id]);
    await new Promise((r) => setTimeout(r, 100)); // now it is due, and locked
    let passes = 0;
    const original = engineInternals(q).scheduler.runOnce.bind(engineInternals(q).scheduler);
    engineInternals(q).scheduler.runOnce = async () => {
      passes += 1;
      return original();
    };
    const windowMs = 1_000;
    await new Promise((r) => setTimeout(r, windowMs));
    // Each pass finds the row due but locked; the next one waits at least the floor.
    expect(passes).toBeLessThanOrEqual(windowMs / 25 + 2);
  } finally {
    await holder.query('ROLLBACK');
    holder.release();
  }
  await waitForStatus(q, id, 'succeeded');
});
