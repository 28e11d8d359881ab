import { createHash } from 'node:crypto';
import pg from 'pg';
import { InternalError } from '../errors.js';
import { quoteIdentifier, validateSchemaName } from '../identifiers.js';
import { STATEMENT_NAME_TOO_LONG } from '../messages.js';
import { isConnectionError, isPreparedStatementNameRefused } from '../pg-errors.js';

/**
 * The store's door to the database: a statement is a name, its text, how its named parameters
 * become the positional `$n` values, and how its rows become records. Only lib/engine/store/
 * holds SQL text, `$n` or raw rows; the rest of the engine calls typed functions.
 *
 * Statements are prepared by name per connection (the name includes the schema, so two engines
 * with different schemas on one pool never share a plan), unless `preparedStatements` is false:
 * through a transaction pooler consecutive statements of one client run on different server
 * connections, so a name prepared on one is unknown on the next (and already taken on another).
 */

// Anything that runs a query (the pool, a caller's client): a job and handler type (ctx.complete's `tx`).
import type { Queryable } from '../types.js';
export type { Queryable };

/** What is sent: the statement's name and text, and how it is sent. */
export interface StatementText {
  readonly name: string;
  readonly text: string;
  /** Client-side bound of the statement (pg's per-query `query_timeout`), in ms. */
  readonly query_timeout: number;
  /**
   * Sent unnamed, so planned for its values on every call, instead of prepared once per
   * connection: for the few statements whose right index depends on the values, which the
   * generic plan a prepared statement may switch to after five calls does not know. Only rare
   * (operator) statements, where a planning per call costs nothing that matters. With
   * `preparedStatements: false`, every statement.
   */
  readonly planPerCall?: boolean;
  /**
   * A named statement's name was refused by the server (unknown on the connection, or already
   * taken there): told to the engine, which explains it once (see execute()).
   */
  readonly nameRefused?: (error: Error) => void;
}

/** A statement with named parameters `P` and a mapped result `R`. */
export interface Statement<P, R> extends StatementText {
  /** The positional values (`$1`, `$2`, …) of named parameters. */
  values(params: P): unknown[];
  /** The statement's rows as records (the one place raw rows are read). */
  map(rows: pg.QueryResultRow[]): R;
}

export interface StoreOptions {
  /** Bound of every statement (see PgQueueOptions.statementTimeoutMs). */
  readonly statementTimeoutMs: number;
  /** false: every statement is sent unnamed (see PgQueueOptions.preparedStatements). Default true. */
  readonly preparedStatements?: boolean;
  /** Told when the server refuses a named statement's name (see StatementText.nameRefused). */
  readonly nameRefused?: (error: Error) => void;
}

export const STATEMENT_TIMEOUT_DEFAULT_MS = 10_000;

/**
 * The client-side timeout waits this much longer than the server's statement_timeout, so that
 * on a live connection the server's own error (57014, with its SQLSTATE) arrives first.
 */
export const CLIENT_TIMEOUT_SLACK_MS = 1_000;

/** PostgreSQL cuts names (prepared statements' too) to this many bytes. */
const NAME_MAX_BYTES = 63;
/** The longest statement name (`end-cancelled-attempt`), with room to spare. */
const STATEMENT_NAME_MAX = 30;

/**
 * `pgq:<schema>:`, or `pgq:<hash of the schema>:` when a long schema name would push a statement's
 * name past NAME_MAX_BYTES: the server would cut it short, and statements whose names then agree
 * would take each other's name ("already exists"). Schema names are ASCII (validateSchemaName).
 */
function statementPrefix(schema: string): string {
  const plain = `pgq:${schema}:`;
  if (plain.length + STATEMENT_NAME_MAX <= NAME_MAX_BYTES) return plain;
  return `pgq:${createHash('sha256').update(schema).digest('hex').slice(0, 16)}:`;
}

/** What every domain module of the store builds its statements from. */
export interface StatementContext {
  /** The validated schema name. */
  readonly schema: string;
  /** The schema, quoted: the only text interpolated into SQL. Everything else is a bound parameter. */
  readonly s: string;
  readonly jobs: string;
  /** Succeeded jobs that left jobs at completion (migration 0014). */
  readonly jobsSucceeded: string;
  /**
   * Every job, in jobs or in jobs_succeeded (the view of 0014): what a read that must see
   * finished jobs names. Never written.
   */
  readonly jobRows: string;
  readonly events: string;
  readonly status: string;
  readonly statementTimeoutMs: number;
  define<P, Row extends pg.QueryResultRow, R>(
    name: string,
    text: string,
    values: (params: P) => unknown[],
    map: (rows: Row[]) => R,
    extra?: { planPerCall?: boolean },
  ): Statement<P, R>;
}

export function statementContext(schemaName: string, options: StoreOptions): StatementContext {
  const schema = validateSchemaName(schemaName);
  const s = quoteIdentifier(schema);
  const query_timeout = options.statementTimeoutMs + CLIENT_TIMEOUT_SLACK_MS;
  const named = options.preparedStatements ?? true;
  const prefix = statementPrefix(schema);
  return {
    schema,
    s,
    jobs: `${s}.jobs`,
    jobsSucceeded: `${s}.jobs_succeeded`,
    jobRows: `${s}.job_rows`,
    events: `${s}.job_events`,
    status: `${s}.job_status`,
    statementTimeoutMs: options.statementTimeoutMs,
    define(name, text, values, map, extra = {}) {
      // A programmer's error, caught by any test that creates the store.
      if (name.length > STATEMENT_NAME_MAX) throw new InternalError(STATEMENT_NAME_TOO_LONG(name, STATEMENT_NAME_MAX));
      const planPerCall = extra.planPerCall === true || !named;
      return {
        name: `${prefix}${name}`,
        text,
        query_timeout,
        ...(planPerCall ? { planPerCall } : { nameRefused: options.nameRefused }),
        values,
        map: map as (rows: pg.QueryResultRow[]) => ReturnType<typeof map>,
      };
    },
  };
}

/** `ms` (a bound parameter or column) as an interval. */
export function ms(value: string): string {
  return `(${value} * interval '1 millisecond')`;
}

/** No parameters. */
export const none = (_params: void): unknown[] => [];

/**
 * Runs a statement: prepared once per connection by its name, or planned per call
 * (StatementText.planPerCall). The statement carries its client-side timeout (`query_timeout`): a
 * statement on a connection that died silently fails after it instead of waiting for the kernel
 * to give up (~15 minutes).
 *
 * pg remembers which names it prepared on each connection. A server that does not know one of
 * them, or knows one already, is not the connection pg prepared it on: what a transaction pooler
 * does (or a DEALLOCATE behind pg's back). The statement fails as the server said (nothing ran),
 * and StatementText.nameRefused hears of it.
 */
export async function execute<P, R>(db: Queryable, statement: Statement<P, R>, params: P): Promise<R> {
  return statement.map(await send(db, statement, statement.values(params)));
}

async function send(db: Queryable, statement: StatementText, values: unknown[]): Promise<pg.QueryResultRow[]> {
  const { name, text, query_timeout } = statement;
  // pg reads query_timeout from the config; its types do not declare it.
  const config: pg.QueryConfig & { query_timeout: number } = statement.planPerCall ? { text, values, query_timeout } : { name, text, values, query_timeout };
  try {
    const result = await db.query(config);
    return result.rows;
  } catch (error) {
    if (statement.nameRefused && isPreparedStatementNameRefused(error)) statement.nameRefused(error as Error);
    throw error;
  }
}

export interface TransactionOptions {
  /**
   * Bounds each statement of the transaction on the server (`SET LOCAL statement_timeout`, so it
   * also holds through transaction pooling) and on the client (`query_timeout`).
   */
  readonly statementTimeoutMs: number;
  /**
   * Plan the transaction's prepared statements once per connection (`plan_cache_mode =
   * force_generic_plan`): for a large statement whose custom plans cost more to make than to run
   * (the flow claim: planning took longer than executing), and whose right plan does not depend
   * on its values.
   */
  readonly genericPlans?: boolean;
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
    const generic = options.genericPlans ? '; SET LOCAL plan_cache_mode = force_generic_plan' : '';
    await client.query(bounded(`BEGIN; SET LOCAL statement_timeout = ${Math.trunc(options.statementTimeoutMs)}${generic}`));
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

/** Sends a statement by its text alone, unnamed and without values (e.g. two statements in one: simple protocol). */
export async function sendText(db: Queryable, statement: StatementText): Promise<void> {
  const { text, query_timeout } = statement;
  await db.query({ text, query_timeout } as pg.QueryConfig);
}
