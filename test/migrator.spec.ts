import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { copyFile, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { InvalidOptionError, MigrationError } from '../lib/engine/errors.js';
import { loadMigrations, MIGRATIONS_DIR, migrate, migrationLockKey, type MigrateOptions, type MigrationReport } from '../lib/engine/migrator.js';
import { compileEngine } from './support/compile-engine.mjs';
import { createTestDatabase, type TestDatabase } from './support/database.js';

const childScript = fileURLToPath(new URL('./support/migrate-child.mjs', import.meta.url));

let db: TestDatabase;
let pool: pg.Pool;
let scratch: string;
let schemaCounter = 0;

/** A schema of its own for each test, so tests in this file share one database. */
function freshSchema(): string {
  schemaCounter += 1;
  return `mt_${process.pid}_${schemaCounter}`;
}

/** A copy of the package's migrations that a test may add to or edit. */
async function copyOfMigrations(): Promise<string> {
  const dir = await mkdtemp(join(scratch, 'migrations-'));
  for (const name of await readdir(MIGRATIONS_DIR)) {
    if (name.endsWith('.sql')) await copyFile(join(MIGRATIONS_DIR, name), join(dir, name));
  }
  return dir;
}

async function realMigrationNames(): Promise<string[]> {
  return (await readdir(MIGRATIONS_DIR)).filter((name) => name.endsWith('.sql')).sort();
}

async function appliedRows(schema: string): Promise<Array<{ name: string; checksum: string; compatible: boolean }>> {
  const { rows } = await pool.query(`SELECT name, checksum, compatible FROM "${schema}".schema_migrations ORDER BY name`);
  return rows;
}

async function schemaExists(schema: string): Promise<boolean> {
  const { rows } = await pool.query('SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS present', [schema]);
  return rows[0].present;
}

async function tablesIn(schema: string): Promise<string[]> {
  const { rows } = await pool.query('SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename', [schema]);
  return rows.map((row: { tablename: string }) => row.tablename);
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

/** A pool that fails the test if the migrator touches it. */
function trapPool(): pg.Pool & { calls: number } {
  const trap = {
    calls: 0,
    connect() {
      trap.calls += 1;
      throw new Error('the migrator connected');
    },
    query() {
      trap.calls += 1;
      throw new Error('the migrator ran a query');
    },
  };
  return trap as unknown as pg.Pool & { calls: number };
}

function silentLogger() {
  return { log: vi.fn<(message: string) => void>(), warn: vi.fn<(message: string) => void>() };
}

beforeAll(async () => {
  db = await createTestDatabase('migrator');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  scratch = await mkdtemp(join(tmpdir(), 'pgq-migrator-'));
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe('migrate() in ten processes at once', () => {
  let compiledMigrator: string;

  // The children run the real migrator, compiled to JavaScript with the project's TypeScript
  // (test/support/compile-engine.mjs: cached under node_modules/.cache, shared with the crash suite).
  beforeAll(async () => {
    compiledMigrator = (await compileEngine()).module('engine/migrator.js');
  });

  it('applies each file exactly once, and running again is a no-op', async () => {
    // The package's files plus two that count their own applications: applying either twice would
    // leave two rows (and 0001 cannot run twice at all: CREATE TYPE fails).
    const dir = await copyOfMigrations();
    await writeFile(join(dir, '9001_counter.sql'), 'CREATE TABLE applied_counter (file text NOT NULL);\nINSERT INTO applied_counter VALUES (\'9001\');\n');
    await writeFile(join(dir, '9002_counter.sql'), 'INSERT INTO applied_counter VALUES (\'9002\');\n');
    const names = [...(await realMigrationNames()), '9001_counter.sql', '9002_counter.sql'];
    const options: MigrateOptions = { migrationsDir: dir }; // default schema: pgqueue
    expect(await schemaExists('pgqueue')).toBe(false);

    const children = Array.from({ length: 10 }, () => startChild(compiledMigrator, db.url, options));
    try {
      await Promise.all(children.map((child) => child.ready));

      // Hold the migrator's lock while all ten start, so that every one of them finds every file
      // pending and then queues on the lock: the re-check under the lock is what is being tested.
      const holder = await pool.connect();
      try {
        await holder.query('BEGIN');
        await holder.query('SELECT pg_advisory_xact_lock($1::bigint)', [migrationLockKey('pgqueue')]);
        for (const child of children) child.go();
        await waitFor(async () => {
          const { rows } = await pool.query(
            `SELECT count(*)::int AS waiting FROM pg_locks
              WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          );
          return rows[0].waiting === 10;
        }, 20_000);
        await holder.query('COMMIT');
      } finally {
        holder.release();
      }

      const results = await Promise.all(children.map((child) => child.done));
      for (const result of results) {
        expect(result, JSON.stringify(result)).toMatchObject({ ok: true, exitCode: 0 });
      }
      const reports = results.map((result) => result.report!);
      // Every file applied by exactly one process; every process saw every file done.
      const appliedAll = reports.flatMap((report) => report.applied).sort();
      expect(appliedAll).toEqual(names);
      for (const report of reports) {
        expect([...report.applied, ...report.skipped].sort()).toEqual(names);
        expect(report.schema).toBe('pgqueue');
      }
    } finally {
      for (const child of children) child.process.kill('SIGKILL');
    }

    expect((await appliedRows('pgqueue')).map((row) => row.name)).toEqual(names);
    const { rows: counted } = await pool.query('SELECT file FROM pgqueue.applied_counter ORDER BY file');
    expect(counted).toEqual([{ file: '9001' }, { file: '9002' }]);
    const { rows: before } = await pool.query('SELECT name, applied_at FROM pgqueue.schema_migrations ORDER BY name');

    // Again, in this process: nothing to do, nothing written.
    const again = await migrate(pool, options);
    expect(again).toEqual({ schema: 'pgqueue', mode: 'auto', applied: [], skipped: names, newerCompatible: [] });
    const { rows: after } = await pool.query('SELECT name, applied_at FROM pgqueue.schema_migrations ORDER BY name');
    expect(after).toEqual(before);
    expect((await pool.query('SELECT count(*)::int AS n FROM pgqueue.applied_counter')).rows[0].n).toBe(2);
  });
});

describe('migrate()', () => {
  it('applies the package migrations by default and reports them', async () => {
    const schema = freshSchema();
    const logger = silentLogger();
    const names = await realMigrationNames();
    const report = await migrate(pool, { schema, logger });
    expect(report).toEqual({ schema, mode: 'auto', applied: names, skipped: [], newerCompatible: [] });
    expect(logger.log).toHaveBeenCalledWith(expect.stringContaining(`Applied migration ${names[0]}`));
    const rows = await appliedRows(schema);
    expect(rows.map((row) => row.name)).toEqual(names);
    const files = await loadMigrations();
    for (const [i, row] of rows.entries()) {
      expect(row.checksum).toBe(files[i]!.checksum);
      expect(row.compatible).toBe(files[i]!.compatible);
    }
    // 0003 (ordering keys) changes the claimable index under older code: it says so.
    expect(rows.find((row) => row.name.startsWith('0003_'))?.compatible).toBe(false);
  });

  it('puts the tables in a non-default schema and leaves the connection search_path alone', async () => {
    const schema = 'tenant_alpha';
    const single = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const { rows: pathBefore } = await single.query('SHOW search_path');
      await migrate(single, { schema });
      expect(await tablesIn(schema)).toEqual(expect.arrayContaining(['job_events', 'jobs', 'schema_migrations']));
      const { rows: types } = await pool.query(
        `SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.typname = 'job_status' ORDER BY 1`,
      );
      expect(types.map((row: { nspname: string }) => row.nspname)).toContain(schema);
      expect(await tablesIn('public')).toEqual([]);
      // SET LOCAL ended with the transaction: the pooled connection is as it was.
      const { rows: pathAfter } = await single.query('SHOW search_path');
      expect(pathAfter).toEqual(pathBefore);
    } finally {
      await single.end();
    }
  });

  it('accepts a connection string and opens and closes its own connection', async () => {
    const schema = freshSchema();
    const report = await migrate(db.url, { schema });
    expect(report.applied).toEqual(await realMigrationNames());
  });

  it('refuses an applied file that was edited, and ignores line-ending changes', async () => {
    const schema = freshSchema();
    const dir = await copyOfMigrations();
    await migrate(pool, { schema, migrationsDir: dir });
    const [first] = await realMigrationNames();
    const path = join(dir, first!);
    const original = await readFile(path, 'utf8');

    // The same text with CRLF line endings is the same migration.
    await writeFile(path, original.replace(/\n/g, '\r\n'));
    expect((await migrate(pool, { schema, migrationsDir: dir })).applied).toEqual([]);

    await writeFile(path, `${original}\n-- a harmless-looking edit\n`);
    for (const mode of ['auto', 'verify'] as const) {
      const error = await rejection(migrate(pool, { schema, migrationsDir: dir, mode }));
      expect(error).toBeInstanceOf(MigrationError);
      expect(error).toMatchObject({ code: 'MIGRATION_EDITED' });
      expect((error as Error).message).toContain(first);
      expect((error as Error).message).toContain('must never be edited');
      expect((error as Error).message).toContain('add a new migration file');
    }
  });

  it('refuses an edited applied file even when other files are pending (nothing is applied)', async () => {
    const schema = freshSchema();
    const dir = await copyOfMigrations();
    await migrate(pool, { schema, migrationsDir: dir });
    const [first] = await realMigrationNames();
    await writeFile(join(dir, first!), `${await readFile(join(dir, first!), 'utf8')}\nSELECT 1;\n`);
    await writeFile(join(dir, '9001_extra.sql'), 'CREATE TABLE extra (id int);\n');
    const error = await rejection(migrate(pool, { schema, migrationsDir: dir }));
    expect(error).toMatchObject({ code: 'MIGRATION_EDITED' });
    expect(await tablesIn(schema)).not.toContain('extra');
  });

  it('accepts a database migrated by a newer version when its unknown migrations are compatible', async () => {
    const schema = freshSchema();
    const newer = await copyOfMigrations();
    await writeFile(join(newer, '9001_newer_column.sql'), '-- Adds a column older versions simply do not use.\nALTER TABLE jobs ADD COLUMN tag text;\n');
    await migrate(pool, { schema, migrationsDir: newer });
    expect((await appliedRows(schema)).at(-1)).toMatchObject({ name: '9001_newer_column.sql', compatible: true });

    const logger = silentLogger();
    const report = await migrate(pool, { schema, logger });
    expect(report).toEqual({ schema, mode: 'auto', applied: [], skipped: await realMigrationNames(), newerCompatible: ['9001_newer_column.sql'] });
    expect(logger.warn).toHaveBeenCalledWith(expect.stringContaining('9001_newer_column.sql'));
    expect((await migrate(pool, { schema, mode: 'verify' })).newerCompatible).toEqual(['9001_newer_column.sql']);
  });

  it('refuses a database with a newer migration marked incompatible', async () => {
    const schema = freshSchema();
    const newer = await copyOfMigrations();
    await writeFile(
      join(newer, '9001_rename_column.sql'),
      '-- Renames a column older versions read.\n--   pg-queue: incompatible-with-older-versions\n\nALTER TABLE jobs RENAME COLUMN priority TO urgency;\n',
    );
    const applied = await migrate(pool, { schema, migrationsDir: newer });
    expect(applied.applied).toContain('9001_rename_column.sql');
    expect((await appliedRows(schema)).at(-1)).toMatchObject({ name: '9001_rename_column.sql', compatible: false });

    // The newer version itself still runs.
    expect((await migrate(pool, { schema, migrationsDir: newer })).applied).toEqual([]);

    for (const mode of ['auto', 'verify'] as const) {
      const error = await rejection(migrate(pool, { schema, mode }));
      expect(error).toBeInstanceOf(MigrationError);
      expect(error).toMatchObject({ code: 'MIGRATION_INCOMPATIBLE' });
      expect((error as Error).message).toContain('9001_rename_column.sql');
      expect((error as Error).message).toContain('newer nestjs-pg-queue');
      expect((error as Error).message).toMatch(/upgrade/i);
    }
  });

  it('refuses an incompatible row recorded by a newer version even when this version has pending files', async () => {
    const schema = freshSchema();
    const dir = await copyOfMigrations();
    await migrate(pool, { schema, migrationsDir: dir });
    await pool.query(`INSERT INTO "${schema}".schema_migrations (name, checksum, compatible) VALUES ('9500_future.sql', 'x', false)`);
    await writeFile(join(dir, '9001_pending.sql'), 'CREATE TABLE pending_one (id int);\n');
    const error = await rejection(migrate(pool, { schema, migrationsDir: dir }));
    expect(error).toMatchObject({ code: 'MIGRATION_INCOMPATIBLE' });
    expect(await tablesIn(schema)).not.toContain('pending_one');
  });

  it('verify mode applies nothing and lists the pending files', async () => {
    const schema = freshSchema();
    const names = await realMigrationNames();
    const empty = await rejection(migrate(pool, { schema, mode: 'verify' }));
    expect(empty).toBeInstanceOf(MigrationError);
    expect(empty).toMatchObject({ code: 'MIGRATION_PENDING' });
    for (const name of names) expect((empty as Error).message).toContain(name);
    expect(await schemaExists(schema)).toBe(false);

    const dir = await copyOfMigrations();
    await migrate(pool, { schema, migrationsDir: dir });
    await writeFile(join(dir, '9001_later.sql'), 'CREATE TABLE later (id int);\n');
    const later = await rejection(migrate(pool, { schema, migrationsDir: dir, mode: 'verify' }));
    expect(later).toMatchObject({ code: 'MIGRATION_PENDING' });
    expect((later as Error).message).toContain('9001_later.sql');
    expect((later as Error).message).not.toContain(names[0]);
    expect(await tablesIn(schema)).not.toContain('later');
    expect((await appliedRows(schema)).map((row) => row.name)).toEqual(names);

    const upToDate = await migrate(pool, { schema, mode: 'verify' });
    expect(upToDate).toEqual({ schema, mode: 'verify', applied: [], skipped: names, newerCompatible: [] });
  });

  it('off mode runs no SQL and reads no files', async () => {
    const trap = trapPool();
    const report = await migrate(trap, { mode: 'off', migrationsDir: join(scratch, 'does-not-exist') });
    expect(report).toEqual({ schema: 'pgqueue', mode: 'off', applied: [], skipped: [], newerCompatible: [] });
    expect(trap.calls).toBe(0);
  });

  it('rejects a hostile schema name before any SQL runs', async () => {
    const hostile = 'x"; drop table y; --';
    for (const mode of ['auto', 'verify', 'off'] as const) {
      const trap = trapPool();
      const error = await rejection(migrate(trap, { schema: hostile, mode }));
      expect(error).toBeInstanceOf(InvalidOptionError);
      expect(error).toMatchObject({ code: 'INVALID_OPTION', option: 'schema' });
      expect(trap.calls).toBe(0);
    }
    // And against the real database: nothing was created.
    await expect(migrate(pool, { schema: hostile })).rejects.toBeInstanceOf(InvalidOptionError);
    const { rows } = await pool.query(`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'x%'`);
    expect(rows).toEqual([]);
  });

  it('rejects an unknown mode and other bad options before any SQL runs', async () => {
    const trap = trapPool();
    const cases: Array<[MigrateOptions, string]> = [
      [{ mode: 'apply' as never }, 'mode'],
      [{ schema: 'Upper' }, 'schema'],
      [{ schema: '' }, 'schema'],
      [{ migrationsDir: '' }, 'migrationsDir'],
      [{ logger: {} as never }, 'logger'],
      [{ migrationsDir: join(scratch, 'does-not-exist') }, 'migrationsDir'],
    ];
    for (const [options, option] of cases) {
      const error = await rejection(migrate(trap, options));
      expect(error, JSON.stringify(options)).toBeInstanceOf(InvalidOptionError);
      expect(error).toMatchObject({ option });
    }
    expect(trap.calls).toBe(0);
  });

  it('rejects badly named files, duplicate numbers and unknown directives before any SQL runs', async () => {
    const trap = trapPool();
    const badName = await mkdtemp(join(scratch, 'bad-name-'));
    await writeFile(join(badName, '2_jobs.sql'), 'SELECT 1;\n');
    await expect(migrate(trap, { migrationsDir: badName })).rejects.toMatchObject({ option: 'migrationsDir', message: expect.stringContaining('2_jobs.sql') });

    const duplicate = await mkdtemp(join(scratch, 'duplicate-'));
    await writeFile(join(duplicate, '0002_a.sql'), 'SELECT 1;\n');
    await writeFile(join(duplicate, '0002_b.sql'), 'SELECT 1;\n');
    await expect(migrate(trap, { migrationsDir: duplicate })).rejects.toMatchObject({ option: 'migrationsDir', message: expect.stringContaining('same number') });

    const typo = await mkdtemp(join(scratch, 'typo-'));
    await writeFile(join(typo, '0001_typo.sql'), '-- pg-queue: incompatible\nSELECT 1;\n');
    await expect(migrate(trap, { migrationsDir: typo })).rejects.toMatchObject({ code: 'MIGRATION_FAILED', message: expect.stringContaining('0001_typo.sql') });
    expect(trap.calls).toBe(0);
  });

  it('wraps a failing file in MIGRATION_FAILED naming the file and line, and applies nothing from it', async () => {
    const schema = freshSchema();
    const dir = await copyOfMigrations();
    await writeFile(join(dir, '9001_broken.sql'), '-- Half of this would work.\nCREATE TABLE half (id int);\nSELECT no_such_column FROM half;\n');
    await writeFile(join(dir, '9002_after.sql'), 'CREATE TABLE after_broken (id int);\n');
    const error = await rejection(migrate(pool, { schema, migrationsDir: dir }));
    expect(error).toBeInstanceOf(MigrationError);
    expect(error).toMatchObject({ code: 'MIGRATION_FAILED' });
    expect((error as Error).message).toContain('9001_broken.sql');
    expect((error as Error).message).toContain('line 3');
    expect((error as Error).cause).toMatchObject({ code: '42703' });
    // The files before it stay applied; the broken one and everything after it are not.
    expect((await appliedRows(schema)).map((row) => row.name)).toEqual(await realMigrationNames());
    expect(await tablesIn(schema)).not.toContain('half');
    expect(await tablesIn(schema)).not.toContain('after_broken');
    // The pool's connection was returned in a usable state.
    expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });
});

interface ChildResult {
  ok: boolean;
  exitCode: number | null;
  report?: MigrationReport;
  code?: string;
  message?: string;
  stderr: string;
}

interface Child {
  process: ChildProcessWithoutNullStreams;
  ready: Promise<void>;
  go(): void;
  done: Promise<ChildResult>;
}

function startChild(migrator: string, url: string, options: MigrateOptions): Child {
  const child = spawn(process.execPath, [childScript, migrator, url, JSON.stringify(options)], { stdio: 'pipe' });
  let stdout = '';
  let stderr = '';
  let markReady: () => void;
  let failReady: (error: Error) => void;
  const ready = new Promise<void>((resolve, reject) => {
    markReady = resolve;
    failReady = reject;
  });
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    if (stdout.startsWith('ready\n')) markReady();
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const done = new Promise<ChildResult>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (exitCode) => {
      failReady(new Error(`child exited before it was ready (${exitCode}): ${stderr}`));
      const line = stdout.split('\n').find((text) => text.startsWith('{'));
      const parsed = line ? (JSON.parse(line) as Omit<ChildResult, 'exitCode' | 'stderr'>) : { ok: false, message: 'no result' };
      resolve({ ...parsed, exitCode, stderr });
    });
  });
  return { process: child, ready, go: () => child.stdin.write('go\n'), done };
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
