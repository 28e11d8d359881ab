import pg from 'pg';
import { PermanentJobError, PgQueue, RetryableJobError, type PgQueueOptions } from '../../lib/engine/index.js';
import { testLogger, waitFor } from '../support/engine.js';

/**
 * The mixed workload the topologies suite runs through each connection topology: a worker engine
 * and a separate producer engine (so every wake-up crosses the database, as between processes),
 * and waves of jobs of every kind the engine writes differently:
 *
 * - noop: claim + batched completion;
 * - complete: ctx.complete, a side row in the completion's transaction (BEGIN; SET LOCAL …);
 * - complete-client: ctx.complete({ client }) in the app's own transaction through the pooler (the
 *   SAVEPOINT check, the fence's row lock, the completion, all on the caller's connection);
 *   enqueued in an app transaction too (enqueue({ client })), so it exists only once that commits;
 * - heartbeat: runs past its lease, renewed by ctx.heartbeat();
 * - retry: RetryableJobError on attempt 1 (the failure write, then the scheduler's promotion);
 * - permanent: PermanentJobError (dead at once);
 * - orphan (first wave): a running row whose worker died (inserted directly, lease expired): the
 *   reaper returns it, the scheduler promotes it, a worker finishes it.
 *
 * A wave is enqueued once the worker is idle (the previous wave finished), so its jobs are found
 * by a wake-up or a poll, never by a claim that was going on anyway.
 */

export const KINDS = ['noop', 'noop', 'complete', 'complete', 'complete-client', 'heartbeat', 'retry', 'permanent'] as const;
type Kind = (typeof KINDS)[number] | 'orphan';

/** What each kind must end as: status, attempts, handler executions. */
const EXPECTED: Record<Kind, { status: string; attempts: number; executions: number }> = {
  noop: { status: 'succeeded', attempts: 1, executions: 1 },
  complete: { status: 'succeeded', attempts: 1, executions: 1 },
  'complete-client': { status: 'succeeded', attempts: 1, executions: 1 },
  heartbeat: { status: 'succeeded', attempts: 1, executions: 1 },
  retry: { status: 'succeeded', attempts: 2, executions: 2 },
  permanent: { status: 'dead', attempts: 1, executions: 1 },
  orphan: { status: 'succeeded', attempts: 2, executions: 1 },
};

const QUEUE = 'mixed';
const LEASE_MS = 1_500;

export interface WorkloadOptions {
  /** The test database, direct (for setup and assertions). */
  directUrl: string;
  /** The engines' main connection (through the pooler). */
  url: string;
  /** Engine options of both engines (listenConnectionString, preparedStatements, pollIntervalMs, notifier…). */
  engine: Partial<PgQueueOptions> & { pollIntervalMs: number };
  waves: number;
  /** Before the first wave (the listener's state is known by then). */
  beforeWaves?: (worker: PgQueue, logLines: readonly string[]) => Promise<void>;
}

export interface WorkloadResult {
  /** Per job: kind, status, attempts, executions, side rows (ctx.complete), heartbeat written. */
  jobs: { id: string; kind: Kind; status: string; attempts: number; executions: number; sideRows: number; heartbeatAt: Date | null }[];
  /** Time from enqueue (the row's created_at) to the first handler start, per job enqueued by a wave. */
  pickupsMs: number[];
  /** The worker's and the producer's warnings and errors. */
  logLines: string[];
  listening: boolean;
  /** A ctx.complete row of the same job more than once, or of a job not succeeded (should be none). */
  sideRowsOfUnfinished: number;
}

export async function runWorkload(options: WorkloadOptions): Promise<WorkloadResult> {
  const direct = new pg.Pool({ connectionString: options.directUrl, max: 2 });
  direct.on('error', () => {});
  // The application's own pool, through the same pooler as the engines.
  const app = new pg.Pool({ connectionString: options.url, max: 4 });
  app.on('error', () => {});
  /** `fn` in a transaction of the app's, on a client of its own. */
  const inAppTransaction = async <T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> => {
    const client = await app.connect();
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  };
  const logger = testLogger();
  const common: PgQueueOptions = {
    connectionString: options.url,
    logger,
    reaper: { intervalMs: 300 },
    scheduler: { intervalMs: 200 },
    ...options.engine,
  };
  const worker = new PgQueue(common);
  // A producer process: never started (enqueue needs no services), its own pool through the pooler.
  const producer = new PgQueue({ ...common, handlerDefaults: undefined });
  const executions = new Map<string, number>();
  const pickups = new Map<string, number>();
  const kinds = new Map<string, Kind>();
  try {
    worker.work(
      QUEUE,
      async (job, ctx) => {
        const kind = (job.payload as { kind: Kind }).kind;
        executions.set(job.id, (executions.get(job.id) ?? 0) + 1);
        if (ctx.attempt === 1) pickups.set(job.id, Date.now() - job.createdAt.getTime());
        switch (kind) {
          case 'complete':
            await ctx.complete((tx) => tx.query({ text: 'INSERT INTO side_rows (job_id) VALUES ($1)', values: [job.id] } as pg.QueryConfig));
            return;
          case 'complete-client':
            await inAppTransaction((client) =>
              ctx.complete((tx) => tx.query({ text: 'INSERT INTO side_rows (job_id) VALUES ($1)', values: [job.id] } as pg.QueryConfig), { client }),
            );
            return;
          case 'heartbeat':
            // Past one lease in all, a heartbeat after each half of it.
            for (let i = 0; i < 3; i++) {
              await new Promise((resolve) => setTimeout(resolve, LEASE_MS / 2));
              await ctx.heartbeat();
            }
            return;
          case 'retry':
            if (ctx.attempt === 1) throw new RetryableJobError('the first attempt fails', { code: 'AGAIN', retryAfterMs: 100 });
            return;
          case 'permanent':
            throw new PermanentJobError('this job can never succeed', { code: 'NEVER' });
          default:
            return;
        }
      },
      { leaseMs: LEASE_MS, concurrency: 10, prefetch: 10 },
    );
    await worker.start();
    await direct.query('CREATE TABLE IF NOT EXISTS side_rows (job_id bigint NOT NULL)');
    await options.beforeWaves?.(worker, logger.lines);

    // A running job whose worker is gone: expired lease, attempt 1 charged.
    const { rows } = await direct.query<{ id: string }>(
      `INSERT INTO pgqueue.jobs (queue_name, payload, status, attempt_count, max_attempts, max_runtime_ms, backoff_base_ms, backoff_max_ms,
                                 lease_owner, lease_token, lease_expires_at, deadline_at, claimed_at)
       VALUES ($1, '{"kind":"orphan"}', 'running', 1, 5, 60000, 50, 100, 'a-worker-that-died', 1, now() - interval '1 second', now() + interval '1 minute', now() - interval '2 seconds')
       RETURNING id::text AS id`,
      [QUEUE],
    );
    kinds.set(rows[0]!.id, 'orphan');

    const waveIds: string[] = [];
    for (let wave = 0; wave < options.waves; wave++) {
      // One enqueue call per job, all at once: each its own statement on the producer's pool.
      const ids = await Promise.all(
        KINDS.map((kind) =>
          kind === 'complete-client' ? inAppTransaction((client) => producer.enqueue(QUEUE, { kind }, { client })) : producer.enqueue(QUEUE, { kind }),
        ),
      );
      ids.forEach((id, i) => kinds.set(id, KINDS[i]!));
      waveIds.push(...ids);
      await waitFor(async () => {
        const { rows: open } = await direct.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE status NOT IN ('succeeded', 'dead')`);
        return open[0]!.n === 0;
      }, 30_000, 50);
    }
    const listening = (await worker.stats()).listener.listening;

    const { rows: states } = await direct.query<{ id: string; status: string; attempt_count: number; heartbeat_at: Date | null; side_rows: number }>(
      `SELECT j.id::text AS id, j.status::text AS status, j.attempt_count, j.heartbeat_at,
              (SELECT count(*)::int FROM side_rows s WHERE s.job_id = j.id) AS side_rows
       FROM pgqueue.job_rows j ORDER BY j.id`,
    );
    const { rows: stray } = await direct.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM side_rows s LEFT JOIN pgqueue.job_rows j ON j.id = s.job_id WHERE j.status IS DISTINCT FROM 'succeeded'`,
    );
    return {
      jobs: states.map((row) => ({
        id: row.id,
        kind: kinds.get(row.id) ?? ('unknown' as Kind),
        status: row.status,
        attempts: row.attempt_count,
        executions: executions.get(row.id) ?? 0,
        sideRows: row.side_rows,
        heartbeatAt: row.heartbeat_at,
      })),
      pickupsMs: waveIds.map((id) => pickups.get(id) ?? Number.POSITIVE_INFINITY),
      logLines: [...logger.lines],
      listening,
      sideRowsOfUnfinished: stray[0]!.n,
    };
  } finally {
    await worker.stop(5_000);
    await producer.stop(5_000);
    await app.end();
    await direct.end();
  }
}

/** Every job ended as its kind must, each ctx.complete row exists once, a heartbeat was written. */
export function expectOutcomes(result: WorkloadResult, waves: number): void {
  expect(result.jobs).toHaveLength(waves * KINDS.length + 1);
  for (const job of result.jobs) {
    const expected = EXPECTED[job.kind];
    expect({ kind: job.kind, status: job.status, attempts: job.attempts, executions: job.executions }).toEqual({ kind: job.kind, ...expected });
    expect({ kind: job.kind, sideRows: job.sideRows }).toEqual({ kind: job.kind, sideRows: job.kind.startsWith('complete') ? 1 : 0 });
    if (job.kind === 'heartbeat') expect(job.heartbeatAt).not.toBeNull();
  }
  expect(result.sideRowsOfUnfinished).toBe(0);
}
