import type pg from 'pg';
import type { Queries, QueryText } from './sql.js';

/**
 * Anything that runs a query: the engine's pool, or a caller's client inside their own
 * transaction (a `pg.PoolClient` or `pg.Client`).
 */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(config: pg.QueryConfig): Promise<pg.QueryResult<R>>;
}

/** Runs a named statement; prepared once per connection by its name, or planned per call (QueryText.planPerCall). */
export async function run<R extends pg.QueryResultRow>(db: Queryable, query: QueryText, values: unknown[]): Promise<R[]> {
  const result = await db.query<R>(query.planPerCall ? { text: query.text, values } : { name: query.name, text: query.text, values });
  return result.rows;
}

/** Runs `fn` in a transaction on a client of its own; rolls back when it throws. */
export async function transaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/** The columns a statement that may finish jobs of ordering keys reports (see releaseKeys in sql.ts). */
export interface ReleasedKeys {
  key_queues: string[] | null;
  key_names: string[] | null;
}

/**
 * Runs a statement that may finish jobs of ordering keys and, in the same transaction, promotes
 * the next head of each key it released. The second statement's snapshot is taken after the
 * first one held the keys' rows, so it sees every job a producer added to those keys.
 */
export function runReleasingKeys<R extends pg.QueryResultRow & ReleasedKeys>(
  pool: pg.Pool,
  queries: Queries,
  channel: string,
  query: QueryText,
  values: unknown[],
): Promise<R[]> {
  return transaction(pool, async (client) => {
    const rows = await run<R>(client, query, values);
    const released = rows[0];
    if (released?.key_queues?.length) {
      await run(client, queries.promoteKeyHeads, [released.key_queues, released.key_names, channel]);
    }
    return rows;
  });
}
