// What every bench command reports first: the machine, the server and the engine build measured.
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { describeUrl, serverContext } from './db.mjs';

/** The machine, the server in `serverUrl` and `extra` (the command's own fields), taken at the start. */
export async function benchContext(serverUrl, { systems, engine, ...extra }) {
  return {
    date: new Date().toISOString(),
    node: process.version,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model?.trim(),
    memory: `${Math.round(os.totalmem() / 2 ** 30)} GiB`,
    loadAverageAtStart: loadAverage(),
    server: describeUrl(serverUrl),
    postgres: await serverContext(serverUrl),
    systems: systems.map((s) => s.label),
    engine: engine ?? `dist/engine from ${gitDescribe()}`,
    ...extra,
  };
}

/** Call at the end: the load average then and the wall time since `startedAt` (ms). */
export function finishContext(context, startedAt) {
  context.loadAverageAtEnd = loadAverage();
  context.wallSeconds = Math.round((Date.now() - startedAt) / 1000);
}

/** The report's first three lines (machine, server, engine); `engineNote` is appended to the third. */
export function contextLines(context, engineNote = '') {
  const pg = context.postgres;
  return [
    `Date: ${context.date}. Machine: Node ${context.node}, ${context.cpus} cores (${context.cpuModel}), ${context.memory}; load average ${context.loadAverageAtStart.join(' ')} at start, ${context.loadAverageAtEnd.join(' ')} at end`,
    `PostgreSQL: ${pg.serverVersion} (${pg.kind} server${pg.kind === 'embedded' ? ', durability off' : ''}: ${context.server}); synchronous_commit=${pg.synchronousCommit}, fsync=${pg.fsync}, shared_buffers=${pg.sharedBuffers}`,
    `Engine: ${context.engine}.${engineNote}`,
  ];
}

/** This checkout's commit, flagged when lib/ or migrations/ have uncommitted changes. */
export function gitDescribe() {
  try {
    const cwd = new URL('../..', import.meta.url);
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'lib', 'migrations'], { cwd, encoding: 'utf8' }).trim();
    return `${commit}${dirty ? ' + uncommitted changes in lib/ or migrations/' : ''}`;
  } catch {
    return 'an unknown commit';
  }
}

function loadAverage() {
  return os.loadavg().map((x) => Math.round(x * 100) / 100);
}
