// One worker process of the crash suite and the soak: the real engine, compiled to JavaScript
// (test/support/compile-engine.mjs), configured by one JSON document in the environment variable
// PGQ_CRASH_WORKER (see CrashWorkerConfig in crash-worker.d.mts). The parent kills it (SIGKILL),
// pauses it (SIGSTOP/SIGCONT), cuts its database sessions (pg_terminate_backend on its
// application_name) or its network (a proxy), and reads what it did from side tables.
//
// What it records, through a connection of its own (the "recorder", never behind the proxy, so it
// still reports while the worker's queue connections are cut):
//   crash_executions       one row per handler run: job, lease token, attempt, worker, pid, and the
//                          start / abort / end times on both clocks (the child's Date.now() and the
//                          database's clock_timestamp()); outcome 'ok' is written *before* the
//                          handler returns, so a completion can only follow a recorded 'ok'.
//   crash_outcomes         what the engine reported afterwards: succeeded, failed, lease_lost, released.
//   crash_service_calls /  the fake external service: every call, and the effects it applied, one per
//   crash_service_effects  idempotency key (INSERT … ON CONFLICT DO NOTHING).
//
// Protocol: prints one JSON line {"type":"ready",...} once started; SIGTERM stops the engine
// gracefully and exits 0; the end of stdin (the parent died) exits at once.
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import pg from 'pg';

const config = JSON.parse(process.env.PGQ_CRASH_WORKER ?? '');
const { PgQueue, RetryableJobError, PermanentJobError } = await import(pathToFileURL(config.engine).href);

const workerId = config.workerId;
let executionSeq = 0;

// ---------------------------------------------------------------------------------------------
// The recorder: its writes are retried until they succeed (a database restart, a cut session), and
// each is idempotent, so a retried write never records twice.
const recorder = new pg.Pool({ connectionString: config.recorderUrl, max: 4, application_name: `pgq-crash-rec:${workerId}` });
recorder.on('error', () => {});

async function record(sql, params) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await recorder.query(sql, params);
    } catch (error) {
      if (attempt >= 200) throw error;
      await sleep(Math.min(1_000, 20 * 2 ** Math.min(attempt, 6)));
    }
  }
}

/** The fake external service: applies an effect once per idempotency key, logs every call. */
async function callService(job) {
  const { rows } = await record(
    `WITH effect AS (
       INSERT INTO crash_service_effects (idempotency_key, job_id, lease_token, worker)
       VALUES ($1, $2, $3, $4) ON CONFLICT (idempotency_key) DO NOTHING RETURNING 1
     )
     INSERT INTO crash_service_calls (call_id, idempotency_key, job_id, lease_token, worker, applied)
     VALUES ($5, $1, $2, $3, $4, EXISTS (SELECT 1 FROM effect))
     ON CONFLICT (call_id) DO UPDATE SET applied = crash_service_calls.applied
     RETURNING applied`,
    [job.idempotencyKey, job.id, job.leaseToken, workerId, `${workerId}:${job.id}:${job.leaseToken}`],
  );
  return rows[0].applied;
}

// ---------------------------------------------------------------------------------------------
// Handler behaviours. A job's payload may carry its own { behaviour }; otherwise the queue's.
const never = () => new Promise(() => {});

/** Sleeps `ms`, or less: throws the signal's reason as soon as it aborts. */
async function sleepOrAbort(ms, signal) {
  signal.throwIfAborted();
  const timer = new AbortController();
  const stop = () => timer.abort();
  signal.addEventListener('abort', stop, { once: true });
  try {
    await sleep(ms, undefined, { signal: timer.signal });
  } catch (error) {
    if (error?.name !== 'AbortError') throw error;
  } finally {
    signal.removeEventListener('abort', stop);
  }
  signal.throwIfAborted();
}

const behaviours = {
  noop: async () => {},
  /** Works for `ms`, deaf to its signal. */
  sleep: async (b) => sleep(b.ms),
  /** Works for up to `ms`, stops (throws the reason) as soon as its signal aborts. */
  honour: async (b, job, ctx) => sleepOrAbort(b.ms ?? 3_600_000, ctx.signal),
  /** Never settles (the parent kills it, or the engine abandons it). */
  hang: async () => never(),
  /** The external call, then hangs: a crash here is "after the side effect, before completion". */
  'effect-then-hang': async (b, job) => {
    await callService(job);
    return never();
  },
  effect: async (b, job) => {
    if (b.sleepMs) await sleep(b.sleepMs);
    await callService(job);
  },
  /**
   * Real progress: `chunks` chunks of `chunkMs`, each followed by ctx.heartbeat(). With `honour`,
   * an aborted signal or a refused heartbeat stops it; without, it carries on regardless.
   */
  progress: async (b, job, ctx) => {
    for (let i = 0; i < b.chunks; i++) {
      if (b.honour) await sleepOrAbort(b.chunkMs, ctx.signal);
      else await sleep(b.chunkMs);
      try {
        await ctx.heartbeat();
      } catch (error) {
        if (b.honour) throw error;
      }
    }
  },
  fail: async (b) => {
    switch (b.error) {
      case 'retryable':
        throw new RetryableJobError('the fake dependency timed out', { code: 'FAKE_TIMEOUT' });
      case 'permanent':
        throw new PermanentJobError('the payload is not supported', { code: 'FAKE_UNSUPPORTED' });
      case 'string':
        throw 'a plain string';
      case 'reject-non-error':
        return Promise.reject({ not: 'an error' });
      default:
        throw new Error(`an unexpected failure (${b.error})`);
    }
  },
  /**
   * The soak's mix: a short random run with a heartbeat midway, the external call, and failures
   * the payload asks for (transient on early attempts, permanent always).
   */
  soak: async (b, job, ctx) => {
    const p = job.payload;
    await sleepOrAbort(Math.floor(Math.random() * (p.maxSleepMs ?? 20)), ctx.signal);
    await ctx.heartbeat();
    if (p.permanent) throw new PermanentJobError('poison job', { code: 'SOAK_POISON' });
    if (job.attempt <= (p.transientAttempts ?? 0)) throw new RetryableJobError('transient', { code: 'SOAK_TRANSIENT', retryAfterMs: 20 });
    await callService(job);
    await sleepOrAbort(Math.floor(Math.random() * (p.maxSleepMs ?? 20)), ctx.signal);
  },
};

// ---------------------------------------------------------------------------------------------
// Side effects that happen once (test/serial/crash/side-effects.spec.ts). Added behaviours only;
// each records what it learnt in crash_outcomes (kind 'paused' | 'ctx.complete' | 'effect_result'
// | 'reconcile'), and the one that crashes or pauses does it to itself, at the exact point named.

/** The fake service, called with an explicit key (ctx.effect's): one effect per key, every call logged. */
async function callServiceWithKey(job, key) {
  await record(
    `WITH effect AS (
       INSERT INTO crash_service_effects (idempotency_key, job_id, lease_token, worker)
       VALUES ($1, $2, $3, $4) ON CONFLICT (idempotency_key) DO NOTHING RETURNING 1
     )
     INSERT INTO crash_service_calls (call_id, idempotency_key, job_id, lease_token, worker, applied)
     VALUES ($5, $1, $2, $3, $4, EXISTS (SELECT 1 FROM effect))
     ON CONFLICT (call_id) DO UPDATE SET applied = crash_service_calls.applied`,
    [key, job.id, job.leaseToken, workerId, `${workerId}:${key}:${job.leaseToken}`],
  );
  return { chargeId: `ch:${key}` };
}

const noteOutcome = (job, kind, detail) =>
  record(`INSERT INTO crash_outcomes (job_id, lease_token, worker, kind, detail, at_local) VALUES ($1, $2, $3, $4, $5, $6)`, [
    job.id,
    job.leaseToken,
    workerId,
    kind,
    detail,
    Date.now(),
  ]);

Object.assign(behaviours, {
  /**
   * Fenced transactional completion: ctx.complete inserts (job_id, token, worker) into `b.table`.
   * With `pauseBeforeComplete`, the process SIGSTOPs itself right before the call (the parent
   * resumes it with SIGCONT). The call's outcome is recorded: 'committed' or '<code>:<reason>'.
   */
  'complete-tx': async (b, job, ctx) => {
    if (!/^[a-z_][a-z0-9_]*$/.test(b.table)) throw new Error(`crash-worker: bad table name ${b.table}`);
    if (b.pauseBeforeComplete) {
      await noteOutcome(job, 'paused', 'before ctx.complete');
      process.kill(process.pid, 'SIGSTOP');
    }
    try {
      await ctx.complete(async (tx) =>
        tx.query({ text: `INSERT INTO ${b.table} (job_id, token, worker) VALUES ($1, $2, $3)`, values: [job.id, job.leaseToken, workerId] }),
      );
    } catch (error) {
      await noteOutcome(job, 'ctx.complete', `${error?.code}:${error?.reason}`);
      throw error;
    }
    await noteOutcome(job, 'ctx.complete', 'committed');
  },
  /**
   * ctx.effect('charge', key => the fake service, { reconcile: look the key up there } if
   * `b.reconcile`). `crash`: 'after-call' SIGKILLs the process after the service applied the
   * call, before the effect is confirmed; 'after-confirm' after ctx.effect returned, before the
   * job's completion. The result the handler got is recorded.
   */
  charge: async (b, job, ctx) => {
    const reconcile = async (key) => {
      const { rows } = await record(`SELECT worker FROM crash_service_effects WHERE idempotency_key = $1`, [key]);
      await noteOutcome(job, 'reconcile', rows.length ? 'found' : 'not found');
      return rows.length ? { done: true, result: { chargeId: `ch:${key}`, reconciled: true } } : { done: false };
    };
    const result = await ctx.effect(
      'charge',
      async (key) => {
        const charged = await callServiceWithKey(job, key);
        if (b.crash === 'after-call') process.kill(process.pid, 'SIGKILL');
        return charged;
      },
      b.reconcile ? { reconcile } : {},
    );
    await noteOutcome(job, 'effect_result', JSON.stringify(result));
    if (b.crash === 'after-confirm') process.kill(process.pid, 'SIGKILL');
  },
});
// Flows (test/serial/crash/flows.spec.ts): a child returns its number; a parent records what
// ctx.childResults() gave it (how many, their sum, how many distinct) before it succeeds.
Object.assign(behaviours, {
  child: async (b, job) => {
    await sleep(b.ms ?? 0);
    return { n: job.payload.n };
  },
  parent: async (b, job, ctx) => {
    const results = await ctx.childResults();
    const ns = results.map((r) => r.result?.n);
    await noteOutcome(job, 'children', JSON.stringify({ count: results.length, distinct: new Set(ns).size, sum: ns.reduce((a, n) => a + (n ?? 0), 0), allSucceeded: results.every((r) => r.status === 'succeeded') }));
  },
});
// ---------------------------------------------------------------------------------------------

function handlerFor(queue) {
  return async (job, ctx) => {
    const b = job.payload?.behaviour ?? queue.behaviour ?? { kind: 'noop' };
    const run = behaviours[b.kind];
    if (!run) throw new Error(`crash-worker: unknown behaviour ${JSON.stringify(b)}`);
    const id = `${workerId}:${++executionSeq}`;
    await record(
      `INSERT INTO crash_executions (id, job_id, lease_token, attempt, worker, pid, queue, behaviour, started_local)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING`,
      [id, job.id, job.leaseToken, job.attempt, workerId, process.pid, job.queue, b.kind, Date.now()],
    );
    let abortWrite = Promise.resolve();
    const onAbort = () => {
      const at = Date.now();
      const code = ctx.signal.reason?.code ?? String(ctx.signal.reason);
      abortWrite = record(`UPDATE crash_executions SET aborted_local = $2, aborted_db = clock_timestamp(), abort_code = $3 WHERE id = $1`, [id, at, code]);
    };
    if (ctx.signal.aborted) onAbort();
    else ctx.signal.addEventListener('abort', onAbort, { once: true });
    const finish = async (outcome, error) => {
      const at = Date.now();
      await abortWrite.catch(() => {});
      await record(`UPDATE crash_executions SET ended_local = $2, ended_db = clock_timestamp(), outcome = $3, error = $4 WHERE id = $1`, [
        id,
        at,
        outcome,
        error === undefined ? null : String(error?.message ?? error).slice(0, 200),
      ]);
    };
    let value;
    try {
      value = await run(b, job, ctx);
    } catch (error) {
      await finish('threw', error);
      throw error;
    }
    await finish('ok');
    return value;
  };
}

// ---------------------------------------------------------------------------------------------
const logger = {
  log: () => {},
  warn: (message) => process.stderr.write(`[${workerId}] warn: ${message}\n`),
  error: (message) => process.stderr.write(`[${workerId}] error: ${message}\n`),
};

const queue = new PgQueue({
  connectionString: config.url,
  listenConnectionString: config.listenUrl,
  workerId,
  schema: config.schema,
  poolSize: config.poolSize,
  pollIntervalMs: config.pollIntervalMs ?? 200,
  reaper: config.reaper === false ? undefined : config.reaper,
  scheduler: config.scheduler,
  pruner: config.pruner,
  notifier: config.notifier,
  completer: config.completer,
  logger,
});

const tokens = new Map();
queue.onJobEvent((event) => {
  const write = (kind, token, detail) =>
    void record(`INSERT INTO crash_outcomes (job_id, lease_token, worker, kind, detail, at_local) VALUES ($1, $2, $3, $4, $5, $6)`, [
      event.jobId,
      token,
      workerId,
      kind,
      detail,
      Date.now(),
    ]).catch(() => {});
  switch (event.type) {
    case 'claimed':
      tokens.set(event.jobId, event.leaseToken);
      break;
    case 'succeeded':
      write('succeeded', tokens.get(event.jobId) ?? null, null);
      break;
    case 'failed':
      write('failed', tokens.get(event.jobId) ?? null, `${event.code}${event.dead ? ' dead' : ''}`);
      break;
    case 'lease_lost':
      write('lease_lost', event.leaseToken, `${event.reason}:${event.operation}`);
      break;
    case 'released':
      write('released', tokens.get(event.jobId) ?? null, null);
      break;
  }
});

for (const q of config.queues) {
  queue.work(q.name, handlerFor(q), q.options ?? {});
}

process.stdin.on('end', () => process.exit(70)).resume();
process.on('SIGTERM', () => {
  void queue
    .stop(config.stopTimeoutMs ?? 2_000)
    .catch((error) => logger.error(`stop failed: ${error.message}`))
    .finally(() => recorder.end().finally(() => process.exit(0)));
});

await queue.start({ reaperTimer: config.reaper !== false });
process.stdout.write(`${JSON.stringify({ type: 'ready', workerId, pid: process.pid })}\n`);
