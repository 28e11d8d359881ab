// --diag: what the engine asks of its pool during a measurement (statements by name, rows per
// statement, time waiting for a pooled connection), and where the CPU went (this process vs the
// whole machine). Only used with a pool the benchmark created itself.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { percentile, sortedCopy } from './stats.mjs';

export function instrumentPool(pool) {
  const statements = new Map();
  const waits = [];
  let maxWaiting = 0;

  const connect = pool.connect;
  pool.connect = function (cb) {
    const t0 = performance.now();
    maxWaiting = Math.max(maxWaiting, pool.waitingCount);
    if (typeof cb === 'function') {
      return connect.call(pool, (err, client, release) => {
        waits.push(performance.now() - t0);
        cb(err, client, release);
      });
    }
    return connect.call(pool).then((client) => {
      waits.push(performance.now() - t0);
      return client;
    });
  };

  const query = pool.query;
  pool.query = function (config, values, cb) {
    const name = typeof config === 'object' && config?.name ? config.name.split(':').pop() : 'ad-hoc';
    const batch = name === 'complete-many' ? config.values?.[0]?.length : undefined;
    const t0 = performance.now();
    const result = query.call(pool, config, values, cb);
    if (result && typeof result.then === 'function') {
      result.then(
        (res) => record(name, performance.now() - t0, res?.rowCount ?? 0, batch),
        () => record(name, performance.now() - t0, 0, batch, true),
      );
    }
    return result;
  };

  function record(name, ms, rows, batch, failed = false) {
    let s = statements.get(name);
    if (!s) statements.set(name, (s = { count: 0, failed: 0, ms: [], rows: 0, batches: [] }));
    s.count += 1;
    if (failed) s.failed += 1;
    s.ms.push(ms);
    s.rows += rows;
    if (batch !== undefined) s.batches.push(batch);
  }

  return {
    stop() {
      pool.connect = connect;
      pool.query = query;
    },
    report() {
      const w = sortedCopy(waits);
      const out = {
        poolWaitMs: { p50: round(percentile(w, 50)), p99: round(percentile(w, 99)), max: round(w.at(-1) ?? 0), total: round(w.reduce((a, b) => a + b, 0)) },
        maxPoolWaiting: maxWaiting,
        statements: {},
      };
      for (const [name, s] of statements) {
        const ms = sortedCopy(s.ms);
        out.statements[name] = {
          count: s.count,
          failed: s.failed,
          rowsPerCall: round(s.rows / s.count),
          msP50: round(percentile(ms, 50)),
          msP99: round(percentile(ms, 99)),
          ...(s.batches.length ? { meanBatch: round(s.batches.reduce((a, b) => a + b, 0) / s.batches.length) } : {}),
        };
      }
      return out;
    },
  };
}

/** CPU used by this process and by the whole machine between start() and stop(), in cores. */
export function cpuMeter() {
  const t0 = performance.now();
  const p0 = process.cpuUsage();
  const m0 = machineTicks();
  return {
    stop() {
      const seconds = (performance.now() - t0) / 1000;
      const p = process.cpuUsage(p0);
      const m1 = machineTicks();
      const out = { processCores: round((p.user + p.system) / 1e6 / seconds) };
      if (m0 && m1) {
        const busy = m1.busy - m0.busy;
        const total = busy + (m1.idle - m0.idle);
        out.machineBusy = round(busy / total); // 1 = every core busy
      }
      return out;
    },
  };
}

function machineTicks() {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const [, ...fields] = line.trim().split(/\s+/);
    const [user, nice, system, idle, iowait, irq, softirq, steal] = fields.map(Number);
    return { busy: user + nice + system + irq + softirq + steal, idle: idle + iowait };
  } catch {
    return undefined;
  }
}

function round(x) {
  return Math.round(x * 100) / 100;
}
