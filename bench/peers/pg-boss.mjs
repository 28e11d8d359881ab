// pg-boss as a benchmark system (the interface of bench/ours.mjs).
//
// pg-boss 10.4.2 is the newest release that supports Node 20 (11.x needs Node >= 22, 12.x >= 22.12).
// Its worker model differs from ours:
// - A `work()` call starts one polling loop: fetch up to `batchSize` jobs (one SKIP LOCKED
//   statement), hand the array to the handler, complete the batch (one statement), then sleep
//   until `pollingIntervalSeconds` has passed since the fetch began, unless the batch took longer.
//   There is no LISTEN/NOTIFY wake-up in 10.x, and no in-process prefetch buffer.
// - There is no concurrency option (10.x removed teamSize): concurrency is the number of work()
//   loops.
// So "concurrency C, prefetch P" maps to C work() loops of batchSize 1 + ceil(P / C), each running
// its batch one job at a time: C handlers run at once, and up to C + P jobs are claimed by the
// process (C × batchSize), like ours. The polling interval is set to pg-boss's minimum (0.5 s; the
// default is 2 s), the most favourable legal setting for both throughput and pickup latency.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import PgBoss from 'pg-boss';

const QUEUE = 'bench';
const POLLING_INTERVAL_SECONDS = 0.5;
const POOL_SIZE = 10; // pg-boss's default `max`, the same as ours
const require = createRequire(import.meta.url);
const version = JSON.parse(readFileSync(require.resolve('pg-boss/package.json'), 'utf8')).version;

export const key = 'pg-boss';
export const label = `pg-boss ${version}`;
export const defaults = { prefetch: 0 };
/**
 * The random gap between latency samples: it spans a whole polling period, so that each job
 * arrives at a random phase of the poll. (With a short gap, every sample would arrive just after
 * the poll that picked up the previous one, and wait almost a full period: a biased ~480 ms.)
 */
export const latencyGapMs = [5, 5 + POLLING_INTERVAL_SECONDS * 1000];

export function workerParams({ concurrency, prefetch }) {
  return {
    workLoops: concurrency,
    batchSize: batchSizeFor(concurrency, prefetch),
    claimedAtMost: concurrency * batchSizeFor(concurrency, prefetch),
    pollingIntervalSeconds: POLLING_INTERVAL_SECONDS,
    poolSize: POOL_SIZE,
    wakeup: 'poll only',
  };
}

function batchSizeFor(concurrency, prefetch) {
  return 1 + Math.ceil(prefetch / concurrency);
}

export async function open({ url, schema }) {
  const boss = new PgBoss({
    connectionString: url,
    schema,
    max: POOL_SIZE,
    application_name: 'pg-boss',
    schedule: false, // no cron in these tests (ours has none either)
    pollingIntervalSeconds: POLLING_INTERVAL_SECONDS,
  });
  boss.on('error', (error) => console.error(`[pg-boss] ${error.message}`));
  await boss.start();
  await boss.createQueue(QUEUE);
  let started = false;

  return {
    enqueue: (payload) => boss.send(QUEUE, payload),
    enqueueMany: (payloads) => boss.insert(payloads.map((data) => ({ name: QUEUE, data }))),

    async startWorker({ concurrency, prefetch, handler }) {
      started = true;
      const batchSize = batchSizeFor(concurrency, prefetch);
      const options = { batchSize, pollingIntervalSeconds: POLLING_INTERVAL_SECONDS };
      for (let i = 0; i < concurrency; i++) {
        await boss.work(QUEUE, options, async (jobs) => {
          for (const job of jobs) await handler(job.data);
        });
      }
    },

    async counts() {
      const rows = await boss.getDb().executeSql(`SELECT state::text AS state, count(*)::int AS n FROM "${schema}".job WHERE name = $1 GROUP BY 1`, [QUEUE]);
      const list = rows.rows;
      const byState = Object.fromEntries(list.map((r) => [r.state, r.n]));
      return { total: list.reduce((a, r) => a + r.n, 0), succeeded: byState.completed ?? 0, byState };
    },

    diagnostics() {
      return {};
    },

    async close() {
      await boss.stop({ graceful: started, wait: true, timeout: 5_000 });
    },
  };
}
