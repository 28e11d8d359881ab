import type pg from 'pg';
import { quoteIdentifier } from '../../lib/engine/identifiers.js';

/** A pool or a client: the test's own connection, never the engine's. */
type Sql = Pick<pg.Pool, 'query'>;

/**
 * Moving a job's times into the past by SQL, so a test does not wait a lease or a backoff out.
 * Only the row changes: a worker that holds the job still believes in its local lease timer, which
 * is the situation these helpers are for (a stalled worker whose lease the database already
 * considers over). The fence compares with `clock_timestamp()`, the reaper and the scheduler with
 * `now()`; a time a second in the past is past for both, in any later statement.
 */
export interface TimeTravelOptions {
  /** The queue's schema (default `pgqueue`). */
  schema?: string;
  /** How far into the past (default 1 000 ms). */
  agoMs?: number;
}

/**
 * Ends the lease of running job `jobId` (or the unconfirmed attempt of a cancelled one) as if it
 * had run out: `lease_expires_at` moves into the past, `deadline_at` stays, so the reaper records
 * LEASE_EXPIRED (not MAX_RUNTIME). Throws when the job holds no lease, so a test cannot pass by
 * expiring nothing.
 */
export async function expireLease(db: Sql, jobId: string, options: TimeTravelOptions = {}): Promise<void> {
  const jobs = `${quoteIdentifier(options.schema ?? 'pgqueue')}.jobs`;
  const { rows } = await db.query(
    `UPDATE ${jobs} SET lease_expires_at = clock_timestamp() - $2 * interval '1 millisecond'
     WHERE id = $1 AND lease_expires_at IS NOT NULL RETURNING status::text`,
    [jobId, options.agoMs ?? 1_000],
  );
  if (rows.length === 0) throw new Error(`expireLease: job ${jobId} holds no lease (not running, or no such job).`);
}

/**
 * Makes scheduled or pending job `jobId` due now (a delayed job, or a retry waiting out its
 * backoff): `available_at` moves into the past. The scheduler promotes it at its next pass; wake it
 * (`engine.scheduler.wake()`) or await its test signal. Throws when the job is not waiting.
 */
export async function makeDue(db: Sql, jobId: string, options: TimeTravelOptions = {}): Promise<void> {
  const jobs = `${quoteIdentifier(options.schema ?? 'pgqueue')}.jobs`;
  const { rows } = await db.query(
    `UPDATE ${jobs} SET available_at = clock_timestamp() - $2 * interval '1 millisecond'
     WHERE id = $1 AND status IN ('scheduled', 'pending') RETURNING status::text`,
    [jobId, options.agoMs ?? 1_000],
  );
  if (rows.length === 0) throw new Error(`makeDue: job ${jobId} is not scheduled or pending (or does not exist).`);
}
