import { crashFixture, type CrashFixture, type ExecutionRow } from '../../support/crash-harness.js';
import { waitFor } from '../../support/engine.js';

/**
 * Per-key order across real worker processes, through a crash (README, "Per-key order:
 * orderingKey"): jobs of one key run one at a time, in enqueue order, and a successor never starts
 * before its predecessor has succeeded, even when the process running the predecessor is SIGKILLed
 * and another process recovers it after its lease expires.
 */
let fx: CrashFixture;
beforeAll(async () => {
  fx = await crashFixture('crashkeys');
});
afterAll(() => fx?.close());
afterEach((context) => {
  if (context.task.result?.state === 'fail') console.log(fx.logs());
});

test('200 keys × 10 jobs over 3 processes, one SIGKILLed mid-run and restarted: no successor starts before its predecessor succeeded', async () => {
  const KEYS = 200;
  const PER_KEY = 10;
  const queue = 'keyed';
  const spec = {
    name: 'keyed',
    queues: [{ name: queue, behaviour: { kind: 'sleep' as const, ms: 10 }, options: { concurrency: 4, prefetch: 4, leaseMs: 2_000, backoff: { baseMs: 0, maxMs: 0 } } }],
    poolSize: 4,
  };
  const workers = await Promise.all([1, 2, 3].map(() => fx.startWorker(spec)));

  // Interleaved over the keys, in 2 batches of 1,000: job n of every key before job n + 1 of any.
  await fx.producer.declareQueues([queue]);
  const all = Array.from({ length: KEYS * PER_KEY }, (_, i) => ({ key: `k${i % KEYS}`, n: Math.floor(i / KEYS) }));
  const ids: string[] = [];
  for (let from = 0; from < all.length; from += 1_000) {
    const batch = all.slice(from, from + 1_000).map(({ key, n }) => ({ queue, payload: { key, n }, options: { orderingKey: key } }));
    ids.push(...(await fx.producer.enqueueMany(batch)));
  }
  const idsByKey = new Map<string, string[]>();
  for (const [i, { key }] of all.entries()) idsByKey.set(key, [...(idsByKey.get(key) ?? []), ids[i]!]);

  // Mid-run (a fifth done), kill the worker that has the most handlers running right now.
  await waitFor(async () => ((await fx.statusCounts(queue)).succeeded ?? 0) >= (KEYS * PER_KEY) / 5, 60_000, 20);
  const { rows: busy } = await fx.pool.query<{ worker: string; n: number }>(
    `SELECT worker, count(*)::int AS n FROM crash_executions WHERE outcome IS NULL GROUP BY worker ORDER BY n DESC LIMIT 1`,
  );
  const victim = workers.find((w) => w.workerId === busy[0]?.worker) ?? workers[0]!;
  await victim.kill('SIGKILL');
  const restarted = await fx.startWorker(spec);

  await fx.drained(queue, 90_000);
  expect(await fx.statusCounts(queue)).toEqual({ succeeded: KEYS * PER_KEY });

  const runs = await fx.executions(ids);
  const byJob = new Map<string, ExecutionRow[]>();
  for (const r of runs) byJob.set(r.jobId, [...(byJob.get(r.jobId) ?? []), r]);
  const { rows: finals } = await fx.pool.query<{ id: string; token: number }>(`SELECT id::text, lease_token::int AS token FROM pgqueue.job_rows WHERE id = ANY($1)`, [ids]);
  const finalToken = new Map(finals.map((r) => [r.id, r.token]));

  // The crash did hit running work: executions the victim started and never ended, recovered by others.
  const cutShort = runs.filter((r) => r.worker === victim.workerId && r.outcome === null);
  // Handlers of the victim that ended ok but whose completion the kill prevented: they ran again.
  const okNotCompleted = runs.filter((r) => r.worker === victim.workerId && r.outcome === 'ok' && r.token !== finalToken.get(r.jobId));
  // Any other process's execution that did not become the job's success (a lease lost under load).
  const otherRetries = runs.filter((r) => r.worker !== victim.workerId && r.token !== finalToken.get(r.jobId)).length;
  expect(cutShort.length).toBeGreaterThan(0);
  expect(runs.filter((r) => r.worker === restarted.workerId).length).toBeGreaterThan(0);

  const violations: string[] = [];
  let minGapMs = Number.POSITIVE_INFINITY;
  for (const [key, keyIds] of idsByKey) {
    for (let n = 0; n < keyIds.length; n++) {
      const mine = byJob.get(keyIds[n]!) ?? [];
      // The successful execution is the one under the job's final token (ended ok). Others may
      // have ended ok too (at-least-once): the victim's, killed before its completion was written,
      // or, on a loaded machine, one whose lease ran out before its completion was written.
      const final = mine.filter((r) => r.token === finalToken.get(keyIds[n]!));
      if (final.length !== 1 || final[0]!.outcome !== 'ok') {
        violations.push(`${key}#${n}: executions ${JSON.stringify(mine.map((r) => [r.worker, r.token, r.outcome]))}, final token ${finalToken.get(keyIds[n]!)}`);
        continue;
      }
      if (n === 0) continue;
      // Every execution of job n (including ones cut short by the kill) started, on the database's
      // clock, after job n - 1's successful execution had ended.
      const predecessor = byJob.get(keyIds[n - 1]!) ?? [];
      const predecessorEnd = predecessor.find((r) => r.token === finalToken.get(keyIds[n - 1]!))?.endedDb;
      for (const r of mine) {
        const gap = predecessorEnd === undefined || predecessorEnd === null ? Number.NEGATIVE_INFINITY : r.startedDb - predecessorEnd;
        minGapMs = Math.min(minGapMs, gap);
        if (!(gap > 0)) violations.push(`${key}#${n} (${r.worker}, token ${r.token}) started ${gap} ms after its predecessor's successful execution ended`);
      }
    }
  }
  expect(violations).toEqual([]);

  // What the victim held was taken back through its leases' expiry (every execution it left unended
  // among them) and then succeeded under a later token.
  const { rows: expired } = await fx.pool.query<{ id: string; token: number }>(
    `SELECT job_id::text AS id, lease_token::int AS token FROM pgqueue.job_events WHERE kind = 'lease_expired' AND worker = $1`,
    [victim.workerId],
  );
  const expiredIds = new Set(expired.map((e) => e.id));
  expect([...cutShort, ...okNotCompleted].filter((r) => !expiredIds.has(r.jobId))).toEqual([]);
  for (const e of expired) expect(finalToken.get(e.id)).toBeGreaterThan(e.token);
  console.log(
    JSON.stringify({
      test: 'ordering-keys-crash',
      keys: KEYS,
      jobsPerKey: PER_KEY,
      victimLeasesExpired: expired.length,
      cutShort: cutShort.length,
      okButNotCompleted: okNotCompleted.length,
      otherRetries,
      executions: runs.length,
      minSuccessorGapMs: Math.round(minGapMs * 1000) / 1000,
    }),
  );
  await Promise.all([...workers.filter((w) => w !== victim), restarted].map((w) => w.stop()));
}, 120_000);
