// pg-boss as a benchmark system (the interface of bench/ours.mjs).
//
// pg-boss 12.x declares Node >= 22.12 but runs on Node 20.20 (npm install only warns). Its worker
// model (node_modules/pg-boss/dist/worker.js, types.d.ts):
// - `work(name, { localConcurrency: C, batchSize: B, ... }, handler)` starts C polling loops. Each
//   fetches up to B jobs (one SKIP LOCKED statement), hands the array to the handler, completes the
//   batch (one statement), then sleeps until the polling interval has passed since the fetch began,
//   unless it was notified meanwhile or is in burst mode (`burstWhenBatchFull`: a full batch
//   re-fetches at once; ignored when B is 1).
// - LISTEN/NOTIFY is opt-in twice: `useListenNotify` on the instance and `notify: true` on the
//   queue. Polling then runs as a 30 s backstop.
// - No prefetch buffer: the jobs held by the process are the C batches.
//
// The bench's settings (bench/scenarios.mjs) map as follows, each loop running its batch one job
// at a time so that C handlers run at once:
// - 'defaults': localConcurrency C, everything else pg-boss's default (batchSize 1, a 2 s poll
//   after every fetch, no NOTIFY): at most C jobs per 2 s.
// - 'tuned': its most favourable settings for a backlog and for pickup: batchSize 1 + ceil(500 / C)
//   (C × 51 = 510 jobs held, like our 10 running + prefetch 500), burstWhenBatchFull, the minimum
//   0.5 s poll, and LISTEN/NOTIFY on.
// - { prefetch: P } (the process.c10.pfP figures, "equal concurrency and prefetch"): batchSize
//   1 + ceil(P / C), 0.5 s poll, no burst, no NOTIFY: the mapping measured against 10.x, kept so
//   the pfP figures stay comparable.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { PgBoss } from 'pg-boss';

const QUEUE = 'bench';
/** The backlog bench's "another queue" (bench/backlog.mjs): created like QUEUE, so in the same table (job_common). */
const OTHER_QUEUE = 'bench-other';
/** Jobs per insert() call of fillBacklog. */
const FILL_CHUNK = 10_000;
const MIN_POLLING_INTERVAL_SECONDS = 0.5; // pg-boss's minimum (its default is 2)
const TUNED_HELD = 500;
const POOL_SIZE = 10; // pg-boss's default `max`, the same as ours
const require = createRequire(import.meta.url);
const version = JSON.parse(readFileSync(require.resolve('pg-boss/package.json'), 'utf8')).version;

export const key = 'pg-boss';
export const label = `pg-boss ${version}`;
/**
 * The random gap between latency samples. The latency figures use the 'tuned' settings, which
 * wake on NOTIFY, so a short gap is enough (as for ours).
 */
export const latencyGapMs = [5, 25];

function batchSizeFor(concurrency, held) {
  return 1 + Math.ceil(held / concurrency);
}

/** The `work()` options for `settings`, and whether the instance and queue use LISTEN/NOTIFY. */
function workOptions({ concurrency, settings }) {
  if (settings === 'defaults') return { notify: false, options: { localConcurrency: concurrency } };
  if (settings === 'tuned') {
    return {
      notify: true,
      options: {
        localConcurrency: concurrency,
        batchSize: batchSizeFor(concurrency, TUNED_HELD),
        burstWhenBatchFull: true,
        pollingIntervalSeconds: MIN_POLLING_INTERVAL_SECONDS,
      },
    };
  }
  return {
    notify: false,
    options: { localConcurrency: concurrency, batchSize: batchSizeFor(concurrency, settings.prefetch), pollingIntervalSeconds: MIN_POLLING_INTERVAL_SECONDS },
  };
}

export function workerParams({ concurrency, settings }) {
  const { notify, options } = workOptions({ concurrency, settings });
  const batchSize = options.batchSize ?? 1;
  return {
    ...options,
    batchSize,
    pollingIntervalSeconds: options.pollingIntervalSeconds ?? 2,
    claimedAtMost: concurrency * batchSize,
    poolSize: POOL_SIZE,
    wakeup: notify ? 'LISTEN/NOTIFY (useListenNotify + queue notify) + 30 s poll' : 'poll only',
  };
}

/** `settings`: the scenario's (NOTIFY is chosen when the instance and the queue are made). */
export async function open({ url, schema, settings = 'defaults' }) {
  const { notify } = workOptions({ concurrency: 1, settings });
  const boss = new PgBoss({
    connectionString: url,
    schema,
    max: POOL_SIZE,
    application_name: 'pg-boss',
    schedule: false, // no cron in these tests (ours has none either)
    useListenNotify: notify,
  });
  boss.on('error', (error) => console.error(`[pg-boss] ${error.message}`));
  boss.on('warning', (warning) => console.error(`[pg-boss] warning: ${warning.message ?? JSON.stringify(warning)}`));
  await boss.start();
  await boss.createQueue(QUEUE, { notify });
  let started = false;

  return {
    enqueue: (payload) => boss.send(QUEUE, payload),
    enqueueMany: (payloads) => boss.insert(QUEUE, payloads.map((data) => ({ data }))),

    async startWorker({ concurrency, settings: workerSettings, handler }) {
      started = true;
      const { options } = workOptions({ concurrency, settings: workerSettings });
      await boss.work(QUEUE, options, async (jobs) => {
        for (const job of jobs) await handler(job.data);
      });
    },

    /** The tables that hold this system's jobs (the sustained bench reports their dead tuples): the default partition every queue made without `partition: true` shares. */
    jobTables: ['job_common'],

    /**
     * bench/backlog.mjs: `rows` jobs beside the measured ones through its own bulk path,
     * insert() (one statement per 10,000 jobs, the indexes in place): 'other-queue' = ready jobs
     * of queue bench-other (created like this one, so in the same job_common table), 'delayed' =
     * this queue, startAfter in an hour.
     */
    async fillBacklog({ rows, kind }) {
      const other = kind === 'other-queue';
      if (other) await boss.createQueue(OTHER_QUEUE, { notify });
      const startAfter = other ? undefined : new Date(Date.now() + 3_600_000);
      for (let done = 0; done < rows; done += FILL_CHUNK) {
        const jobs = [];
        for (let i = done; i < Math.min(rows, done + FILL_CHUNK); i++) jobs.push({ data: { i }, ...(startAfter ? { startAfter } : {}) });
        await boss.insert(other ? OTHER_QUEUE : QUEUE, jobs);
      }
    },

    /** counts() of the jobs created after this call only (index job_i15 on (name, created_on): cheap beside a million rows). */
    async since() {
      const { rows } = await boss.getDb().executeSql('SELECT now() AS t');
      const after = rows[0].t;
      return async () => {
        const { rows: byState } = await boss
          .getDb()
          .executeSql(`SELECT state::text AS state, count(*)::int AS n FROM "${schema}".job WHERE name = $1 AND created_on >= $2 GROUP BY 1`, [QUEUE, after]);
        const states = Object.fromEntries(byState.map((r) => [r.state, r.n]));
        return { total: byState.reduce((a, r) => a + r.n, 0), succeeded: states.completed ?? 0, byState: states };
      };
    },

    async counts() {
      const { rows } = await boss.getDb().executeSql(`SELECT state::text AS state, count(*)::int AS n FROM "${schema}".job WHERE name = $1 GROUP BY 1`, [QUEUE]);
      const byState = Object.fromEntries(rows.map((r) => [r.state, r.n]));
      return { total: rows.reduce((a, r) => a + r.n, 0), succeeded: byState.completed ?? 0, byState };
    },

    diagnostics() {
      return {};
    },

    async close() {
      await boss.stop({ graceful: started, timeout: 5_000 });
    },
  };
}
