import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { PgQueue, type HandlerOptions, type JobEventRecord, type NotifierConfig, type ReaperConfig, type SchedulerConfig } from '../../lib/engine/index.js';
import { compileEngine, type CompiledEngine } from './compile-engine.mjs';
import { createTestDatabase, type TestDatabase } from './database.js';
import { testLogger, waitFor } from './engine.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';
import { closedPort } from './tcp-proxy.js';

/**
 * The crash suite's harness: worker *processes* running the real engine (compiled JavaScript, see
 * compile-engine.mjs and crash-worker.mjs) against a database of the test file's own, which the
 * test can SIGKILL, SIGSTOP/SIGCONT, cut off (pg_terminate_backend on the child's sessions, found
 * by application_name; or a proxy partition), and whose every execution is recorded in side tables
 * (crash-tables.sql) with times on both clocks.
 */

const workerScript = fileURLToPath(new URL('./crash-worker.mjs', import.meta.url));
export const CRASH_TABLES_SQL = readFileSync(fileURLToPath(new URL('./crash-tables.sql', import.meta.url)), 'utf8');

/** What a handler does; a job's payload may carry its own `behaviour` instead. */
export type Behaviour =
  | { kind: 'noop' }
  | { kind: 'sleep'; ms: number }
  | { kind: 'honour'; ms?: number }
  | { kind: 'hang' }
  | { kind: 'effect-then-hang' }
  | { kind: 'effect'; sleepMs?: number }
  | { kind: 'progress'; chunkMs: number; chunks: number; honour: boolean }
  | { kind: 'fail'; error: 'retryable' | 'permanent' | 'string' | 'reject-non-error' | 'error' }
  // Side effects that happen once (test/serial/crash/side-effects.spec.ts; see crash-worker.mjs).
  | { kind: 'complete-tx'; table: string; pauseBeforeComplete?: boolean }
  | { kind: 'charge'; reconcile: boolean; crash?: 'after-call' | 'after-confirm' }
  // Flows (test/serial/crash/flows.spec.ts): a child returns { n }; a parent records its children's results.
  | { kind: 'child'; ms?: number }
  | { kind: 'parent' };

export interface QueueSpec {
  name: string;
  behaviour?: Behaviour;
  options?: Partial<HandlerOptions>;
}

export interface WorkerSpec {
  /** A label; the workerId (lease_owner) is `<name>-<n>`, unique in the fixture. */
  name: string;
  queues: QueueSpec[];
  pollIntervalMs?: number;
  /** false: no reaper timer in this process. */
  reaper?: Partial<ReaperConfig> | false;
  scheduler?: Partial<SchedulerConfig>;
  /** Passed through as the engine's `pruner` option (retention of succeeded jobs). */
  pruner?: Record<string, number> | false;
  notifier?: Partial<NotifierConfig>;
  poolSize?: number;
  /** Route the queue and listen connections through a proxy the test can cut (`worker.proxy`). */
  viaProxy?: boolean;
  /** 'unreachable': the listener points at a port where nothing listens, so it never connects. */
  listen?: 'direct' | 'unreachable';
  stopTimeoutMs?: number;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class WorkerProcess {
  readonly ready: Promise<void>;
  readonly exited: Promise<Exit>;
  stderr = '';
  private exit: Exit | undefined;
  private paused = false;

  constructor(
    readonly workerId: string,
    readonly child: ChildProcess,
    readonly proxy: TcpProxy | undefined,
  ) {
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      });
    });
    let stdout = '';
    this.ready = new Promise((resolve, reject) => {
      child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
        stdout += chunk;
        if (stdout.includes('"type":"ready"')) resolve();
      });
      void this.exited.then((exit) => reject(new Error(`worker ${workerId} exited before it was ready (${JSON.stringify(exit)}):\n${this.stderr}`)));
    });
    this.ready.catch(() => {});
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  get alive(): boolean {
    return this.exit === undefined;
  }

  /** The application_name of its queue connections (the listener's adds `:listen`). */
  get appName(): string {
    return `pgq-crash:${this.workerId}`;
  }

  /** Sends `signal`; for SIGKILL and SIGTERM, resolves when the process has exited. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<Exit | undefined> {
    if (!this.alive) return this.exit;
    if (signal === 'SIGSTOP') this.paused = true;
    if (signal === 'SIGCONT') this.paused = false;
    this.child.kill(signal);
    if (signal === 'SIGKILL' || signal === 'SIGTERM') {
      if (signal === 'SIGTERM' && this.paused) this.child.kill('SIGCONT');
      return this.exited;
    }
    return undefined;
  }

  pause(): Promise<unknown> {
    return this.kill('SIGSTOP');
  }

  resume(): Promise<unknown> {
    return this.kill('SIGCONT');
  }

  /** Graceful: SIGTERM (the engine stops and releases), then waits for the exit. */
  stop(): Promise<Exit | undefined> {
    return this.kill('SIGTERM');
  }
}

export interface ExecutionRow {
  id: string;
  seq: number;
  jobId: string;
  token: number;
  attempt: number;
  worker: string;
  pid: number;
  queue: string;
  behaviour: string;
  startedLocal: number;
  startedDb: number;
  abortedLocal: number | null;
  abortCode: string | null;
  endedLocal: number | null;
  endedDb: number | null;
  outcome: 'ok' | 'threw' | null;
  error: string | null;
}

export interface JobRow {
  id: string;
  status: string;
  attemptCount: number;
  maxAttempts: number | null;
  leaseOwner: string | null;
  leaseToken: number;
  leaseExpiresAt: number | null;
  claimedAt: number | null;
  finishedAt: number | null;
  lastErrorCode: string | null;
}

export type CrashFixture = Awaited<ReturnType<typeof crashFixture>>;

/**
 * A database of its own (migrated, with the side tables), the compiled engine, a producer
 * (an engine that enqueues and is never started), and a factory of worker processes.
 */
export async function crashFixture(label: string) {
  const database: TestDatabase = await createTestDatabase(label);
  const pool = new pg.Pool({ connectionString: database.url, max: 10 });
  pool.on('error', () => {});
  const producer = new PgQueue({ connectionString: database.url, logger: testLogger(), poolSize: 4 });
  let engine: CompiledEngine;
  try {
    engine = await compileEngine();
    await producer.migrate();
    await pool.query(CRASH_TABLES_SQL);
  } catch (error) {
    await producer.stop();
    await pool.end();
    await database.drop();
    throw error;
  }
  const skewMs = await measureSkew(pool);
  const workers: WorkerProcess[] = [];
  const counters = new Map<string, number>();
  const target = new URL(database.url);

  const urlFor = (appName: string, port?: number) => {
    const url = new URL(database.url);
    if (port !== undefined) url.port = String(port);
    url.searchParams.set('application_name', appName);
    return url.toString();
  };

  async function startWorker(spec: WorkerSpec): Promise<WorkerProcess> {
    const n = (counters.get(spec.name) ?? 0) + 1;
    counters.set(spec.name, n);
    const workerId = `${spec.name}-${n}`;
    const appName = `pgq-crash:${workerId}`;
    const proxy = spec.viaProxy ? await startTcpProxy(target.hostname, Number(target.port || 5432)) : undefined;
    const listenPort = spec.listen === 'unreachable' ? await closedPort() : proxy?.port;
    const config = {
      engine: engine.entry,
      workerId,
      url: urlFor(appName, proxy?.port),
      listenUrl: urlFor(`${appName}:listen`, listenPort),
      recorderUrl: database.url,
      queues: spec.queues,
      pollIntervalMs: spec.pollIntervalMs ?? 200,
      reaper: spec.reaper ?? { intervalMs: 100 },
      scheduler: spec.scheduler ?? { intervalMs: 100 },
      pruner: spec.pruner,
      notifier: spec.notifier,
      poolSize: spec.poolSize,
      stopTimeoutMs: spec.stopTimeoutMs,
    };
    const child = spawn(process.execPath, [workerScript], {
      env: { ...process.env, PGQ_CRASH_WORKER: JSON.stringify(config) },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const worker = new WorkerProcess(workerId, child, proxy);
    workers.push(worker);
    await worker.ready;
    return worker;
  }

  /** pg_terminate_backend on a worker's sessions: its queue pool, its listener, or both. */
  async function terminateSessions(worker: WorkerProcess, which: 'queue' | 'listen' | 'all' = 'all'): Promise<number> {
    const names = which === 'queue' ? [worker.appName] : which === 'listen' ? [`${worker.appName}:listen`] : [worker.appName, `${worker.appName}:listen`];
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = ANY($1)`,
      [names],
    );
    return rows[0]!.n;
  }

  async function sessions(worker: WorkerProcess): Promise<{ listen: number; queue: number }> {
    const { rows } = await pool.query<{ listen: number; queue: number }>(
      `SELECT count(*) FILTER (WHERE application_name = $1 || ':listen')::int AS listen,
              count(*) FILTER (WHERE application_name = $1)::int AS queue
       FROM pg_stat_activity WHERE datname = current_database()`,
      [worker.appName],
    );
    return rows[0]!;
  }

  async function executions(jobIds?: readonly string[]): Promise<ExecutionRow[]> {
    const { rows } = await pool.query(
      `SELECT id, seq::int AS seq, job_id::text AS "jobId", lease_token::int AS token, attempt, worker, pid, queue, behaviour,
              started_local AS "startedLocal", extract(epoch FROM started_db) * 1000 AS "startedDb",
              aborted_local AS "abortedLocal", abort_code AS "abortCode",
              ended_local AS "endedLocal", extract(epoch FROM ended_db) * 1000 AS "endedDb", outcome, error
       FROM crash_executions WHERE $1::bigint[] IS NULL OR job_id = ANY($1) ORDER BY seq`,
      [jobIds ?? null],
    );
    return rows.map((r) => ({ ...r, startedDb: Number(r.startedDb), endedDb: r.endedDb === null ? null : Number(r.endedDb) }));
  }

  async function job(id: string): Promise<JobRow> {
    const { rows } = await pool.query(
      `SELECT id::text, status::text, attempt_count AS "attemptCount", max_attempts AS "maxAttempts", lease_owner AS "leaseOwner",
              lease_token::int AS "leaseToken", extract(epoch FROM lease_expires_at) * 1000 AS "leaseExpiresAt",
              extract(epoch FROM claimed_at) * 1000 AS "claimedAt", extract(epoch FROM finished_at) * 1000 AS "finishedAt",
              last_error_code AS "lastErrorCode"
       FROM pgqueue.job_rows WHERE id = $1`,
      [id],
    );
    const r = rows[0];
    if (!r) throw new Error(`job ${id} does not exist`);
    const num = (v: unknown) => (v === null ? null : Number(v));
    return { ...r, leaseExpiresAt: num(r.leaseExpiresAt), claimedAt: num(r.claimedAt), finishedAt: num(r.finishedAt) };
  }

  async function statusCounts(queue?: string): Promise<Record<string, number>> {
    const { rows } = await pool.query<{ status: string; n: number }>(
      `SELECT status::text, count(*)::int AS n FROM pgqueue.job_rows WHERE $1::text IS NULL OR queue_name = $1 GROUP BY status`,
      [queue ?? null],
    );
    return Object.fromEntries(rows.map((r) => [r.status, r.n]));
  }

  return {
    url: database.url,
    database,
    pool,
    producer,
    engine,
    /** Database clock minus this process's clock, in ms (both are this host's clock in CI: ~0). */
    skewMs,
    workers,
    startWorker,
    terminateSessions,
    sessions,
    executions,
    job,
    statusCounts,
    events: (id: string): Promise<JobEventRecord[]> => producer.getJobEvents(id),
    async enqueue(queue: string, count: number, payload: (i: number) => unknown = (i) => ({ i }), options: { priority?: number; maxAttempts?: number } = {}) {
      await producer.declareQueues([queue]);
      const ids: string[] = [];
      for (let from = 0; from < count; from += 1_000) {
        const batch = Array.from({ length: Math.min(1_000, count - from) }, (_, k) => ({ queue, payload: payload(from + k), options }));
        ids.push(...(await producer.enqueueMany(batch)));
      }
      return ids;
    },
    async dbNowMs(): Promise<number> {
      const { rows } = await pool.query<{ ms: number }>(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms`);
      return Number(rows[0]!.ms);
    },
    /** Waits until every job of `queue` is in one of `statuses`. */
    async drained(queue: string, timeoutMs = 30_000, statuses: string[] = ['succeeded', 'dead']) {
      return waitFor(async () => {
        const counts = await statusCounts(queue);
        return Object.keys(counts).every((s) => statuses.includes(s)) ? counts : undefined;
      }, timeoutMs, 50);
    },
    /** Every worker's stderr, for a failing test's message. */
    logs(): string {
      return workers.map((w) => `--- ${w.workerId} (pid ${w.pid})\n${w.stderr.slice(-4_000)}`).join('\n');
    },
    async close() {
      await Promise.allSettled(
        workers.map(async (w) => {
          if (w.alive) {
            w.child.kill('SIGCONT');
            await w.kill('SIGKILL');
          }
          await w.proxy?.close();
        }),
      );
      await producer.stop();
      await pool.end();
      await database.drop();
    },
  };
}

/** Database clock minus local clock, from the sample with the shortest round trip. */
async function measureSkew(pool: pg.Pool): Promise<number> {
  let best = { rtt: Number.POSITIVE_INFINITY, skew: 0 };
  for (let i = 0; i < 5; i++) {
    const before = Date.now();
    const { rows } = await pool.query<{ ms: number }>(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms`);
    const after = Date.now();
    if (after - before < best.rtt) best = { rtt: after - before, skew: Number(rows[0]!.ms) - (before + after) / 2 };
  }
  return best.skew;
}


/** Per job, executions whose [start, end] intervals overlap (the children's clock; an execution that never ended lasts forever), as pairs. */
export function overlappingExecutions(rows: readonly ExecutionRow[]): [ExecutionRow, ExecutionRow][] {
  const byJob = new Map<string, ExecutionRow[]>();
  for (const row of rows) byJob.set(row.jobId, [...(byJob.get(row.jobId) ?? []), row]);
  const pairs: [ExecutionRow, ExecutionRow][] = [];
  for (const list of byJob.values()) {
    const sorted = [...list].sort((a, b) => a.startedLocal - b.startedLocal);
    // The earlier execution that ends last so far: any later start before its end overlaps it.
    let latest: ExecutionRow | undefined;
    for (const row of sorted) {
      if (latest && (latest.endedLocal ?? Number.POSITIVE_INFINITY) > row.startedLocal) pairs.push([latest, row]);
      if (!latest || (row.endedLocal ?? Number.POSITIVE_INFINITY) > (latest.endedLocal ?? Number.POSITIVE_INFINITY)) latest = row;
    }
  }
  return pairs;
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
