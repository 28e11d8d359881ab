// Issue 15: what the claim statement's parts cost. Claims only (no completion), until the queue is empty,
// N connections; per variant a fresh schema of 50k jobs. Median of --runs.
//   DATABASE_URL=… node bench/probes/claim-variants.mjs [--runs 3] [--conns 1] [--batch 500]
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { PgQueue } from '../../dist/engine/index.js';
import { createStore } from '../../dist/engine/store/index.js';
import { createBenchDatabase, withClient } from '../lib/db.mjs';

const args = process.argv.slice(2);
const arg = (n, d) => (args.includes(`--${n}`) ? args[args.indexOf(`--${n}`) + 1] : d);
const RUNS = Number(arg('runs', 3)), CONNS = Number(arg('conns', 1)), B = Number(arg('batch', 500)), JOBS = 50_000;
const minimal = (s) => `UPDATE ${s}.jobs AS j SET status = 'running', attempt_count = j.attempt_count + 1, lease_token = j.lease_token + 1,
    lease_owner = $2, deadline_at = now() + interval '15 min', lease_expires_at = now() + interval '30 s'
  WHERE j.id = ANY (ARRAY(SELECT id FROM ${s}.jobs WHERE queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()
                          ORDER BY priority DESC, available_at, id LIMIT $3 FOR UPDATE SKIP LOCKED))
  RETURNING j.id, j.lease_token::text AS lease_token, j.payload, j.attempt_count`;
const VARIANTS = {
  ours: { setup: async () => {}, oldestFirst: 0.1 },
  'ours-strict': { setup: async () => {}, oldestFirst: 0 },
  'ours-nochecks': {
    oldestFirst: 0.1,
    setup: async (c, s) => {
      const { rows } = await c.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${s}.jobs'::regclass AND contype = 'c'`);
      for (const { conname } of rows) await c.query(`ALTER TABLE ${s}.jobs DROP CONSTRAINT "${conname}"`);
    },
  },
  'ours-noregex': {
    oldestFirst: 0.1,
    setup: async (c, s) => {
      const { rows } = await c.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${s}.jobs'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%~%'`);
      for (const { conname } of rows) await c.query(`ALTER TABLE ${s}.jobs DROP CONSTRAINT "${conname}"`);
    },
  },
  minimal: { setup: async () => {}, text: minimal },
};
const db = await createBenchDatabase(process.env.DATABASE_URL);
const res = [];
let n = 0;
try {
  for (let r = 0; r < RUNS; r++) for (const [name, v] of Object.entries(VARIANTS).filter(([k]) => !process.env.ONLY || process.env.ONLY.split(',').includes(k))) {
    const schema = `cv_${n++}`, s = `"${schema}"`;
    const q = new PgQueue({ connectionString: db.url, schema });
    await q.migrate();
    await q.declareQueues(['bench']);
    await withClient(db.url, (c) => v.setup(c, s));
    for (let i = 0; i < JOBS; i += 1000) await q.enqueueMany(Array.from({ length: 1000 }, (_, k) => ({ queue: 'bench', payload: { i: i + k } })));
    await q.stop();
    await withClient(db.url, async (c) => { await c.query('ANALYZE'); await c.query('CHECKPOINT'); });
    const claim = createStore(schema).statements.claim;
    const stmt = v.text ? { name: `cv-${n}`, text: v.text(s), values: () => ['bench', 'w', B] } : claim;
    const p = { queue: 'bench', owner: 'w', limit: B, leaseMs: 30000, maxRuntimeMs: 900000, maxAttempts: 25, backoffBaseMs: 1000, backoffMaxMs: 3600000, oldestFirst: Math.floor(B * v.oldestFirst) };
    const clients = await Promise.all(Array.from({ length: CONNS }, async () => { const c = new pg.Client({ connectionString: db.url }); await c.connect(); return c; }));
    let got = 0;
    const t0 = performance.now();
    await Promise.all(clients.map(async (c) => { for (;;) { const { rows } = await c.query({ name: stmt.name, text: stmt.text, values: stmt.values(p) }); if (!rows.length) return; got += rows.length; } }));
    const sec = (performance.now() - t0) / 1000;
    for (const c of clients) await c.end();
    if (got !== JOBS) throw new Error(`${name}: ${got}`);
    res.push({ name, jps: got / sec });
    console.error(name, (got / sec).toFixed(0));
    await withClient(db.url, async (c) => { await c.query(`DROP SCHEMA ${s} CASCADE`); await c.query('CHECKPOINT'); });
  }
} finally { await db.drop(); }
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`claims only, batch ${B}, conns ${CONNS}, median of ${RUNS}`);
for (const name of Object.keys(VARIANTS).filter((k) => !process.env.ONLY || process.env.ONLY.split(',').includes(k))) { const xs = res.filter((r) => r.name === name).map((r) => r.jps); console.log(`${name.padEnd(16)} ${med(xs).toFixed(0).padStart(7)} rows/s [${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}]  ${(1e6 / med(xs)).toFixed(1)} µs/row wall`); }
