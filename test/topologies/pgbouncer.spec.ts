import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../scripts/embedded-postgres.mjs';
import { pgBouncerVersion, startPgBouncer, type PgBouncer } from '../../scripts/pgbouncer.mjs';
import { PgQueue } from '../../lib/engine/index.js';
import { testLogger, waitFor } from '../support/engine.js';
import { urlForDatabase } from '../support/database.js';
import { expectOutcomes, runWorkload } from './workload.js';

/**
 * The engine through a real PgBouncer (Debian's package), in front of a PostgreSQL of this file's
 * own: session pooling, and transaction pooling with and without a direct URL for LISTEN. Each
 * case runs the mixed workload of workload.ts in a database of its own.
 *
 * Polling is 60 s, so that a job found by a poll would take about a minute: every pickup must be
 * well within a tenth of the interval (a bound relative to the configuration, not a latency
 * figure; latency is the benchmark's: bench/README.md). The case without a LISTEN URL polls more
 * often instead, since the poll is all it has, and must say that it is degraded.
 */

const POLL_MS = 60_000;

let server: EmbeddedPostgres;
const bouncers: Record<'session' | 'transaction' | 'oneServer', PgBouncer> = {} as never;

beforeAll(async () => {
  server = await startEmbeddedPostgres();
  const [session, transaction, oneServer] = await Promise.all([
    startPgBouncer({ upstream: server.url, poolMode: 'session' }),
    startPgBouncer({ upstream: server.url, poolMode: 'transaction' }),
    // One server connection for every client: two clients' statements meet on it for certain.
    startPgBouncer({ upstream: server.url, poolMode: 'transaction', settings: { default_pool_size: 1 } }),
  ]);
  Object.assign(bouncers, { session, transaction, oneServer });
  console.log(`topologies: ${pgBouncerVersion()} in front of PostgreSQL on port ${server.port}`);
});

afterAll(async () => {
  await Promise.allSettled(Object.values(bouncers).map((bouncer) => bouncer.stop()));
  await server?.stop();
});

/** A fresh database on the throwaway server: its direct URL. */
async function database(label: string): Promise<string> {
  const name = `topo_${label}_${randomBytes(3).toString('hex')}`;
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  return urlForDatabase(server.url, name);
}

test('transaction pooling, preparedStatements: false, LISTEN on a direct URL: every job ends as expected, each picked up well within a poll interval', async () => {
  const directUrl = await database('tx_listen');
  const waves = 3;
  const result = await runWorkload({
    directUrl,
    url: bouncers.transaction.via(directUrl),
    engine: { pollIntervalMs: POLL_MS, preparedStatements: false, listenConnectionString: directUrl },
    waves,
  });
  expectOutcomes(result, waves);
  expect(result.listening).toBe(true);
  expect(Math.max(...result.pickupsMs)).toBeLessThanOrEqual(POLL_MS / 10);
  // Nothing failed on the way: no claim, completion, reaper, scheduler or probe error was logged.
  expect(result.logLines).toEqual([]);
});

test('session pooling, the defaults (named statements, LISTEN through the pooler): every job ends as expected, each picked up well within a poll interval', async () => {
  const directUrl = await database('session');
  const waves = 3;
  const result = await runWorkload({
    directUrl,
    url: bouncers.session.via(directUrl),
    engine: { pollIntervalMs: POLL_MS },
    waves,
  });
  expectOutcomes(result, waves);
  expect(result.listening).toBe(true);
  expect(Math.max(...result.pickupsMs)).toBeLessThanOrEqual(POLL_MS / 10);
  expect(result.logLines).toEqual([]);
});

test('transaction pooling without a LISTEN URL: the listener is reported down, one warning names listenConnectionString, and jobs are found by the poll', async () => {
  const directUrl = await database('tx_deaf');
  const pollIntervalMs = 3_000;
  const waves = 1;
  let downBeforeWaves: boolean | undefined;
  const result = await runWorkload({
    directUrl,
    url: bouncers.transaction.via(directUrl),
    engine: { pollIntervalMs, preparedStatements: false, notifier: { probeTimeoutMs: 300, reconnectMinMs: 50, reconnectMaxMs: 200 } },
    waves,
    async beforeWaves(worker, logLines) {
      // The LISTEN succeeds through the pooler; the probe NOTIFY never arrives. After a few deaf
      // sessions in a row the warning comes (probes of 300 ms: within seconds).
      await waitFor(() => logLines.some((line) => line.includes('listenConnectionString')), 20_000);
      downBeforeWaves = !(await worker.stats()).listener.listening;
    },
  });
  expect(downBeforeWaves).toBe(true);
  expectOutcomes(result, waves);
  expect(result.listening).toBe(false);
  const named = result.logLines.filter((line) => line.includes('listenConnectionString'));
  expect(named).toHaveLength(1);
  expect(named[0]).toMatch(/^warn: .*transaction mode/);
  // Every other line is the listener's own account of its reconnects.
  expect(result.logLines.filter((line) => !line.includes('listenConnectionString') && !/Listener connection lost/.test(line))).toEqual([]);
  // Found by the poll: within one interval (half another for a loaded machine).
  expect(Math.max(...result.pickupsMs)).toBeLessThanOrEqual(pollIntervalMs * 1.5);
});

test('transaction pooling with named statements (preparedStatements left true) fails as the issue saw it, and one warning names preparedStatements: false', async () => {
  const directUrl = await database('tx_named');
  const logger = testLogger();
  const engine = new PgQueue({ connectionString: bouncers.oneServer.via(directUrl), poolSize: 2, logger });
  try {
    // The migrator's statements are unnamed: migrations pass through any pooler.
    await engine.migrate();
    // Two clients of the pool prepare the same name on the one server connection.
    const outcomes = await Promise.allSettled([engine.getJob('1'), engine.getJob('2'), engine.getJob('3'), engine.getJob('4')]);
    const codes = outcomes.map((o) => (o.status === 'rejected' ? (o.reason as { code?: string }).code : 'ok'));
    expect(codes.some((code) => code === '42P05' || code === '26000')).toBe(true);
    const warnings = logger.lines.filter((line) => line.includes('preparedStatements'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^warn: .*preparedStatements: false/);
  } finally {
    await engine.stop();
  }
});
