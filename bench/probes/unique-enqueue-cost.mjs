#!/usr/bin/env node
// Probe: what a unique or debounce key costs one enqueue call, without the commit's WAL flush
// (synchronous_commit off for the probe's database), so the statements' own cost shows instead of
// the fsync that dominates `enqueue.single`. One call at a time, the three kinds alternating in
// rounds (drifting load hits each alike): plain, a unique key of its own per call ('unfinished',
// every key free: every call inserts), the same key every call (every call deduplicated: no
// insert), and a debounce key of its own per call (the upsert's insert path).
//
//   DATABASE_URL=postgres://… node bench/probes/unique-enqueue-cost.mjs [calls=2000] [rounds=5]
import { createBenchDatabase } from '../lib/db.mjs';

const [calls, rounds] = [Number(process.argv[2] ?? 2000), Number(process.argv[3] ?? 5)];
const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) throw new Error('set DATABASE_URL');
const { PgQueue } = await import(process.env.BENCH_ENGINE ?? '../../dist/engine/index.js');
const db = await createBenchDatabase(serverUrl);
const quiet = { log() {}, warn() {}, error() {} };
let queue;
try {
  const admin = new PgQueue({ connectionString: db.url, logger: quiet, poolSize: 2 });
  await admin.migrate();
  await admin.declareQueues(['probe']);
  await admin.pool.query(`ALTER DATABASE "${db.name}" SET synchronous_commit = off`);
  await admin.stop();
  queue = new PgQueue({ connectionString: db.url, logger: quiet, poolSize: 2 });
  let n = 0;
  const kinds = {
    plain: () => queue.enqueue('probe', { i: n }),
    'unique (free key)': () => queue.enqueue('probe', { i: n }, { unique: { key: `k${n}`, while: 'unfinished' } }),
    'unique (held key)': () => queue.enqueue('probe', { i: n }, { unique: { key: 'held', while: 'unfinished' } }),
    'debounce (free key)': () => queue.enqueue('probe', { i: n }, { debounce: { key: `d${n}`, delayMs: 0 } }),
  };
  const totals = Object.fromEntries(Object.keys(kinds).map((k) => [k, []]));
  for (const call of Object.values(kinds)) for (let i = 0; i < 200; i++, n++) await call(); // warm-up: connections, prepared statements
  for (let round = 1; round <= rounds; round++) {
    for (const [name, call] of Object.entries(kinds)) {
      const t0 = performance.now();
      for (let i = 0; i < calls; i++, n++) await call();
      totals[name].push(((performance.now() - t0) * 1000) / calls);
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const base = median(totals.plain);
  for (const [name, xs] of Object.entries(totals)) {
    console.log(`${name.padEnd(20)} ${median(xs).toFixed(0).padStart(5)} µs/call [${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)}]  ${(median(xs) / base).toFixed(2)}× plain`);
  }
} finally {
  await queue?.stop();
  await db.drop();
}
