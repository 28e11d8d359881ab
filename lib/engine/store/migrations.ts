import type pg from 'pg';
import { quoteIdentifier } from '../identifiers.js';

/**
 * The migrator's statements (the migration files themselves live in migrations/). Sent on the
 * migrator's own client, unnamed: each runs once per process.
 */

export interface AppliedMigration {
  name: string;
  checksum: string;
  compatible: boolean;
}

export function migrationsTable(schema: string): string {
  return `${quoteIdentifier(schema)}.schema_migrations`;
}

/** What the schema has applied. `known`: the table is known to exist (under the lock, after ensureMigrationsTable). */
export async function readApplied(client: pg.ClientBase, schema: string, known: boolean): Promise<Map<string, AppliedMigration>> {
  const table = migrationsTable(schema);
  if (!known) {
    const { rows } = await client.query<{ present: boolean }>('SELECT to_regclass($1) IS NOT NULL AS present', [table]);
    if (!rows[0]?.present) return new Map();
  }
  const { rows } = await client.query<AppliedMigration>(`SELECT name, checksum, compatible FROM ${table} ORDER BY name`);
  return new Map(rows.map((row) => [row.name, row]));
}

export async function begin(client: pg.ClientBase): Promise<void> {
  await client.query('BEGIN');
}

export async function commit(client: pg.ClientBase): Promise<void> {
  await client.query('COMMIT');
}

export async function rollback(client: pg.ClientBase): Promise<void> {
  await client.query('ROLLBACK');
}

/** The schema's migration lock, held until the transaction ends. */
export async function lockMigrations(client: pg.ClientBase, key: string): Promise<void> {
  await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [key]);
}

/** Creates the schema and its bookkeeping table when they are missing. */
export async function ensureMigrationsTable(client: pg.ClientBase, schema: string): Promise<void> {
  // Only when missing: CREATE SCHEMA checks the database-level CREATE privilege even with IF NOT
  // EXISTS, and a schema created beforehand by an administrator must not need it.
  const { rows } = await client.query<{ present: boolean }>('SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS present', [schema]);
  if (!rows[0]?.present) await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(schema)}`);
  await client.query(
    `CREATE TABLE IF NOT EXISTS ${migrationsTable(schema)} (
       name       text        PRIMARY KEY,
       checksum   text        NOT NULL,
       compatible boolean     NOT NULL,
       applied_at timestamptz NOT NULL DEFAULT now()
     )`,
  );
}

/** Files are written without a schema prefix: they run with the schema as the search path. */
export async function useSchema(client: pg.ClientBase, schema: string): Promise<void> {
  await client.query(`SET LOCAL search_path TO ${quoteIdentifier(schema)}`);
}

/** A migration file's SQL, as it is. */
export async function runFile(client: pg.ClientBase, sql: string): Promise<void> {
  await client.query(sql);
}

export async function recordApplied(client: pg.ClientBase, schema: string, file: AppliedMigration): Promise<void> {
  await client.query(`INSERT INTO ${migrationsTable(schema)} (name, checksum, compatible) VALUES ($1, $2, $3)`, [file.name, file.checksum, file.compatible]);
}
