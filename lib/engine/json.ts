import { InvalidJobError, InvalidPayloadError } from './errors.js';
import { PAYLOAD_NOT_JSON, PAYLOAD_TOO_LARGE } from './messages.js';

/**
 * The JSON check of what the queue stores: a job's payload (producer.ts) and an effect's result
 * (effects.ts). A leaf beside types.ts: it imports only errors and messages.
 */

/** The largest payload accepted by default: 256 KiB of JSON text. */
export const MAX_PAYLOAD_BYTES_DEFAULT = 256 * 1024;

/** An identifier-like key is written `.key` in a path, any other `["key"]`. */
const PLAIN_KEY = /^[A-Za-z_$][\w$]*$/;

/**
 * Payloads are JSON: what the handler reads is exactly what the producer passed. So every value
 * that JSON.stringify would silently change (a Date to a string, a class instance to its fields,
 * a Map or Set to `{}`, NaN to null, undefined in an array to null) and every value PostgreSQL's
 * jsonb refuses (a string holding U+0000 or half a surrogate pair: SQLSTATE 22P05 / 22P02) is an
 * error here, before anything is written, with the path of the offending value and what to
 * convert it to. One walk, then one JSON.stringify: the walk only looks, it builds nothing.
 *
 * An object property that holds `undefined` is accepted: JSON drops it, and the handler reads
 * `undefined` for it all the same (`{ cc: undefined }` from optional fields is everyday code).
 * Anywhere else (the whole payload, an array element) undefined would become something else.
 */
export function serializePayload(payload: unknown, where: string, root = 'payload'): string {
  const stack: object[] = [];
  const fail = (path: string, what: string, fix?: string) => refused(where, root === 'payload', path, what, fix);
  const visit = (value: unknown, path: () => string): void => {
    switch (typeof value) {
      case 'string':
        if (!stringStorable(value)) throw fail(path(), stringProblem(value, 'a string'));
        return;
      case 'boolean':
        return;
      case 'number':
        if (!Number.isFinite(value)) throw fail(path(), `${value}, not a finite number`, 'JSON has no NaN or Infinity: use null, or a string');
        return;
      case 'bigint':
        throw fail(path(), 'a BigInt', 'convert it to a string (value.toString()), or to a number if it is within 2^53');
      case 'undefined':
        throw fail(path(), 'undefined', 'pass null (or {}) for a job without data');
      case 'function':
      case 'symbol':
        throw fail(path(), `a ${typeof value}`, 'leave it out: only data can be stored');
    }
    if (value === null) return;
    const object = value as object;
    if (stack.includes(object)) throw fail(path(), 'a cycle (an object that contains itself)', 'store a copy without the back-reference (an id instead)');
    if (Array.isArray(object)) {
      stack.push(object);
      for (let i = 0; i < object.length; i++) {
        const item: unknown = object[i];
        const itemPath = () => `${path()}[${i}]`;
        // A hole reads as undefined, and JSON.stringify writes both as null.
        if (item === undefined) {
          throw fail(itemPath(), i in object ? 'undefined' : 'a hole in a sparse array', 'use null (JSON would store null here)');
        }
        visit(item, itemPath);
      }
      stack.pop();
      return;
    }
    const proto = Object.getPrototypeOf(object) as object | null;
    if (proto !== Object.prototype && proto !== null) throw fail(path(), ...notPlain(object));
    stack.push(object);
    for (const key of Object.keys(object)) {
      const item = (object as Record<string, unknown>)[key];
      if (item === undefined) continue;
      const itemPath = () => `${path()}${PLAIN_KEY.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`}`;
      if (!stringStorable(key)) throw fail(itemPath(), stringProblem(key, 'a property name'));
      visit(item, itemPath);
    }
    stack.pop();
  };
  visit(payload, () => root);
  return JSON.stringify(payload);
}

/** A job's payload as the JSON text it is stored as: JSON-safe (serializePayload) and at most `maxBytes`. */
export function payloadJson(payload: unknown, where: string, maxBytes: number): string {
  const json = serializePayload(payload, where);
  // Each UTF-16 unit is at most 3 bytes of UTF-8: a short text needs no count.
  if (json.length * 3 > maxBytes) {
    const bytes = Buffer.byteLength(json);
    if (bytes > maxBytes) throw new InvalidJobError('PAYLOAD_TOO_LARGE', PAYLOAD_TOO_LARGE(where, bytes, maxBytes));
  }
  return json;
}

/** jsonb holds neither U+0000 nor a lone surrogate (half of a pair), in values or in keys. */
function stringStorable(value: string): boolean {
  return !value.includes('\u0000') && (value as string & { isWellFormed(): boolean }).isWellFormed();
}

function stringProblem(value: string, subject: string): string {
  return `${subject} that contains ${value.includes('\u0000') ? 'U+0000 (\\u0000), which PostgreSQL cannot store in jsonb' : 'a lone surrogate (half of a UTF-16 pair), which is not valid Unicode'}`;
}

/** What a non-plain object is, and what to store instead. */
function notPlain(value: object): [string, string] {
  if (value instanceof Date) return ['a Date', 'convert it to a string (date.toISOString()) or a number (date.getTime())'];
  if (value instanceof Map) return ['a Map', 'convert it to a plain object (Object.fromEntries(map)) or an array of entries ([...map])'];
  if (value instanceof Set) return ['a Set', 'convert it to an array ([...set])'];
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) {
    return [`binary data (${value.constructor.name})`, 'store it elsewhere and enqueue a reference, or encode it as a string (base64)'];
  }
  if (value instanceof RegExp) return ['a RegExp', 'store its source as a string'];
  if (value instanceof Error) return [`an Error (${value.constructor.name})`, 'store its message (and code) as strings'];
  if (value instanceof Promise) return ['a Promise', 'await it and enqueue its result'];
  const name = (value.constructor as { name?: unknown } | undefined)?.name;
  return [
    `an instance of ${typeof name === 'string' && name !== '' ? name : 'a class'}, not a plain object`,
    'copy the fields it needs into a plain object ({ ...value } keeps only own fields, and no methods or toJSON)',
  ];
}

function refused(where: string, enqueue: boolean, path: string, what: string, fix = 'remove the character, or encode the text (base64) if it is binary data'): InvalidPayloadError {
  return new InvalidPayloadError(path, what, PAYLOAD_NOT_JSON(where, path, what, fix, enqueue));
}
