import { InvalidOptionError } from './errors.js';

/**
 * Options, validated in one place. Every option of the engine is described once, in a *section*
 * beside the service it configures (its fields' kinds and bounds, and its defaults), and the
 * engine's top-level section (options.ts) is built from them. The Nest module checks its options
 * against the same sections, so an option has one name, one default and one message in both
 * layers. Programmer errors surface at construction, with the option's full path and the fix,
 * instead of as a strange loop later: a misspelt name anywhere (`reaper.intervallMs`) is an error,
 * not a silent default.
 */

/** setTimeout/setInterval take at most 2^31-1 ms; above it Node fires the timer every millisecond. */
export const TIMER_MAX_MS = 2_147_483_647;

export type Field =
  | { readonly kind: 'integer'; readonly min: number; readonly max: number }
  | { readonly kind: 'number'; readonly min: number; readonly max: number }
  | { readonly kind: 'boolean' }
  | { readonly kind: 'string'; readonly pattern?: RegExp; readonly hint?: string }
  | { readonly kind: 'oneOf'; readonly values: readonly string[] }
  /** `true`, `false`, or a non-empty list of some of `values` (a switch that may name what it covers). */
  | { readonly kind: 'flagOrList'; readonly values: readonly string[] }
  | { readonly kind: 'section'; readonly section: Section<object>; readonly allowFalse?: boolean }
  /** Checked by its owner (a pool, a logger, a list): only its presence and type are known here. */
  | { readonly kind: 'opaque'; readonly type: 'object' | 'function' | 'array' };

/** A name that is still accepted, with a warning, for one minor version. */
export interface Deprecation {
  /** What to write instead ("reaper.intervalMs"). */
  readonly use: string;
  /**
   * Moves the value to its new place ("intervalMs", or one level down: "reaper.intervalMs");
   * absent: the option is ignored.
   */
  readonly moveTo?: string;
}

export interface Section<T extends object> {
  /** For messages: "the reaper", "@JobHandler". */
  readonly owner: string;
  readonly fields: { readonly [K in keyof T]-?: Field };
  /** Defaults of the fields that have one. */
  readonly defaults: Partial<T>;
  readonly deprecated?: Readonly<Record<string, Deprecation>>;
}

export function section<T extends object>(owner: string, fields: Section<T>['fields'], defaults: Partial<T>, deprecated?: Section<T>['deprecated']): Section<T> {
  return { owner, fields, defaults, deprecated };
}

export const integer = (min: number, max: number = Number.MAX_SAFE_INTEGER): Field => ({ kind: 'integer', min, max });
/** A duration that a timer waits for: never above what setTimeout can wait. */
export const timerMs = (min: number): Field => ({ kind: 'integer', min, max: TIMER_MAX_MS });
export const number = (min: number, max: number): Field => ({ kind: 'number', min, max });
export const boolean = (): Field => ({ kind: 'boolean' });
export const string = (pattern?: RegExp, hint?: string): Field => ({ kind: 'string', pattern, hint });
export const oneOf = (values: readonly string[]): Field => ({ kind: 'oneOf', values });
export const flagOrList = (values: readonly string[]): Field => ({ kind: 'flagOrList', values });
export const nested = <T extends object>(inner: Section<T>, allowFalse = false): Field => ({ kind: 'section', section: inner as Section<object>, allowFalse });
export const opaque = (type: 'object' | 'function' | 'array'): Field => ({ kind: 'opaque', type });

/** Where a warning about a deprecated option goes. */
export type Warn = (message: string) => void;

/**
 * Validates `value` against `section` (unknown names, kinds, bounds, nested sections) and returns
 * it with the section's defaults filled in (nested sections resolved the same way). `path` names
 * the section in messages ("reaper", "EmailJobs.send").
 */
export function resolveSection<T extends object>(inner: Section<T>, value: unknown, path: string, warn: Warn = () => {}): T {
  if (value === undefined || value === null) value = {};
  requireObject(path || 'options', value, `options of ${inner.owner}`);
  const given = { ...(value as Record<string, unknown>) };
  for (const [name, deprecation] of Object.entries(inner.deprecated ?? {})) {
    if (!Object.hasOwn(given, name)) continue;
    const moved = given[name];
    delete given[name];
    if (moved === undefined) continue;
    warn(`Option "${join(path, name)}" is deprecated and will be removed in the next minor version: use "${deprecation.use}".`);
    if (deprecation.moveTo === undefined) continue;
    const [head, leaf] = deprecation.moveTo.split('.') as [string, string | undefined];
    const parent = leaf === undefined ? given : { ...(given[head] as Record<string, unknown> | undefined) };
    const key = leaf ?? head;
    if (parent[key] !== undefined && parent[key] !== moved) {
      throw new InvalidOptionError(join(path, name), `it is set to ${describe(moved)} and "${deprecation.use}" to ${describe(parent[key])}`, `Set only "${deprecation.use}".`);
    }
    parent[key] = moved;
    if (leaf !== undefined) given[head] = parent;
  }
  const fields = inner.fields as Record<string, Field>;
  for (const name of Object.keys(given)) {
    if (!Object.hasOwn(fields, name)) {
      throw new InvalidOptionError(join(path, name), `it is not an option of ${inner.owner}`, `Remove it, or use one of: ${Object.keys(fields).join(', ')}.`);
    }
  }
  const resolved: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(fields)) {
    const given1 = given[name];
    const fallback = (inner.defaults as Record<string, unknown>)[name];
    if (field.kind === 'section') {
      resolved[name] = given1 === false && field.allowFalse ? false : resolveSection(field.section, given1 ?? fallback, join(path, name), warn);
      continue;
    }
    const chosen = given1 === undefined ? fallback : given1;
    if (chosen !== undefined) checkField(join(path, name), field, chosen);
    resolved[name] = chosen;
  }
  return resolved as T;
}

/** The names a section accepts (its fields and deprecated names). */
export function optionNames(inner: Section<object>): string[] {
  return [...Object.keys(inner.fields), ...Object.keys(inner.deprecated ?? {})];
}

function checkField(option: string, field: Field, value: unknown): void {
  switch (field.kind) {
    case 'integer':
      requireInteger(option, value, field.min, field.max);
      return;
    case 'number':
      if (typeof value !== 'number' || !(value >= field.min && value <= field.max)) {
        throw new InvalidOptionError(option, `${describe(value)} is not a number from ${field.min} to ${field.max}`, `Set "${option}" to a number from ${field.min} to ${field.max}.`);
      }
      return;
    case 'boolean':
      if (typeof value !== 'boolean') throw new InvalidOptionError(option, `${describe(value)} is not a boolean`, `Set "${option}" to true or false.`);
      return;
    case 'string':
      requireString(option, value, field.pattern, field.hint);
      return;
    case 'oneOf':
      requireOneOf(option, value, field.values);
      return;
    case 'flagOrList': {
      if (typeof value === 'boolean') return;
      const some = `true, false, or a list of some of ${field.values.map((v) => `"${v}"`).join(', ')}`;
      if (!Array.isArray(value) || value.length === 0) throw new InvalidOptionError(option, `${Array.isArray(value) ? 'an empty list' : describe(value)} is not ${some}`, `Set "${option}" to one of those (false for none).`);
      value.forEach((item, index) => requireOneOf(`${option}[${index}]`, item, field.values));
      return;
    }
    case 'opaque': {
      const ok = field.type === 'array' ? Array.isArray(value) : field.type === 'function' ? typeof value === 'function' : typeof value === 'object' && value !== null;
      if (!ok) throw new InvalidOptionError(option, `${describe(value)} is not ${field.type === 'array' ? 'an array' : `a${field.type === 'object' ? 'n object' : ' function'}`}`, `Check "${option}".`);
      return;
    }
    case 'section':
      return;
  }
}

function join(path: string, name: string): string {
  return path ? `${path}.${name}` : name;
}

export function requireObject(option: string, value: unknown, expected: string): asserts value is object {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new InvalidOptionError(option, `${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value} is not an object`, `Pass ${expected}.`);
  }
}

export function requireInteger(option: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer from ${min} to ${max}`;
    throw new InvalidOptionError(option, `${describe(value)} is not ${range}`, `Set "${option}" to ${range}.`);
  }
  return value;
}

export function requireString(option: string, value: unknown, pattern?: RegExp, hint?: string): string {
  if (typeof value !== 'string' || value.length === 0 || (pattern && !pattern.test(value))) {
    throw new InvalidOptionError(option, `${describe(value)} is not accepted`, hint ?? `Set "${option}" to a non-empty string.`);
  }
  return value;
}

export function requireOneOf<T extends string>(option: string, value: unknown, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw new InvalidOptionError(option, `${describe(value)} is not one of ${allowed.map((a) => `"${a}"`).join(', ')}`, `Pick one of those.`);
  }
  return value as T;
}

export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || value === undefined || typeof value === 'number' || typeof value === 'boolean') return String(value);
  return typeof value;
}
