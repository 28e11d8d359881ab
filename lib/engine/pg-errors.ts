/**
 * What PostgreSQL (and the connection to it) tells us about a failure, decoded in one place.
 *
 * A *transient* database error says nothing about the job or the statement: the same work is
 * expected to succeed when tried again (the connection dropped, the server is restarting, a
 * serialization failure or deadlock chose us as the victim, a lock or statement timed out). Every
 * layer that classifies or retries a failure asks `isTransientDatabaseError`, so a handler's own
 * query that hits a restart is retried like the engine's own statements are.
 */

import { DatabaseConnectionError, DatabaseTimeoutError, DatabaseUnavailableError, PgQueueError } from './errors.js';
import {
  AUTH_FAILED,
  AUTH_PASSWORD_MISSING,
  AUTH_REJECTED,
  DATABASE_MISSING,
  TLS_CERTIFICATE_REFUSED,
  TLS_NOT_SUPPORTED,
  TLS_REQUIRED,
} from './messages.js';

/**
 * SQLSTATEs that are transient wherever they are raised, besides classes 08 (connection exception)
 * and 40 (transaction rollback: serialization failure, deadlock). Anything else the server raises
 * is about the statement or the data, and keeps the caller's normal classification.
 */
const TRANSIENT_STATES = new Set([
  '57P01', // admin_shutdown: the server is shutting down (a restart, a failover)
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now: the server is starting up
  '55P03', // lock_not_available: lock_timeout, NOWAIT
]);

/**
 * Node and pg errors of a connection that is gone or never came: no SQLSTATE, since the server
 * never answered. Matched by their codes first, by pg's own messages second.
 */
const CONNECTION_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTCONN', 'EAI_AGAIN']);
const CONNECTION_MESSAGES = [
  /Connection terminated/i,
  /Client has encountered a connection error/i,
  /Client was closed and is not queryable/i,
  /timeout exceeded when trying to connect/i,
  /Query read timeout/i,
  /connection timeout/i,
  /the database system is (starting up|shutting down|in recovery mode)/i,
];

/** The SQLSTATE of an error the server raised, if it is one. */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && /\d/.test(code) ? code : undefined;
}

/** The connection to the database failed (as opposed to a statement the database refused). */
export function isConnectionError(error: unknown): boolean {
  if (error === null || typeof error !== 'object') return false;
  const state = sqlState(error);
  // 53300 too_many_connections: no connection could be had, which is the same as none.
  if (state !== undefined) return state.startsWith('08') || state === '57P01' || state === '57P02' || state === '57P03' || state === '53300';
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && CONNECTION_CODES.has(code)) return true;
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' && CONNECTION_MESSAGES.some((pattern) => pattern.test(message));
}

/** Trying the same work again is expected to succeed (see the file's comment). */
export function isTransientDatabaseError(error: unknown): boolean {
  const state = sqlState(error);
  if (state !== undefined && (state.startsWith('08') || state.startsWith('40') || TRANSIENT_STATES.has(state))) return true;
  return isConnectionError(error);
}

/** What a public call's failure is reported against. */
export interface CallContext {
  /** `host:port/database` of the connection the call used (see describeTarget in db.ts). */
  readonly target: string;
  readonly statementTimeoutMs: number;
  /** The option the connection settings came from ("connectionString", "pool"), for messages. */
  readonly option?: string;
  /** At start, after start-up retries: how many attempts, over how long. */
  readonly startup?: { readonly attempts: number; readonly forMs: number };
}

/** Node's codes of a TLS certificate it did not accept (a self-signed one, an unknown CA, another host's). */
const CERTIFICATE_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** A host name that does not resolve: as good as unreachable (at start a service's DNS name may come late). */
const RESOLVE_CODES = new Set(['ENOTFOUND', 'EAI_AGAIN']);

/**
 * A connection the database (or its TLS layer) refused for a reason that trying again does not
 * change: a wrong or missing password, an unknown user or database, TLS refused or required, an
 * untrusted certificate. Undefined for anything else.
 */
export function connectionRefusal(error: unknown, context: Pick<CallContext, 'target' | 'option'>): DatabaseConnectionError | undefined {
  if (error === null || typeof error !== 'object') return undefined;
  const { message: raw, code } = error as { message?: unknown; code?: unknown };
  const message = typeof raw === 'string' ? raw : '';
  const make = (kind: DatabaseConnectionError['code'], [problem, fix]: readonly [string, string]) =>
    new DatabaseConnectionError(kind, context.target, context.option, problem, fix, error);
  const state = sqlState(error);
  if (state === '28P01') return make('DATABASE_AUTH_FAILED', AUTH_FAILED(message, context.option));
  if (state === '3D000') return make('DATABASE_NOT_FOUND', DATABASE_MISSING(message, context.option));
  if (state === '28000') {
    return /no encryption/.test(message) ? make('DATABASE_TLS_FAILED', TLS_REQUIRED(message, context.option)) : make('DATABASE_AUTH_FAILED', AUTH_REJECTED(message, context.option));
  }
  if (state !== undefined) return undefined;
  // pg's own, before anything is sent: SASL (scram) and md5 both need a string.
  if (/client password must be a string/.test(message)) return make('DATABASE_AUTH_FAILED', AUTH_PASSWORD_MISSING(context.option));
  if (/The server does not support SSL connections/.test(message)) return make('DATABASE_TLS_FAILED', TLS_NOT_SUPPORTED(context.option));
  if (typeof code === 'string' && CERTIFICATE_CODES.has(code)) return make('DATABASE_TLS_FAILED', TLS_CERTIFICATE_REFUSED(message || code, context.option));
  return undefined;
}

/**
 * A public call's failure as its caller should see it: a statement that ran out of time becomes
 * DatabaseTimeoutError, a database that cannot be reached DatabaseUnavailableError (each with the
 * driver's error as `cause`); the library's own errors, and anything else the server said about
 * the statement or the data, stay as they are. A connection the database refused for good (a
 * wrong password, no such database, TLS) becomes DatabaseConnectionError (connectionRefusal), and
 * a host name that does not resolve counts as unreachable. Every SQLSTATE 57014 counts as a
 * timeout: the engine sets statement_timeout and never cancels its own statements, and the
 * server's message that would tell a timeout from pg_cancel_backend() is localised.
 */
export function toCallError(error: unknown, context: CallContext): unknown {
  if (error instanceof PgQueueError || error === null || typeof error !== 'object') return error;
  if (sqlState(error) === '57014') return new DatabaseTimeoutError(context.statementTimeoutMs, true, error);
  // pg's own query_timeout (statementTimeoutMs + slack): a connection error to the engine's loops,
  // which retry it, but to a caller it is a statement that did not finish.
  if ((error as { message?: unknown }).message === 'Query read timeout') return new DatabaseTimeoutError(context.statementTimeoutMs, false, error);
  const refusal = connectionRefusal(error, context);
  if (refusal) return refusal;
  if (isConnectionError(error) || RESOLVE_CODES.has((error as { code?: unknown }).code as string)) {
    return new DatabaseUnavailableError(context.target, error, { option: context.option, startup: context.startup });
  }
  return error;
}

/**
 * The server refused a prepared statement's name: 26000 (invalid_sql_statement_name: no statement
 * of that name on this connection) or 42P05 (duplicate_prepared_statement: one exists already).
 * Raised at Bind or Parse, so the statement did not run.
 */
export function isPreparedStatementNameRefused(error: unknown): boolean {
  const state = sqlState(error);
  return state === '26000' || state === '42P05';
}
