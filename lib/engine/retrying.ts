import { setTimeout as sleep } from 'node:timers/promises';
import { isTransientDatabaseError } from './pg-errors.js';

/** First pause between tries of a write; it doubles up to RETRY_PAUSE_MAX_MS. */
const RETRY_PAUSE_MIN_MS = 50;
const RETRY_PAUSE_MAX_MS = 1_000;

/**
 * Runs a write of a job's outcome, trying again on transient database errors (a restart, a lost
 * connection, a serialization failure) for as long as `msLeft()` says the lease lasts. Giving up
 * sooner throws away finished work: the job would run again once its lease expired. Giving up
 * later is pointless: past the lease the fence refuses the write anyway. Any other error is
 * thrown at once.
 */
export async function retryWhile<T>(msLeft: () => number, write: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await write();
    } catch (error) {
      const pause = Math.min(RETRY_PAUSE_MAX_MS, RETRY_PAUSE_MIN_MS * 2 ** (tries - 1));
      if (!isTransientDatabaseError(error) || msLeft() <= pause) throw error;
      await sleep(pause);
    }
  }
}

/** retryWhile for one attempt's write: until its lease runs out by the local clock. */
export function whileLeaseLasts<T>(lease: { readonly msLeft: number }, write: () => Promise<T>): Promise<T> {
  return retryWhile(() => lease.msLeft, write);
}
