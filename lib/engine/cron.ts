import { Cron } from 'croner';
import { InvalidOptionError } from './errors.js';

/**
 * The ticks of a recurring schedule: a cron pattern read in a time zone, turned into instants.
 * Pure and clock-free (every function takes the instants it works from), so the tests compute
 * ticks at fixed instants, never against the wall clock.
 *
 * croner matches the pattern's fields; it is asked in UTC only, over *wall-clock times* (a local
 * time written as if it were UTC). Turning a wall-clock time into an instant is done here, by the
 * decisions of docs/recurring-jobs.md#time-zones, for every pattern alike:
 *
 * - a local time that does not exist (spring forward) runs once, at the first valid instant after
 *   it (the instant the clock jumps: 02:30 in a 02:00→03:00 gap runs at 03:00; every time of the
 *   gap that the pattern names collapses into that one run);
 * - a local time that occurs twice (autumn) runs once, at its first occurrence.
 *
 * croner's own time-zone mode distinguishes "fixed-time" from "interval" patterns (an interval
 * pattern runs on both passes of a repeated hour, and skips a gap). The decision is one
 * rule for every pattern, so the zone is never handed to croner.
 */

const SECOND = 1_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

/** The longest walk over wall-clock matches that map to instants already past (a repeated hour of a per-second pattern is 3,600). */
const WALK_MAX = 200_000;

/**
 * What `planTicks` walks at most per call: past it, the rest of the backlog is the next call's
 * (see TickPlan.more). About 150 ms of one core for a per-second pattern: a pass never blocks the
 * event loop (heartbeats, completions) for longer than that.
 */
export const TICKS_WALKED_MAX = 10_000;

export type MissedPolicy = 'latest' | 'all' | 'none';
export const MISSED_POLICIES: readonly MissedPolicy[] = ['latest', 'all', 'none'];

const CRON_FIX = 'Use 5 fields (minute hour day month weekday), 6 with seconds first, or a nickname such as "@daily".';

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(tz: string): Intl.DateTimeFormat {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: tz,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
      era: 'short',
    });
    formatters.set(tz, f);
  }
  return f;
}

/** The zone's canonical name, or an InvalidOptionError naming `option`. */
export function checkTimeZone(option: string, tz: unknown): string {
  if (typeof tz !== 'string' || tz.length === 0 || tz.length > 64) {
    throw new InvalidOptionError(option, `${JSON.stringify(tz)} is not a time zone`, 'Use an IANA time zone name such as "Europe/Paris", or "UTC".');
  }
  try {
    return formatter(tz).resolvedOptions().timeZone;
  } catch {
    throw new InvalidOptionError(option, `${JSON.stringify(tz.slice(0, 64))} is not a time zone this runtime knows`, 'Use an IANA time zone name such as "Europe/Paris", or "UTC".');
  }
}

/** The zone's offset from UTC at instant `t` (whole seconds), in ms: wall-clock time = t + offset. */
function exactOffset(tz: string, t: number): number {
  let year = 0;
  let month = 0;
  let day = 0;
  let hour = 0;
  let minute = 0;
  let second = 0;
  let bc = false;
  for (const part of formatter(tz).formatToParts(t)) {
    switch (part.type) {
      case 'year':
        year = Number(part.value);
        break;
      case 'month':
        month = Number(part.value);
        break;
      case 'day':
        day = Number(part.value);
        break;
      case 'hour':
        hour = Number(part.value);
        break;
      case 'minute':
        minute = Number(part.value);
        break;
      case 'second':
        second = Number(part.value);
        break;
      case 'era':
        bc = part.value === 'BC' || part.value === 'B';
        break;
    }
  }
  const wall = new Date(0);
  wall.setUTCFullYear(bc ? 1 - year : year, month - 1, day);
  wall.setUTCHours(hour, minute, second, 0);
  return wall.getTime() - Math.floor(t / SECOND) * SECOND;
}

/**
 * Offsets by the hour: a zone whose offset is the same at both ends of an hour has it throughout
 * (no zone has ever had two transitions within an hour), so one hour costs two lookups however
 * many ticks fall in it. Bounded: cleared when it grows past a few days of hours per zone.
 */
const hourOffsets = new Map<string, number>();
const HOUR_OFFSETS_MAX = 20_000;

function offsetAt(tz: string, t: number): number {
  if (tz === 'UTC') return 0;
  const hour = Math.floor(t / HOUR);
  const key = `${tz}\u0000${hour}`;
  const known = hourOffsets.get(key);
  if (known !== undefined) return known;
  const start = exactOffset(tz, hour * HOUR);
  const end = exactOffset(tz, hour * HOUR + HOUR - SECOND);
  if (start !== end) return exactOffset(tz, t);
  if (hourOffsets.size >= HOUR_OFFSETS_MAX) hourOffsets.clear();
  hourOffsets.set(key, start);
  return start;
}

/** The wall-clock time (as if UTC) at instant `t` in `tz`. */
export function wallClockAt(tz: string, t: number): number {
  return t + offsetAt(tz, t);
}

/**
 * The instant a wall-clock time `wall` (whole seconds, as if UTC) runs at in `tz`: its only
 * occurrence; the first of two (autumn); or, when it does not exist (spring forward), the first
 * valid instant after it: the instant of the transition that skipped it.
 */
export function instantOf(tz: string, wall: number): number {
  if (tz === 'UTC') return wall;
  const before = offsetAt(tz, wall - DAY);
  const after = offsetAt(tz, wall + DAY);
  const candidates = [wall - before, wall - after].filter((t) => t + offsetAt(tz, t) === wall).sort((a, b) => a - b);
  if (candidates.length > 0) return candidates[0]!;
  // A gap: the clock jumped forward (after > before) between these two instants, over `wall`.
  let lo = wall - after;
  let hi = wall - before;
  if (hi <= lo) return wall - before;
  const offsetBefore = offsetAt(tz, lo);
  while (hi - lo > SECOND) {
    const mid = lo + Math.floor((hi - lo) / (2 * SECOND)) * SECOND;
    if (offsetAt(tz, mid) === offsetBefore) lo = mid;
    else hi = mid;
  }
  return hi;
}

/** A parsed schedule: its pattern and zone, and the next tick after any instant. */
export class TickClock {
  private readonly cron: Cron;

  /** `option`: what a bad pattern's error names ("cron", "Reports.nightly.cron"). */
  constructor(
    readonly pattern: string,
    readonly tz: string,
    option = 'cron',
  ) {
    try {
      // paused, no function: croner never starts a timer of its own. A fixed offset of 0, not
      // timezone 'UTC': croner then skips its Intl path, 17 times faster (15 µs a tick, measured).
      this.cron = new Cron(pattern, { utcOffset: 0, paused: true });
    } catch (error) {
      throw new InvalidOptionError(option, `${JSON.stringify(String(pattern).slice(0, 100))} is not a cron pattern (${(error as Error).message})`, CRON_FIX);
    }
  }

  /** The first tick strictly after instant `afterMs`, or undefined when the pattern has no later match. */
  next(afterMs: number): number | undefined {
    let wall = wallClockAt(this.tz, afterMs);
    for (let walked = 0; walked < WALK_MAX; walked++) {
      const match = this.cron.nextRun(new Date(wall));
      if (!match) return undefined;
      const at = instantOf(this.tz, match.getTime());
      // A match whose instant is not later is one that already ran: the first pass of a repeated
      // hour (we are in its second pass), or a time of a gap that collapsed into its end.
      if (at > afterMs) return at;
      wall = match.getTime();
    }
    return undefined;
  }
}

/** Builds a schedule's clock, validating both (InvalidOptionError names `option`). */
export function tickClock(option: string, pattern: unknown, tz: unknown): TickClock {
  const zone = checkTimeZone(`${option}.tz`, tz);
  if (typeof pattern !== 'string' || pattern.trim().length === 0 || pattern.length > 200) {
    throw new InvalidOptionError(`${option}.cron`, `${JSON.stringify(pattern)} is not a cron pattern`, 'Pass a string of 5 or 6 fields, such as "0 3 * * *".');
  }
  const clock = new TickClock(pattern.trim(), zone, `${option}.cron`);
  if (clock.next(Date.now()) === undefined) throw new InvalidOptionError(`${option}.cron`, `${JSON.stringify(pattern)} has no tick in the future`, CRON_FIX);
  return clock;
}

export interface MissedRule {
  readonly policy: MissedPolicy;
  /** A tick handled more than this long after it fell due is missed (late but within it: it simply runs). */
  readonly missedAfterMs: number;
  /** 'all': at most this many missed ticks run, the latest ones. */
  readonly maxMissedRuns: number;
}

/** What a pass does with a schedule's due ticks. */
export interface TickPlan {
  /** The ticks whose job is inserted now, oldest first. */
  readonly run: number[];
  /** Due ticks that will never run (the missed policy dropped them). */
  readonly missed: number;
  /** The schedule's next tick: the first one after what this plan covered (undefined: none ever again). */
  readonly next: number | undefined;
  /** true when TICKS_WALKED_MAX ticks were walked and more are due: the next pass goes on. */
  readonly more: boolean;
}

/**
 * The plan for the ticks of a schedule that are due at `nowMs`, starting with `fromMs` (the
 * schedule's next tick, due since then). A tick at most `missedAfterMs` late runs whatever the
 * policy: it is on time, give or take the pass that found it. The others are missed: `latest`
 * runs the latest of them once, `all` runs them (the latest `maxMissedRuns`), `none` runs none.
 */
export function planTicks(clock: TickClock, fromMs: number, nowMs: number, rule: MissedRule): TickPlan {
  const onTime: number[] = [];
  const late: number[] = [];
  const keep = rule.policy === 'all' ? rule.maxMissedRuns : rule.policy === 'latest' ? 1 : 0;
  let tick: number | undefined = fromMs;
  let walked = 0;
  while (tick !== undefined && tick <= nowMs && walked < TICKS_WALKED_MAX) {
    if (nowMs - tick <= rule.missedAfterMs) onTime.push(tick);
    else late.push(tick);
    walked += 1;
    tick = clock.next(tick);
  }
  const more = tick !== undefined && tick <= nowMs;
  if (more) {
    // The walk was cut short, so the ticks it found may not be the latest: the ones the policy
    // could still run (the last `keep` late ones, and any on time) are left to the next walk,
    // which starts at them, and only the late ticks before them are counted missed now.
    const deferred = Math.min(keep > 0 && late.length > 0 ? late[Math.max(0, late.length - keep)]! : Infinity, onTime[0] ?? Infinity);
    if (deferred === Infinity) return { run: [], missed: late.length, next: tick, more };
    if (deferred > fromMs) return { run: [], missed: late.filter((t) => t < deferred).length, next: deferred, more };
    // Nothing could be left to the next walk without walking the same ticks again: decide here.
  }
  const kept = keep === 0 ? [] : late.slice(-keep);
  return { run: [...kept, ...onTime], missed: late.length - kept.length, next: tick, more };
}
