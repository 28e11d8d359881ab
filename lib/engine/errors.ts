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
    readonly code: 'INVALID_QUEUE_NAME' | 'UNKNOWN_QUEUE' | 'PAYLOAD_NOT_JSON' | 'PAYLOAD_TOO_LARGE' | 'INVALID_JOB_OPTION',
    message: string,
  ) {
    super(message);
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

/** An operator's request does not fit the job's state (replay of a job that is not dead, …). */
export class JobStateError extends PgQueueError {
  constructor(
    readonly code: 'JOB_NOT_FOUND' | 'JOB_NOT_DEAD' | 'JOB_NOT_CANCELLABLE' | 'JOB_NOT_FINISHED' | 'QUEUE_NOT_FOUND',
    message: string,
  ) {
    super(message);
  }
}
