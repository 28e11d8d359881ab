// nestjs-pg-queue's engine as a benchmark system: the same small interface as bench/peers/*.mjs.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { instrumentPool } from './lib/diag.mjs';

const QUEUE = 'bench';
/** The queue of the backlog bench's "another queue" million (bench/backlog.mjs). */
const OTHER_QUEUE = 'bench-other';
const PARENT_QUEUE = 'bench-parent';
/** Rows per INSERT … SELECT of fillBacklog. */
const FILL_CHUNK = 100_000;
const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
/** PgQueue's default pool size (POOL_SIZE_DEFAULT, not exported by the barrel). */
const POOL_SIZE = 10;

const logger = {
  log: () => {},
  warn: (message) => console.error(`[pg-queue] ${message}`),
  error: (message) => console.error(`[pg-queue] ${message}`),
};

/**
 * The engine at `enginePath` (default: this checkout's dist/engine) as a benchmark system.
 * BENCH_ENGINE=/path/to/dist/engine/index.js makes another build the default one;
 * `--peer engine:/path/to/dist/engine/index.js` measures two builds side by side (A/B).
 */
export async function loadEngine(enginePath, { key = 'ours', label } = {}) {
  const resolved = enginePath ? path.resolve(enginePath) : undefined;
  const engine = await import(resolved ? pathToFileURL(resolved).href : '../dist/engine/index.js');
  return {
    key,
    label: label ?? (resolved ? `engine ${path.basename(path.resolve(resolved, '..', '..', '..'))}` : `${pkg.name} ${pkg.version}`),
    enginePath: resolved,
    /** How a forked worker process loads the same build (bench/systems.mjs). */
    spec: { engine: resolved ?? null, key, label: label ?? null },
    /**
     * The random gap between latency samples. Its job is to make arrivals random relative to any
     * periodic activity in the worker; ours picks up on NOTIFY, so a short gap is enough.
     */
    latencyGapMs: [5, 25],
    workerParams,
    /** Runs the engine-only processing variants (ordering keys, fairness, ctx.complete, ctx.effect, retries). */
    variants: true,
    open: (options) => open(engine, options),
  };
}

export default await loadEngine(process.env.BENCH_ENGINE);

/**
 * Our prefetch in the `tuned` settings: the same number of jobs held in the process beyond the
 * running ones as graphile-worker's perf-test local queue (bench/peers/graphile-worker.mjs).
 */
const TUNED_PREFETCH = 500;

/**
 * The handler options for `settings` (bench/scenarios.mjs): 'defaults' passes only the
 * concurrency (the engine's own default prefetch applies), 'tuned' prefetch 500, { prefetch }
 * that prefetch.
 */
function handlerOptions({ concurrency, settings }) {
  if (settings === 'defaults') return { concurrency };
  if (settings === 'tuned') return { concurrency, prefetch: TUNED_PREFETCH };
  return { concurrency, prefetch: settings.prefetch };
}

/** How a worker of `concurrency` handlers with `settings` is configured here. */
function workerParams({ concurrency, settings }) {
  const options = handlerOptions({ concurrency, settings });
  return { ...options, prefetch: options.prefetch ?? 'the engine default', poolSize: POOL_SIZE, wakeup: 'LISTEN/NOTIFY + 2 s poll' };
}

/**
 * What a variant's handler does besides counting the execution. `insertSide(db, job)` writes the
 * job's one row to a table of the bench's schema (the variants in SIDE_TABLE_HANDLERS).
 */
const HANDLERS = {
  'no-op': () => {},
  // The baseline for complete-tx: the same insert, on its own connection, before a plain completion.
  insert: (job, _ctx, { pool, insertSide }) => insertSide(pool, job),
  'complete-tx': (job, ctx, { insertSide }) => ctx.complete((tx) => insertSide(tx, job)),
  effect: (_job, ctx) => ctx.effect('call', async (idempotencyKey) => ({ idempotencyKey })),
  'fail-once': (_job, ctx, { engine }) => {
    if (ctx.attempt === 1) throw new engine.RetryableJobError('the first attempt fails', { code: 'BENCH_RETRY', retryAfterMs: 0 });
  },
};
const SIDE_TABLE_HANDLERS = new Set(['insert', 'complete-tx']);

/** `engineOptions`: extra engine options (the topology's: preparedStatements, listenConnectionString). */
async function open(engine, { url, schema, diag = false, engineOptions = {} }) {
  const { PgQueue } = engine;
  const pool = diag ? new pg.Pool({ connectionString: url, max: POOL_SIZE, application_name: 'nestjs-pg-queue' }) : undefined;
  const probe = pool ? instrumentPool(pool) : undefined;
  const queue = new PgQueue({ ...(pool ? { pool } : { connectionString: url }), schema, logger, ...engineOptions });
  // With events.crossProcess on (the events variants, --topology direct-events) the process
  // listens too, as one of a fleet would: it decodes what comes back on its LISTEN connection (its
  // own NOTIFYs, skipped after decoding) and hears its own events directly.
  if (engineOptions.events?.crossProcess) queue.onClusterEvent(() => {});
  await queue.migrate();
  await queue.declareQueues([QUEUE]);
  const claims = [];
  const side = `"${schema}".bench_side`;
  let started = false;
  let sideTable = false;
  // Every job: the job_rows view (jobs and jobs_succeeded, migration 0014) when the build under
  // test has it, else jobs (an older build completes in place), so A/B runs count succeeded jobs either way.
  let jobsTable;
  const allJobs = async () => {
    if (jobsTable === undefined) {
      const { rows } = await queue.pool.query(`SELECT to_regclass($1) IS NOT NULL AS has`, [`"${schema}".job_rows`]);
      jobsTable = rows[0].has ? `"${schema}".job_rows` : `"${schema}".jobs`;
    }
    return jobsTable;
  };
  let parentWorker = false;
  /** The schedules variant: its ticks' jobs (in OTHER_QUEUE) are not the measured queue's. */
  let onlyMeasuredQueue = false;

  // The `defined` variants: the same queue through a defineJob with a zod schema (validation on at
  // enqueue and before each handler). Builds without defineJob skip them.
  const { z } = await import('zod');
  const defined = engine.defineJob ? engine.defineJob(QUEUE, { schema: z.object({ i: z.number().int() }) }) : undefined;

  return {
    enqueue: (payload) => queue.enqueue(QUEUE, payload),
    /**
     * enqueue() with a unique key of its own per job (the `enqueue_single_unique` figure): the
     * unique statement's insert path, every key free (a deduplicated call does less: no insert).
     */
    enqueueUnique: (payload) => queue.enqueue(QUEUE, payload, { unique: { key: `k${payload.i}`, while: 'unfinished' } }),
    /** enqueue() with a debounce key of its own per job (the `enqueue_single_debounced` figure): the upsert's insert path. */
    enqueueDebounced: (payload) => queue.enqueue(QUEUE, payload, { debounce: { key: `k${payload.i}`, delayMs: 0 } }),
    /** enqueue() through the job definition (the `enqueue_single_defined` figure). */
    enqueueDefined: defined ? (payload) => queue.enqueue(defined, payload) : undefined,
    /** `optionsOf(payload)`: per-job enqueue options (a variant's ordering key). */
    enqueueMany: (payloads, optionsOf) =>
      queue.enqueueMany(payloads.map((payload) => ({ queue: QUEUE, payload, ...(optionsOf ? { options: optionsOf(payload) } : {}) }))),

    /** A flow: a parent (queue bench-parent) whose children are `payloads` on the bench queue. */
    enqueueFlow: async (payloads) => {
      if (!engine.FLOW_RESULT_MAX_BYTES) throw new Error('this build has no flows: the flow variants need enqueueFlow');
      await queue.declareQueues([PARENT_QUEUE]);
      if (!parentWorker) {
        parentWorker = true;
        queue.work(PARENT_QUEUE, async (_job, ctx) => void (await ctx.childResults({ limit: 1 })), { concurrency: 2 });
      }
      return queue.enqueueFlow({ queue: PARENT_QUEUE, payload: {}, children: payloads.map((payload) => ({ queue: QUEUE, payload })) });
    },

    /** `variant`: `{ handler: keyof HANDLERS, worker: extra HandlerOptions }` (default: a no-op, no options). */
    async startWorker({ concurrency, settings, handler, variant = {} }) {
      const work = HANDLERS[variant.handler ?? 'no-op'];
      if (!work) throw new Error(`unknown handler variant ${variant.handler}`);
      sideTable = SIDE_TABLE_HANDLERS.has(variant.handler);
      if (sideTable) await queue.pool.query(`CREATE TABLE ${side} (job_id bigint PRIMARY KEY)`);
      const insertSide = (db, job) => db.query({ text: `INSERT INTO ${side} (job_id) VALUES ($1)`, values: [job.id] });
      const env = { pool: queue.pool, insertSide, engine };
      if (variant.defined && !defined) throw new Error('this build has no defineJob: the defined variants need one');
      queue.work(
        variant.defined ? defined : QUEUE,
        async (job, ctx) => {
          handler(job.payload);
          await work(job, ctx, env);
        },
        { ...handlerOptions({ concurrency, settings }), ...variant.worker },
        { claimed: (n) => claims.push(n) },
      );
      // The schedules variant: runtime schedules every second into a queue without a handler, so
      // the ticker of this process inserts their jobs while the measured queue is processed.
      for (let n = 0; n < (variant.schedules ?? 0); n++) {
        if (!queue.schedules) throw new Error('this build has no recurring schedules: the schedules variants need them');
        await queue.schedules.upsert({ name: `bench-${n}`, queue: OTHER_QUEUE, cron: '* * * * * *', overlap: true, payload: { n } });
        onlyMeasuredQueue = true;
      }
      started = true;
      await queue.start();
    },

    /** The tables that hold this system's jobs (the sustained bench reports their dead tuples). */
    jobTables: ['jobs'],

    /**
     * bench/backlog.mjs: `rows` jobs beside the measured ones, in one plain INSERT … SELECT
     * generate_series per 100,000 rows into the jobs table with its indexes in place (every index
     * maintained row by row, as enqueueMany would), in the row shape enqueue() writes: `kind`
     * 'other-queue' = ready ('pending', due now) in queue bench-other (declared), 'delayed' =
     * 'scheduled' in this queue, due in an hour (enqueue puts a job not yet due there).
     */
    async fillBacklog({ rows, kind }) {
      const other = kind === 'other-queue';
      if (other) await queue.declareQueues([OTHER_QUEUE]);
      for (let done = 0; done < rows; done += FILL_CHUNK) {
        await queue.pool.query(
          `INSERT INTO "${schema}".jobs (queue_name, payload, status, available_at)
           SELECT $1, jsonb_build_object('i', g), $2::"${schema}".job_status, now() + $3 * interval '1 second'
           FROM generate_series($4::int, $5::int) g`,
          [other ? OTHER_QUEUE : QUEUE, other ? 'pending' : 'scheduled', other ? 0 : 3600, done + 1, Math.min(rows, done + FILL_CHUNK)],
        );
      }
    },

    /** counts() of the jobs enqueued after this call only (by id: a primary-key range, cheap beside a million rows). */
    async since() {
      const table = await allJobs();
      const { rows } = await queue.pool.query(`SELECT coalesce(max(id), 0)::text AS id FROM ${table}`);
      const after = rows[0].id;
      return async () => {
        const { rows: byState } = await queue.pool.query(`SELECT status::text AS state, count(*)::int AS n FROM ${table} WHERE id > $1 GROUP BY 1`, [after]);
        return normalize(byState, 'succeeded');
      };
    },

    async counts() {
      const { rows } = await queue.pool.query(
        `SELECT status::text AS state, count(*)::int AS n FROM ${await allJobs()} WHERE NOT $1 OR queue_name = $2 GROUP BY 1`,
        [onlyMeasuredQueue, QUEUE],
      );
      const counts = normalize(rows, 'succeeded');
      if (sideTable) {
        const { rows: sideCount } = await queue.pool.query(`SELECT count(*)::int AS n FROM ${side}`);
        counts.sideRows = sideCount[0].n;
      }
      return counts;
    },

    diagnostics() {
      const nonEmpty = claims.filter((n) => n > 0);
      return {
        claimQueries: claims.length,
        emptyClaims: claims.length - nonEmpty.length,
        meanClaimBatch: nonEmpty.length ? nonEmpty.reduce((a, b) => a + b, 0) / nonEmpty.length : 0,
        // The events variants: what reached the other processes, and what the buffer dropped (by now: before the final flush).
        ...(queue.clusterEventTypes?.length
          ? { clusterEvents: { published: queue.metrics.count('cluster_events_published'), dropped: queue.metrics.count('cluster_events_dropped') } }
          : {}),
        ...(probe ? probe.report() : {}),
      };
    },

    async close() {
      await queue.stop(started ? 5_000 : 0);
      probe?.stop();
      await pool?.end();
    },
  };
}

function normalize(rows, doneState) {
  const byState = Object.fromEntries(rows.map((r) => [r.state, r.n]));
  const total = rows.reduce((a, r) => a + r.n, 0);
  return { total, succeeded: byState[doneState] ?? 0, byState };
}
