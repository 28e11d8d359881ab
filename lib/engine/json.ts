import { InvalidJobError } from './errors.js';
import { PAYLOAD_NOT_JSON, PAYLOAD_TOO_LARGE } from './messages.js';

/**
 * The JSON check of what the queue stores: a job's payload (producer.ts) and an effect's result
 * (effects.ts). A leaf beside types.ts: it imports only errors and messages.
 */

/** The largest payload accepted by default: 256 KiB of JSON text. */
export const MAX_PAYLOAD_BYTES_DEFAULT = 256 * 1024;

/**
 * JSON.stringify silently turns NaN into null and drops functions, and throws a bare TypeError on
 * BigInt and cycles. A job payload must survive the round trip, so those are errors here, with the
 * path of the offending value.
 */
export function serializePayload(payload: unknown, where: string): string {
  const fail = (path: string, problem: string) => new InvalidJobError('PAYLOAD_NOT_JSON', PAYLOAD_NOT_JSON(where, problem, path));
  const stack: unknown[] = [];
  const visit = (value: unknown, path: string): void => {
    switch (typeof value) {
      case 'string':
      case 'boolean':
        return;
      case 'number':
        if (!Number.isFinite(value)) throw fail(path, `${value} is not a finite number`);
        return;
      case 'bigint':
        throw fail(path, 'a BigInt (use a string or number)');
      case 'undefined':
        if (path === '$') throw fail(path, 'undefined');
        return;
      case 'function':
      case 'symbol':
        throw fail(path, `a ${typeof value}`);
    }
    if (value === null) return;
    if (stack.includes(value)) throw fail(path, 'a cycle (an object that contains itself)');
    if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return; // Date and friends
    if (value instanceof Map || value instanceof Set) throw fail(path, `a ${value.constructor.name} (use an array or a plain object)`);
    stack.push(value);
    if (Array.isArray(value)) value.forEach((item, i) => visit(item, `${path}[${i}]`));
    else for (const [key, item] of Object.entries(value as object)) visit(item, `${path}.${key}`);
    stack.pop();
  };
  visit(payload, '$');
  return JSON.stringify(payload);
}

/** A job's payload as the JSON text it is stored as: JSON-safe (serializePayload) and at most `maxBytes`. */
export function payloadJson(payload: unknown, where: string, maxBytes: number): string {
  const json = serializePayload(payload, where);
  const bytes = Buffer.byteLength(json);
  if (bytes > maxBytes) throw new InvalidJobError('PAYLOAD_TOO_LARGE', PAYLOAD_TOO_LARGE(where, bytes, maxBytes));
  return json;
}
