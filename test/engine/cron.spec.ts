import { instantOf, planTicks, tickClock, TICKS_WALKED_MAX, type MissedRule } from '../../lib/engine/cron.js';
import { InvalidOptionError } from '../../lib/engine/errors.js';

/**
 * Ticks computed at fixed instants (docs/recurring-jobs.md#time-zones): never against the wall
 * clock. Europe/Paris springs forward on 2025-03-30 at 02:00 CET (01:00Z) to 03:00 CEST, and falls
 * back on 2025-10-26 at 03:00 CEST (01:00Z) to 02:00 CET, so 02:00-02:59 happens twice that night.
 */

const at = (iso: string) => Date.parse(iso);
const iso = (t: number | undefined) => (t === undefined ? undefined : new Date(t).toISOString().replace('.000Z', 'Z'));

function ticks(pattern: string, tz: string, from: string, n: number): (string | undefined)[] {
  const clock = tickClock('test', pattern, tz);
  const out: (string | undefined)[] = [];
  let t: number | undefined = at(from);
  for (let i = 0; i < n && t !== undefined; i++) out.push(iso((t = clock.next(t))));
  return out;
}

describe('time zones', () => {
  test('a daily 03:00 in Paris is 02:00Z in winter and 01:00Z in summer', () => {
    expect(ticks('0 3 * * *', 'Europe/Paris', '2025-03-28T12:00:00Z', 4)).toEqual(['2025-03-29T02:00:00Z', '2025-03-30T01:00:00Z', '2025-03-31T01:00:00Z', '2025-04-01T01:00:00Z']);
  });

  test('spring forward: 02:30, which does not exist, runs once at the first valid instant after it (03:00 CEST)', () => {
    expect(ticks('30 2 * * *', 'Europe/Paris', '2025-03-29T12:00:00Z', 3)).toEqual(['2025-03-30T01:00:00Z', '2025-03-31T00:30:00Z', '2025-04-01T00:30:00Z']);
    // From inside the day, just before the gap: the same single run.
    expect(ticks('30 2 * * *', 'Europe/Paris', '2025-03-30T00:59:59Z', 1)).toEqual(['2025-03-30T01:00:00Z']);
  });

  test('spring forward: every time of the gap the pattern names collapses into one run at its end', () => {
    // 01:45 CET, then 02:00/02:15/02:30/02:45 (none exists) and 03:00 all run once at 01:00Z, then 03:15 CEST.
    expect(ticks('*/15 * * * *', 'Europe/Paris', '2025-03-30T00:40:00Z', 3)).toEqual(['2025-03-30T00:45:00Z', '2025-03-30T01:00:00Z', '2025-03-30T01:15:00Z']);
    expect(ticks('*/20 2 * * *', 'Europe/Paris', '2025-03-29T12:00:00Z', 2)).toEqual(['2025-03-30T01:00:00Z', '2025-03-31T00:00:00Z']);
  });

  test('autumn: 02:30, which happens twice, runs once, at its first occurrence (CEST)', () => {
    expect(ticks('30 2 * * *', 'Europe/Paris', '2025-10-25T12:00:00Z', 2)).toEqual(['2025-10-26T00:30:00Z', '2025-10-27T01:30:00Z']);
    expect(ticks('0,30 2 * * *', 'Europe/Paris', '2025-10-25T23:30:00Z', 3)).toEqual(['2025-10-26T00:00:00Z', '2025-10-26T00:30:00Z', '2025-10-27T01:00:00Z']);
  });

  test('autumn: from inside the second pass of the repeated hour, its times do not run again', () => {
    // 01:10Z is 02:10 CET, the second 02:10 of the night: 02:30 ran at 00:30Z already.
    expect(ticks('30 2 * * *', 'Europe/Paris', '2025-10-26T01:10:00Z', 1)).toEqual(['2025-10-27T01:30:00Z']);
    // An hourly pattern runs 02:00 once too (the decision is one rule for every pattern): 03:00 CET next.
    expect(ticks('0 * * * *', 'Europe/Paris', '2025-10-25T23:30:00Z', 3)).toEqual(['2025-10-26T00:00:00Z', '2025-10-26T02:00:00Z', '2025-10-26T03:00:00Z']);
  });

  test('New York (a transition at 02:00 local, 5 h behind), Lord Howe (a 30-minute shift) and UTC', () => {
    expect(ticks('30 2 * * *', 'America/New_York', '2025-03-08T12:00:00Z', 2)).toEqual(['2025-03-09T07:00:00Z', '2025-03-10T06:30:00Z']);
    expect(ticks('30 1 * * *', 'America/New_York', '2025-11-01T12:00:00Z', 2)).toEqual(['2025-11-02T05:30:00Z', '2025-11-03T06:30:00Z']);
    // Lord Howe falls back at 02:00 to 01:30 on 2025-04-06: 01:45 happens twice, runs once (the first, +11).
    expect(ticks('45 1 * * *', 'Australia/Lord_Howe', '2025-04-05T00:00:00Z', 2)).toEqual(['2025-04-05T14:45:00Z', '2025-04-06T15:15:00Z']);
    expect(ticks('* * * * * *', 'UTC', '2025-03-08T00:00:00.400Z', 2)).toEqual(['2025-03-08T00:00:01Z', '2025-03-08T00:00:02Z']);
  });

  test('instantOf maps each kind of local time', () => {
    const wall = (s: string) => Date.parse(`${s}Z`);
    expect(iso(instantOf('Europe/Paris', wall('2025-01-15T12:00:00')))).toBe('2025-01-15T11:00:00Z');
    expect(iso(instantOf('Europe/Paris', wall('2025-03-30T02:59:59')))).toBe('2025-03-30T01:00:00Z');
    expect(iso(instantOf('Europe/Paris', wall('2025-10-26T02:00:00')))).toBe('2025-10-26T00:00:00Z');
  });

  test('a bad zone or pattern is an InvalidOptionError naming the option', () => {
    expect(() => tickClock('nightly', '0 3 * * *', 'Mars/Olympus')).toThrow(InvalidOptionError);
    expect(() => tickClock('nightly', '0 3 * * *', 'Mars/Olympus')).toThrow(/"nightly\.tz"/);
    expect(() => tickClock('nightly', '61 * * * *', 'UTC')).toThrow(/"nightly\.cron"/);
    expect(() => tickClock('nightly', '', 'UTC')).toThrow(/"nightly\.cron"/);
    expect(() => tickClock('nightly', '0 0 0 1 1 * 2001', 'UTC')).toThrow(/no tick in the future/);
  });
});

describe('missed ticks', () => {
  const everySecond = tickClock('test', '* * * * * *', 'UTC');
  const rule = (policy: MissedRule['policy'], maxMissedRuns = 5): MissedRule => ({ policy, missedAfterMs: 3_000, maxMissedRuns });

  test('on time (within missedAfterMs) every due tick runs, whatever the policy', () => {
    for (const policy of ['latest', 'all', 'none'] as const) {
      expect(planTicks(everySecond, 10_000, 12_500, rule(policy))).toEqual({ run: [10_000, 11_000, 12_000], missed: 0, next: 13_000, more: false });
    }
  });

  test('latest: the latest missed tick runs once, the older ones are counted missed', () => {
    // 20 s down: ticks 0..20 s due, 0..16 s are more than 3 s late.
    expect(planTicks(everySecond, 0, 20_000, rule('latest'))).toEqual({ run: [16_000, 17_000, 18_000, 19_000, 20_000], missed: 16, next: 21_000, more: false });
  });

  test('all: the missed ticks run too, at most maxMissedRuns of them (the latest)', () => {
    expect(planTicks(everySecond, 0, 20_000, rule('all', 5))).toEqual({ run: [12_000, 13_000, 14_000, 15_000, 16_000, 17_000, 18_000, 19_000, 20_000], missed: 12, next: 21_000, more: false });
    expect(planTicks(everySecond, 0, 20_000, rule('all', 100)).run).toHaveLength(21);
  });

  test('none: no missed tick runs', () => {
    expect(planTicks(everySecond, 0, 20_000, rule('none'))).toEqual({ run: [17_000, 18_000, 19_000, 20_000], missed: 17, next: 21_000, more: false });
  });

  test('a backlog longer than a walk is counted missed over several passes', () => {
    const s = (n: number) => n * 1_000;
    const now = s(TICKS_WALKED_MAX + 10);
    // The first walk stops after TICKS_WALKED_MAX ticks: the last late one it saw is left to the next.
    const first = planTicks(everySecond, 0, now, rule('latest'));
    expect(first).toEqual({ run: [], missed: TICKS_WALKED_MAX - 1, next: s(TICKS_WALKED_MAX - 1), more: true });
    const second = planTicks(everySecond, first.next!, now, rule('latest'));
    expect(second).toEqual({ run: [s(TICKS_WALKED_MAX + 6), s(TICKS_WALKED_MAX + 7), s(TICKS_WALKED_MAX + 8), s(TICKS_WALKED_MAX + 9), now], missed: 7, next: now + 1_000, more: false });
    // Every due tick is either run or counted missed, once.
    expect(first.missed + second.missed + second.run.length).toBe(TICKS_WALKED_MAX + 11);
    // A cut that falls inside the on-time window leaves the on-time ticks (and the latest late one) to the next walk.
    const late = planTicks(everySecond, 0, s(TICKS_WALKED_MAX + 1), rule('latest'));
    expect(late).toEqual({ run: [], missed: TICKS_WALKED_MAX - 3, next: s(TICKS_WALKED_MAX - 3), more: true });
    const rest = planTicks(everySecond, late.next!, s(TICKS_WALKED_MAX + 1), rule('latest'));
    expect(rest.run).toEqual([s(TICKS_WALKED_MAX - 3), s(TICKS_WALKED_MAX - 2), s(TICKS_WALKED_MAX - 1), s(TICKS_WALKED_MAX), s(TICKS_WALKED_MAX + 1)]);
    expect(late.missed + rest.missed + rest.run.length).toBe(TICKS_WALKED_MAX + 2);
  });
});
