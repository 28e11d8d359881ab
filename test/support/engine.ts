import pg from 'pg';
import { onTestFinished } from 'vitest';
import { PgQueue, type JobRecord, type JobStatus, type PgQueueOptions } from '../../lib/engine/index.js';
import type { AttemptOutcome } from '../../lib/testing/test-signals.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { attemptEnded, testSignals } from './signals.js';

/** Quiet logger for tests; collects warnings and errors so a test can assert on them. */
export function testLogger() {
  const lines: string[] = [];
  return {
    lines,
    log: () => {},
    warn: (m: string) => void lines.push(`warn: ${m}`),
    error: (m: string) => void lines.push(`error: ${m}`),
  };
}

/**
 * A database of the test file's own, migrated, with a pool for direct SQL, and a factory of
 * engines on it whose intervals are short enough for tests, their test signals on from the start
 * (so a wait never misses an event that came first). Everything is closed by `close()`.
 */
export async function engineFixture(label: string) {
  const database: TestDatabase = await createTestDatabase(label);
  const pool = new pg.Pool({ connectionString: database.url, max: 10 });
  // Dropping the database at the end terminates sessions that are still closing; not an error here.
  pool.on('error', () => {});
  const engines: PgQueue[] = [];
  const make = (options: Partial<PgQueueOptions> = {}) => {
    const engine = new PgQueue({
      connectionString: database.url,
      pollIntervalMs: 200,
      logger: testLogger(),
      reaper: { intervalMs: 100 },
      scheduler: { intervalMs: 100 },
      ...options,
    });
    testSignals(engine);
    engines.push(engine);
    // An engine made inside a test stops when that test ends: a file's engines piling up until
    // close() held 60-77 connections (each has a pool and a listener), which with other files in
    // parallel filled the server's max_connections (100). One made in beforeAll (shared by the
    // file's tests) throws here and lives until close().
    try {
      onTestFinished(() => engine.stop(1_000));
    } catch {
      // not inside a test
    }
    return engine;
  };
  await make().migrate();
  return {
    url: database.url,
    pool,
    make,
    /**
     * Inserts jobs directly with one statement, for backlogs and fixtures. Finished ones (succeeded,
     * dead, cancelled) finished `finishedAgoSeconds` ago (default now), as the engine would have set
     * it; `errorCodes` are given to the rows in turn (the g-th row gets errorCodes[g % length]).
     */
    async insertJobs(
      queue: string,
      count: number,
      extra: { status?: string; availableInSeconds?: number; priority?: number; finishedAgoSeconds?: number; errorCodes?: readonly string[] } = {},
    ) {
      await pool.query(`INSERT INTO pgqueue.queues (name) VALUES ($1) ON CONFLICT DO NOTHING`, [queue]);
      // A running row needs a lease (a CHECK constraint): give it one owned by nobody alive.
      await pool.query(
        `INSERT INTO pgqueue.jobs (queue_name, payload, status, priority, available_at, lease_owner, lease_expires_at, deadline_at,
                                   finished_at, last_error_code)
         SELECT $1, jsonb_build_object('n', g), $3::pgqueue.job_status, $4, now() + $5 * interval '1 second',
                CASE WHEN $3 = 'running' THEN 'fixture' END,
                CASE WHEN $3 = 'running' THEN now() + interval '1 hour' END,
                CASE WHEN $3 = 'running' THEN now() + interval '1 hour' END,
                CASE WHEN $3 IN ('succeeded', 'dead', 'cancelled') THEN now() - $6 * interval '1 second' END,
                ($7::text[])[1 + g % nullif(cardinality($7::text[]), 0)]
         FROM generate_series(1, $2) g`,
        [queue, count, extra.status ?? 'pending', extra.priority ?? 0, extra.availableInSeconds ?? 0, extra.finishedAgoSeconds ?? 0, extra.errorCodes ?? []],
      );
    },
    async close() {
      await Promise.allSettled(engines.map((e) => e.stop(1_000)));
      await pool.end();
      await database.drop();
    },
  };
}

/** Polls `check` until it returns a truthy value or `timeoutMs` passes. */
export async function waitFor<T>(check: () => Promise<T> | T, timeoutMs = 10_000, intervalMs = 20): Promise<NonNullable<T>> {
  const started = Date.now();
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() - started > timeoutMs) throw new Error(`waitFor: condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * Waits on `queue`'s test signal until this engine's worker ended an attempt of job `id` with
 * `outcome` (its write committed), and returns the job's record then. The engine must have its
 * signals on from before the attempt (engines of engineFixture do).
 */
export async function waitForOutcome(queue: PgQueue, id: string, outcome: AttemptOutcome, timeoutMs?: number): Promise<JobRecord> {
  await attemptEnded(testSignals(queue), id, outcome, timeoutMs);
  const job = await queue.getJob(id);
  if (!job) throw new Error(`waitForOutcome: job ${id} ended (${outcome}) but no longer exists`);
  return job;
}

/**
 * Polls until job `id` reaches `status`, and returns its record then. For a status no attempt of
 * this engine's ends in (another process's worker, an operator's call): prefer waitForOutcome.
 */
export function waitForStatus(queue: PgQueue, id: string, status: JobStatus, timeoutMs = 10_000): Promise<JobRecord> {
  return waitFor(async () => {
    const job = await queue.getJob(id);
    return job?.status === status ? job : undefined;
  }, timeoutMs);
}
