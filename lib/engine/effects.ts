import { run } from './db.js';
import { InvalidOptionError } from './errors.js';
import type { Lease } from './lease.js';
import { serializePayload } from './producer.js';

/** What a reconcile function reports after asking the destination about an uncertain effect. */
export type Reconciliation<R> = { done: true; result: R } | { done: false };

export interface EffectOptions<R> {
  /**
   * Called instead of assuming, when an earlier attempt started this effect but never confirmed it
   * (it crashed, or lost its lease, between the call and the record). Look the key up at the
   * destination: `{ done: true, result }` records the effect without calling again;
   * `{ done: false }` calls again with the same key. Without it, the call is repeated with the
   * same key, which is right for destinations that deduplicate.
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
  if (lease.signal.aborted) throw lease.signal.reason;
  const { db, queries, owner } = lease.deps;
  const { job } = lease;
  const idempotencyKey = `${job.idempotencyKey}:${name}`;
  const [begun] = await run<{ owned: boolean; earlier: 'started' | 'confirmed' | null; result: unknown }>(db, queries.beginEffect, [
    job.id,
    owner,
    job.leaseToken,
    name,
    idempotencyKey,
  ]);
  if (begun?.earlier === 'confirmed') return begun.result as R;
  if (!begun?.owned) throw await lease.lostOn('effect');

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

async function confirm(lease: Lease, name: string, result: unknown, kind: string): Promise<void> {
  const json = result === undefined ? 'null' : serializePayload(result, `effect "${name}" result`);
  if (Buffer.byteLength(json) > EFFECT_RESULT_MAX_BYTES) {
    throw new InvalidOptionError(
      `effect "${name}" result`,
      `${Buffer.byteLength(json)} bytes of JSON, over ${EFFECT_RESULT_MAX_BYTES}`,
      'Return what a later attempt needs (an id, a status), not the whole response.',
    );
  }
  await run(lease.deps.db, lease.deps.queries.confirmEffect, [lease.job.id, lease.deps.owner, lease.job.leaseToken, name, json, kind]);
}
