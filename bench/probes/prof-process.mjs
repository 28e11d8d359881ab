// Issue 15 profiling probe: one process_tuned-like run (50k preloaded no-op jobs, concurrency 10,
// 'tuned' settings) of one system, with pg_stat_statements, WAL and table/index stats around the
// drain. The server in DATABASE_URL must have pg_stat_statements loaded (a throwaway cluster).
//   DATABASE_URL=… node bench/probes/prof-process.mjs ours|graphile-worker [--jobs N] [--json]
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadSystem } from '../systems.mjs';
import { createBenchDatabase, withClient } from '../lib/db.mjs';

const [which = 'ours', ...rest] = process.argv.slice(2);
const arg = (name, d) => {
  const i = rest.indexOf(`--${name}`);
  return i >= 0 ? rest[i + 1] : d;
};
const JOBS = Number(arg('jobs', 50_000));
const serverUrl = process.env.DATABASE_URL;
import { readFileSync, readdirSync } from 'node:fs';
/** CPU seconds of the throwaway cluster: the postmaster, its live children and its reaped ones (PGDATA in PROF_PGDATA). */
function pgCpu() {
  const dir = process.env.PROF_PGDATA;
  if (!dir) return NaN;
  const pm = Number(readFileSync(`${dir}/postmaster.pid`, 'utf8').split('\n')[0]);
  const stat = (pid) => { try { const f = readFileSync(`/proc/${pid}/stat`, 'utf8'); return f.slice(f.lastIndexOf(')') + 2).split(' '); } catch { return null; } };
  const own = stat(pm);
  let ticks = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14]);
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const f = stat(d);
    if (f && Number(f[1]) === pm) ticks += Number(f[11]) + Number(f[12]);
  }
  return ticks / 100;
}
function machineCpu() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3] + f[4];
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: (total - idle) / 100, total: total / 100 };
}
const sys = await loadSystem(which === 'ours' ? { engine: null, key: 'ours' } : { peer: which });
const db = await createBenchDatabase(serverUrl);
const schema = 'prof';
const out = { system: which, jobs: JOBS };
try {
  const h = await sys.open({ url: db.url, schema });
  for (let s = 0; s < JOBS; s += 1000) await h.enqueueMany(Array.from({ length: Math.min(1000, JOBS - s) }, (_, k) => ({ i: s + k })));
  await withClient(db.url, async (c) => {
    await c.query('ANALYZE');
    await c.query('CHECKPOINT');
  });
  const snap = () =>
    withClient(db.url, async (c) => {
      const { rows } = await c.query(`SELECT pg_current_wal_lsn()::text AS lsn, (SELECT wal_records FROM pg_stat_wal) AS rec,
        (SELECT wal_fpi FROM pg_stat_wal) AS fpi, (SELECT wal_bytes FROM pg_stat_wal)::text AS bytes,
        (SELECT wal_sync FROM pg_stat_wal) AS syncs, (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits`);
      return rows[0];
    });
  await withClient(db.url, (c) => c.query('SELECT pg_stat_statements_reset()'));
  const before = await snap();
  let handled = 0;
  let allHandled;
  const done = new Promise((r) => (allHandled = r));
  const profileTo = arg('profile', null);
  let session;
  if (profileTo) {
    const inspector = await import('node:inspector/promises');
    session = new inspector.Session();
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 200 });
    await session.post('Profiler.start');
  }
  let hook;
  const asyncCounts = {};
  if (rest.includes('--async-hooks')) {
    const { createHook } = await import('node:async_hooks');
    hook = createHook({ init(_id, type) { asyncCounts[type] = (asyncCounts[type] ?? 0) + 1; } }).enable();
  }
  const cpu0 = process.cpuUsage();
  const pg0 = pgCpu();
  const m0 = machineCpu();
  const t0 = performance.now();
  await h.startWorker({ concurrency: 10, settings: 'tuned', handler: () => { handled += 1; if (handled === JOBS) allHandled(); } });
  await Promise.race([done, sleep(120_000)]);
  out.handlerSeconds = (performance.now() - t0) / 1000;
  for (;;) {
    const c = await h.counts();
    if (c.succeeded >= JOBS || performance.now() - t0 > 120_000) break;
    await sleep(25);
  }
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  if (hook) {
    hook.disable();
    out.asyncPerJob = Object.fromEntries(Object.entries(asyncCounts).sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, +(v / JOBS).toFixed(3)]));
    console.error('async resources per job', JSON.stringify(out.asyncPerJob));
  }
  if (session) {
    const { profile } = await session.post('Profiler.stop');
    (await import('node:fs')).writeFileSync(profileTo, JSON.stringify(profile));
  }
  const after = await snap();
  const m1 = machineCpu();
  out.machineBusyCores = (m1.busy - m0.busy) / seconds;
  out.seconds = seconds;
  out.jobsPerSec = JOBS / seconds;
  out.handled = handled;
  out.processCpuSec = (cpu.user + cpu.system) / 1e6;
  await withClient(db.url, async (c) => {
    const { rows: wal } = await c.query(`SELECT pg_wal_lsn_diff($1, $2)::bigint AS bytes`, [after.lsn, before.lsn]);
    out.wal = { bytes: Number(wal[0].bytes), bytesPerJob: Number(wal[0].bytes) / JOBS, records: after.rec - before.rec, fpi: after.fpi - before.fpi, commits: after.commits - before.commits, walSyncs: after.syncs - before.syncs };
    const { rows: st } = await c.query(
      `SELECT calls, round(mean_exec_time::numeric, 3) AS mean_ms, round(total_exec_time::numeric, 1) AS total_ms, rows,
              shared_blks_hit + shared_blks_read AS blks, wal_bytes, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS q
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       ORDER BY total_exec_time DESC LIMIT 25`);
    out.statements = st.map((r) => ({ ...r, calls: Number(r.calls), rows: Number(r.rows), callsPer1k: (Number(r.calls) * 1000) / JOBS, wal_bytes: Number(r.wal_bytes) }));
    out.serverMsPerJob = st.reduce((a, r) => a + Number(r.total_ms), 0) / JOBS;
  });
  await h.close();
  await sleep(1500);
  out.pgCpuSecIncludingClose = pgCpu() - pg0;
  await withClient(db.url, async (c) => {
    const { rows: tabs } = await c.query(
      `SELECT relname, n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, autovacuum_count, pg_relation_size(relid) AS heap_bytes
       FROM pg_stat_user_tables WHERE schemaname = $1 AND (n_tup_upd + n_tup_del + n_tup_ins) > 0`, [schema]);
    out.tables = tabs;
    const { rows: idx } = await c.query(
      `SELECT relname AS tbl, indexrelname AS idx, pg_relation_size(indexrelid) AS bytes, idx_scan, idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = $1 ORDER BY 1, 2`, [schema]);
    out.indexes = idx;
  });
} finally {
  await db.drop();
}
if (rest.includes('--json')) console.log(JSON.stringify(out));
else {
  console.log(`${which}: ${out.jobsPerSec.toFixed(0)} jobs/s (${out.seconds.toFixed(2)} s, handled ${out.handled}, node cpu ${out.processCpuSec.toFixed(2)} s)`);
  console.log(`handlers done at ${out.handlerSeconds.toFixed(2)} s; machine busy ${out.machineBusyCores.toFixed(2)} cores; postgres cpu ${out.pgCpuSecIncludingClose.toFixed(2)} s (incl. close+1.5 s)`);
  console.log(`server exec ms/job ${out.serverMsPerJob.toFixed(4)}; WAL ${JSON.stringify(out.wal)}`);
  console.log('calls/1k  mean_ms  total_ms  rows  walB/call  query');
  for (const s of out.statements) console.log(`${s.callsPer1k.toFixed(2).padStart(8)} ${String(s.mean_ms).padStart(8)} ${String(s.total_ms).padStart(9)} ${String(s.rows).padStart(6)} ${(s.wal_bytes / Math.max(1, s.calls)).toFixed(0).padStart(9)}  ${s.q}`);
  console.table(out.tables);
  console.table(out.indexes);
}
