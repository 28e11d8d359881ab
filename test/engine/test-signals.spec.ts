import { PgQueue } from '../../lib/engine/index.js';
import { TestSignal } from '../../lib/engine/test-signals.js';
import { engineInternals } from '../../lib/engine/internals.js';
import { engineFixture, testLogger } from '../support/engine.js';
import { attemptEnded, testSignals } from '../support/signals.js';
import { expireLease, makeDue } from '../support/time-travel.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('signals');
});
afterAll(() => fx.close());

test('a wait sees a value signalled before it started, takes each value once, and leaves the values it skips', async () => {
  const signal = new TestSignal<number>('s');
  signal.signal(1);
  signal.signal(2);
  expect(await signal.waitFor((n) => n === 2)).toBe(2);
  expect(await signal.next()).toBe(1);
  const later = signal.next();
  signal.signal(3);
  expect(await later).toBe(3);
  expect(signal.count).toBe(3);
  await expect(signal.next(20)).rejects.toThrow(/Test signal "s": no matching value within 20 ms \(3 signalled, 0 kept unread\)/);
});

test('signals are off until a test turns them on: the services hold none, so they signal nothing', async () => {
  // Not fx.make(): its engines have their signals on from the start.
  const q = new PgQueue({ connectionString: fx.url, logger: testLogger() });
  expect(engineInternals(q).reaper.testSignals).toBeUndefined();
  expect(engineInternals(q).scheduler.testSignals).toBeUndefined();
  q.work('signals-off', async () => {});
  await q.start();
  expect(q.worker('signals-off')?.testSignals).toBeUndefined();
  // Turned on after start, they reach the running services too, and once only.
  const signals = testSignals(q);
  expect(testSignals(q)).toBe(signals);
  expect(q.worker('signals-off')?.testSignals).toBe(signals.worker);
  const id = await q.enqueue('signals-off', {});
  expect(await attemptEnded(signals, id)).toEqual({ queue: 'signals-off', jobId: id, outcome: 'succeeded' });
  expect((await q.getJob(id))?.status).toBe('succeeded');
  await q.stop(1_000);
});

test('expireLease and makeDue move a time into the past, and refuse a job that has none to move', async () => {
  const q = fx.make();
  const signals = testSignals(q);
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  q.work('travel', () => held, { leaseMs: 60_000 });
  await q.start({ reaperTimer: false });
  const id = await q.enqueue('travel', {});
  await signals.worker.batchClaimed.waitFor((b) => b.jobIds.includes(id));
  await expireLease(fx.pool, id);
  expect(await q.reapOnce()).toMatchObject({ reaped: 1 });
  expect(await q.getJob(id)).toMatchObject({ status: 'scheduled', lastErrorCode: 'LEASE_EXPIRED' });
  await expect(expireLease(fx.pool, id)).rejects.toThrow(/holds no lease/);
  await makeDue(fx.pool, id);
  engineInternals(q).scheduler.wake();
  await signals.scheduler.passRan.waitFor((p) => p.promoted > 0);
  release(); // the stale attempt's completion is refused by the fence; the retry runs and succeeds
  expect(await attemptEnded(signals, id, 'lost')).toMatchObject({ outcome: 'lost' });
  await attemptEnded(signals, id, 'succeeded');
  await expect(makeDue(fx.pool, id)).rejects.toThrow(/not scheduled or pending/);
});
