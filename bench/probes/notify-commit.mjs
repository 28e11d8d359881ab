#!/usr/bin/env node
// Probe: what a pg_notify in every enqueue transaction costs at commit. 8 clients insert one row
// per transaction, with and without pg_notify in the same statement (as the engine's enqueue
// does), alternating; backend wait events are sampled meanwhile. On a durable server, notifying
// commits queue on one database-wide lock ("Lock:object") held through the commit's WAL flush, so
// they cannot share a flush the way plain commits do.
//
//   DATABASE_URL=postgres://… node bench/probes/notify-commit.mjs [commits=3000] [clients=8] [rounds=3]
import pg from 'pg';
import { createBenchDatabase } from '../lib/db.mjs';

const [commits, clients, rounds] = [Number(process.argv[2] ?? 3000), Number(process.argv[3] ?? 8), Number(process.argv[4] ?? 3)];
const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) throw new Error('set DATABASE_URL');
const db = await createBenchDatabase(serverUrl);
const pool = new pg.Pool({ connectionString: db.url, max: clients + 1 });
pool.on('error', () => {});
try {
  await pool.query('CREATE TABLE t (id bigserial PRIMARY KEY, payload jsonb NOT NULL)');
  const variants = [
    ['insert', 'INSERT INTO t (payload) VALUES ($1) RETURNING id'],
    ['insert + pg_notify', `WITH i AS (INSERT INTO t (payload) VALUES ($1) RETURNING id) SELECT i.id, pg_notify('probe', 'q') FROM i`],
  ];
  for (let round = 1; round <= rounds; round++) {
    for (const [name, text] of variants) {
      let next = 0;
      let sampling = true;
      const waits = {};
      const sampler = (async () => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        while (sampling) {
          const { rows } = await c.query(
            `SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-') AS w, count(*)::int AS n
             FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1`,
          );
          for (const r of rows) waits[r.w] = (waits[r.w] ?? 0) + r.n;
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        await c.end();
      })();
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: clients }, async () => {
          while (next < commits) {
            next++;
            await pool.query({ name, text, values: ['{"i":1}'] });
          }
        }),
      );
      const seconds = (performance.now() - t0) / 1000;
      sampling = false;
      await sampler;
      const top = Object.entries(waits).sort((a, b) => b[1] - a[1]).slice(0, 3).map(([k, v]) => `${k} ${v}`).join(', ');
      console.log(`round ${round} ${name.padEnd(18)} ${(commits / seconds).toFixed(0).padStart(6)} commits/s   wait samples: ${top}`);
    }
  }
} finally {
  await pool.end();
  await db.drop();
}
