// Issue 15: what each CHECK constraint of jobs costs per row, evaluated as PostgreSQL evaluates it
// on every UPDATE. Each constraint's expression (from pg_constraint of a fresh schema, today's or
// the one in dist/) is run over ROWS rows shaped like claimed jobs, minus a baseline of one cheap
// comparison; the median of --runs, in µs per row.
//   DATABASE_URL=… node bench/probes/check-costs.mjs [--runs 5] [--rows 200000] [--with-regex]
import { PgQueue } from '../../dist/engine/index.js';
import { createBenchDatabase, withClient } from '../lib/db.mjs';

const args = process.argv.slice(2);
const arg = (n, d) => (args.includes(`--${n}`) ? args[args.indexOf(`--${n}`) + 1] : d);
const RUNS = Number(arg('runs', 5)), ROWS = Number(arg('rows', 200_000));
const db = await createBenchDatabase(process.env.DATABASE_URL);
try {
  const q = new PgQueue({ connectionString: db.url, schema: 'cc' });
  await q.migrate();
  await q.stop();
  await withClient(db.url, async (c) => {
    await c.query(`SET search_path TO cc`);
    await c.query(`INSERT INTO jobs (queue_name, payload, status, priority, max_attempts, max_runtime_ms, backoff_base_ms, backoff_max_ms,
                     lease_owner, lease_token, lease_expires_at, deadline_at, claimed_at)
                   SELECT 'bench', '{}', 'running', 0, 25, 900000, 1000, 3600000, 'worker-1', 1, now() + interval '30 s', now() + interval '15 min', now()
                   FROM generate_series(1, $1)`, [ROWS]);
    await c.query('VACUUM ANALYZE jobs');
    const { rows: cons } = await c.query(`SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = 'jobs'::regclass AND contype = 'c' ORDER BY conname`);
    const exprs = [{ conname: '(baseline: id > 0)', expr: 'id > 0' }, ...cons.map((r) => ({ conname: r.conname, expr: r.def.replace(/^CHECK /, '').replace(/ NOT VALID$/, '') }))];
    if (args.includes('--with-regex') && !cons.some((r) => r.def.includes('{0,127}'))) exprs.push({ conname: 'jobs_queue_name_check (0001)', expr: `(queue_name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$')` });
    const time = async (expr) => {
      const { rows } = await c.query(`EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) SELECT count(*) FROM jobs WHERE (${expr}) IS NOT FALSE`);
      return rows[0]['QUERY PLAN'][0]['Execution Time'];
    };
    const ms = new Map(exprs.map((e) => [e.conname, []]));
    for (let r = 0; r < RUNS; r++) for (const e of exprs) ms.get(e.conname).push(await time(e.expr));
    const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const base = med(ms.get('(baseline: id > 0)'));
    console.log(`${ROWS} rows, median of ${RUNS}; µs per row above the baseline (one integer comparison, ${((1000 * base) / ROWS).toFixed(3)} µs/row for the whole scan)`);
    let total = 0;
    for (const e of exprs.slice(1)) {
      const us = (1000 * (med(ms.get(e.conname)) - base)) / ROWS;
      total += us;
      console.log(`${e.conname.padEnd(34)} ${us.toFixed(3).padStart(7)}  ${e.expr.slice(0, 90)}`);
    }
    console.log(`${'all'.padEnd(34)} ${total.toFixed(3).padStart(7)}`);
  });
} finally {
  await db.drop();
}
