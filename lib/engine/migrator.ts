/**
 * The runtime migrator: applies the plain SQL files in `migrations/` to the configured schema.
 *
 * Files
 *   - Named `NNNN_name.sql` (four digits, lower-case name) and applied in name order. Two files
 *     with the same number are refused: renumber one of them.
 *   - Written without a schema prefix: each runs with `SET LOCAL search_path TO <schema>`.
 *   - Each file runs in one transaction, so it must not contain BEGIN/COMMIT, statements that
 *     cannot run in a transaction (CREATE INDEX CONCURRENTLY), or a session-level `SET` (use
 *     `SET LOCAL`): the connection goes back to the caller's pool afterwards.
 *   - Applied files are recorded in `<schema>.schema_migrations` with a sha256 checksum of their
 *     text (CRLF normalised to LF, a leading BOM removed). An applied file must never be edited:
 *     the migrator refuses to run when one differs from what was applied. Add a new file instead.
 *
 * Rolling deploys: the directive
 *
 *     -- pg-queue: incompatible-with-older-versions
 *
 * on a line of a file's header (the comment lines and blank lines before its first statement)
 * marks the migration as one that code which does not know it cannot run against (for example it
 * drops or renames something older versions use). Files without it are compatible. A process
 * whose files are a prefix of what the database has applied starts normally when every unknown
 * applied migration is compatible (the report lists them, and the logger warns), and refuses to
 * start with MIGRATION_INCOMPATIBLE when any is not. Any other `-- pg-queue:` header directive is
 * an error, so that a misspelt directive cannot silently mean "compatible".
 *
 * Concurrency: every file's transaction first takes `pg_advisory_xact_lock` on a key derived from
 * the schema name and then re-reads `schema_migrations`, so any number of processes can start at
 * once and each file is applied exactly once. A process that finds nothing pending takes no lock
 * and writes nothing.
 *
 * Framework-free: no Nest import here.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { InvalidOptionError, MigrationError } from './errors.js';
import { DEFAULT_SCHEMA, validateSchemaName } from './identifiers.js';
import { isConnectionError } from './pg-errors.js';
import * as store from './store/migrations.js';

/** `auto` applies pending files; `verify` applies nothing and fails when any is pending; `off` does nothing. */
export type MigrationMode = 'auto' | 'verify' | 'off';

export const MIGRATION_MODES: readonly MigrationMode[] = ['auto', 'verify', 'off'];

export const MIGRATION_MODE_DEFAULT: MigrationMode = 'auto';

/** The package's own migrations: `../../migrations` from both lib/engine/*.ts and dist/engine/*.js. */
export const MIGRATIONS_DIR: string = fileURLToPath(new URL('../../migrations/', import.meta.url));

/** The header directive that marks a migration as incompatible with code that does not know it. */
export const INCOMPATIBLE_DIRECTIVE = 'incompatible-with-older-versions';

/** Nest's `Logger` and `console` both fit. */
export interface MigrationLogger {
  log(message: string): void;
  warn(message: string): void;
}

export interface MigrateOptions {
  /** Schema the queue's tables live in. Default `pgqueue`. */
  schema?: string;
  /** Default `auto`. */
  mode?: MigrationMode;
  /** Directory of `NNNN_name.sql` files. Default: the package's `migrations/`. */
  migrationsDir?: string;
  logger?: MigrationLogger;
}

/** A pool (the engine passes its own), or what is needed to open one connection for the run. */
export type MigrationTarget = pg.Pool | pg.ClientConfig | string;

export interface MigrationFile {
  /** File name, e.g. `0001_jobs.sql`. */
  readonly name: string;
  /** sha256 (hex) of the normalised text. */
  readonly checksum: string;
  /** False when the header carries the incompatible-with-older-versions directive. */
  readonly compatible: boolean;
  readonly sql: string;
}

export interface MigrationReport {
  readonly schema: string;
  readonly mode: MigrationMode;
  /** Files this call applied, in order. */
  readonly applied: string[];
  /** Files that were already applied (earlier, or concurrently by another process). */
  readonly skipped: string[];
  /** Applied migrations this code does not know; all are marked compatible (else the call throws). */
  readonly newerCompatible: string[];
}

interface AppliedRow {
  readonly name: string;
  readonly checksum: string;
  readonly compatible: boolean;
}

interface Plan {
  readonly pending: MigrationFile[];
  readonly skipped: string[];
  readonly newerCompatible: string[];
}

const FILE_NAME = /^(\d{4})_[a-z0-9_]+\.sql$/;
const DIRECTIVE = /^--\s*pg-queue\s*:\s*(.*?)\s*$/i;

/**
 * Brings `schema` up to date with the migration files (mode `auto`), or checks that it is (mode
 * `verify`). Options are validated before any SQL runs. Throws MigrationError (MIGRATION_EDITED,
 * MIGRATION_INCOMPATIBLE, MIGRATION_PENDING, MIGRATION_FAILED) or InvalidOptionError.
 */
export async function migrate(db: MigrationTarget, options: MigrateOptions = {}): Promise<MigrationReport> {
  const { schema, mode, migrationsDir, logger } = checkOptions(options);
  const report = { schema, mode, applied: [] as string[], skipped: [] as string[], newerCompatible: [] as string[] };
  if (mode === 'off') return report;

  const files = await loadMigrations(migrationsDir);
  return withClient(db, async (client) => {
    const plan = planMigrations(schema, files, await store.readApplied(client, schema, false));
    report.newerCompatible.push(...plan.newerCompatible);
    report.skipped.push(...plan.skipped);
    warnNewer(logger, schema, plan.newerCompatible);

    if (mode === 'verify') {
      if (plan.pending.length > 0) {
        const names = plan.pending.map((file) => file.name);
        throw new MigrationError(
          'MIGRATION_PENDING',
          `Schema ${JSON.stringify(schema)} has ${names.length} pending migration(s): ${names.join(', ')}. ` +
            'Migration mode is "verify", so nothing was applied: apply them (run once with mode "auto", ' +
            'or your deploy step that migrates) before starting this version.',
        );
      }
      return report;
    }

    for (const file of plan.pending) {
      const started = performance.now();
      const outcome = await applyFile(client, schema, files, file);
      for (const name of outcome.newerCompatible) {
        if (!report.newerCompatible.includes(name)) {
          report.newerCompatible.push(name);
          warnNewer(logger, schema, [name]);
        }
      }
      if (outcome.applied) {
        report.applied.push(file.name);
        logger?.log(`Applied migration ${file.name} to schema ${JSON.stringify(schema)} in ${Math.round(performance.now() - started)} ms.`);
      } else {
        report.skipped.push(file.name);
      }
    }
    report.skipped.sort();
    if (report.applied.length === 0) {
      logger?.log(`Schema ${JSON.stringify(schema)} is up to date (${files.length} migration(s)).`);
    }
    return report;
  });
}

/** Reads, names, orders and checksums the migration files of `dir`. No SQL. */
export async function loadMigrations(dir: string = MIGRATIONS_DIR): Promise<MigrationFile[]> {
  let entries: string[];
  try {
    entries = await readdir(dir);
  } catch (error) {
    throw new InvalidOptionError('migrationsDir', `cannot read directory ${JSON.stringify(dir)} (${(error as Error).message})`, 'Pass a directory of NNNN_name.sql files.');
  }
  const names = entries.filter((entry) => entry.endsWith('.sql')).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const byNumber = new Map<string, string>();
  for (const name of names) {
    const match = FILE_NAME.exec(name);
    if (!match) {
      throw new InvalidOptionError(
        'migrationsDir',
        `${JSON.stringify(name)} in ${JSON.stringify(dir)} is not named NNNN_name.sql`,
        'Name migration files with a four-digit number and a lower-case name, for example 0002_add_index.sql.',
      );
    }
    const other = byNumber.get(match[1]!);
    if (other !== undefined) {
      throw new InvalidOptionError(
        'migrationsDir',
        `${JSON.stringify(other)} and ${JSON.stringify(name)} in ${JSON.stringify(dir)} have the same number`,
        'Give the one that has not been released yet the next free number.',
      );
    }
    byNumber.set(match[1]!, name);
  }
  const files: MigrationFile[] = [];
  for (const name of names) {
    const sql = normalise(await readFile(join(dir, name), 'utf8'));
    files.push({ name, sql, checksum: createHash('sha256').update(sql).digest('hex'), compatible: isCompatible(name, sql) });
  }
  return files;
}

function normalise(text: string): string {
  return text.replace(/^\uFEFF/, '').replace(/\r\n/g, '\n');
}

function isCompatible(name: string, sql: string): boolean {
  let compatible = true;
  for (const raw of sql.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    if (!line.startsWith('--')) break; // the header ends at the first statement
    const directive = DIRECTIVE.exec(line);
    if (!directive) continue;
    if (directive[1] !== INCOMPATIBLE_DIRECTIVE) {
      throw new MigrationError(
        'MIGRATION_FAILED',
        `Migration ${name} has an unknown directive ${JSON.stringify(line)}. ` +
          `The only directive is "-- pg-queue: ${INCOMPATIBLE_DIRECTIVE}"; fix or remove the line.`,
      );
    }
    compatible = false;
  }
  return compatible;
}

interface CheckedOptions {
  readonly schema: string;
  readonly mode: MigrationMode;
  readonly migrationsDir: string;
  readonly logger: MigrationLogger | undefined;
}

function checkOptions(options: MigrateOptions): CheckedOptions {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidOptionError('options', `${typeof options} is not an options object`, 'Pass an object such as { schema: "pgqueue", mode: "auto" }.');
  }
  const mode = options.mode ?? MIGRATION_MODE_DEFAULT;
  if (!MIGRATION_MODES.includes(mode)) {
    throw new InvalidOptionError('mode', `${JSON.stringify(String(mode).slice(0, 80))} is not a migration mode`, 'Use "auto", "verify" or "off".');
  }
  const schema = validateSchemaName(options.schema ?? DEFAULT_SCHEMA);
  const migrationsDir = options.migrationsDir ?? MIGRATIONS_DIR;
  if (typeof migrationsDir !== 'string' || migrationsDir === '') {
    throw new InvalidOptionError('migrationsDir', 'it is not a non-empty string', 'Pass the path of a directory of NNNN_name.sql files, or leave it out.');
  }
  const { logger } = options;
  if (logger !== undefined && (typeof logger !== 'object' || logger === null || typeof logger.log !== 'function' || typeof logger.warn !== 'function')) {
    throw new InvalidOptionError('logger', 'it has no log() and warn() methods', 'Pass a Nest Logger, console, or leave it out.');
  }
  return { schema, mode, migrationsDir, logger };
}

function isPool(db: MigrationTarget): db is pg.Pool {
  return typeof db === 'object' && db !== null && typeof (db as pg.Pool).connect === 'function' && typeof (db as pg.Pool).query === 'function';
}

/**
 * A connection that ends while it is ours (a restart, a terminated backend) also emits 'error'
 * (pg does so when it ends outside a query, as it does while a ROLLBACK waits to be sent), and a
 * pool's checked-out client has no listener for it: the process would die of an uncaught 'error'.
 * The statements in flight fail with the same error, and that is what the caller is told.
 */
const ignoreConnectionError = () => {};

async function withClient<T>(db: MigrationTarget, run: (client: pg.ClientBase) => Promise<T>): Promise<T> {
  if (isPool(db)) {
    const client = await db.connect();
    client.on('error', ignoreConnectionError);
    let broken: Error | undefined;
    try {
      return await run(client);
    } catch (error) {
      // A client whose ROLLBACK failed may still be inside a transaction: never hand it back.
      if (error instanceof ConnectionBroken) broken = error;
      throw error instanceof ConnectionBroken ? error.original : error;
    } finally {
      client.off('error', ignoreConnectionError);
      client.release(broken);
    }
  }
  const client = new pg.Client(typeof db === 'string' ? { connectionString: db } : db);
  client.on('error', ignoreConnectionError);
  await client.connect();
  try {
    return await run(client);
  } catch (error) {
    throw error instanceof ConnectionBroken ? error.original : error;
  } finally {
    await client.end().catch(() => undefined);
  }
}

class ConnectionBroken extends Error {
  constructor(readonly original: unknown) {
    super('connection left in an unknown state');
  }
}

/** Compares the files with what the database has applied; throws when this code must not run. */
function planMigrations(schema: string, files: readonly MigrationFile[], applied: ReadonlyMap<string, AppliedRow>): Plan {
  const local = new Set(files.map((file) => file.name));
  const unknown = [...applied.values()].filter((row) => !local.has(row.name));
  const incompatible = unknown.filter((row) => !row.compatible).map((row) => row.name);
  if (incompatible.length > 0) {
    throw new MigrationError(
      'MIGRATION_INCOMPATIBLE',
      `Schema ${JSON.stringify(schema)} was migrated by a newer nestjs-pg-queue: its migration ${incompatible.join(', ')} ` +
        'is marked incompatible with older versions, and this version does not know it. ' +
        'Upgrade nestjs-pg-queue in this application to the version that added it (or later).',
    );
  }
  for (const file of files) {
    const row = applied.get(file.name);
    if (row && row.checksum !== file.checksum) {
      throw new MigrationError(
        'MIGRATION_EDITED',
        `Migration ${file.name} was applied to schema ${JSON.stringify(schema)} with checksum ${row.checksum.slice(0, 12)}…, ` +
          `but the file now has checksum ${file.checksum.slice(0, 12)}…: it was edited after it was applied. ` +
          'Applied migrations must never be edited: restore the file and add a new migration file with the change instead.',
      );
    }
  }
  return {
    pending: files.filter((file) => !applied.has(file.name)),
    skipped: files.filter((file) => applied.has(file.name)).map((file) => file.name),
    newerCompatible: unknown.map((row) => row.name),
  };
}

function warnNewer(logger: MigrationLogger | undefined, schema: string, names: readonly string[]): void {
  if (names.length === 0) return;
  logger?.warn(
    `Schema ${JSON.stringify(schema)} has migration(s) this version of nestjs-pg-queue does not know: ${names.join(', ')}. ` +
      'They are marked compatible with older versions, so this process starts (a rolling deploy); upgrade it when you can.',
  );
}

/** The 64-bit `pg_advisory_xact_lock` key the migrator takes for `schema`: the same in every process. */
export function migrationLockKey(schema: string): string {
  return createHash('sha256').update(`nestjs-pg-queue:migrations:${schema}`).digest().readBigInt64BE(0).toString();
}

/** One file in one transaction, under the schema's advisory lock. */
async function applyFile(
  client: pg.ClientBase,
  schema: string,
  files: readonly MigrationFile[],
  file: MigrationFile,
): Promise<{ applied: boolean; newerCompatible: string[] }> {
  let step: 'bookkeeping' | 'file' = 'bookkeeping';
  await store.begin(client);
  try {
    await store.lockMigrations(client, migrationLockKey(schema));
    await store.ensureMigrationsTable(client, schema);
    // Under the lock: another process may have applied files (or a newer version may have) meanwhile.
    const plan = planMigrations(schema, files, await store.readApplied(client, schema, true));
    if (!plan.pending.some((pending) => pending.name === file.name)) {
      await store.commit(client);
      return { applied: false, newerCompatible: plan.newerCompatible };
    }
    await store.useSchema(client, schema);
    step = 'file';
    await store.runFile(client, file.sql);
    step = 'bookkeeping';
    await store.recordApplied(client, schema, file);
    await store.commit(client);
    return { applied: true, newerCompatible: plan.newerCompatible };
  } catch (error) {
    try {
      await store.rollback(client);
    } catch {
      throw new ConnectionBroken(failure(schema, file, step, error));
    }
    throw failure(schema, file, step, error);
  }
}

function failure(schema: string, file: MigrationFile, step: 'bookkeeping' | 'file', error: unknown): unknown {
  // A lost connection says nothing about the file or the user's rights: it stays what it is (the
  // engine reports it as DatabaseUnavailableError), instead of sending the reader to fix the file.
  if (error instanceof MigrationError || isConnectionError(error)) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (step === 'file') {
    const position = Number((error as { position?: unknown }).position);
    const where = Number.isInteger(position) && position > 0 ? ` at line ${file.sql.slice(0, position - 1).split('\n').length}` : '';
    return new MigrationError(
      'MIGRATION_FAILED',
      `Migration ${file.name} failed in schema ${JSON.stringify(schema)}${where}: ${message}. ` +
        'Its transaction was rolled back, so nothing from this file was applied; fix the file (it was never applied, so editing it is safe) and start again.',
      { cause: error },
    );
  }
  return new MigrationError(
    'MIGRATION_FAILED',
    `Migration ${file.name} could not be applied to schema ${JSON.stringify(schema)}: ${message}. ` +
      'Nothing from this file was applied. Check that the database user may create the schema (or that it exists) and create tables in it.',
    { cause: error },
  );
}
