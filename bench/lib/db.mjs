// The benchmark's own database: created on the server in DATABASE_URL, dropped at the end.
import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** `postgres://…/postgres` → the same server, database `name`. */
export function withDatabase(url, name) {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(name)}`;
  return u.toString();
}

/** The server's address without credentials, for the report. */
export function describeUrl(url) {
  try {
    const u = new URL(url);
    const host = u.hostname || u.searchParams.get('host') || '(socket)';
    return `${u.protocol}//${u.username ? `${u.username}@` : ''}${host}${u.port ? `:${u.port}` : ''}${u.pathname}`;
  } catch {
    return '(unparsable DATABASE_URL)';
  }
}

export async function withClient(url, fn) {
  const client = new pg.Client({ connectionString: url, application_name: 'pgqueue-bench' });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/** CREATE DATABASE bench_<rand>; returns its URL and a drop() that is safe to call twice. */
export async function createBenchDatabase(serverUrl) {
  const name = `bench_${randomBytes(4).toString('hex')}`;
  await withClient(serverUrl, (c) => c.query(`CREATE DATABASE "${name}"`));
  let dropped = false;
  return {
    name,
    url: withDatabase(serverUrl, name),
    async drop() {
      if (dropped) return;
      dropped = true;
      await withClient(serverUrl, (c) => c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
    },
  };
}

/** On Ctrl-C (or SIGTERM, SIGHUP): `onSignal()`, then drop `db` and exit 130. */
export function dropOnSignals(db, onSignal = () => {}) {
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.once(signal, () => {
      onSignal(signal);
      process.stderr.write(`\n${signal}: dropping ${db.name}…\n`);
      db.drop().finally(() => process.exit(130));
    });
  }
}

/** What the report says about the server. */
export async function serverContext(url) {
  return withClient(url, async (c) => {
    const setting = async (name) => {
      try {
        const { rows } = await c.query('SELECT current_setting($1) AS v', [name]);
        return rows[0].v;
      } catch {
        return undefined;
      }
    };
    const { rows } = await c.query('SELECT version() AS v');
    const dataDirectory = await setting('data_directory');
    // scripts/embedded-postgres.mjs puts its cluster in a temp dir named pgqueue-embedded-*.
    const kind = dataDirectory === undefined ? 'unknown' : /pgqueue-embedded-/.test(dataDirectory) ? 'embedded' : 'external';
    return {
      version: rows[0].v,
      serverVersion: await setting('server_version'),
      kind,
      dataDirectory,
      synchronousCommit: await setting('synchronous_commit'),
      fsync: await setting('fsync'),
      sharedBuffers: await setting('shared_buffers'),
      maxConnections: await setting('max_connections'),
    };
  });
}

/**
 * Between measurements: drop the run's schema, then a checkpoint so that one run's dirty pages
 * are not flushed during the next one (skipped without the privilege).
 */
export async function resetBetweenRuns(benchUrl, schema) {
  await withClient(benchUrl, async (c) => {
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await c.query('CHECKPOINT').catch(() => {});
  });
}

export async function analyze(benchUrl) {
  await withClient(benchUrl, (c) => c.query('ANALYZE'));
}
