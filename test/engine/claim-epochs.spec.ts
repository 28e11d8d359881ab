import { engineFixture } from '../support/engine.js';
import { localSignal } from '../support/signals.js';

// The claim returns timestamps as epoch milliseconds in float8 (store/claim.ts). A float8 product
// can land a hair under the whole millisecond (date_part('epoch', '2039-01-23 15:49:17.805+00') *
// 1000 is 2179410557804.9998), and a Date built from it truncates a millisecond away: the handler
// must see the job's own createdAt, to the millisecond.

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('claim-epochs');
});
afterAll(() => fx.close());

test('a claimed job carries its createdAt to the exact millisecond, also where float8 rounds under it', async () => {
  // Whole milliseconds whose epoch × 1000 is inexact in float8, one that is exact, and microseconds
  // (truncated to their millisecond, as a Date from the timestamp's text would be).
  const instants = [
    ['2039-01-23 15:49:17.805+00', '2039-01-23T15:49:17.805Z'],
    ['2026-12-07 10:00:00.001+00', '2026-12-07T10:00:00.001Z'],
    ['2026-12-07 10:00:00.999+00', '2026-12-07T10:00:00.999Z'],
    ['2026-12-07 10:00:00+00', '2026-12-07T10:00:00.000Z'],
    ['2026-12-07 10:00:00.123999+00', '2026-12-07T10:00:00.123Z'],
  ] as const;
  const { rows } = await fx.pool.query<{ inexact: boolean }>(`SELECT date_part('epoch', $1::timestamptz) * 1000 <> floor(date_part('epoch', $1::timestamptz) * 1000) AS inexact`, [instants[0][0]]);
  expect(rows[0]!.inexact).toBe(true); // the case this test is about exists on this server
  const q = fx.make();
  await q.declareQueues(['epochs']);
  const seen = localSignal<{ id: string; createdAt: string }>('epochs.seen');
  const ids: string[] = [];
  for (const [at] of instants) {
    const id = await q.enqueue('epochs', { at });
    await fx.pool.query(`UPDATE pgqueue.jobs SET created_at = $2 WHERE id = $1`, [id, at]);
    ids.push(id);
  }
  q.work('epochs', async (job) => {
    seen.signal({ id: job.id, createdAt: job.createdAt.toISOString() });
  });
  await q.start();
  const byId = new Map<string, string>();
  for (let i = 0; i < instants.length; i++) {
    const s = await seen.next();
    byId.set(s.id, s.createdAt);
  }
  expect(ids.map((id) => byId.get(id))).toEqual(instants.map(([, iso]) => iso));
});
