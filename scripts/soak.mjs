#!/usr/bin/env node
// Chaos soak: worker processes running the real engine, against a throwaway PostgreSQL of its own,
// while they are SIGKILLed and restarted, their sessions are terminated, and the database itself
// crash-restarts. At the end every job must be `succeeded` or `dead`, none lost, no stale
// completion applied, and the duplicate executions bounded by what the chaos explains.
//
//   npm run soak -- --jobs 2000 --kills 10
//   node scripts/soak.mjs --jobs 300 --kills 3 --session-kills 3 --db-restarts 1 --workers 3 --json
//
// Options (defaults in brackets):
//   --jobs N            jobs to run [2000]
//   --kills K           SIGKILLs of a random worker, each restarted at once [10]
//   --session-kills S   pg_terminate_backend of every session of a random worker [= kills]
//   --db-restarts R     database crash-restarts: a backend is SIGKILLed, so the postmaster ends
//                       every session, runs crash recovery and accepts connections again [1]
//   --workers W         worker processes [4]
//   --concurrency C     handlers per worker (prefetch is the same) [4]
//   --lease-ms L        lease length [2000]
//   --max-sleep-ms M    a handler works twice up to M ms (a heartbeat between) [100]
//   --batch B           jobs enqueued per tick; ticks are ~100-400 ms apart [25]
//   --timeout-ms T      give up waiting for the drain after T ms [600000]
//   --json              print only the summary, as one JSON line, on stdout
//   --verbose           pass the workers' engine warnings and errors through to stderr
//
// The server is never the shared one: scripts/embedded-postgres.mjs starts a fresh cluster on a
// free port (PG_BIN_DIR may point at other binaries), and it is deleted at the end. The handlers'
// records (test/support/crash-tables.sql) are what the checks read. Exit code 0 when every check
// holds, 1 when one fails, 2 on bad arguments.
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { compileEngine } from '../test/support/compile-engine.mjs';
import { startEmbeddedPostgres } from './embedded-postgres.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const workerScript = path.join(here, '..', 'test', 'support', 'crash-worker.mjs');
const tablesSql = path.join(here, '..', 'test', 'support', 'crash-tables.sql');
const QUEUE = 'soak';

const options = parseArgs(process.argv.slice(2));
const say = options.json ? () => {} : (message) => process.stderr.write(`soak: ${message}\n`);

const startedAt = Date.now();
let server;
let pool;
let producer;
const workers = new Map(); // slot -> { workerId, child, exited }
const killedWorkers = new Set();
const sessionKilledWorkers = new Set();
let exitCode = 1;
try {
  const summary = await soak();
  exitCode = summary.ok ? 0 : 1;
  if (options.json) process.stdout.write(`${JSON.stringify(summary)}\n`);
  else {
    process.stderr.write(`${JSON.stringify(summary, null, 2)}\n`);
    say(summary.ok ? 'every check holds' : `FAILED: ${summary.failures.join('; ')}`);
  }
} catch (error) {
  process.stderr.write(`soak: ${error instanceof Error ? error.stack : error}\n`);
  if (options.json) process.stdout.write(`${JSON.stringify({ ok: false, failures: [String(error?.message ?? error)] })}\n`);
} finally {
  for (const w of workers.values()) w.child.kill('SIGKILL');
  await Promise.allSettled([...workers.values()].map((w) => w.exited));
  await producer?.stop().catch(() => {});
  await pool?.end().catch(() => {});
  await server?.stop().catch(() => {});
}
process.exit(exitCode);

async function soak() {
  say('compiling the engine and starting a throwaway PostgreSQL');
  // synchronous_commit back on: the throwaway server turns it off for speed, and a crash-restart
  // then loses commits that were already acknowledged (an enqueue, a handler's record, a
  // completion), which no queue can survive. fsync may stay off: a crash of the server, not of
  // the machine, leaves the OS's page cache intact.
  const [engine, started] = await Promise.all([compileEngine(), startEmbeddedPostgres({ serverOptions: { synchronous_commit: 'on' } })]);
  server = started;
  const { PgQueue, migrate } = await import(pathToFileURL(engine.entry).href);
  const url = server.url;
  pool = new pg.Pool({ connectionString: url, max: 4, application_name: 'pgq-soak' });
  pool.on('error', () => {});
  await migrate(url, {});
  await pool.query(await readFile(tablesSql, 'utf8'));
  const silent = { log() {}, warn() {}, error() {} };
  producer = new PgQueue({ connectionString: url, logger: silent, poolSize: 2 });
  await producer.declareQueues([QUEUE]);

  const handlerOptions = {
    concurrency: options.concurrency,
    prefetch: options.concurrency,
    leaseMs: options.leaseMs,
    maxAttempts: 10,
    backoff: { baseMs: 50, maxMs: 1_000 },
  };
  const workerConfig = (workerId) => ({
    engine: engine.entry,
    workerId,
    url: withAppName(url, `pgq-crash:${workerId}`),
    listenUrl: withAppName(url, `pgq-crash:${workerId}:listen`),
    recorderUrl: url,
    queues: [{ name: QUEUE, behaviour: { kind: 'soak' }, options: handlerOptions }],
    pollIntervalMs: 250,
    reaper: { intervalMs: 200 },
    scheduler: { intervalMs: 100 },
    notifier: { reconnectMinMs: 50, reconnectMaxMs: 1_000 },
    stopTimeoutMs: 2_000,
  });
  let generation = 0;
  const startWorker = async (slot) => {
    const workerId = `soak-w${slot}-g${++generation}`;
    const child = spawn(process.execPath, [workerScript], {
      env: { ...process.env, PGQ_CRASH_WORKER: JSON.stringify(workerConfig(workerId)) },
      stdio: ['pipe', 'pipe', options.verbose ? 'inherit' : 'ignore'],
    });
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const ready = new Promise((resolve, reject) => {
      let out = '';
      child.stdout.setEncoding('utf8').on('data', (chunk) => {
        out += chunk;
        if (out.includes('"type":"ready"')) resolve();
      });
      void exited.then((exit) => reject(new Error(`worker ${workerId} exited before it was ready: ${JSON.stringify(exit)}`)));
    });
    const worker = { workerId, child, exited, ready };
    workers.set(slot, worker);
    return worker;
  };

  // Workers, and the chaos plan: one action per tick at most, spread over the whole run.
  say(`starting ${options.workers} workers`);
  await Promise.all(Array.from({ length: options.workers }, (_, slot) => startWorker(slot).then((w) => w.ready)));
  const batches = Math.ceil(options.jobs / options.batch);
  const actions = [
    ...Array(options.kills).fill('kill'),
    ...Array(options.sessionKills).fill('session-kill'),
    ...Array(options.dbRestarts).fill('db-restart'),
  ];
  const ticks = Math.max(batches, 2 * actions.length + 2);
  // Some work first and some last; every action somewhere in between.
  const plan = ['none', ...shuffle([...actions, ...Array(ticks - 2 - actions.length).fill('none')]), 'none'];

  const chaos = { kills: 0, sessionKills: 0, sessionsTerminated: 0, dbRestarts: 0, dbDowntimeMs: [] };
  let enqueued = 0;
  say(`running ${options.jobs} jobs over ${plan.length} ticks: ${actions.length} chaos actions`);
  for (const [tick, action] of plan.entries()) {
    const due = Math.min(options.jobs, Math.ceil(((tick + 1) * options.jobs) / plan.length));
    if (due > enqueued) {
      await enqueueRange(enqueued, due);
      enqueued = due;
    }
    if (action === 'kill') {
      const slot = pick([...workers.keys()]);
      const victim = workers.get(slot);
      victim.child.kill('SIGKILL');
      await victim.exited;
      killedWorkers.add(victim.workerId);
      chaos.kills += 1;
      const replacement = await startWorker(slot);
      say(`tick ${tick}: SIGKILL ${victim.workerId}, restarted as ${replacement.workerId}`);
      await replacement.ready;
    } else if (action === 'session-kill') {
      const victim = pick([...workers.values()]);
      const { rows } = await query(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name IN ($1, $1 || ':listen')`,
        [`pgq-crash:${victim.workerId}`],
      );
      sessionKilledWorkers.add(victim.workerId);
      chaos.sessionKills += 1;
      chaos.sessionsTerminated += rows[0].n;
      say(`tick ${tick}: terminated ${rows[0].n} session(s) of ${victim.workerId}`);
    } else if (action === 'db-restart') {
      const downMs = await crashRestartDatabase(url);
      chaos.dbRestarts += 1;
      chaos.dbDowntimeMs.push(downMs);
      say(`tick ${tick}: database crash-restarted (${downMs} ms until it accepted connections again)`);
    }
    await sleep(100 + Math.floor(Math.random() * 300));
  }

  say('chaos done; waiting for every job to finish');
  const drainStarted = Date.now();
  let counts;
  for (;;) {
    counts = await statusCounts();
    const unfinished = Object.entries(counts).filter(([s]) => s !== 'succeeded' && s !== 'dead').reduce((n, [, c]) => n + c, 0);
    if (unfinished === 0) break;
    if (Date.now() - startedAt > options.timeoutMs) break;
    await sleep(250);
  }
  const drainMs = Date.now() - drainStarted;

  // Graceful stop: the engines release nothing (all finished) and exit 0.
  await Promise.all([...workers.values()].map((w) => (w.child.kill('SIGTERM'), w.exited)));
  workers.clear();
  const restartsInLog = await countInServerLog('all server processes terminated; reinitializing');
  const report = await verify(counts, chaos, restartsInLog);
  return { ...report, timing: { totalMs: Date.now() - startedAt, drainMs }, options: { ...options, json: undefined, verbose: undefined } };
}

/** Enqueues jobs [from, to). A batch whose fate is unknown (the server went away) is re-sent only for what is missing. */
async function enqueueRange(from, to) {
  const job = (n) => ({
    queue: QUEUE,
    payload: {
      n,
      behaviour: { kind: 'soak' },
      maxSleepMs: options.maxSleepMs,
      transientAttempts: n % 7 === 3 ? 1 : 0,
      permanent: n % 97 === 5,
    },
  });
  for (let attempt = 0; ; attempt++) {
    const { rows } = await query(`SELECT (payload->>'n')::int AS n FROM pgqueue.job_rows WHERE (payload->>'n')::int >= $1 AND (payload->>'n')::int < $2`, [from, to]);
    const present = new Set(rows.map((r) => r.n));
    const missing = [];
    for (let n = from; n < to; n++) if (!present.has(n)) missing.push(job(n));
    if (missing.length === 0) return;
    try {
      await producer.enqueueMany(missing);
      return;
    } catch (error) {
      if (attempt >= 50) throw error;
      await sleep(200);
    }
  }
}

/**
 * SIGKILL of one backend: the postmaster terminates every other session, reinitialises shared
 * memory, runs crash recovery and accepts connections again: a database restart, on the same port.
 */
async function crashRestartDatabase(url) {
  const victim = new pg.Client({ connectionString: url, application_name: 'pgq-soak:crash-me' });
  const sentinel = new pg.Client({ connectionString: url, application_name: 'pgq-soak:sentinel' });
  victim.on('error', () => {});
  sentinel.on('error', () => {});
  await victim.connect();
  await sentinel.connect();
  const sentinelGone = new Promise((resolve) => sentinel.once('end', resolve));
  const { rows } = await victim.query('SELECT pg_backend_pid() AS pid');
  const started = Date.now();
  process.kill(rows[0].pid, 'SIGKILL');
  // The postmaster has reacted once it ends every other session (the sentinel's among them);
  // then wait until it accepts connections again.
  await Promise.race([sentinelGone, sleep(30_000)]);
  await victim.end().catch(() => {});
  await sentinel.end().catch(() => {});
  for (;;) {
    const probe = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.query('SELECT 1');
      await probe.end();
      return Date.now() - started;
    } catch {
      await probe.end().catch(() => {});
      if (Date.now() - started > 60_000) throw new Error('the database did not come back within 60 s after its crash-restart');
      await sleep(50);
    }
  }
}

async function countInServerLog(text) {
  try {
    const log = await readFile(path.join(path.dirname(server.dataDir), 'postgres.log'), 'utf8');
    return log.split(text).length - 1;
  } catch {
    return null;
  }
}

async function statusCounts() {
  const { rows } = await query(`SELECT status::text, count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = $1 GROUP BY 1`, [QUEUE]);
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/** A query on the soak's own pool, retried across a database restart. */
async function query(text, params) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await pool.query(text, params);
    } catch (error) {
      if (attempt >= 100) throw error;
      await sleep(100);
    }
  }
}

async function verify(counts, chaos, restartsInLog) {
  const failures = [];
  const check = (ok, message) => {
    if (!ok) failures.push(message);
  };
  const one = async (sql, params = []) => (await query(sql, params)).rows[0];

  // None lost, none doubled: exactly the jobs enqueued, each once.
  const jobs = await one(`SELECT count(*)::int AS total, count(DISTINCT payload->>'n')::int AS distinct_n FROM pgqueue.job_rows WHERE queue_name = $1`, [QUEUE]);
  check(jobs.total === options.jobs && jobs.distinct_n === options.jobs, `expected ${options.jobs} jobs, found ${jobs.total} (${jobs.distinct_n} distinct)`);
  const unfinished = Object.entries(counts).filter(([s]) => s !== 'succeeded' && s !== 'dead');
  check(unfinished.length === 0, `unfinished jobs: ${JSON.stringify(Object.fromEntries(unfinished))}`);

  // No stale completion: a succeeded job's final token is the token of an execution that recorded
  // 'ok' (written before its handler returned), and no claim came after the success.
  const stale = await one(
    `SELECT count(*)::int AS n FROM pgqueue.job_rows j
     WHERE j.status = 'succeeded' AND NOT EXISTS (
       SELECT 1 FROM crash_executions e WHERE e.job_id = j.id AND e.lease_token = j.lease_token AND e.outcome = 'ok')`,
  );
  check(stale.n === 0, `${stale.n} succeeded job(s) whose final token has no execution that finished ok`);
  const diagnostics = [];
  if (stale.n > 0) {
    const { rows } = await query(
      `SELECT j.id::text, j.lease_token::int AS token, j.attempt_count, j.finished_at, j.claimed_at,
              (SELECT json_agg(json_build_object('w', e.worker, 't', e.lease_token, 'o', e.outcome, 'a', e.abort_code, 'err', e.error,
                        's', e.started_db, 'e', e.ended_db) ORDER BY e.seq) FROM crash_executions e WHERE e.job_id = j.id) AS runs,
              (SELECT json_agg(json_build_object('k', v.kind, 'w', v.worker, 't', v.lease_token, 'c', v.error_code, 'at', v.at) ORDER BY v.id)
                 FROM pgqueue.job_events v WHERE v.job_id = j.id) AS events,
              (SELECT json_agg(json_build_object('k', o.kind, 'w', o.worker, 't', o.lease_token, 'd', o.detail, 'at', o.at_db) ORDER BY o.id)
                 FROM crash_outcomes o WHERE o.job_id = j.id) AS outcomes
       FROM pgqueue.job_rows j
       WHERE j.status = 'succeeded' AND NOT EXISTS (
         SELECT 1 FROM crash_executions e WHERE e.job_id = j.id AND e.lease_token = j.lease_token AND e.outcome = 'ok')
       LIMIT 5`,
    );
    diagnostics.push(...rows);
  }
  const late = await one(
    `SELECT count(*)::int AS n FROM crash_executions e JOIN pgqueue.job_rows j ON j.id = e.job_id
     WHERE j.status IN ('succeeded', 'dead') AND e.lease_token > j.lease_token`,
  );
  check(late.n === 0, `${late.n} execution(s) under a token newer than the job's final one`);
  // The fence held: every lost-fence event is for a token older than the job's final one (or its own finished claim).
  const fences = await one(`SELECT count(*)::int AS n FROM pgqueue.job_events WHERE kind = 'lost_fence'`);

  // Side effects: exactly one per succeeded job, whatever the number of calls.
  const effects = await one(
    `SELECT (SELECT count(*)::int FROM crash_service_calls) AS calls,
            (SELECT count(*)::int FROM crash_service_effects) AS effects,
            (SELECT count(*)::int FROM pgqueue.job_rows j WHERE j.status = 'succeeded'
               AND NOT EXISTS (SELECT 1 FROM crash_service_effects f WHERE f.job_id = j.id)) AS succeeded_without_effect`,
  );
  check(effects.succeeded_without_effect === 0, `${effects.succeeded_without_effect} succeeded job(s) without their effect`);

  // Dead jobs: the poison ones (dead at once), or attempts exhausted; each with its 'dead' event.
  const dead = await one(
    `SELECT count(*)::int AS total,
            count(*) FILTER (WHERE last_error_code = 'SOAK_POISON')::int AS poison,
            count(*) FILTER (WHERE last_error_code <> 'SOAK_POISON' AND attempt_count >= max_attempts)::int AS exhausted,
            count(*) FILTER (WHERE last_error_code <> 'SOAK_POISON' AND attempt_count < max_attempts)::int AS unexplained,
            count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM pgqueue.job_events e WHERE e.job_id = j.id AND e.kind = 'dead'))::int AS without_event
     FROM pgqueue.job_rows j WHERE status = 'dead'`,
  );
  const poisonJobs = Array.from({ length: options.jobs }, (_, n) => n).filter((n) => n % 97 === 5).length;
  check(dead.poison === poisonJobs, `expected ${poisonJobs} poison jobs dead, found ${dead.poison}`);
  check(dead.unexplained === 0, `${dead.unexplained} dead job(s) neither poison nor out of attempts`);
  check(dead.without_event === 0, `${dead.without_event} dead job(s) without a 'dead' event`);

  // Duplicate executions: runs of a job after its first, other than the retries its payload asked
  // for (a deliberate transient failure). Each is explained by what happened to the run before it.
  const { rows: reruns } = await query(
    `WITH runs AS (
       SELECT e.*, lag(e.outcome) OVER w AS prev_outcome, lag(e.worker) OVER w AS prev_worker,
              lag(e.error) OVER w AS prev_error, lag(e.abort_code) OVER w AS prev_abort
       FROM crash_executions e WINDOW w AS (PARTITION BY e.job_id ORDER BY e.lease_token)
     )
     SELECT prev_outcome, prev_worker, prev_error, prev_abort FROM runs
     WHERE prev_worker IS NOT NULL AND NOT (prev_outcome IS NOT DISTINCT FROM 'threw' AND prev_error IS NOT DISTINCT FROM 'transient')`,
  );
  const causes = { previousRunKilled: 0, previousRunCutOff: 0, completionLost: 0, previousRunAborted: 0, other: 0 };
  for (const r of reruns) {
    if (r.prev_outcome === null && killedWorkers.has(r.prev_worker)) causes.previousRunKilled += 1;
    else if (r.prev_outcome === 'ok') causes.completionLost += 1;
    else if (r.prev_outcome === 'threw' && r.prev_abort) causes.previousRunAborted += 1;
    else if (sessionKilledWorkers.has(r.prev_worker)) causes.previousRunCutOff += 1;
    else causes.other += 1;
  }
  const duplicates = reruns.length;
  // What the chaos can explain: every job a killed or cut-off worker held (its slots and its
  // prefetch), and every job any worker held at a database restart.
  const held = 2 * options.concurrency;
  const bound = (chaos.kills + chaos.sessionKills + chaos.dbRestarts * options.workers) * held;
  check(duplicates <= bound, `${duplicates} duplicate executions, more than the chaos explains (${bound})`);
  check(causes.previousRunKilled <= chaos.kills * held, `${causes.previousRunKilled} re-runs after a SIGKILL, more than ${chaos.kills} kills x ${held} jobs held`);

  const totals = await one(
    `SELECT (SELECT count(*)::int FROM crash_executions) AS executions,
            (SELECT coalesce(sum(lease_token), 0)::int FROM pgqueue.job_rows WHERE queue_name = $1) AS claims,
            (SELECT count(*)::int FROM pgqueue.job_events WHERE kind = 'lease_expired') AS leases_expired,
            (SELECT count(*)::int FROM crash_executions WHERE outcome IS NULL) AS runs_never_ended`,
    [QUEUE],
  );
  check(chaos.dbRestarts === 0 || restartsInLog === null || restartsInLog >= chaos.dbRestarts, `the server log shows ${restartsInLog} restart(s), not ${chaos.dbRestarts}`);

  return {
    ok: failures.length === 0,
    failures,
    jobs: { total: jobs.total, ...counts, deadPoison: dead.poison, deadExhausted: dead.exhausted },
    chaos: { ...chaos, dbRestartsInServerLog: restartsInLog },
    executions: totals.executions,
    claims: totals.claims,
    leasesExpired: totals.leases_expired,
    lostFenceEvents: fences.n,
    runsNeverEnded: totals.runs_never_ended,
    duplicateExecutions: { total: duplicates, bound, causes },
    sideEffects: { calls: effects.calls, effects: effects.effects },
    ...(diagnostics.length > 0 ? { diagnostics } : {}),
  };
}

function parseArgs(argv) {
  const defaults = {
    jobs: 2_000,
    kills: 10,
    sessionKills: undefined,
    dbRestarts: 1,
    workers: 4,
    concurrency: 4,
    leaseMs: 2_000,
    maxSleepMs: 100,
    batch: 25,
    timeoutMs: 600_000,
    json: false,
    verbose: false,
  };
  const result = { ...defaults };
  const names = {
    '--jobs': 'jobs',
    '--kills': 'kills',
    '--session-kills': 'sessionKills',
    '--db-restarts': 'dbRestarts',
    '--workers': 'workers',
    '--concurrency': 'concurrency',
    '--lease-ms': 'leaseMs',
    '--max-sleep-ms': 'maxSleepMs',
    '--batch': 'batch',
    '--timeout-ms': 'timeoutMs',
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--json' || arg === '--verbose') {
      result[arg.slice(2)] = true;
      continue;
    }
    const [flag, inline] = arg.split('=', 2);
    const key = names[flag];
    const raw = inline ?? argv[++i];
    const value = Number(raw);
    if (!key || !Number.isInteger(value) || value < 0) {
      process.stderr.write(`soak: bad argument ${arg}${raw === undefined ? '' : ` ${raw}`}. Options: ${Object.keys(names).join(' ')} --json --verbose\n`);
      process.exit(2);
    }
    result[key] = value;
  }
  result.sessionKills ??= result.kills;
  if (result.jobs < 1 || result.workers < 1 || result.concurrency < 1 || result.batch < 1 || result.leaseMs < 200) {
    process.stderr.write('soak: --jobs, --workers, --concurrency and --batch must be >= 1, --lease-ms >= 200\n');
    process.exit(2);
  }
  return result;
}

function withAppName(url, name) {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
}

function pick(list) {
  return list[Math.floor(Math.random() * list.length)];
}

function shuffle(list) {
  for (let i = list.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [list[i], list[j]] = [list[j], list[i]];
  }
  return list;
}
