import type pg from 'pg';
import type { QueryText } from './sql.js';

/**
 * Anything that runs a query: the engine's pool, or a caller's client inside their own
 * transaction (a `pg.PoolClient` or `pg.Client`).
 */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(config: pg.QueryConfig): Promise<pg.QueryResult<R>>;
}

/** Runs a named statement; prepared once per connection by its name. */
export async function run<R extends pg.QueryResultRow>(db: Queryable, query: QueryText, values: unknown[]): Promise<R[]> {
  const result = await db.query<R>({ name: query.name, text: query.text, values });
  return result.rows;
}
