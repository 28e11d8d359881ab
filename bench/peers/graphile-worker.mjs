// graphile-worker as a benchmark system (the interface of bench/ours.mjs).
//
// graphile-worker 0.18 declares Node >= 22.18 but runs on Node 20.20 (npm install only warns).
// Its model (node_modules/graphile-worker/dist/index.d.ts, the preset's `worker` options):
// - One runner (`run()`) is a pool of `concurrentJobs` workers. It wakes on LISTEN/NOTIFY (add_job
//   notifies) and polls every `pollInterval` (2 s) for jobs due later.
// - Without a local queue (its default, `localQueue.size: -1`), each worker fetches its own next
//   job (one statement) when it finishes one, and completes it with one DELETE
//   (`completeJobBatchDelay: -1`: no batching).
// - With `localQueue: { size: N }` the pool fetches and locks N jobs at a time and hands them to
//   its workers from memory; `completeJobBatchDelay` / `failJobBatchDelay` >= 0 batch the
//   completions (DELETEs) and failures made within that many ms into one statement.
// - A finished job is deleted: "succeeded" here is the jobs enqueued minus the rows left.
//
// The bench's settings (bench/scenarios.mjs) map as follows:
// - 'defaults': concurrentJobs C; everything else graphile-worker's default (no local queue, no
//   batched completion, a pool of 10).
// - 'tuned': exactly its own perf test's preset, perfTest/graphile.config.js of graphile/worker
//   (read at abfb4cf, 2026-07-08, the newest in the repository): `localQueue: { size: 500,
//   refetchDelay: { durationMs: 10 } }`, `completeJobBatchDelay: 0`, `failJobBatchDelay: 0`,
//   `maxPoolSize: concurrentJobs + 1`; only concurrentJobs is the bench's C (its file says 24).
//   Its latency test (perfTest/latencyTest.js) uses the same preset.
// - { prefetch: P } (the process.c10.pfP figures): a local queue of P (none below 2), no batched
//   completion.
import { readFileSync } from 'node:fs';
import { Logger, makeWorkerUtils, run } from 'graphile-worker';

const TASK = 'bench';
/**
 * The backlog bench's "another queue" (bench/backlog.mjs): another task identifier, which the
 * measured worker has no task for. (A graphile-worker `queueName` is not that: it runs its jobs
 * one at a time.)
 */
const OTHER_TASK = 'bench-other';
/** Jobs per addJobs() call of fillBacklog. */
const FILL_CHUNK = 10_000;
const POOL_SIZE = 10; // graphile-worker's default maxPoolSize, the same as ours
// Its package.json is not in its exports: read it from node_modules.
const version = JSON.parse(readFileSync(new URL('../../node_modules/graphile-worker/package.json', import.meta.url), 'utf8')).version;

export const key = 'graphile-worker';
export const label = `graphile-worker ${version}`;
/** The random gap between latency samples: it wakes on NOTIFY, so a short gap is enough (as for ours). */
export const latencyGapMs = [5, 25];

/** Errors and warnings on stderr; its info lines (one per job start in some versions) dropped. */
const logger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') console.error(`[graphile-worker] ${level}: ${message}`);
});

/** The preset's `worker` options for `settings` (besides the connection and schema). */
function workerOptions({ concurrency, settings }) {
  if (settings === 'defaults') return { concurrentJobs: concurrency };
  if (settings === 'tuned') {
    return {
      concurrentJobs: concurrency,
      maxPoolSize: concurrency + 1,
      localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    };
  }
  return settings.prefetch >= 2 ? { concurrentJobs: concurrency, localQueue: { size: settings.prefetch } } : { concurrentJobs: concurrency };
}

export function workerParams({ concurrency, settings }) {
  const options = workerOptions({ concurrency, settings });
  return {
    ...options,
    maxPoolSize: options.maxPoolSize ?? POOL_SIZE,
    localQueue: options.localQueue ?? { size: -1 },
    completeJobBatchDelay: options.completeJobBatchDelay ?? -1,
    wakeup: 'LISTEN/NOTIFY + 2 s poll',
  };
}

export async function open({ url, schema }) {
  // The producer's side: WorkerUtils runs the migrations into `schema` (each run's own, fresh).
  const utils = await makeWorkerUtils({ connectionString: url, schema, maxPoolSize: POOL_SIZE, logger });
  await utils.migrate();
  let runner;
  let enqueued = 0;

  return {
    async enqueue(payload) {
      await utils.addJob(TASK, payload);
      enqueued += 1;
    },
    async enqueueMany(payloads) {
      await utils.addJobs(payloads.map((payload) => ({ identifier: TASK, payload })));
      enqueued += payloads.length;
    },

    async startWorker({ concurrency, settings, handler }) {
      runner = await run({
        preset: { worker: { connectionString: url, schema, ...workerOptions({ concurrency, settings }) } },
        logger,
        noHandleSignals: true,
        taskList: {
          [TASK]: async (payload) => {
            await handler(payload);
          },
        },
      });
    },

    /** The tables that hold this system's jobs (the sustained bench reports their dead tuples). */
    jobTables: ['_private_jobs'],

    /**
     * bench/backlog.mjs: `rows` jobs beside the measured ones through its own bulk path,
     * WorkerUtils.addJobs() (one add_jobs statement per 10,000 jobs, the indexes in place):
     * 'other-queue' = ready jobs of task bench-other, 'delayed' = this task, runAt in an hour.
     */
    async fillBacklog({ rows, kind }) {
      const other = kind === 'other-queue';
      const runAt = other ? undefined : new Date(Date.now() + 3_600_000);
      for (let done = 0; done < rows; done += FILL_CHUNK) {
        const specs = [];
        for (let i = done; i < Math.min(rows, done + FILL_CHUNK); i++) specs.push({ identifier: other ? OTHER_TASK : TASK, payload: { i }, ...(runAt ? { runAt } : {}) });
        await utils.addJobs(specs);
      }
    },

    /** counts() of the jobs enqueued through this handle after this call only (rows of a higher id). */
    async since() {
      const { rows } = await utils.withPgClient((client) => client.query(`SELECT coalesce(max(id), 0)::text AS id FROM "${schema}"._private_jobs`));
      const after = rows[0].id;
      const enqueuedBefore = enqueued;
      return async () => {
        const { rows: left } = await utils.withPgClient((client) =>
          client.query(`SELECT count(*)::int AS n FROM "${schema}"._private_jobs WHERE id > $1`, [after]),
        );
        const mine = enqueued - enqueuedBefore;
        return { total: mine, succeeded: mine - left[0].n, byState: { completed: mine - left[0].n, left: left[0].n } };
      };
    },

    /**
     * Finished jobs are deleted, so succeeded = enqueued (through this handle) − rows left; a row
     * left is pending, locked (running or in a local queue) or failed (retrying or permanently).
     */
    async counts() {
      const { rows } = await utils.withPgClient((client) =>
        client.query(`SELECT CASE WHEN attempts >= max_attempts AND last_error IS NOT NULL THEN 'failed'
                                  WHEN locked_at IS NOT NULL THEN 'locked'
                                  WHEN last_error IS NOT NULL THEN 'retrying'
                                  ELSE 'pending' END AS state, count(*)::int AS n
                           FROM "${schema}"._private_jobs GROUP BY 1`),
      );
      const left = rows.reduce((a, r) => a + r.n, 0);
      if (left > enqueued) throw new Error(`graphile-worker: ${left} jobs in the table, only ${enqueued} enqueued through this handle`);
      const byState = Object.fromEntries(rows.map((r) => [r.state, r.n]));
      byState.completed = enqueued - left;
      return { total: enqueued, succeeded: enqueued - left, byState };
    },

    diagnostics() {
      return {};
    },

    async close() {
      if (runner) await runner.stop();
      await utils.release();
    },
  };
}
