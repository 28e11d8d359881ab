import { randomBytes } from 'node:crypto';
import pg from 'pg';

/**
 * Each test file gets a database of its own on the server named by DATABASE_URL (CI's server, or
 * the throwaway one the global setup started), so files can run in parallel and a failed run leaves
 * nothing that the next one trips over.
 */
export interface TestDatabase {
  /** Connection string of the new database. */
  readonly url: string;
  readonly name: string;
  drop(): Promise<void>;
}

export function adminUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) {
    throw new Error('DATABASE_URL is not set: run the tests with `npm test` (it starts a throwaway PostgreSQL) or set it.');
  }
  return url;
}

export function urlForDatabase(base: string, database: string): string {
  const url = new URL(base);
  url.pathname = `/${database}`;
  return url.toString();
}

export async function createTestDatabase(label = 'test'): Promise<TestDatabase> {
  const safeLabel = label.toLowerCase().replace(/[^a-z0-9]/g, '').slice(0, 20) || 'test';
  const name = `pgqt_${Math.floor(Date.now() / 1000)}_${safeLabel}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  return {
    name,
    url: urlForDatabase(adminUrl(), name),
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl() });
      await client.connect();
      try {
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await client.end();
      }
    },
  };
}
