import { setTimeout as sleep } from 'node:timers/promises';
import { engineFixture } from '../support/engine.js';
import { localSignal, nextValues } from '../support/signals.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('shutdown');
});
afterAll(() => fx.close());

test('stop lets a handler finish within the timeout, and completes it', async () => {
  const q = fx.make();
  const started = localSignal<void>('finishes.started');
  q.work('finishes', async () => {
    started.signal();
    await sleep(300);
  });
  await q.start();
  const id = await q.enqueue('finishes', {});
  await started.next();
  await q.stop(5_000);
  const check = fx.make();
  expect((await check.getJob(id))?.status).toBe('succeeded');
});

test('stop aborts a handler that outlives the timeout and releases its job: pending, attempt given back, history kept', async () => {
  const q = fx.make();
  const abortedWith: string[] = [];
  const started = localSignal<void>('slow.started');
  q.work('slow', async (_job, ctx) => {
    started.signal();
    await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    abortedWith.push((ctx.signal.reason as { code: string }).code);
    throw ctx.signal.reason;
  }, { concurrency: 2, prefetch: 3 });
  await q.start();
  const ids = await q.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue: 'slow', payload: { i } })));
  await nextValues(started, 2);
  const stoppedAt = Date.now();
  await q.stop(200);
  expect(Date.now() - stoppedAt).toBeLessThan(2_000);
  expect(abortedWith).toEqual(['SHUTDOWN', 'SHUTDOWN']);

  const check = fx.make();
  const jobs = await Promise.all(ids.map((id) => check.getJob(id)));
  expect(jobs.map((j) => j?.status)).toEqual(['pending', 'pending', 'pending', 'pending', 'pending']);
  expect(jobs.map((j) => j?.attemptCount)).toEqual([0, 0, 0, 0, 0]);
  expect(jobs.every((j) => j?.leaseOwner === null && j.leaseExpiresAt === null)).toBe(true);
  // The two that ran count a release; the three prefetched ones never started and count none.
  expect(jobs.map((j) => j?.releaseCount).sort()).toEqual([0, 0, 0, 1, 1]);
  const ran = jobs.filter((j) => j?.releaseCount === 1).map((j) => j!.id);
  for (const id of ran) expect((await check.getJobEvents(id)).map((e) => e.kind)).toEqual(['released']);
});

test('a handler that ignores the abort at shutdown is released anyway, and its late success changes nothing', async () => {
  const q = fx.make();
  let finish!: () => void;
  const gate = new Promise<void>((r) => (finish = r));
  const started = localSignal<void>('deaf.started');
  q.work('deaf', async () => {
    started.signal();
    await gate; // ignores ctx.signal
  }, { abortMarginMs: 100 });
  await q.start();
  const id = await q.enqueue('deaf', {});
  await started.next();
  await q.stop(100);
  finish();
  // A window for a wrong late write: a return the stopped worker ignores signals nothing.
  await sleep(100);
  const job = await fx.make().getJob(id);
  expect(job).toMatchObject({ status: 'pending', attemptCount: 0, releaseCount: 1 });
});

test('after the free releases are used up, a release charges the attempt, and the last one ends dead', async () => {
  const id = await (async () => {
    const producer = fx.make();
    await producer.declareQueues(['crashloop']);
    return producer.enqueue('crashloop', {}, { maxAttempts: 2 });
  })();
  const cycle = async () => {
    const q = fx.make({ maxFreeReleases: 1 });
    const started = localSignal<void>('crashloop.started');
    q.work('crashloop', async (_job, ctx) => {
      started.signal();
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      throw ctx.signal.reason;
    });
    await q.start();
    await started.next();
    await q.stop(50);
    return fx.make().getJob(id);
  };
  expect(await cycle()).toMatchObject({ status: 'pending', attemptCount: 0, releaseCount: 1 }); // free
  expect(await cycle()).toMatchObject({ status: 'pending', attemptCount: 1, releaseCount: 2 }); // charged
  expect(await cycle()).toMatchObject({ status: 'dead', attemptCount: 2, releaseCount: 3, lastErrorCode: 'RELEASED' });
});
