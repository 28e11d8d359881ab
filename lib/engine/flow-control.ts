import { describe } from './config.js';
import { InvalidOptionError } from './errors.js';
import type { GroupLimits, QueueLimits, RateLimit } from './types.js';

/**
 * Flow control's options, checked before any SQL runs: the limits a handler declares
 * (`limits`), and those set at run time (`PgQueue.setLimits`, `setGroupLimits`). Every field may
 * be `null` (remove the limit) or left out (keep what the database has).
 */


const INT32_MAX = 2_147_483_647;

/** The groups a claim visits each way round the ring, at most (see flowClaim). */
export const FLOW_MAX_GROUPS_PER_CLAIM = 200;
/** How deep a claim looks for jobs without a group among the queue's next claimable ones (see flowClaim). */
export const FLOW_UNGROUPED_WINDOW = 200;

function positive(where: string, value: unknown, min: number): number | null {
  if (value === null) return null;
  if (!(Number.isInteger(value) && (value as number) >= min && (value as number) <= INT32_MAX)) {
    throw new InvalidOptionError(where, `${describe(value)} is not an integer from ${min} to ${INT32_MAX}`, `Pass a whole number, or null to remove the limit.`);
  }
  return value as number;
}

function rateLimit(where: string, value: unknown, min: number): RateLimit | null {
  if (value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new InvalidOptionError(where, `${describe(value)} is not a rate limit`, 'Pass { limit, windowMs } (at most `limit` claims per `windowMs`), or null to remove it.');
  }
  const { limit, windowMs, ...rest } = value as Partial<RateLimit>;
  const extra = Object.keys(rest)[0];
  if (extra !== undefined) throw new InvalidOptionError(`${where}.${extra}`, 'it is not a field of a rate limit', 'Use { limit, windowMs }.');
  return { limit: positive(`${where}.limit`, limit, min) ?? missing(`${where}.limit`), windowMs: positive(`${where}.windowMs`, windowMs, 1) ?? missing(`${where}.windowMs`) };
}

function missing(where: string): never {
  throw new InvalidOptionError(where, 'it is missing', 'A rate limit is { limit, windowMs }: both whole numbers.');
}

function fields<T extends object>(where: string, value: unknown, known: readonly (keyof T & string)[]): Partial<Record<keyof T, unknown>> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new InvalidOptionError(where, `${describe(value)} is not an object`, `Pass an object with any of: ${known.join(', ')}.`);
  }
  for (const name of Object.keys(value)) {
    if (!(known as readonly string[]).includes(name)) {
      throw new InvalidOptionError(`${where}.${name}`, 'it is not a flow-control option', `Use one of: ${known.join(', ')}.`);
    }
  }
  return value as Partial<Record<keyof T, unknown>>;
}

/** Checks a queue's limits; returns only the fields given (undefined ones left out). */
export function checkQueueLimits(where: string, value: unknown): Partial<QueueLimits> {
  const given = fields<QueueLimits>(where, value, ['globalConcurrency', 'groupConcurrency', 'rateLimit', 'groupRateLimit', 'groupFairness']);
  const out: Partial<QueueLimits> = {};
  if (given.globalConcurrency !== undefined) out.globalConcurrency = positive(`${where}.globalConcurrency`, given.globalConcurrency, 1);
  if (given.groupConcurrency !== undefined) out.groupConcurrency = positive(`${where}.groupConcurrency`, given.groupConcurrency, 1);
  if (given.rateLimit !== undefined) out.rateLimit = rateLimit(`${where}.rateLimit`, given.rateLimit, 1);
  if (given.groupRateLimit !== undefined) out.groupRateLimit = rateLimit(`${where}.groupRateLimit`, given.groupRateLimit, 1);
  if (given.groupFairness !== undefined) {
    if (typeof given.groupFairness !== 'boolean') throw new InvalidOptionError(`${where}.groupFairness`, `${describe(given.groupFairness)} is not a boolean`, 'Pass true or false.');
    out.groupFairness = given.groupFairness;
  }
  return out;
}

/**
 * Checks a group's settings. A group's concurrency and rate limit may be 0 (hold the group: none
 * of its jobs is claimed); its weight is 1 to 1000 (null: back to 1).
 */
export function checkGroupLimits(where: string, value: unknown): Partial<GroupLimits> {
  const given = fields<GroupLimits>(where, value, ['concurrency', 'weight', 'rateLimit']);
  const out: Partial<GroupLimits> = {};
  if (given.concurrency !== undefined) out.concurrency = positive(`${where}.concurrency`, given.concurrency, 0);
  if (given.rateLimit !== undefined) out.rateLimit = rateLimit(`${where}.rateLimit`, given.rateLimit, 0);
  if (given.weight !== undefined) {
    const weight = given.weight;
    if (weight !== null && !(Number.isInteger(weight) && (weight as number) >= 1 && (weight as number) <= 1000)) {
      throw new InvalidOptionError(`${where}.weight`, `${describe(weight)} is not an integer from 1 to 1000`, 'A weight is how many jobs the group gets per turn of the round-robin (default 1).');
    }
    out.weight = (weight as number | null) ?? 1;
  }
  return out;
}

/** A group's name, as enqueue's `group` takes it. */
export function checkGroup(where: string, value: unknown): string {
  if (!(typeof value === 'string' && value.length >= 1 && value.length <= 256)) {
    throw new InvalidOptionError(where, `${describe(value)} is not a group`, 'A group is a string of 1-256 characters.');
  }
  return value;
}
