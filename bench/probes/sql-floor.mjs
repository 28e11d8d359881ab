// Issue 15: the SQL floor of processing a backlog, no JS handler work. N connections, each
// loops: claim B (our claim statement) → complete the rows in chunks of C (one statement each,
// sequentially) until the queue is empty. Variants change the write shape or the schema.
//   DATABASE_URL=… node bench/probes/sql-floor.mjs [--runs 3] [--jobs 50000] [--conns 3]
//        [--variants base,lean,...] [--shapes 50/50,500/125,500/500]
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { PgQueue } from '../../dist/engine/index.js';
import { createStore } from '../../dist/engine/store/index.js';
import { createBenchDatabase, withClient } from '../lib/db.mjs';

const args = process.argv.slice(2);
const arg = (name, d) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : d;
};
const RUNS = Number(arg('runs', 3));
const JOBS = Number(arg('jobs', 50_000));
const CONNS = Number(arg('conns', 3));
const SHAPES = arg('shapes', '50/50,500/125,500/500').split(',').map((s) => s.split('/').map(Number));
const OWNER = 'floor-worker';

const fenceHolds = (j, owner) => `${j}.lease_owner = ${owner} AND ${j}.status::text = 'running' AND ${j}.lease_expires_at > clock_timestamp()`;
const matched = (j) => `${j}.id = ANY ($1::bigint[]) AND coalesce((${j}.id, ${j}.lease_token) IN (SELECT id, token FROM input), false)`;
const INPUT = `WITH input AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token))`;

/** Each variant: setup(client, s) after the migration; complete(s) → SQL text with $1 ids, $2 tokens, $3 owner. null = the engine's. */
const VARIANTS = {
  // Today's statements, today's schema.
  base: { setup: async () => {}, complete: null },
  // Today's schema; the completion without the lost/report CTEs (a second and third PK probe per row):
  // the applied (id, token) come back, lost ones would be derived in JS.
  lean: {
    setup: async () => {},
    complete: (s) => `${INPUT}
      UPDATE ${s}.jobs AS j SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
      WHERE ${matched('j')} AND ${fenceHolds('j', '$3')}
      RETURNING j.id, j.lease_token`,
  },
  // (b) today's statements, jobs indexes cut to what the claim needs (pkey + the two claimable).
  fewidx: {
    setup: async (c, s) => {
      const { rows } = await c.query(`SELECT indexrelid::regclass::text AS i FROM pg_index x JOIN pg_class r ON r.oid = x.indrelid JOIN pg_namespace n ON n.oid = r.relnamespace
        WHERE n.nspname = $1 AND r.relname = 'jobs' AND NOT x.indisprimary AND indexrelid::regclass::text NOT LIKE '%claimable%'`, [s.replace(/"/g, '')]);
      for (const { i } of rows) await c.query(`DROP INDEX ${i}`);
    },
    complete: null,
  },
  // (c) today's statements, fillfactor 70 on jobs (set before the fill): is any update HOT?
  ff70: { setup: async (c, s) => c.query(`ALTER TABLE ${s}.jobs SET (fillfactor = 70)`), complete: null },
  // (c) lean completion + fewer indexes.
  'lean+fewidx': { setup: (c, s) => VARIANTS.fewidx.setup(c, s), complete: (s) => VARIANTS.lean.complete(s) },
  // (a) completion = DELETE … RETURNING from jobs + INSERT into a history table, one statement;
  // the FKs of job_events/job_effects (ON DELETE CASCADE) still on jobs: a per-row RI trigger.
  'delete+history': { setup: (c, s) => historyTable(c, s), complete: (s) => deleteIntoHistory(s) },
  // (a) the same without the FKs (events/effects would reference the job id without a constraint, or the history).
  'delete+history-nofk': {
    setup: async (c, s) => {
      await historyTable(c, s);
      await dropFks(c, s);
    },
    complete: (s) => deleteIntoHistory(s),
  },
  // (a) the same, history without its finished_at index (PK only).
  'delete+history-nofk-pkonly': {
    setup: async (c, s) => {
      await historyTable(c, s, false);
      await dropFks(c, s);
    },
    complete: (s) => deleteIntoHistory(s),
  },
  // The CHECK constraints of jobs dropped (PostgreSQL re-evaluates every CHECK, the queue_name regex
  // included, on every UPDATE of a row): with the lean completion and the cut indexes.
  'lean+fewidx+nochecks': {
    setup: async (c, s) => {
      await VARIANTS.fewidx.setup(c, s);
      await dropChecks(c, s);
    },
    complete: (s) => VARIANTS.lean.complete(s),
  },
  'delete+history-nofk+nochecks': {
    setup: async (c, s) => {
      await historyTable(c, s);
      await dropFks(c, s);
      await dropChecks(c, s);
    },
    complete: (s) => deleteIntoHistory(s),
  },
  // The lower bound of a delete shape: no history at all (graphile-worker's shape, fenced).
  'delete-only-nofk': {
    setup: (c, s) => dropFks(c, s),
    complete: (s) => `${INPUT}
      DELETE FROM ${s}.jobs AS j WHERE ${matched('j')} AND ${fenceHolds('j', '$3')} RETURNING j.id, j.lease_token`,
  },
};

async function historyTable(c, s, finishedIndex = true) {
  await c.query(`CREATE TABLE ${s}.jobs_history (LIKE ${s}.jobs INCLUDING DEFAULTS, PRIMARY KEY (id))`);
  if (finishedIndex) await c.query(`CREATE INDEX ON ${s}.jobs_history (finished_at)`);
}
async function dropChecks(c, s) {
  const { rows } = await c.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${s}.jobs'::regclass AND contype = 'c'`);
  for (const { conname } of rows) await c.query(`ALTER TABLE ${s}.jobs DROP CONSTRAINT "${conname}"`);
}
async function dropFks(c, s) {
  for (const t of ['job_events', 'job_effects']) {
    const { rows } = await c.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${s}.${t}'::regclass AND contype = 'f'`);
    for (const { conname } of rows) await c.query(`ALTER TABLE ${s}.${t} DROP CONSTRAINT ${conname}`);
  }
}
let historyColumns;
function deleteIntoHistory(s) {
  const cols = historyColumns;
  const sel = cols.map((c) => (c === 'status' ? `'succeeded'::${s}.job_status` : c === 'finished_at' ? 'now()' : c === 'lease_expires_at' ? 'NULL::timestamptz' : `d.${c}`));
  return `${INPUT}, done AS (
      DELETE FROM ${s}.jobs AS j WHERE ${matched('j')} AND ${fenceHolds('j', '$3')} RETURNING j.*)
    INSERT INTO ${s}.jobs_history (${cols.join(', ')}) SELECT ${sel.join(', ')} FROM done d RETURNING id, lease_token`;
}

async function oneRun(dbUrl, variantName, [B, C], runNo) {
  const variant = VARIANTS[variantName];
  const schemaName = `floor_${runNo}`;
  const s = `"${schemaName}"`;
  const queue = new PgQueue({ connectionString: dbUrl, schema: schemaName });
  await queue.migrate();
  await queue.declareQueues(['bench']);
  await withClient(dbUrl, async (c) => {
    const { rows } = await c.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs' ORDER BY ordinal_position`, [schemaName]);
    historyColumns = rows.map((r) => r.column_name);
    await variant.setup(c, s);
  });
  for (let i = 0; i < JOBS; i += 1000) await queue.enqueueMany(Array.from({ length: Math.min(1000, JOBS - i) }, (_, k) => ({ queue: 'bench', payload: { i: i + k } })));
  await queue.stop();
  await withClient(dbUrl, async (c) => {
    await c.query('ANALYZE');
    await c.query('CHECKPOINT');
  });
  const store = createStore(schemaName);
  const claim = store.statements.claim;
  const complete = variant.complete ? { name: `floor-${variantName}-${runNo}`, text: variant.complete(s) } : store.statements.completeMany;
  const claimParams = { queue: 'bench', owner: OWNER, limit: B, leaseMs: 30_000, maxRuntimeMs: 900_000, maxAttempts: 25, backoffBaseMs: 1000, backoffMaxMs: 3_600_000, oldestFirst: Math.floor(B * 0.1) };
  const clients = await Promise.all(Array.from({ length: CONNS }, async () => {
    const c = new pg.Client({ connectionString: dbUrl });
    await c.connect();
    return c;
  }));
  const stat = () => withClient(dbUrl, async (c) => (await c.query(`SELECT pg_current_wal_lsn()::text AS lsn`)).rows[0].lsn);
  await withClient(dbUrl, (c) => c.query('SELECT pg_stat_statements_reset()'));
  const lsn0 = await stat();
  let done = 0;
  const t0 = performance.now();
  await Promise.all(clients.map(async (c) => {
    for (;;) {
      const { rows } = await c.query({ name: claim.name, text: claim.text, values: claim.values(claimParams) });
      if (rows.length === 0) return;
      for (let k = 0; k < rows.length; k += C) {
        const chunk = rows.slice(k, k + C);
        const ids = chunk.map((r) => r.id);
        const tokens = chunk.map((r) => r.lease_token);
        const r = await c.query({ name: complete.name, text: complete.text, values: [ids, tokens, OWNER] });
        const applied = variant.complete ? r.rowCount : r.rows.filter((x) => x.applied).length;
        if (applied !== chunk.length) throw new Error(`${variantName}: ${applied} of ${chunk.length} applied`);
        done += applied;
      }
    }
  }));
  const seconds = (performance.now() - t0) / 1000;
  const lsn1 = await stat();
  for (const c of clients) await c.end();
  const out = { variant: variantName, B, C, jobsPerSec: done / seconds, done, seconds };
  await new Promise((r) => setTimeout(r, 700)); // pgstat flush of the exited backends
  await withClient(dbUrl, async (c) => {
    out.walPerJob = Number((await c.query(`SELECT pg_wal_lsn_diff($1, $2)::bigint AS b`, [lsn1, lsn0])).rows[0].b) / JOBS;
    const { rows: st } = await c.query(`SELECT calls, mean_exec_time, total_exec_time, rows, query FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 5 ORDER BY total_exec_time DESC LIMIT 2`);
    out.stmts = st.map((r) => ({ kind: /WITH open AS/.test(r.query) ? 'claim' : 'complete', calls: Number(r.calls), meanMs: r.mean_exec_time, perRowUs: (1000 * r.total_exec_time) / Number(r.rows) }));
    const { rows: t } = await c.query(`SELECT n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`, [schemaName]);
    out.jobsTable = t[0];
    const { rows: sz } = await c.query(`SELECT sum(pg_relation_size(indexrelid))::bigint AS b, count(*)::int AS n FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname IN ('jobs', 'jobs_history')`, [schemaName]);
    out.indexBytes = Number(sz[0].b);
    out.indexes = sz[0].n;
    await c.query(`DROP SCHEMA ${s} CASCADE`);
    await c.query('CHECKPOINT');
  });
  return out;
}

const db = await createBenchDatabase(process.env.DATABASE_URL);
const variants = arg('variants', Object.keys(VARIANTS).join(',')).split(',');
const results = [];
try {
  let n = 0;
  for (const shape of SHAPES) {
    for (let run = 0; run < RUNS; run++) {
      for (const v of variants) {
        const r = await oneRun(db.url, v, shape, n++);
        results.push(r);
        console.error(JSON.stringify(r));
      }
    }
  }
} finally {
  await db.drop();
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`conns ${CONNS}, jobs ${JOBS}, median of ${RUNS}`);
console.log('variant                      B/C      jobs/s [min-max]        WAL B/job  claim µs/row  complete µs/row  hot/upd  idx MB');
for (const [B, C] of SHAPES) {
  for (const v of variants) {
    const rs = results.filter((r) => r.variant === v && r.B === B && r.C === C);
    const js = rs.map((r) => r.jobsPerSec);
    const pick = (f) => median(rs.map(f));
    console.log(
      `${v.padEnd(28)} ${`${B}/${C}`.padEnd(8)} ${median(js).toFixed(0).padStart(6)} [${Math.min(...js).toFixed(0)}-${Math.max(...js).toFixed(0)}]`.padEnd(60) +
        `${pick((r) => r.walPerJob).toFixed(0).padStart(6)}  ${pick((r) => r.stmts.find((x) => x.kind === 'claim')?.perRowUs ?? NaN).toFixed(1).padStart(12)}  ${pick((r) => r.stmts.find((x) => x.kind === 'complete')?.perRowUs ?? NaN).toFixed(1).padStart(15)}  ${rs[0].jobsTable.n_tup_hot_upd}/${rs[0].jobsTable.n_tup_upd}  ${(pick((r) => r.indexBytes) / 1048576).toFixed(1)}`,
    );
  }
}
