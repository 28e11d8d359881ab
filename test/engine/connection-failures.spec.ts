import { writeFile } from 'node:fs/promises';
import pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../scripts/embedded-postgres.mjs';
import { DatabaseConnectionError, DatabaseUnavailableError, PgQueue, PgQueueError } from '../../lib/engine/index.js';
import { engineInternals } from '../../lib/engine/internals.js';
import { adminUrl, createTestDatabase, type TestDatabase } from '../support/database.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { closedPort } from '../support/tcp-proxy.js';

// Issue 16: a bad configuration, or a database that is not there yet, fails with our error: it
// names the option and host:port/database (never the password) and says what to check. Start-up
// tries an unreachable database again for startupRetryMs; a refusal (password, database, TLS)
// fails at once. A failed start leaves nothing running.

const PASSWORD = 'pw-secret-9311';

/** A logger that keeps its lines and tells a waiting test when one matches. */
function recordingLogger() {
  const lines: string[] = [];
  const waiters: { pattern: RegExp; resolve: () => void }[] = [];
  const add = (line: string) => {
    lines.push(line);
    for (const waiter of waiters.splice(0)) {
      if (waiter.pattern.test(line)) waiter.resolve();
      else waiters.push(waiter);
    }
  };
  return {
    lines,
    log: (m: string) => add(`log: ${m}`),
    warn: (m: string) => add(`warn: ${m}`),
    error: (m: string) => add(`error: ${m}`),
    /** Resolves when a line matching `pattern` has been logged (or already was). */
    seen(pattern: RegExp): Promise<void> {
      if (lines.some((line) => pattern.test(line))) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ pattern, resolve }));
    },
  };
}


async function startFailure(options: ConstructorParameters<typeof PgQueue>[0]): Promise<{ error: PgQueueError; engine: PgQueue; logger: ReturnType<typeof recordingLogger> }> {
  const logger = recordingLogger();
  const engine = new PgQueue({ startupRetryMs: 0, ...options, logger });
  engine.work('orders', async () => {});
  const error = await engine.start().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PgQueueError);
  return { error: error as PgQueueError, engine, logger };
}

function expectNoSecret(error: Error) {
  expect(error.message).not.toContain(PASSWORD);
  expect(JSON.stringify(error)).not.toContain(PASSWORD);
}

const shared = new URL(adminUrl());

describe('on the shared server (nothing changed on it)', () => {
  test('unknown host: DATABASE_UNAVAILABLE naming the host, connectionString, and what to check', async () => {
    const { error } = await startFailure({ connectionString: `postgres://app:${PASSWORD}@no-such-host.invalid:5432/shop` });
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    expect(error).toMatchObject({ code: 'DATABASE_UNAVAILABLE', option: 'connectionString', target: 'no-such-host.invalid:5432/shop' });
    expect(error.message).toMatch(/^The database at no-such-host\.invalid:5432\/shop cannot be reached \(getaddrinfo (ENOTFOUND|EAI_AGAIN) no-such-host\.invalid\)/);
    expect(error.message).toMatch(/The host name does not resolve: check the host in "connectionString"/);
    expectNoSecret(error);
  });

  test('connection refused: DATABASE_UNAVAILABLE, "nothing accepts connections there"', async () => {
    const port = await closedPort();
    const { error } = await startFailure({ connectionString: `postgres://app:${PASSWORD}@127.0.0.1:${port}/shop` });
    expect(error).toMatchObject({ code: 'DATABASE_UNAVAILABLE', target: `127.0.0.1:${port}/shop` });
    expect(error.message).toMatch(/Nothing accepts connections there: check that PostgreSQL is running, and the host and port in "connectionString"/);
    expectNoSecret(error);
  });

  test('a database that does not exist: DATABASE_NOT_FOUND (3D000) at once, even with start-up retries on', async () => {
    const url = new URL(shared);
    url.pathname = '/pgqt_no_such_database';
    const { error, logger } = await startFailure({ connectionString: url.toString(), startupRetryMs: 60_000 });
    expect(error).toBeInstanceOf(DatabaseConnectionError);
    expect(error).toMatchObject({ code: 'DATABASE_NOT_FOUND', option: 'connectionString' });
    expect(error.message).toMatch(/refused the connection: database "pgqt_no_such_database" does not exist \(SQLSTATE 3D000\)\. Check the database name in "connectionString", or create it/);
    expect((error.cause as { code?: string }).code).toBe('3D000');
    // Not retried: waiting does not create a database.
    expect(logger.lines.filter((l) => l.startsWith('warn:'))).toEqual([]);
  });

  test('a role that does not exist: DATABASE_AUTH_FAILED (28000)', async () => {
    const url = new URL(shared);
    url.username = 'pgqt_no_such_role';
    const { error } = await startFailure({ connectionString: url.toString() });
    expect(error).toMatchObject({ code: 'DATABASE_AUTH_FAILED' });
    expect(error.message).toMatch(/role "pgqt_no_such_role" does not exist \(SQLSTATE 28000\)\. Check the user in "connectionString"/);
  });

  test('TLS asked of a server without it: DATABASE_TLS_FAILED', async () => {
    const url = new URL(shared);
    url.searchParams.set('sslmode', 'no-verify');
    const { error } = await startFailure({ connectionString: url.toString() });
    expect(error).toMatchObject({ code: 'DATABASE_TLS_FAILED' });
    expect(error.message).toMatch(/the connection asks for TLS, and the server does not support it\. Remove sslmode or ssl from "connectionString"/);
  });

  test('a pool passed in is named as "pool" in the message', async () => {
    const pool = new pg.Pool({ host: shared.hostname, port: Number(shared.port || 5432), user: shared.username || 'postgres', database: 'pgqt_no_such_database' });
    try {
      const { error } = await startFailure({ pool });
      expect(error).toMatchObject({ code: 'DATABASE_NOT_FOUND', option: 'pool' });
      expect(error.message).toMatch(/Check the database name in the settings of the pool passed as "pool"/);
    } finally {
      await pool.end();
    }
  });

  test('a server that accepts and never answers: DATABASE_UNAVAILABLE once the connect timeout (statementTimeoutMs) passes', async () => {
    const proxy = await startTcpProxy(shared.hostname, Number(shared.port || 5432));
    proxy.blackhole();
    try {
      const { error } = await startFailure({ connectionString: `postgres://app:${PASSWORD}@127.0.0.1:${proxy.port}/shop`, statementTimeoutMs: 200 });
      expect(error).toMatchObject({ code: 'DATABASE_UNAVAILABLE' });
      expect(error.message).toMatch(/cannot be reached \(.*timeout.*\)\. No answer in time: a firewall/i);
      expectNoSecret(error);
    } finally {
      await proxy.close();
    }
  });
});

describe('start-up retries a database that cannot be reached, for startupRetryMs', () => {
  let database: TestDatabase;
  let proxy: TcpProxy;
  beforeAll(async () => {
    database = await createTestDatabase('startup');
  });
  afterAll(() => database.drop());
  beforeEach(async () => {
    const url = new URL(database.url);
    proxy = await startTcpProxy(url.hostname, Number(url.port || 5432));
  });
  afterEach(() => proxy.close());

  const viaProxy = () => {
    const url = new URL(database.url);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    return url.toString();
  };

  test('a database that comes up during start-up: start waits, logs each attempt once, and then runs', async () => {
    proxy.cut();
    const logger = recordingLogger();
    const engine = new PgQueue({ connectionString: viaProxy(), startupRetryMs: 120_000, logger });
    engine.work('orders', async () => {});
    const starting = engine.start();
    await logger.seen(/start-up attempt 2 failed/);
    proxy.heal();
    await starting;
    try {
      const retries = logger.lines.filter((l) => /start-up attempt \d+ failed/.test(l));
      expect(retries.length).toBeGreaterThanOrEqual(2);
      expect(retries[0]).toMatch(/^warn: The database at 127\.0\.0\.1:\d+\/\w+ cannot be reached yet \(.+\): start-up attempt 1 failed, trying again in 250 ms \(for .+ more, startupRetryMs\)\.$/);
      expect(retries[1]).toMatch(/attempt 2 failed, trying again in 500 ms/);
      // Each attempt once: no attempt number twice.
      const numbers = retries.map((l) => /attempt (\d+)/.exec(l)![1]);
      expect(new Set(numbers).size).toBe(numbers.length);
      expect(logger.lines).toContainEqual(expect.stringMatching(/^log: The database at .+ answered at start-up attempt \d+, after /));
      expect(await engine.enqueue('orders', { ok: true })).toMatch(/^\d+$/);
    } finally {
      await engine.stop(1_000);
    }
  });

  test('it gives up after startupRetryMs with DATABASE_UNAVAILABLE naming the attempts, and leaves nothing running', async () => {
    proxy.cut();
    const { error, engine, logger } = await startFailure({ connectionString: viaProxy(), startupRetryMs: 700 });
    expect(error).toMatchObject({ code: 'DATABASE_UNAVAILABLE' });
    const attempts = Number(/after (\d+) attempts over .+ \(startupRetryMs\)/.exec(error.message)?.[1]);
    expect(attempts).toBeGreaterThanOrEqual(2);
    expect(logger.lines.filter((l) => /start-up attempt \d+ failed/.test(l))).toHaveLength(attempts - 1);
    expect(engineInternals(engine).pool.ended).toBe(true);
    await engine.stop(1_000);
  });

  test('stop() during the retries ends them at once: start rejects, stop resolves, nothing is left', async () => {
    proxy.cut();
    const logger = recordingLogger();
    const engine = new PgQueue({ connectionString: viaProxy(), startupRetryMs: 600_000, logger });
    engine.work('orders', async () => {});
    const starting = engine.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    await logger.seen(/start-up attempt 1 failed/);
    await engine.stop(1_000);
    expect(await starting).toBeInstanceOf(DatabaseUnavailableError);
    expect(engineInternals(engine).pool.ended).toBe(true);
    const before = proxy.accepted;
    proxy.heal();
    // No attempt after the stop reached the server.
    expect(proxy.accepted).toBe(before);
  });
});

describe('a failed start leaves nothing running, and stop() after it is clean', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase('failedstart');
  });
  afterAll(() => database.drop());

  test('a start refused after it connected (migrations: "verify" on an empty database) closes its pool by itself', async () => {
    const { error, engine, logger } = await startFailure({ connectionString: database.url, migrations: 'verify' });
    expect(error).toMatchObject({ code: 'MIGRATION_PENDING' });
    const { pool, notifier } = engineInternals(engine);
    // The pool had connections; the failed start ended it without any stop().
    expect(pool.ended).toBe(true);
    expect(pool.totalCount).toBe(0);
    expect(notifier.listening).toBe(false);
    // What outlives a failed start (a host's timer) is told clearly, not "Cannot use a pool after calling end".
    for (const pass of engine.hostablePasses) {
      await expect(pass.runOnce()).rejects.toMatchObject({ code: 'ENGINE_STOPPED', message: expect.stringMatching(/has stopped \(stop\(\) was called, or start\(\) failed\)/) });
    }
    await expect(engine.enqueue('orders', {})).rejects.toMatchObject({ code: 'ENGINE_STOPPED' });
    await engine.stop(1_000);
    await engine.stop(1_000);
    expect(logger.lines).toEqual([]);
  });
});

describe('on a throwaway cluster with password authentication', () => {
  let server: EmbeddedPostgres;
  beforeAll(async () => {
    server = await startEmbeddedPostgres();
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE app LOGIN PASSWORD '${PASSWORD}'`);
      await admin.query(`CREATE ROLE tlsonly LOGIN PASSWORD '${PASSWORD}'`);
      const { rows } = await admin.query<{ hba_file: string }>('SHOW hba_file');
      // Only this throwaway cluster's pg_hba.conf: postgres keeps trust for the setup, app needs
      // a password, tlsonly is admitted over TLS only (which this server does not offer).
      await writeFile(
        rows[0]!.hba_file,
        ['host all postgres 127.0.0.1/32 trust', 'hostssl all tlsonly 127.0.0.1/32 scram-sha-256', 'host all app 127.0.0.1/32 scram-sha-256', ''].join('\n'),
      );
      await admin.query('SELECT pg_reload_conf()');
    } finally {
      await admin.end();
    }
  }, 120_000);
  afterAll(() => server?.stop());

  const url = (user: string, password?: string) => `postgres://${user}${password === undefined ? '' : `:${encodeURIComponent(password)}`}@127.0.0.1:${server.port}/postgres`;

  test('a wrong password: DATABASE_AUTH_FAILED (28P01) at once, never retried, never echoing the password', async () => {
    const { error, logger } = await startFailure({ connectionString: url('app', `${PASSWORD}-wrong`), startupRetryMs: 60_000 });
    expect(error).toBeInstanceOf(DatabaseConnectionError);
    expect(error).toMatchObject({ code: 'DATABASE_AUTH_FAILED', target: `127.0.0.1:${server.port}/postgres` });
    expect(error.message).toMatch(/refused the connection: password authentication failed for user "app" \(SQLSTATE 28P01\)\. Check the user and password in "connectionString"/);
    expectNoSecret(error);
    expect(logger.lines.filter((l) => l.startsWith('warn:'))).toEqual([]);
  });

  test('no password (pg: "SASL: client password must be a string"): DATABASE_AUTH_FAILED saying none was given', async () => {
    const { error } = await startFailure({ connectionString: url('app') });
    expect(error).toMatchObject({ code: 'DATABASE_AUTH_FAILED' });
    expect(error.message).toMatch(/the server asks for a password, and none was given \(or it is not a string\)\. Set the password in "connectionString"/);
    expect((error.cause as Error).message).toMatch(/client password must be a string/);
  });

  test('a pool whose password is not a string: the same, naming "pool"', async () => {
    const pool = new pg.Pool({ host: '127.0.0.1', port: server.port, user: 'app', database: 'postgres', password: 42 as unknown as string });
    try {
      const { error } = await startFailure({ pool });
      expect(error).toMatchObject({ code: 'DATABASE_AUTH_FAILED', option: 'pool' });
      expect(error.message).toMatch(/none was given \(or it is not a string\)\. Set the password in the settings of the pool passed as "pool"/);
    } finally {
      await pool.end();
    }
  });

  test('a server that admits the user only over TLS: DATABASE_TLS_FAILED saying so', async () => {
    const { error } = await startFailure({ connectionString: url('tlsonly', PASSWORD) });
    expect(error).toMatchObject({ code: 'DATABASE_TLS_FAILED' });
    expect(error.message).toMatch(/no pg_hba\.conf entry for host "127\.0\.0\.1", user "tlsonly", database "postgres", no encryption \(SQLSTATE 28000\): the server admits this connection only over TLS/);
    expect(error.message).toMatch(/Ask for TLS in "connectionString"/);
    expectNoSecret(error);
  });

  test('the right password works', async () => {
    const engine = new PgQueue({ connectionString: url('app', PASSWORD), schema: 'pwq', logger: recordingLogger() });
    try {
      const admin = new pg.Client({ connectionString: server.url });
      await admin.connect();
      await admin.query('GRANT CREATE ON DATABASE postgres TO app');
      await admin.end();
      await engine.migrate();
      await engine.declareQueues(['orders']);
      expect(await engine.enqueue('orders', {})).toMatch(/^\d+$/);
    } finally {
      await engine.stop(1_000);
    }
  });
});
