import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { PgQueueError } from '../engine/index.js';
// The server starter is imported when a server is first needed, never before: see startEmbedded().
import type { EmbeddedPostgres } from './embedded-postgres.mjs';
import { EMBEDDED_POSTGRES_FAILED, EMBEDDED_POSTGRES_MISSING, TEST_DATABASE_FAILED } from './testing.messages.js';

/** A database of its own for a test file (or a worker): `url` to connect to, `drop()` when done. */
export interface TestDatabase {
  /** Connection string of the new database. */
  readonly url: string;
  /** Its name (`pgqt_<epoch seconds>_<label>_<random>`). */
  readonly name: string;
  /** Whether it lives on the throwaway embedded server of this process (DATABASE_URL was unset). */
  readonly embedded: boolean;
  /** Drops the database (forcing its connections closed). Idempotent. */
  drop(): Promise<void>;
}

export interface CreateTestDatabaseOptions {
  /** Part of the database's name, to tell runs apart (letters and digits, up to 20; default 'test'). */
  label?: string;
  /**
   * The server to create it on (a connection string whose user may CREATE DATABASE). Default:
   * DATABASE_URL; when that is unset too, a throwaway embedded PostgreSQL started for this process.
   */
  serverUrl?: string;
}

/**
 * `createTestDatabase` could not give a database: `EMBEDDED_POSTGRES_MISSING`, DATABASE_URL is
 * unset and the optional peer embedded-postgres (or its binaries for this platform) is not
 * installed; `EMBEDDED_POSTGRES_FAILED`, it is installed but the server did not start;
 * `TEST_DATABASE_FAILED`, the server was reached but refused CREATE DATABASE (or could not be
 * reached). The message says what to do.
 */
export class TestDatabaseError extends PgQueueError {
  constructor(
    readonly code: 'EMBEDDED_POSTGRES_MISSING' | 'EMBEDDED_POSTGRES_FAILED' | 'TEST_DATABASE_FAILED',
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * A fresh, empty database for a test file or a test worker, so files can run in parallel and a
 * failed run leaves nothing the next one trips over:
 *
 * ```ts
 * const db = await createTestDatabase();
 * // PgQueueModule.forRoot({ connectionString: db.url }) ...
 * afterAll(() => db.drop());
 * ```
 *
 * - DATABASE_URL set (CI, your own server): a database with a unique name on that server.
 * - DATABASE_URL unset: one throwaway PostgreSQL per process (a vitest or jest worker), started
 *   on the first call from the optional peer dependency embedded-postgres, loaded only then; every
 *   call gets a database of its own on it. The server and its data are removed when the process
 *   exits, however it exits (a watchdog stops it even after SIGKILL).
 *
 * @publicApi
 */
export async function createTestDatabase(options: CreateTestDatabaseOptions = {}): Promise<TestDatabase> {
  const given = options.serverUrl ?? process.env.DATABASE_URL;
  const serverUrl = given || (await embeddedServer()).url;
  const label = (options.label ?? 'test').toLowerCase().replace(/[^a-z0-9]/g, '').slice(0, 20) || 'test';
  const name = `pgqt_${Math.floor(Date.now() / 1000)}_${label}_${randomBytes(4).toString('hex')}`;
  await onServer(serverUrl, `CREATE DATABASE ${name}`);
  let dropped: Promise<void> | undefined;
  return {
    name,
    url: urlForDatabase(serverUrl, name),
    embedded: !given,
    drop: () => (dropped ??= onServer(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
  };
}

/** `base` with its database replaced by `database` (user, host, port and parameters kept). */
export function urlForDatabase(base: string, database: string): string {
  const url = new URL(base);
  url.pathname = `/${database}`;
  return url.toString();
}

/**
 * The server of `createTestDatabase` when DATABASE_URL is unset, for a global setup that starts
 * one server for the whole run instead of one per worker (`globalSetup` in vitest or jest): when
 * DATABASE_URL is unset it starts a throwaway PostgreSQL and sets DATABASE_URL to it, which the
 * workers inherit; when it is set, it does nothing. `stop()` stops what it started (the server is
 * removed at exit anyway).
 *
 * @publicApi
 */
export async function startTestDatabaseServer(): Promise<{ url: string; embedded: boolean; stop(): Promise<void> }> {
  const given = process.env.DATABASE_URL;
  if (given) return { url: given, embedded: false, stop: async () => {} };
  const started = await embeddedServer();
  process.env.DATABASE_URL = started.url;
  return {
    url: started.url,
    embedded: true,
    async stop() {
      if (process.env.DATABASE_URL === started.url) delete process.env.DATABASE_URL;
      await stopEmbeddedServer(started);
    },
  };
}

// On globalThis, not in a module variable: a runner that evaluates this module again for each test
// file in one process (vitest does, for sources it transforms) must still find the one server.
const SERVER = Symbol.for('nestjs-pg-queue:testing:embedded-server');
type ServerSlot = { [SERVER]?: Promise<EmbeddedPostgres> };
const slot = globalThis as ServerSlot;

/** This process's throwaway server, started on first use; a failed start is retried by the next call. */
function embeddedServer(): Promise<EmbeddedPostgres> {
  slot[SERVER] ??= startEmbedded().catch((error: unknown) => {
    delete slot[SERVER];
    throw error;
  });
  return slot[SERVER];
}

async function stopEmbeddedServer(started: EmbeddedPostgres): Promise<void> {
  if (slot[SERVER] && (await slot[SERVER].catch(() => undefined)) === started) delete slot[SERVER];
  await started.stop();
}

async function startEmbedded(): Promise<EmbeddedPostgres> {
  // Lazily: the kit loads (drainQueues, runJob) where the starter is not, e.g. a tsc-only compile of lib/.
  const { loadEmbeddedPlatform, startEmbeddedPostgres } = await import('./embedded-postgres.mjs');
  let platform: { initdb: string; postgres: string } | undefined;
  if (!process.env.PG_BIN_DIR) {
    try {
      platform = await loadEmbeddedPlatform();
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code === 'EMBEDDED_POSTGRES_MISSING' || code === 'EMBEDDED_POSTGRES_PLATFORM_MISSING') {
        throw new TestDatabaseError('EMBEDDED_POSTGRES_MISSING', EMBEDDED_POSTGRES_MISSING((error as Error).message), { cause: error });
      }
      throw error;
    }
  }
  let started: EmbeddedPostgres;
  try {
    started = await startEmbeddedPostgres(platform ? { platform } : {});
  } catch (error) {
    throw new TestDatabaseError('EMBEDDED_POSTGRES_FAILED', EMBEDDED_POSTGRES_FAILED((error as Error).message), { cause: error });
  }
  // The watchdog removes the server when this process ends; stopping it on a normal exit as well
  // would need an await that 'exit' cannot give. beforeExit (the event loop ran dry) can.
  process.once('beforeExit', () => void stopEmbeddedServer(started).catch(() => {}));
  return started;
}

async function onServer(serverUrl: string, statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl, connectionTimeoutMillis: 10_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query(statement);
  } catch (error) {
    throw new TestDatabaseError('TEST_DATABASE_FAILED', TEST_DATABASE_FAILED(describeTarget(serverUrl), (error as Error).message), { cause: error });
  } finally {
    await client.end().catch(() => {});
  }
}

/** user@host:port/database, never the password. */
function describeTarget(url: string): string {
  try {
    const u = new URL(url);
    return `${u.username ? `${decodeURIComponent(u.username)}@` : ''}${u.hostname || 'localhost'}${u.port ? `:${u.port}` : ''}${u.pathname}`;
  } catch {
    return 'DATABASE_URL (unparseable)';
  }
}
