import pg from 'pg';
import { isConnectionError, isPreparedStatementNameRefused } from './pg-errors.js';
import { CLIENT_TIMEOUT_SLACK_MS, type Queries, type QueryText } from './sql.js';

/**
 * Anything that runs a query: the engine's pool, or a caller's client inside their own
 * transaction (a `pg.PoolClient` or `pg.Client`).
 */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(config: pg.QueryConfig): Promise<pg.QueryResult<R>>;
}

/**
 * Runs a named statement: prepared once per connection by its name, or planned per call
 * (QueryText.planPerCall). The statement carries its client-side timeout (`query_timeout`, see
 * createQueries): a statement on a connection that died silently fails after it instead of
 * waiting for the kernel to give up (~15 minutes).
 *
 * pg remembers which names it prepared on each connection. A server that does not know one of
 * them, or knows one already, is not the connection pg prepared it on: what a transaction pooler
 * does (or a DEALLOCATE behind pg's back). The statement fails as the server said (nothing ran),
 * and QueryText.nameRefused hears of it.
 */
export async function run<R extends pg.QueryResultRow>(db: Queryable, query: QueryText, values: unknown[]): Promise<R[]> {
  const { name, text, query_timeout } = query;
  // pg reads query_timeout from the config; its types do not declare it.
  const config: pg.QueryConfig & { query_timeout: number } = query.planPerCall ? { text, values, query_timeout } : { name, text, values, query_timeout };
  try {
    const result = await db.query<R>(config);
    return result.rows;
  } catch (error) {
    if (query.nameRefused && isPreparedStatementNameRefused(error)) query.nameRefused(error as Error);
    throw error;
  }
}

export interface TransactionOptions {
  /**
   * Bounds each statement of the transaction on the server (`SET LOCAL statement_timeout`, so it
   * also holds through transaction pooling) and on the client (`query_timeout`).
   */
  readonly statementTimeoutMs: number;
}

/**
 * Runs `fn` in a transaction on a client of its own; rolls back when it throws. A client whose
 * connection failed (or whose ROLLBACK failed: it may still be inside the transaction) is
 * destroyed, never handed back to the pool.
 */
export async function transaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>, options: TransactionOptions): Promise<T> {
  const client = await pool.connect();
  const bounded = (text: string) => ({ text, query_timeout: options.statementTimeoutMs + CLIENT_TIMEOUT_SLACK_MS }) as pg.QueryConfig;
  let broken: Error | undefined;
  // A checked-out client has no 'error' listener of the pool's (pool.query adds one, connect()
  // does not), and pg emits 'error' when the socket fails, even while a statement waits: without
  // this, a connection reset inside a transaction ended the process. The statements fail with the
  // same error; the client is destroyed at release.
  const onError = (error: Error) => void (broken ??= error);
  client.on('error', onError);
  try {
    // One round trip; the value is a validated integer (SET cannot take a parameter).
    await client.query(bounded(`BEGIN; SET LOCAL statement_timeout = ${Math.trunc(options.statementTimeoutMs)}`));
    const result = await fn(client);
    await client.query(bounded('COMMIT'));
    return result;
  } catch (error) {
    if (isConnectionError(error)) broken = error as Error;
    else await client.query(bounded('ROLLBACK')).catch((rollbackFailed: Error) => (broken = rollbackFailed));
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}

/** The columns a statement that may finish jobs of ordering keys reports (see releaseKeys in sql.ts). */
export interface ReleasedKeys {
  key_queues: string[] | null;
  key_names: string[] | null;
  /** Keys whose row a producer held: handed off to the KeyHandoffs pass. */
  keys_deferred: number;
}

/**
 * Runs a statement that may finish jobs of ordering keys and, in the same transaction, promotes
 * the next head of each key it released. The second statement's snapshot is taken after the
 * first one held the keys' rows, so it sees every job a producer added to those keys.
 * `onDeferred` is told, once the transaction has committed (so the handoff pass can see them),
 * when some keys were handed off because a producer held their rows.
 */
export async function runReleasingKeys<R extends pg.QueryResultRow & ReleasedKeys>(
  pool: pg.Pool,
  queries: Queries,
  channel: string,
  query: QueryText,
  values: unknown[],
  onDeferred: () => void = () => {},
): Promise<R[]> {
  let deferred = false;
  const rows = await transaction(
    pool,
    async (client) => {
      const result = await run<R>(client, query, values);
      deferred = await promoteReleasedKeys(client, queries, channel, result[0]);
      return result;
    },
    queries,
  );
  if (deferred) onDeferred();
  return rows;
}

/**
 * The second half of runReleasingKeys, for a caller that runs the first statement in a transaction
 * of its own. Returns whether some keys were handed off: tell the handoff pass after the commit.
 */
export async function promoteReleasedKeys(client: Queryable, queries: Queries, channel: string, released: ReleasedKeys | undefined): Promise<boolean> {
  if (released?.key_queues?.length) await run(client, queries.promoteKeyHeads, [released.key_queues, released.key_names, channel]);
  return (released?.keys_deferred ?? 0) > 0;
}

/**
 * `host:port/database` of connection settings, as pg itself resolves them (a connection string,
 * separate fields, PG* environment variables, its defaults), for messages: never the user or the
 * password. A pool's settings and a client's alike.
 */
export function describeTarget(config: pg.ClientConfig): string {
  try {
    // Constructing a client only resolves its settings; it connects nothing.
    return targetOf(new pg.Client(config)) ?? 'the configured database';
  } catch {
    return 'the configured database';
  }
}

/** The target of a connection that says where it goes (a pg.Client or PoolClient does), else undefined. */
export function targetOf(db: Queryable): string | undefined {
  const { host, port, database } = db as { host?: unknown; port?: unknown; database?: unknown };
  if (typeof host !== 'string' || typeof port !== 'number') return undefined;
  return `${host.includes(':') ? `[${host}]` : host}:${port}/${typeof database === 'string' ? database : ''}`;
}
