// The three measurements, written once against the small system interface of bench/ours.mjs and
// bench/peers/*.mjs: enqueue(payload), enqueueMany(payloads), startWorker({ concurrency,
// settings, handler }), counts(), diagnostics(), close().
//
// `settings` says how each system's worker is configured beyond its `concurrency` handlers; each
// adapter maps it to its own options (and documents the mapping at its top):
// - 'defaults': the system's own defaults;
// - 'tuned': the settings for a backlog of fast jobs (ours: prefetch 500; graphile-worker: its
//   perf test's local queue of 500 and batched completion; pg-boss: batches of 51 in burst mode);
// - { prefetch: P }: P jobs claimed beyond the running ones ("equal concurrency and prefetch").
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { analyze, withClient } from './lib/db.mjs';
import { cpuMeter } from './lib/diag.mjs';
import { percentile, sortedCopy } from './lib/stats.mjs';

const payloadOf = (i) => ({ i });

/** `jobs` single enqueue calls, `inFlight` at a time (each its own statement and transaction). */
export async function enqueueSingle(sys, { jobs, inFlight, warmup = 100 }) {
  await fanOut(warmup, inFlight, (i) => sys.enqueue(payloadOf(-1 - i)));
  const t0 = performance.now();
  await fanOut(jobs, inFlight, (i) => sys.enqueue(payloadOf(i)));
  const seconds = (performance.now() - t0) / 1000;
  return { figures: { 'enqueue.single': jobs / seconds }, detail: { seconds: round(seconds) } };
}

/** `jobs` jobs in calls of `batch`, one call at a time. */
export async function enqueueBulk(sys, { jobs, batch }) {
  await sys.enqueueMany(range(-batch, 0).map(payloadOf)); // warm-up: connections, prepared statements
  const t0 = performance.now();
  for (let start = 0; start < jobs; start += batch) {
    await sys.enqueueMany(range(start, Math.min(jobs, start + batch)).map(payloadOf));
  }
  const seconds = (performance.now() - t0) / 1000;
  return { figures: { 'enqueue.bulk': jobs / seconds }, detail: { seconds: round(seconds) } };
}

/**
 * `jobs` jobs inserted in bulk before any worker starts; then a no-op handler with `concurrency`
 * and `settings`. Timed from just before the worker starts until the database shows every job
 * succeeded (handlers counted in process; then the table is read every 25 ms until the last
 * completions are visible). Stops at `maxSeconds`: the figure is then the jobs succeeded by
 * then per second, and the run is marked capped.
 *
 * `variant` (engine only, see bench/ours.mjs): `orderingKeys` spreads the jobs round-robin over
 * that many ordering keys, `groups` over that many groups; `flowChildren` preloads the jobs as the
 * children of flows of that many (plus one parent each, run once its children succeeded); `handler` and `worker` choose what the handler does and extra handler
 * options; `executionsPerJob` is how often each job's handler is expected to run (2 for fail-once).
 */
export async function processing(sys, { jobs, batch, concurrency, settings, maxSeconds, benchUrl, figure, variant }) {
  await preload(sys, { jobs, batch, benchUrl, orderingKeys: variant?.orderingKeys, groups: variant?.groups, flowChildren: variant?.flowChildren });

  const expectedExecutions = jobs * (variant?.executionsPerJob ?? 1);
  let handled = 0;
  let allHandled;
  const done = new Promise((resolve) => (allHandled = resolve));
  let lastHandlerAt = 0;
  const handler = () => {
    handled += 1;
    lastHandlerAt = performance.now();
    if (handled === expectedExecutions) allHandled();
  };
  const cpu = cpuMeter();
  const t0 = performance.now();
  const deadline = t0 + maxSeconds * 1000;
  await sys.startWorker({ concurrency, settings, handler, ...(variant ? { variant } : {}) });
  await Promise.race([done, sleep(Math.max(0, deadline - performance.now()))]);
  const counts = await drained(sys, jobs, deadline);
  const seconds = (performance.now() - t0) / 1000;
  const usage = cpu.stop();
  return outcome({ sys, figure, jobs, counts, seconds, executions: handled, expectedExecutions, detail: { lastHandlerSeconds: handled ? round((lastHandlerAt - t0) / 1000) : null, ...usage } });
}

/**
 * The same measurement with the workers in `processes` child processes (bench/lib/worker-process.mjs),
 * each one worker of `concurrency` handlers with `settings` on the same queue, the jobs preloaded
 * by this process. Timed from the moment every child has opened its system (connected, migrated:
 * a no-op by then) and is told to start until the table shows every job succeeded.
 * `openOptions`: what each child passes to the system's open() (the URL, schema and engine
 * options of the run's topology).
 */
export async function processingProcesses(sys, { processes, jobs, batch, concurrency, settings, maxSeconds, benchUrl, figure, spec, openOptions }) {
  await preload(sys, { jobs, batch, benchUrl });
  const script = new URL('./lib/worker-process.mjs', import.meta.url);
  const children = Array.from({ length: processes }, () => fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
  const exits = children.map((child) => once(child, 'exit'));
  try {
    const ready = children.map((child) => nextMessage(child, 'ready'));
    for (const child of children) child.send({ type: 'open', spec, openOptions, concurrency, settings, expected: jobs });
    await Promise.all(ready);
    const t0 = performance.now();
    const deadline = t0 + maxSeconds * 1000;
    for (const child of children) child.send({ type: 'start' });
    const counts = await drained(sys, jobs, deadline);
    const seconds = (performance.now() - t0) / 1000;
    const reports = await Promise.all(children.map((child) => {
      const report = nextMessage(child, 'stopped');
      child.send({ type: 'stop' });
      return report;
    }));
    const executions = reports.reduce((a, r) => a + r.handled, 0);
    return outcome({
      sys,
      figure,
      jobs,
      counts,
      seconds,
      executions,
      expectedExecutions: jobs,
      detail: { processes, handledPerProcess: reports.map((r) => r.handled), processCoresPerProcess: reports.map((r) => r.processCores) },
    });
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await Promise.all(exits);
  }
}

/**
 * Sustained pressure (bench/sustained.mjs): `backlog` jobs preloaded, then for `seconds` a worker
 * of `concurrency` handlers with `settings` processes while a producer tops the backlog up (jobs
 * enqueued − handler executions, in calls of up to `batch` whenever at least half a call is
 * missing), so the worker never runs dry. From `pinFromSeconds` to `pinToSeconds` another session
 * holds a snapshot open (BEGIN ISOLATION LEVEL REPEATABLE READ; a SELECT from the job table; then
 * idle): its xmin keeps vacuum from removing any row version that died meanwhile.
 *
 * Reports handler executions per `intervalSeconds` interval (jobs/s), and the dead tuples (and
 * sizes) of the system's job tables (`sys.jobTables` in `schema`) when the snapshot is taken, just
 * before it is released, and at the end.
 */
export async function sustained(sys, { seconds, intervalSeconds, pinFromSeconds, pinToSeconds, backlog, batch, concurrency, settings, benchUrl, schema }) {
  await preload(sys, { jobs: backlog, batch, benchUrl });
  let enqueued = backlog;
  let handled = 0;
  let stopping = false;
  const pin = new pg.Client({ connectionString: benchUrl, application_name: 'pgqueue-bench-snapshot' });
  await pin.connect();
  const tables = () => tableStats(benchUrl, schema, sys.jobTables);
  const events = [];
  const intervals = [];
  try {
    const cpu = cpuMeter();
    await sys.startWorker({ concurrency, settings, handler: () => (handled += 1) });
    const t0 = performance.now();
    let producerError;
    const producer = (async () => {
      while (!stopping) {
        const missing = backlog - (enqueued - handled);
        if (missing < batch / 2) {
          await sleep(10);
          continue;
        }
        const n = Math.min(batch, missing);
        await sys.enqueueMany(range(enqueued, enqueued + n).map(payloadOf));
        enqueued += n;
      }
    })().catch((error) => {
      // Kept until the end (the snapshot must still be released); thrown then.
      producerError = error;
    });
    // The timeline: interval boundaries, the snapshot taken and released, in time order.
    const steps = [
      ...range(1, Math.floor(seconds / intervalSeconds) + 1).map((k) => ({ at: k * intervalSeconds, kind: 'interval' })),
      { at: pinFromSeconds, kind: 'pin' },
      { at: pinToSeconds, kind: 'unpin' },
    ].sort((a, b) => a.at - b.at || (a.kind === 'interval' ? -1 : 1));
    const indexReads = (stats) => stats.reduce((a, t) => a + Object.values(t.indexes).reduce((b, i) => b + Number(i.tupRead), 0), 0);
    let last = { at: 0, handled: 0, enqueued, indexReads: indexReads(await tables()) };
    for (const step of steps) {
      await sleep(Math.max(0, t0 + step.at * 1000 - performance.now()));
      const now = (performance.now() - t0) / 1000;
      if (step.kind === 'interval') {
        const h = handled;
        const e = enqueued;
        const reads = indexReads(await tables());
        intervals.push({
          from: last.at,
          to: step.at,
          jobsPerSecond: (h - last.handled) / (now - last.at),
          enqueuedPerSecond: (e - last.enqueued) / (now - last.at),
          backlog: e - h,
          // Index entries read (the job tables' indexes, pg_stat_user_indexes.idx_tup_read) per job handled.
          indexReadsPerJob: h > last.handled ? (reads - last.indexReads) / (h - last.handled) : Number.NaN,
        });
        last = { at: step.at, handled: h, enqueued: e, indexReads: reads };
      } else if (step.kind === 'pin') {
        await pin.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        await pin.query(`SELECT 1 FROM "${schema}"."${sys.jobTables[0]}" LIMIT 1`);
        const { rows } = await pin.query('SELECT backend_xmin::text AS xmin FROM pg_stat_activity WHERE pid = pg_backend_pid()');
        events.push({ at: round(now), kind: 'snapshot taken', xmin: rows[0].xmin, tables: await tables() });
      } else {
        const atEnd = await tables();
        await pin.query('COMMIT');
        events.push({ at: round(now), kind: 'snapshot released', tables: atEnd });
      }
    }
    stopping = true;
    await producer;
    if (producerError) throw producerError;
    events.push({ at: round((performance.now() - t0) / 1000), kind: 'end', tables: await tables() });
    const rate = (from, to) => {
      const inside = intervals.filter((i) => i.from >= from && i.to <= to);
      const span = inside.reduce((a, i) => a + (i.to - i.from), 0);
      return span ? inside.reduce((a, i) => a + i.jobsPerSecond * (i.to - i.from), 0) / span : Number.NaN;
    };
    const first = rate(0, pinFromSeconds);
    const pinned = rate(pinFromSeconds, pinToSeconds);
    const after = rate(pinToSeconds, seconds);
    return {
      intervals,
      first,
      pinned,
      after,
      events,
      detail: { enqueued, handled, ...cpu.stop(), ...sys.diagnostics() },
    };
  } finally {
    stopping = true;
    await pin.end().catch(() => {});
  }
}

/**
 * Live and dead tuples (pg_stat_user_tables, as of the last stats flush) and total size of
 * `tables` in `schema`; per index, its size and the index entries read so far (idx_tup_read:
 * what claims and completions step over).
 */
export async function tableStats(benchUrl, schema, tables) {
  return withClient(benchUrl, async (c) => {
    const { rows } = await c.query(
      `SELECT relname AS table, n_live_tup::bigint::float8 AS live, n_dead_tup::bigint::float8 AS dead,
              pg_total_relation_size(relid)::float8 AS bytes,
              (SELECT coalesce(jsonb_object_agg(i.indexrelname, jsonb_build_object('tupRead', i.idx_tup_read, 'bytes', pg_relation_size(i.indexrelid))), '{}')
               FROM pg_stat_user_indexes i WHERE i.relid = t.relid) AS indexes
       FROM pg_stat_user_tables t WHERE schemaname = $1 AND relname = ANY($2) ORDER BY relname`,
      [schema, tables],
    );
    return rows;
  });
}

/** `jobs` jobs inserted in calls of `batch` before any worker starts, then ANALYZE. */
async function preload(sys, { jobs, batch, benchUrl, orderingKeys, groups, flowChildren }) {
  if (flowChildren) {
    // Flows of `flowChildren` children each (their parents are extra jobs, counted in the total).
    for (let start = 0; start < jobs; start += flowChildren) await sys.enqueueFlow(range(start, Math.min(jobs, start + flowChildren)).map(payloadOf));
    await analyze(benchUrl);
    return;
  }
  const optionsOf =
    orderingKeys || groups
      ? (payload) => ({ ...(orderingKeys ? { orderingKey: `k${payload.i % orderingKeys}` } : {}), ...(groups ? { group: `g${payload.i % groups}` } : {}) })
      : undefined;
  for (let start = 0; start < jobs; start += batch) {
    await sys.enqueueMany(range(start, Math.min(jobs, start + batch)).map(payloadOf), optionsOf);
  }
  await analyze(benchUrl);
  const before = await sys.counts();
  if (before.total !== jobs) throw new Error(`expected ${jobs} jobs before the worker starts, found ${before.total}`);
}

/** The counts once every job succeeded (read every 25 ms), or at the deadline. */
async function drained(sys, jobs, deadline) {
  for (;;) {
    const counts = await sys.counts();
    if (counts.succeeded >= jobs || performance.now() >= deadline) return counts;
    await sleep(25);
  }
}

function outcome({ sys, figure, jobs, counts, seconds, executions, expectedExecutions, detail }) {
  const complete = counts.succeeded === jobs && counts.total === jobs;
  return {
    figures: { [figure]: counts.succeeded / seconds },
    capped: !complete,
    check: {
      jobs,
      succeeded: counts.succeeded,
      byState: counts.byState,
      // The handlers never fail (fail-once: exactly once): more executions than that means jobs
      // ran twice (leases expired).
      executions,
      expectedExecutions,
      // Insert variants: one side row per job, exactly (complete-tx: written with the completion).
      ...(counts.sideRows !== undefined ? { sideRows: counts.sideRows } : {}),
    },
    detail: {
      seconds: round(seconds),
      executions,
      succeeded: counts.succeeded,
      byState: counts.byState,
      ...detail,
      ...sys.diagnostics(),
    },
  };
}

/** The next IPC message of `type` from `child`; rejects if the child exits first. */
function nextMessage(child, type) {
  return new Promise((resolve, reject) => {
    const onMessage = (message) => {
      if (message?.type === 'error') finish(reject, new Error(`worker process: ${message.message}`));
      else if (message?.type === type) finish(resolve, message);
    };
    const onExit = (code, signal) => finish(reject, new Error(`worker process exited (${signal ?? code}) before "${type}"`));
    const finish = (fn, value) => {
      child.off('message', onMessage);
      child.off('exit', onExit);
      fn(value);
    };
    child.on('message', onMessage);
    child.on('exit', onExit);
  });
}

/**
 * An idle, listening worker; one job enqueued at a time, after a random gap. Per sample: the
 * enqueue call's duration, enqueue call start → handler start ("pickup"), and enqueue resolved →
 * handler start ("after commit"; can be slightly negative, as the wake-up may beat the reply).
 */
export async function latency(sys, { samples, gapMinMs, gapMaxMs, concurrency, settings, warmup = 10, timeoutMs = 10_000 }) {
  const waiters = new Map();
  const handler = (payload) => {
    const at = performance.now();
    const waiter = waiters.get(payload.i);
    if (waiter) {
      waiters.delete(payload.i);
      waiter(at);
    }
  };
  await sys.startWorker({ concurrency, settings, handler });
  await sleep(500); // let it go idle
  const pickup = [];
  const afterCommit = [];
  const call = [];
  for (let i = -warmup; i < samples; i++) {
    await sleep(gapMinMs + Math.random() * (gapMaxMs - gapMinMs));
    const started = new Promise((resolve) => waiters.set(i, resolve));
    const t0 = performance.now();
    await sys.enqueue(payloadOf(i));
    const t1 = performance.now();
    const t2 = await Promise.race([started, sleep(timeoutMs).then(() => Number.NaN)]);
    if (Number.isNaN(t2)) throw new Error(`job ${i} did not start within ${timeoutMs} ms`);
    if (i < 0) continue;
    pickup.push(t2 - t0);
    afterCommit.push(t2 - t1);
    call.push(t1 - t0);
  }
  const figures = {};
  for (const [name, values] of [
    ['latency.pickup', pickup],
    ['latency.afterCommit', afterCommit],
    ['latency.enqueueCall', call],
  ]) {
    const sorted = sortedCopy(values);
    for (const p of [50, 95, 99]) figures[`${name}.p${p}`] = percentile(sorted, p);
  }
  return { figures, detail: { samples } };
}

async function fanOut(count, width, fn) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, count) }, async () => {
      while (next < count) await fn(next++);
    }),
  );
}

function range(from, to) {
  return Array.from({ length: to - from }, (_, k) => from + k);
}

function round(x) {
  return Math.round(x * 1000) / 1000;
}
