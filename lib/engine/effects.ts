import type { Attempt, AttemptDeps } from './attempt.js';
import { HandlerUsageError, InvalidOptionError, PermanentJobError } from './errors.js';
import { serializePayload } from './json.js';
import { EFFECT_INSIDE_COMPLETE, EFFECT_NAME_FIX, EFFECT_NAME_REFUSED, EFFECT_RESULT_NOT_STORED, EFFECT_RESULT_TOO_LARGE } from './messages.js';
import { whileLeaseLasts } from './retrying.js';
import type { FencedOutcome } from './store/index.js';
import type { EffectOptions } from './types.js';

/** Largest stored effect result: the record is for operators and replays, not a blob store. */
export const EFFECT_RESULT_MAX_BYTES = 16 * 1024;
const EFFECT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$/;

/**
 * An external side effect with a durable record, the reference's "durable state with an uncertain
 * outcome and reconciliation": started (with a key stable across attempts and replays) before the
 * call, confirmed with its result after it. A confirmed effect is never repeated; an uncertain one
 * is reconciled or retried with the same key.
 *
 * An effect known to have happened is recorded as happened, whatever its result: a result that
 * cannot be stored (not JSON, or over EFFECT_RESULT_MAX_BYTES) is recorded as "happened, result not
 * stored" and the job fails permanently (EFFECT_RESULT_NOT_STORED); no later attempt calls the
 * destination again for it (with `reconcile`, a later attempt asks the destination for the result).
 */
export async function runEffect<R>(
  attempt: Attempt,
  deps: AttemptDeps,
  name: string,
  call: (idempotencyKey: string) => Promise<R>,
  options: EffectOptions<R> = {},
): Promise<FencedOutcome<{ result: R }>> {
  if (typeof name !== 'string' || !EFFECT_NAME.test(name)) throw new InvalidOptionError('effect name', EFFECT_NAME_REFUSED(name), EFFECT_NAME_FIX());
  if (attempt.inCompletion) {
    // Recorded in that transaction, the record of a call that happened would vanish if it rolled
    // back, and the next attempt would call again; recorded on another connection, a full pool of
    // handlers inside ctx.complete would each wait for a second connection forever.
    throw new HandlerUsageError('EFFECT_INSIDE_COMPLETE', EFFECT_INSIDE_COMPLETE(attempt.job.id, name));
  }
  if (attempt.signal.aborted) throw attempt.signal.reason;
  const { db, store } = deps;
  const idempotencyKey = `${attempt.job.idempotencyKey}:${name}`;
  const begun = await store.beginEffect(db, { ...attempt.fenceKey, name, idempotencyKey });
  if (begun.earlier === 'confirmed') {
    if (begun.resultStored !== false) return { ok: true, result: begun.result as R };
    // It happened, but its result was never stored: ask the destination, never call it again.
    const found = options.reconcile ? await options.reconcile(idempotencyKey) : { done: false as const };
    if (found.done) {
      await confirm(attempt, deps, name, found.result, 'effect_reconciled');
      return { ok: true, result: found.result };
    }
    throw resultNotStored(name, 'an earlier attempt');
  }
  // Refused by the fence: why, as the store decodes it (read on the pool: no transaction is open).
  if (!begun.owned) return { ok: false, reason: (await store.fenceLoss(db, attempt.fenceKey)).reason };

  if (begun.earlier === 'started' && options.reconcile) {
    const found = await options.reconcile(idempotencyKey);
    if (found.done) {
      await confirm(attempt, deps, name, found.result, 'effect_reconciled');
      return { ok: true, result: found.result };
    }
  }
  const result = await call(idempotencyKey);
  await confirm(attempt, deps, name, result, 'effect_confirmed');
  return { ok: true, result };
}

/**
 * Records that the effect happened. Not fenced (see confirmEffect in store/effects.ts), and retried while
 * the lease lasts: the call happened, and a record lost to a blip would make the next attempt
 * treat it as uncertain.
 */
async function confirm(attempt: Attempt, deps: AttemptDeps, name: string, result: unknown, kind: string): Promise<void> {
  const stored = storable(result);
  await whileLeaseLasts(attempt, () =>
    deps.store.confirmEffect(deps.db, { ...attempt.fenceKey, name, result: stored.json, kind, resultStored: stored.ok }),
  );
  if (!stored.ok) throw resultNotStored(name, 'this attempt', stored.problem);
}

/** The result as it is stored, or why it cannot be (then the effect is recorded without it). */
function storable(result: unknown): { ok: true; json: string } | { ok: false; json: null; problem: string } {
  let json: string;
  try {
    json = result === undefined ? 'null' : serializePayload(result, '', 'result');
  } catch (error) {
    return { ok: false, json: null, problem: (error as Error).message };
  }
  const bytes = Buffer.byteLength(json);
  if (bytes > EFFECT_RESULT_MAX_BYTES) return { ok: false, json: null, problem: EFFECT_RESULT_TOO_LARGE(bytes, EFFECT_RESULT_MAX_BYTES) };
  return { ok: true, json };
}

function resultNotStored(name: string, when: string, problem?: string): PermanentJobError {
  return new PermanentJobError(EFFECT_RESULT_NOT_STORED(name, when, problem), { code: 'EFFECT_RESULT_NOT_STORED' });
}
