import { InvalidOptionError } from './errors.js';

/**
 * Validation shared by every service's config: programmer errors surface at start, with the
 * option's name and the fix, instead of as a strange loop later.
 */
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

/** Fills `undefined` fields of `options` from `defaults`; one place for defaults, no scattered `??`. */
export function withDefaults<T extends object>(defaults: T, options: Partial<T> | undefined): T {
  const merged = { ...defaults };
  for (const [key, value] of Object.entries(options ?? {})) {
    if (value !== undefined) (merged as Record<string, unknown>)[key] = value;
  }
  return merged;
}

export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || value === undefined || typeof value === 'number' || typeof value === 'boolean') return String(value);
  return typeof value;
}
