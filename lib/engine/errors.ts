import { DATABASE_GAVE_UP, DATABASE_UNREACHABLE_HINT, INTERNAL_ERROR } from './messages.js';

/**
 * Every error the queue raises has a stable `code` and a message that says what is wrong and
 * what to do about it. Handlers throw `PermanentJobError` or `RetryableJobError` to classify
 * their failures; anything else is "unknown" and gets a small retry budget.
 */
export abstract class PgQueueError extends Error {
  abstract readonly code: string;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A configuration or input value is invalid. Raised before any SQL runs. */
export class InvalidOptionError extends PgQueueError {
  readonly code = 'INVALID_OPTION';

  constructor(
    readonly option: string,
    problem: string,
    fix: string,
  ) {
    super(`Invalid option "${option}": ${problem}. ${fix}`);
  }
}

/** A job passed to enqueue cannot be stored as it is. Nothing was written. */
export class InvalidJobError extends PgQueueError {
  constructor(
    readonly code: 'INVALID_QUEUE_NAME' | 'UNKNOWN_QUEUE' | 'INVALID_PAYLOAD' | 'PAYLOAD_TOO_LARGE' | 'INVALID_JOB_OPTION',
    message: string,
  ) {
    super(message);
  }
}

/**
 * A payload (or an effect's result) is not plain JSON: a Date, a Map, a class instance, a BigInt,
 * NaN, a string PostgreSQL cannot store (U+0000), a cycle… JSON would change it silently or the
 * database would refuse it. Nothing was written (of an enqueueMany batch: no job).
 */
export class InvalidPayloadError extends InvalidJobError {
  declare readonly code: 'INVALID_PAYLOAD';

  constructor(
    /** Where in the value: `payload.user.createdAt`, `payload.items[2]`. */
    readonly path: string,
    /** What is there, in a few words: "a Date", "a BigInt". */
    readonly problem: string,
    message: string,
  ) {
    super('INVALID_PAYLOAD', message);
  }
}

/** The migrator refused to run or to accept the database's schema. */
export class MigrationError extends PgQueueError {
  constructor(
    readonly code: 'MIGRATION_EDITED' | 'MIGRATION_INCOMPATIBLE' | 'MIGRATION_PENDING' | 'MIGRATION_FAILED',
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Why a fenced write was refused: the worker no longer owns the job. */
export const FENCE_LOSS_REASONS = ['lease_lost', 'cancelled', 'finished'] as const;
export type FenceLossReason = (typeof FENCE_LOSS_REASONS)[number];

/**
 * The job's fence was refused: its lease expired or was reclaimed, it was cancelled, or it
 * already finished. The worker's write changed nothing.
 */
export class LeaseLostError extends PgQueueError {
  readonly code = 'LEASE_LOST';

  constructor(
    readonly jobId: string,
    readonly leaseToken: string,
    readonly reason: FenceLossReason,
  ) {
    super(
      `Job ${jobId} (lease token ${leaseToken}) is no longer owned by this worker: ${describeFenceLoss(reason)}. ` +
        'Its state was not changed; stop work on it and do not report its outcome.',
    );
  }
}

function describeFenceLoss(reason: FenceLossReason): string {
  switch (reason) {
    case 'cancelled':
      return 'it was cancelled';
    case 'finished':
      return 'it already finished';
    case 'lease_lost':
      return 'its lease expired or another worker claimed it';
  }
}

const ERROR_CODE = /^[A-Z][A-Z0-9_]{0,63}$/;

export interface JobErrorOptions extends ErrorOptions {
  /** Stored as the job's `last_error_code`; UPPER_SNAKE_CASE, at most 64 characters. */
  code?: string;
}

/** The job can never succeed as it is (a bad payload, an unsupported version): dead at once. */
export class PermanentJobError extends PgQueueError {
  readonly code: string;

  constructor(message: string, options: JobErrorOptions = {}) {
    super(message, options);
    this.code = checkedErrorCode(options.code, 'PERMANENT');
  }
}

/** The longest retry-after a RetryableJobError may ask for: a year. */
export const RETRY_AFTER_MAX_MS = 365 * 24 * 3_600_000;

export interface RetryableJobErrorOptions extends JobErrorOptions {
  /** Retry no sooner than this; replaces the computed backoff for this retry. */
  retryAfterMs?: number;
}

/** A transient failure (a timeout, a dependency outage): retried with backoff up to max attempts. */
export class RetryableJobError extends PgQueueError {
  readonly code: string;
  readonly retryAfterMs: number | undefined;

  constructor(message: string, options: RetryableJobErrorOptions = {}) {
    super(message, options);
    this.code = checkedErrorCode(options.code, 'RETRYABLE');
    const { retryAfterMs } = options;
    if (retryAfterMs !== undefined && !(Number.isFinite(retryAfterMs) && retryAfterMs >= 0 && retryAfterMs <= RETRY_AFTER_MAX_MS)) {
      throw new InvalidOptionError(
        'retryAfterMs',
        `${String(retryAfterMs)} is not a number of milliseconds from 0 to ${RETRY_AFTER_MAX_MS} (a year)`,
        'Pass a delay in milliseconds.',
      );
    }
    // Whole milliseconds, rounded up ("no sooner than"): the delay is stored as a bigint, and a
    // fraction there made the failure's write itself fail (the outcome was lost).
    this.retryAfterMs = retryAfterMs === undefined ? undefined : Math.ceil(retryAfterMs);
  }
}

export interface RateLimitedErrorOptions {
  /** When the limit lets calls through again, in milliseconds from now (0 to a year). */
  retryAfterMs: number;
  /**
   * What the limit applies to: the job's group (the default, when the job has one) or its whole
   * queue. A job without a group throttles its queue.
   */
  scope?: 'group' | 'queue';
  cause?: unknown;
}

/**
 * The handler hit a rate limit of something it calls (an API answering 429): its group (or its
 * queue) claims nothing more until `retryAfterMs` has passed, and the job is retried then without
 * charging an attempt, up to the handler's `maxRateLimitedRetries` times; after that the attempts
 * count again (code RATE_LIMITED), as shutdown releases do, so a limit that never lifts cannot
 * keep a job forever.
 */
export class RateLimitedError extends PgQueueError {
  readonly code = 'RATE_LIMITED';
  readonly retryAfterMs: number;
  readonly scope: 'group' | 'queue';

  constructor(message: string, options: RateLimitedErrorOptions) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    const retryAfterMs = (options as Partial<RateLimitedErrorOptions> | undefined)?.retryAfterMs;
    if (!(typeof retryAfterMs === 'number' && Number.isFinite(retryAfterMs) && retryAfterMs >= 0 && retryAfterMs <= RETRY_AFTER_MAX_MS)) {
      throw new InvalidOptionError(
        'retryAfterMs',
        `${String(retryAfterMs)} is not a number of milliseconds from 0 to ${RETRY_AFTER_MAX_MS} (a year)`,
        'Pass the delay the limited service asked for (a Retry-After header), in milliseconds.',
      );
    }
    const scope = options.scope ?? 'group';
    if (scope !== 'group' && scope !== 'queue') throw new InvalidOptionError('scope', `${String(scope)} is not a scope`, "Use 'group' or 'queue'.");
    this.retryAfterMs = Math.ceil(retryAfterMs);
    this.scope = scope;
  }
}

function checkedErrorCode(code: string | undefined, fallback: string): string {
  if (code === undefined) return fallback;
  if (!ERROR_CODE.test(code)) {
    throw new InvalidOptionError('code', `"${code.slice(0, 80)}" is not an error code`, 'Use UPPER_SNAKE_CASE, at most 64 characters.');
  }
  return code;
}

export function isErrorCode(value: unknown): value is string {
  return typeof value === 'string' && ERROR_CODE.test(value);
}

/**
 * The reason a handler's `signal` was aborted. A handler that sees it should stop and throw
 * (throwing the signal's reason is fine): the worker then records the failure, or releases the
 * job at shutdown.
 */
export class JobAbortedError extends PgQueueError {
  constructor(
    readonly code: 'LEASE_EXPIRED' | 'MAX_RUNTIME' | 'SHUTDOWN' | 'LEASE_LOST' | 'CANCELLED',
    message: string,
  ) {
    super(message);
  }
}

/**
 * A handler used the job's context in a way that cannot keep the queue's promises (a client
 * outside a transaction for ctx.complete, an effect inside ctx.complete's transaction, a second
 * ctx.complete). Raised before anything is written; fix the handler.
 */
export class HandlerUsageError extends PgQueueError {
  constructor(
    readonly code: 'CLIENT_NOT_IN_TRANSACTION' | 'EFFECT_INSIDE_COMPLETE',
    message: string,
  ) {
    super(message);
  }
}

/**
 * An operator's request does not fit the job's state (replay of a job that is not dead, …), or the
 * schedule's: none of that name (`SCHEDULE_NOT_FOUND`), or one the code declares, which only a deploy
 * changes (`SCHEDULE_OWNED_BY_CODE`).
 */
export class JobStateError extends PgQueueError {
  constructor(
    readonly code: 'JOB_NOT_FOUND' | 'JOB_NOT_DEAD' | 'JOB_NOT_CANCELLABLE' | 'JOB_NOT_FINISHED' | 'QUEUE_NOT_FOUND' | 'SCHEDULE_NOT_FOUND' | 'SCHEDULE_OWNED_BY_CODE',
    message: string,
  ) {
    super(message);
  }
}

/**
 * nestjs-pg-queue broke one of its own rules (a statement defined under too long a name, …): a bug
 * of this library, never of its caller's code or data. The message says what, and asks for a report.
 */
export class InternalError extends PgQueueError {
  readonly code = 'INTERNAL_ERROR';

  constructor(problem: string) {
    super(INTERNAL_ERROR(problem));
  }
}

/**
 * A call reached an engine that has stopped (stop() was called, or start() failed): its pool is
 * closed. A timer or a request handler outlived the engine; stop it, or create a new PgQueue.
 */
export class EngineStoppedError extends PgQueueError {
  readonly code = 'ENGINE_STOPPED';
}

/** Where a connection failure is reported against (see toCallError in pg-errors.ts). */
export interface ConnectionFailureContext {
  /** The option the connection settings came from: "connectionString", or "pool" for a pool passed in. */
  readonly option?: string;
  /** At start, after start-up retries: how many attempts, over how long (see startupRetryMs). */
  readonly startup?: { readonly attempts: number; readonly forMs: number };
}

/**
 * The database cannot be reached: no connection could be opened, or the one in use broke during
 * the call (the server is down or restarting, the network is cut, the host name does not resolve,
 * `max_connections` is reached). Nothing is wrong with the call itself: try it again once the
 * database is back. `cause` is the driver's error. The message names the target
 * (`host:port/database`) and the option it came from, never credentials, and what to check.
 */
export class DatabaseUnavailableError extends PgQueueError {
  readonly code = 'DATABASE_UNAVAILABLE';
  /** The driver's error in a few words ("connect ECONNREFUSED 10.0.0.5:5432"). */
  readonly reason: string;
  /** The option the settings came from ("connectionString", "pool"), when known. */
  readonly option: string | undefined;

  constructor(
    /** `host:port/database`, as the connection settings resolve it. */
    readonly target: string,
    cause: unknown,
    context: ConnectionFailureContext = {},
  ) {
    const reason = reasonOf(cause);
    const { code } = (cause ?? {}) as { code?: unknown };
    super(
      `The database at ${target} cannot be reached (${reason})${context.startup ? ` ${DATABASE_GAVE_UP(context.startup.attempts, context.startup.forMs)}` : ''}. ` +
        `${DATABASE_UNREACHABLE_HINT(typeof code === 'string' ? code : undefined, reason, context.option)} ` +
        (context.startup ? '' : 'A write whose connection broke during the call may have been applied: read it back before repeating it.'),
      { cause },
    );
    this.reason = reason;
    this.option = context.option;
  }
}

/**
 * The database answered, and refused the connection: the password or user is wrong or missing,
 * the database does not exist, or TLS is required by one side and refused by the other (or the
 * server's certificate is not trusted). Trying again changes nothing (start-up does not retry it):
 * fix the setting the message names. `cause` is the driver's error; the message never holds the
 * password.
 */
export class DatabaseConnectionError extends PgQueueError {
  constructor(
    readonly code: 'DATABASE_AUTH_FAILED' | 'DATABASE_NOT_FOUND' | 'DATABASE_TLS_FAILED',
    /** `host:port/database`, as the connection settings resolve it. */
    readonly target: string,
    /** The option the settings came from ("connectionString", "pool"), when known. */
    readonly option: string | undefined,
    problem: string,
    fix: string,
    cause: unknown,
  ) {
    super(`The database at ${target} refused the connection: ${problem}. ${fix}`, { cause });
  }
}

/**
 * A statement did not finish within `statementTimeoutMs`. Usually a transaction holds the row the
 * call needs (a producer's or an operator's open transaction, a handler's `ctx.complete`), or the
 * database is overloaded. `cancelled`: the database cancelled the statement (SQLSTATE 57014), so
 * nothing was changed; otherwise the client stopped waiting and the statement may still be applied
 * once the row is free.
 */
export class DatabaseTimeoutError extends PgQueueError {
  readonly code = 'DATABASE_TIMEOUT';

  constructor(
    readonly timeoutMs: number,
    readonly cancelled: boolean,
    cause: unknown,
  ) {
    super(
      cancelled
        ? `The statement did not finish within statementTimeoutMs (${formatMs(timeoutMs)}) and the database cancelled it, so nothing was changed: ` +
            "a transaction may hold the job's row (an open transaction of a producer or an operator, a handler's ctx.complete), or the database is overloaded. " +
            'pg_locks and pg_stat_activity show who holds it; try again once it is released.'
        : `The database did not answer within statementTimeoutMs (${formatMs(timeoutMs)}) and a second of slack, so the call stopped waiting: ` +
            "a transaction may hold the job's row (an open transaction of a producer or an operator, a handler's ctx.complete), the database is overloaded, or the connection went silent. " +
            'The statement may still be applied once the row is free: read the job back before trying again.',
      { cause },
    );
  }
}

/** A driver error in a few words (a Node connect error to several addresses has an empty message, only a code). */
function reasonOf(cause: unknown): string {
  const { message, code } = (cause ?? {}) as { message?: unknown; code?: unknown };
  const text = typeof message === 'string' && message !== '' ? message : typeof code === 'string' ? code : String(cause);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

export function formatMs(ms: number): string {
  return ms >= 1_000 ? `${Number((ms / 1_000).toFixed(1))} s` : `${Math.round(ms)} ms`;
}
