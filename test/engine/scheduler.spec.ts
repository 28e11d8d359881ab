import { engineFixture, waitForOutcome } from '../support/engine.js';
import { testSignals } from '../support/signals.js';
import { makeDue } from '../support/time-travel.js';
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
  const id = await q.enqueue('sched', {}, { delayMs: 60_000 });
  const holder = await fx.pool.connect();
  const passRan = testSignals(q).scheduler.passRan;
  try {
    await makeDue(fx.pool, id);
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM pgqueue.jobs WHERE id = $1 FOR UPDATE`, [id]); // now it is due, and locked
    engineInternals(q).scheduler.wake();
    await passRan.waitFor((p) => p.promoted === 0); // a pass found it due and could not take it
    const before = passRan.count;
    // Real time on purpose: a spin is a rate, passes per window.
    const windowMs = 1_000;
    await new Promise((r) => setTimeout(r, windowMs));
    // Each pass finds the row due but locked; the next one waits at least the floor.
    expect(passRan.count - before).toBeLessThanOrEqual(windowMs / 25 + 2);
  } finally {
    await holder.query('ROLLBACK');
    holder.release();
  }
  await waitForOutcome(q, id, 'succeeded');
});
