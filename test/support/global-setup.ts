import pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../scripts/embedded-postgres.mjs';

/**
 * Vitest global setup (runs once, in the main process, before any worker starts).
 *
 * - DATABASE_URL unset (`npx vitest run some.spec.ts` on a laptop): start a throwaway PostgreSQL and
 *   export DATABASE_URL. Vitest builds each worker's environment from process.env after this runs,
 *   so test/support/database.ts sees it. `npm test` goes through scripts/with-postgres.mjs, which
 *   sets DATABASE_URL itself, so nothing is started here then.
 * - Either way, drop per-file test databases (`pgqt_<epochSeconds>_...`, see database.ts) that are
 *   older than STALE_AFTER_SECONDS: what crashed or killed runs left behind on a long-lived server.
 */
const STALE_AFTER_SECONDS = 6 * 60 * 60;

export default async function setup(): Promise<() => Promise<void>> {
  let server: EmbeddedPostgres | undefined;
  if (!process.env.DATABASE_URL) {
    server = await startEmbeddedPostgres();
    process.env.DATABASE_URL = server.url;
  }
  try {
    await dropStaleTestDatabases(process.env.DATABASE_URL as string);
  } catch (error) {
    await server?.stop();
    throw error;
  }
  return async () => {
    if (server) {
      delete process.env.DATABASE_URL;
      await server.stop();
    }
  };
}

async function dropStaleTestDatabases(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
  } catch (error) {
    throw new Error(`cannot connect to DATABASE_URL (${redact(url)}): ${(error as Error).message}`, { cause: error });
  }
  try {
    const { rows } = await client.query<{ datname: string }>(
      String.raw`SELECT datname FROM pg_database WHERE datname ~ '^pgqt_[0-9]+_'`,
    );
    const cutoff = Math.floor(Date.now() / 1000) - STALE_AFTER_SECONDS;
    for (const { datname } of rows) {
      const createdAt = Number(/^pgqt_(\d+)_/.exec(datname)?.[1]);
      if (!(createdAt < cutoff)) continue;
      try {
        await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(datname)} WITH (FORCE)`);
      } catch (error) {
        console.warn(`global-setup: could not drop stale test database ${datname}: ${(error as Error).message}`);
      }
    }
  } finally {
    await client.end();
  }
}

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparseable URL)';
  }
}
