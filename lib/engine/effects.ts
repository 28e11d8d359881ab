import { HandlerUsageError, InvalidOptionError, PermanentJobError } from './errors.js';
import type { Lease } from './lease.js';
import { whileLeaseLasts } from './retrying.js';
import { serializePayload } from './producer.js';

/** What a reconcile function reports after asking the destination about an uncertain effect. */
export type Reconciliation<R> = { done: true; result: R } | { done: false };

export interface EffectOptions<R> {
  /**
   * Called instead of assuming, when an earlier attempt started this effect but never confirmed it
   * (it crashed, or lost its lease, between the call and the record). Look the key up at the
   * destination: `{ done: true, result }` records the effect without calling again;
   * `{ done: false }` calls again with the same key. Without it, the call is repeated with the
   * same key, which is right for destinations that deduplicate. Also asked, when given, for the
   * result of an effect that happened but whose result could not be stored.
   */
  reconcile?: (idempotencyKey: string) => Promise<Reconciliation<R>>;
}

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
  lease: Lease,
  name: string,
  call: (idempotencyKey: string) => Promise<R>,
  options: EffectOptions<R> = {},
): Promise<R> {
  if (typeof name !== 'string' || !EFFECT_NAME.test(name)) {
    throw new InvalidOptionError('effect name', `${JSON.stringify(String(name).slice(0, 80))} is not accepted`, 'Use 1-200 letters, digits, "_", ".", ":" or "-".');
  }
  if (lease.openTransaction) {
    // Recorded in that transaction, the record of a call that happened would vanish if it rolled
    // back, and the next attempt would call again; recorded on another connection, a full pool of
    // handlers inside ctx.complete would each wait for a second connection forever.
    throw new HandlerUsageError(
      'EFFECT_INSIDE_COMPLETE',
      `Job ${lease.job.id}: ctx.effect("${name}") was called inside ctx.complete's work. Call the effect before ctx.complete, and write its result in the completion's transaction.`,
    );
  }
  if (lease.signal.aborted) throw lease.signal.reason;
  const { db, store } = lease.deps;
  const idempotencyKey = `${lease.job.idempotencyKey}:${name}`;
  const begun = await store.beginEffect(db, { ...lease.fenceKey, name, idempotencyKey });
  if (begun.earlier === 'confirmed') {
    if (begun.resultStored !== false) return begun.result as R;
    // It happened, but its result was never stored: ask the destination, never call it again.
    const found = options.reconcile ? await options.reconcile(idempotencyKey) : { done: false as const };
    if (found.done) {
      await confirm(lease, name, found.result, 'effect_reconciled');
      return found.result;
    }
    throw resultNotStored(name, 'an earlier attempt');
  }
  if (!begun.owned) throw await lease.lostOn('effect');

  if (begun.earlier === 'started' && options.reconcile) {
    const found = await options.reconcile(idempotencyKey);
    if (found.done) {
      await confirm(lease, name, found.result, 'effect_reconciled');
      return found.result;
    }
  }
  const result = await call(idempotencyKey);
  await confirm(lease, name, result, 'effect_confirmed');
  return result;
}

/**
 * Records that the effect happened. Not fenced (see confirmEffect in store/effects.ts), and retried while
 * the lease lasts: the call happened, and a record lost to a blip would make the next attempt
 * treat it as uncertain.
 */
async function confirm(lease: Lease, name: string, result: unknown, kind: string): Promise<void> {
  const stored = storable(result);
  await whileLeaseLasts(lease, () =>
    lease.deps.store.confirmEffect(lease.deps.db, { ...lease.fenceKey, name, result: stored.json, kind, resultStored: stored.ok }),
  );
  if (!stored.ok) throw resultNotStored(name, 'this attempt', stored.problem);
}

/** The result as it is stored, or why it cannot be (then the effect is recorded without it). */
function storable(result: unknown): { ok: true; json: string } | { ok: false; json: null; problem: string } {
  let json: string;
  try {
    json = result === undefined ? 'null' : serializePayload(result, 'the result');
  } catch (error) {
    return { ok: false, json: null, problem: (error as Error).message };
  }
  const bytes = Buffer.byteLength(json);
  if (bytes > EFFECT_RESULT_MAX_BYTES) return { ok: false, json: null, problem: `it is ${bytes} bytes of JSON, over ${EFFECT_RESULT_MAX_BYTES}` };
  return { ok: true, json };
}

function resultNotStored(name: string, when: string, problem?: string): PermanentJobError {
  return new PermanentJobError(
    `Effect "${name}" happened in ${when}, but its result could not be stored${problem ? ` (${problem.slice(0, 300)})` : ''}. ` +
      'It is recorded as done and will not be called again. Return what a later attempt needs (an id, a status), not the whole response; ' +
      'with a reconcile function, a replay asks the destination for the result instead.',
    { code: 'EFFECT_RESULT_NOT_STORED' },
  );
}
