import { copyFile, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { MIGRATIONS_DIR } from '../../lib/engine/migrator.js';
import { createTestDatabase as createDatabase, urlForDatabase, type TestDatabase } from '../../lib/testing/index.js';

export { urlForDatabase, type TestDatabase };

/**
 * Each test file gets a database of its own on the server named by DATABASE_URL (CI's server, or
 * the throwaway one the global setup started), so files can run in parallel and a failed run leaves
 * nothing that the next one trips over. The package's own helper (nestjs-pg-queue/testing), so what
 * users get is what every test here runs on; the global setup drops what crashed runs left
 * (`pgqt_<epoch seconds>_…`, the helper's names).
 */
export function createTestDatabase(label = 'test'): Promise<TestDatabase> {
  return createDatabase({ label, serverUrl: adminUrl() });
}

export function adminUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) {
    throw new Error('DATABASE_URL is not set: run the tests with `npm test` (it starts a throwaway PostgreSQL) or set it.');
  }
  return url;
}

/**
 * A directory (made under `parent`) holding a copy of the package's migrations numbered below
 * `before` ("0007": 0001-0006): a database of an earlier schema, for tests of an upgrade.
 */
export async function migrationsBefore(parent: string, before: string): Promise<string> {
  const dir = await mkdtemp(join(parent, 'migrations-'));
  for (const name of await readdir(MIGRATIONS_DIR)) if (name.endsWith('.sql') && name < before) await copyFile(join(MIGRATIONS_DIR, name), join(dir, name));
  return dir;
}

/**
 * The setup of a migration test file: a database of its own, a pool on it, and a scratch
 * directory for copies of earlier migrations (migrationsBefore), made before the file's tests and
 * removed after them. Read the fields inside tests (they are set by beforeAll).
 */
export function migrationTestSetup(label: string, poolSize = 4) {
  const setup = {} as { db: TestDatabase; pool: pg.Pool; scratch: string };
  beforeAll(async () => {
    setup.db = await createTestDatabase(label);
    setup.pool = new pg.Pool({ connectionString: setup.db.url, max: poolSize });
    // pool.end() resolves once its clients are told to end, not once their sockets closed; the
    // drop's WITH (FORCE) right after can terminate a backend still exiting, and the pool re-emits
    // that client's 57P01: with no listener, an unhandled error that failed two CI runs with every
    // test green (test/migration-0014.spec.ts, 0012). engineFixture's pool listens the same way.
    setup.pool.on('error', () => {});
    setup.scratch = await mkdtemp(join(tmpdir(), `pgq-${label}-`));
  });
  afterAll(async () => {
    await setup.pool?.end();
    await setup.db?.drop();
    if (setup.scratch) await rm(setup.scratch, { recursive: true, force: true });
  });
  return setup;
}
