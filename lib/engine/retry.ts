import { isErrorCode, PermanentJobError, RetryableJobError } from './errors.js';
import { isTransientDatabaseError, sqlState } from './pg-errors.js';
import type { AbortCode, BackoffOptions } from './types.js';

/**
 * Failure classification and backoff. A failure is classified before anything is retried:
 * - permanent (`PermanentJobError`): the job cannot succeed as it is, so it is dead at once;
 * - transient (`RetryableJobError`, or the worker's own aborts: lease expiring, maximum runtime):
 *   retried with backoff until max attempts, honouring a retry-after the error carries;
 * - transient too: PostgreSQL's retryable errors (SQLSTATE classes 08 and 40, 57P01-57P03, 55P03)
 *   and a lost connection, wherever they were raised, with the SQLSTATE (`SQLSTATE_40001`) or the
 *   connection error's own code (`ECONNRESET`, else `CONNECTION_LOST`) as the code;
 * - unknown (anything else, including non-Error throws and other SQLSTATEs): retried, but only
 *   within a small budget, because an error nobody anticipated is as likely a bug as a blip.
 */
export type FailureClass = 'permanent' | 'transient' | 'unknown';

export interface ClassifiedFailure {
  readonly class: FailureClass;
  readonly code: string;
  /** Bounded and single-line; never a stack trace (stacks carry paths and, often, secrets). */
  readonly message: string;
  readonly retryAfterMs: number | undefined;
}

export const ERROR_MESSAGE_MAX_LENGTH = 1000;

export function classifyFailure(thrown: unknown, abortCode?: AbortCode): ClassifiedFailure {
  if (thrown instanceof PermanentJobError) {
    return { class: 'permanent', code: thrown.code, message: boundedMessage(thrown.message), retryAfterMs: undefined };
  }
  if (thrown instanceof RetryableJobError) {
    return { class: 'transient', code: thrown.code, message: boundedMessage(thrown.message), retryAfterMs: thrown.retryAfterMs };
  }
  if (abortCode === 'LEASE_EXPIRED' || abortCode === 'MAX_RUNTIME') {
    // The worker aborted the handler itself: what failed is time, which is worth another attempt.
    const why = abortCode === 'MAX_RUNTIME' ? 'the attempt reached its maximum runtime' : 'the lease was about to expire without a heartbeat';
    return { class: 'transient', code: abortCode, message: boundedMessage(`${why}: ${messageOf(thrown)}`), retryAfterMs: undefined };
  }
  if (thrown instanceof Error) {
    // The database's own word on a failure: a lost connection, a restart, a serialization failure
    // or deadlock, a lock timeout are worth another attempt wherever they were raised (a handler's
    // own query, or its work inside ctx.complete); any other SQLSTATE is about the statement or its
    // data and keeps the small budget. Either way the SQLSTATE is the code.
    const state = sqlState(thrown);
    const raw = (thrown as { code?: unknown }).code;
    const code = state !== undefined ? `SQLSTATE_${state}` : isErrorCode(raw) ? raw : undefined;
    if (isTransientDatabaseError(thrown)) {
      return { class: 'transient', code: code ?? 'CONNECTION_LOST', message: boundedMessage(`${thrown.name}: ${thrown.message}`), retryAfterMs: undefined };
    }
    return { class: 'unknown', code: code ?? 'UNKNOWN', message: boundedMessage(`${thrown.name}: ${thrown.message}`), retryAfterMs: undefined };
  }
  return {
    class: 'unknown',
    code: 'NON_ERROR_THROWN',
    message: boundedMessage(`the handler threw a non-Error value (${typeof thrown}): ${messageOf(thrown)}; throw an Error subclass instead`),
    retryAfterMs: undefined,
  };
}

/**
 * The largest exponent the backoff doubles by, here and in the reaper's SQL. 2^62 times any int4
 * base is far past every int4 cap, and far below float8's limit (2^1023): without the bound, an
 * attempt past ~1,016 overflows float8 (the whole reaper batch failed), and in JS 0 * 2^1100 is NaN.
 */
export const BACKOFF_MAX_EXPONENT = 62;

export interface RetryDecision {
  readonly dead: boolean;
  /** Delay before the next attempt, when not dead. */
  readonly delayMs: number;
}

/**
 * Dead when the failure is permanent, when attempts are exhausted, or when an unknown failure has
 * used its budget; otherwise a delay: the error's retry-after if it set one, else backoff.
 */
export function decideRetry(
  failure: ClassifiedFailure,
  attempt: number,
  maxAttempts: number,
  unknownErrorAttempts: number,
  backoff: BackoffOptions,
  random: () => number = Math.random,
): RetryDecision {
  const budget = failure.class === 'unknown' ? Math.min(maxAttempts, unknownErrorAttempts) : maxAttempts;
  if (failure.class === 'permanent' || attempt >= budget) return { dead: true, delayMs: 0 };
  // Whole milliseconds: the delay is written as a bigint (a fraction made that write fail).
  return { dead: false, delayMs: Math.ceil(failure.retryAfterMs ?? backoffDelayMs(attempt, backoff, random)) };
}

/**
 * Exponential backoff with full jitter: uniform in [0, min(max, base * 2^(attempt - 1))]. Full
 * jitter spreads a burst of failures (a dependency outage) over the whole window instead of
 * retrying them in lockstep. The reaper computes the same formula in SQL.
 */
export function backoffDelayMs(attempt: number, backoff: BackoffOptions, random: () => number = Math.random): number {
  const cap = Math.min(backoff.maxMs, backoff.baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), BACKOFF_MAX_EXPONENT));
  return Math.floor(random() * cap);
}

function messageOf(value: unknown): string {
  if (value instanceof Error) return value.message;
  if (typeof value === 'string') return value;
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function boundedMessage(text: string): string {
  const oneLine = text.replace(/\s+/g, ' ').trim();
  return oneLine.length > ERROR_MESSAGE_MAX_LENGTH ? `${oneLine.slice(0, ERROR_MESSAGE_MAX_LENGTH - 1)}…` : oneLine;
}
