// What every probe (bench/probes/*.mjs) starts with: a database of its own on the server in
// DATABASE_URL, the engine's schema migrated into it, and one queue filled in bulk.
import { PgQueue } from '../../dist/engine/index.js';
import { createBenchDatabase, withClient } from './db.mjs';

export const PROBE_SCHEMA = 'probe';
export const PROBE_QUEUE = 'bench';

/**
 * Runs `fn({ db, queries })` in a fresh database whose queue holds `jobs` jobs (`optionsOf(i)`: the
 * i-th job's enqueue options); drops the database at the end. `analyzeBeforeFill` takes the
 * statistics while the queue is still empty (stale statistics), otherwise after the fill.
 */
export async function withProbeQueue({ jobs, optionsOf, analyzeBeforeFill = false }, fn) {
  const serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) throw new Error('set DATABASE_URL');
  const db = await createBenchDatabase(serverUrl);
  try {
    const queue = new PgQueue({ connectionString: db.url, schema: PROBE_SCHEMA });
    await queue.migrate();
    await queue.declareQueues([PROBE_QUEUE]);
    if (analyzeBeforeFill) await withClient(db.url, (c) => c.query('ANALYZE'));
    for (let i = 0; i < jobs; i += 500) {
      await queue.enqueueMany(
        Array.from({ length: Math.min(500, jobs - i) }, (_, k) => ({
          queue: PROBE_QUEUE,
          payload: { i: i + k },
          ...(optionsOf ? { options: optionsOf(i + k) } : {}),
        })),
      );
    }
    await queue.stop();
    if (!analyzeBeforeFill) await withClient(db.url, (c) => c.query('ANALYZE'));
    return await fn(db);
  } finally {
    await db.drop();
  }
}
