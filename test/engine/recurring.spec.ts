import { checkHealth, InvalidOptionError, JobStateError } from '../../lib/engine/index.js';
import { engineInternals } from '../../lib/engine/internals.js';
import { engineFixture, testLogger, waitFor } from '../support/engine.js';
import { testSignals } from '../support/signals.js';

/**
 * Recurring jobs (docs/recurring-jobs.md) against a real database: the runtime API, one job per
 * tick with several engines racing, the missed policies and overlap (the schedule's next tick
 * moved into the past by SQL, then one ticker pass: no waiting out real ticks), the unique
 * (schedule, tick) key, and the code declarations of deploys.
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('recurring');
});
afterAll(() => fx.close());

/** Moves a schedule's next tick `agoMs` into the past, on a whole second (ticks are whole seconds). */
async function dueSince(name: string, agoMs: number): Promise<number> {
  const { rows } = await fx.pool.query<{ at: number }>(
    `UPDATE pgqueue.schedules SET next_tick_at = date_trunc('second', now() - $2 * interval '1 millisecond')
     WHERE name = $1 RETURNING (extract(epoch FROM next_tick_at) * 1000)::float8 AS at`,
    [name, agoMs],
  );
  return rows[0]!.at;
}

async function ticksOf(name: string) {
  const { rows } = await fx.pool.query<{ tick: number; job_id: string | null; skipped: boolean; available: number | null }>(
    `SELECT (extract(epoch FROM t.tick_at) * 1000)::float8 AS tick, t.job_id::text, t.skipped, (extract(epoch FROM j.available_at) * 1000)::float8 AS available
     FROM pgqueue.schedule_ticks t LEFT JOIN pgqueue.job_rows j ON j.id = t.job_id WHERE t.schedule_name = $1 ORDER BY t.tick_at`,
    [name],
  );
  return rows;
}

describe('the runtime API', () => {
  test('upsert, get, list, pause, resume, remove', async () => {
    const q = fx.make();
    const created = await q.schedules.upsert({ name: 'tenant-1:report', queue: 'reports', cron: '0 3 * * *', tz: 'Europe/Paris', payload: { tenant: 1 } });
    expect(created).toMatchObject({ name: 'tenant-1:report', queue: 'reports', source: 'runtime', cron: '0 3 * * *', tz: 'Europe/Paris', payload: { tenant: 1 }, missed: 'latest', overlap: false, paused: false, lateMs: 0, ticks: { run: 0, missed: 0, skipped: 0 } });
    expect(created.nextTickAt!.getTime()).toBeGreaterThan(Date.now() - 60_000);
    // 03:00 in Paris is 01:00Z or 02:00Z.
    expect([1, 2]).toContain(created.nextTickAt!.getUTCHours());
    expect(await q.schedules.get('tenant-1:report')).toEqual(created);
    await q.schedules.upsert({ name: 'tenant-2:report', queue: 'reports', cron: '0 4 * * *' });
    expect((await q.schedules.list({ queue: 'reports' })).map((s) => s.name)).toEqual(['tenant-1:report', 'tenant-2:report']);
    expect((await q.schedules.list({ queue: 'reports', after: 'tenant-1:report' })).map((s) => s.name)).toEqual(['tenant-2:report']);
    // A change of payload keeps the next tick; a new pattern starts from now.
    const payloadOnly = await q.schedules.upsert({ name: 'tenant-1:report', queue: 'reports', cron: '0 3 * * *', tz: 'Europe/Paris', payload: { tenant: 1, v: 2 } });
    expect(payloadOnly.nextTickAt).toEqual(created.nextTickAt);
    const paused = await q.schedules.pause('tenant-1:report');
    expect(paused).toMatchObject({ paused: true, pausedReason: 'operator' });
    expect(await q.schedules.upsert({ name: 'tenant-1:report', queue: 'reports', cron: '0 5 * * *' })).toMatchObject({ paused: true });
    const resumed = await q.schedules.resume('tenant-1:report');
    expect(resumed).toMatchObject({ paused: false, pausedReason: null, cron: '0 5 * * *' });
    expect(resumed.nextTickAt!.getUTCHours()).toBe(5);
    await q.schedules.remove('tenant-1:report');
    expect(await q.schedules.get('tenant-1:report')).toBeUndefined();
  });

  test('refusals: an unknown schedule, a bad pattern, zone or option (before any SQL)', async () => {
    const q = fx.make();
    await expect(q.schedules.pause('nope')).rejects.toMatchObject({ code: 'SCHEDULE_NOT_FOUND' });
    await expect(q.schedules.remove('nope')).rejects.toBeInstanceOf(JobStateError);
    await expect(q.schedules.upsert({ name: 'x', queue: 'q', cron: '0 3 * *' })).rejects.toThrow(/"schedule\.cron"/);
    await expect(q.schedules.upsert({ name: 'x', queue: 'q', cron: '0 3 * * *', tz: 'Nowhere/City' })).rejects.toThrow(/"schedule\.tz"/);
    await expect(q.schedules.upsert({ name: 'x', queue: 'q', cron: '0 3 * * *', missed: 'some' as never })).rejects.toThrow(InvalidOptionError);
    await expect(q.schedules.upsert({ name: 'x', queue: 'q', cron: '0 3 * * *', maxMissedRuns: 0 })).rejects.toThrow(/"schedule\.maxMissedRuns"/);
    await expect(q.schedules.upsert({ name: 'x', queue: 'q', cron: '0 3 * * *', everyDay: true } as never)).rejects.toThrow(/"schedule\.everyDay"/);
    await expect(q.schedules.upsert({ name: '', queue: 'q', cron: '0 3 * * *' })).rejects.toThrow(/"schedule\.name"/);
  });
});

describe('ticks', () => {
  test('three engines racing a per-second schedule: every tick has exactly one job, due at its tick', async () => {
    const queue = 'race';
    const engines = [1, 2, 3].map(() => fx.make({ ticker: { intervalMs: 200 } }));
    for (const e of engines) e.work(queue, async () => {});
    await Promise.all(engines.map((e) => e.start()));
    await engines[0]!.schedules.upsert({ name: 'race', queue, cron: '* * * * * *' });
    await waitFor(async () => (await ticksOf('race')).length >= 4, 15_000, 100);
    await engines[0]!.schedules.pause('race');
    const ticks = await ticksOf('race');
    expect(ticks.every((t) => t.job_id !== null && t.available === t.tick)).toBe(true);
    // Consecutive seconds, none twice (the key), none missing.
    for (let i = 1; i < ticks.length; i++) expect(ticks[i]!.tick - ticks[i - 1]!.tick).toBe(1_000);
    const { rows } = await fx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = $1`, [queue]);
    expect(rows[0]!.n).toBe(ticks.length);
    const record = await engines[0]!.schedules.get('race');
    expect(record!.ticks).toEqual({ run: ticks.length, missed: 0, skipped: 0 });
    expect(record!.lastJobId).toBe(ticks.at(-1)!.job_id);
    // Each engine counted what it inserted; together, every job.
    expect(engines.reduce((sum, e) => sum + engineInternals(e).metrics.count('schedule_jobs_enqueued', { queue }), 0)).toBe(ticks.length);
  });

  test.each([
    ['latest', 1],
    ['all', 5],
    ['none', 0],
  ] as const)('missed %s: after 20 s with no ticker, %i missed tick(s) run, the others are counted missed, the on-time ones run', async (missed, lateRun) => {
    const q = fx.make({ ticker: false });
    const name = `missed-${missed}`;
    const ticker = fx.make({ ticker: { intervalMs: 60_000 } });
    await q.schedules.upsert({ name, queue: 'missed', cron: '* * * * * *', missed, missedAfterMs: 2_500, maxMissedRuns: 5, overlap: true });
    const from = await dueSince(name, 20_000);
    const result = await engineInternals(ticker).ticker!.runOnce();
    const ticks = await ticksOf(name);
    const record = (await q.schedules.get(name))!;
    const next = record.nextTickAt!.getTime();
    const due = (next - from) / 1_000;
    expect(due).toBeGreaterThanOrEqual(21);
    // Every due tick either ran or was counted missed, once; the ones that ran are the latest.
    expect(result.missed + ticks.length).toBe(due);
    expect(ticks.map((t) => t.tick)).toEqual(Array.from({ length: ticks.length }, (_, i) => next - (ticks.length - i) * 1_000));
    // Those within 2.5 s of now (2 or 3: now is not on a whole second), and the late ones the policy keeps.
    expect([2, 3]).toContain(ticks.length - lateRun);
    expect(record.ticks).toEqual({ run: ticks.length, missed: result.missed, skipped: 0 });
    expect(engineInternals(ticker).metrics.count('schedule_ticks_missed', { queue: 'missed' })).toBeGreaterThanOrEqual(result.missed);
  });

  test('overlap: a tick is skipped (and counted) while the previous tick\'s job is unfinished, and runs with overlap: true', async () => {
    const q = fx.make({ ticker: false });
    const ticker = engineInternals(fx.make()).ticker!;
    await q.schedules.upsert({ name: 'slow', queue: 'slow', cron: '* * * * * *' });
    await q.schedules.upsert({ name: 'slow-overlap', queue: 'slow', cron: '* * * * * *', overlap: true });
    /** One tick each: the next second's, once the database's clock has reached it. */
    const oneTick = async () => {
      const { rows } = await fx.pool.query<{ at: string }>(`SELECT date_trunc('second', now()) + interval '1 second' AS at`);
      await waitFor(async () => (await fx.pool.query(`SELECT now() >= $1::timestamptz AS due`, [rows[0]!.at])).rows[0].due, 5_000);
      await fx.pool.query(`UPDATE pgqueue.schedules SET next_tick_at = $1 WHERE name IN ('slow', 'slow-overlap')`, [rows[0]!.at]);
      await ticker.runOnce();
    };
    await oneTick();
    // No worker: the first tick's job stays pending. The next tick of each:
    await oneTick();
    const slow = await ticksOf('slow');
    expect(slow.map((t) => t.skipped)).toEqual([false, true]);
    expect(slow[1]!.job_id).toBeNull();
    expect((await q.schedules.get('slow'))!.ticks).toEqual({ run: 1, missed: 0, skipped: 1 });
    expect((await ticksOf('slow-overlap')).map((t) => t.skipped)).toEqual([false, false]);
    // Once the job is finished, the next tick runs again.
    await fx.pool.query(`UPDATE pgqueue.jobs SET status = 'succeeded', finished_at = now() WHERE id = $1`, [slow[0]!.job_id]);
    await oneTick();
    expect((await ticksOf('slow')).map((t) => t.skipped)).toEqual([false, true, false]);
  });

  test('the unique (schedule, tick) key: a schedule moved back to ticks that ran gets no second job', async () => {
    const q = fx.make({ ticker: false });
    const logger = testLogger();
    const ticker = engineInternals(fx.make({ logger })).ticker!;
    await q.schedules.upsert({ name: 'moved-back', queue: 'moved', cron: '* * * * * *', overlap: true });
    await dueSince('moved-back', 2_000);
    await ticker.runOnce();
    const first = await ticksOf('moved-back');
    expect(first).toHaveLength(3);
    // Something moved it back onto those ticks (a bug, a restored backup, a hand edit):
    await fx.pool.query(`UPDATE pgqueue.schedules SET next_tick_at = to_timestamp($2 / 1000.0) WHERE name = $1`, ['moved-back', first[0]!.tick]);
    await ticker.runOnce();
    const after = await ticksOf('moved-back');
    expect(after.slice(0, 3)).toEqual(first);
    const { rows } = await fx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgqueue.job_rows WHERE queue_name = 'moved'`);
    expect(rows[0]!.n).toBe(after.length);
    expect(logger.lines.some((l) => l.includes('already had a job'))).toBe(true);
  });

  test('a paused schedule does not tick; stats, metrics and health show a late one', async () => {
    const q = fx.make({ ticker: false });
    await q.schedules.upsert({ name: 'late-one', queue: 'late', cron: '*/5 * * * *' });
    await dueSince('late-one', 90_000);
    const stats = await q.stats();
    const queue = stats.schedules.queues.find((s) => s.queue === 'late')!;
    expect(queue).toMatchObject({ active: 1, paused: 0 });
    expect(queue.maxLateMs).toBeGreaterThanOrEqual(90_000);
    expect(stats.schedules.late.map((l) => l.name)).toContain('late-one');
    const text = await q.prometheus();
    expect(text).toMatch(/^pgqueue_schedule_late_seconds\{queue="late"\} 9\d\.\d+$/m);
    expect(text).toContain('pgqueue_schedules{queue="late",state="active"} 1');
    const health = await checkHealth(q, { maxScheduleLateMs: 60_000 });
    expect(health.healthy).toBe(false);
    expect(health.problems.join('\n')).toMatch(/schedule "late-one" \(queue "late"\)/);
    expect((await checkHealth(q, { maxScheduleLateMs: 600_000 })).problems.filter((p) => p.includes('late-one'))).toEqual([]);
    await q.schedules.pause('late-one');
    expect((await checkHealth(q, { maxScheduleLateMs: 60_000 })).problems.filter((p) => p.includes('late-one'))).toEqual([]);
    await engineInternals(fx.make()).ticker!.runOnce();
    expect(await ticksOf('late-one')).toEqual([]);
  });
});

describe('code declarations and deploys', () => {
  /** A process of release `release`: a handler of `queue` and the schedules its code declares. */
  function release(queue: string, schedules: [cron: string, options: Parameters<ReturnType<typeof fx.make>['recurring']>[2]][], logger = testLogger()) {
    const q = fx.make({ logger, ticker: false });
    q.work(queue, async () => {});
    for (const [cron, options] of schedules) q.recurring(queue, cron, options);
    return { q, logger };
  }

  test('the newest declaration wins and an older release restarting never brings its schedules back; a dropped one is paused, not deleted', async () => {
    const queue = 'deploys';
    const api = fx.make({ ticker: false });
    await api.schedules.upsert({ name: 'deploys:tenant', queue, cron: '0 1 * * *' });
    const v1 = release(queue, [['0 3 * * *', { name: 'nightly' }], ['0 * * * *', { name: 'hourly' }]]);
    await v1.q.start({ workers: false });
    expect((await api.schedules.get('nightly'))!).toMatchObject({ source: 'code', cron: '0 3 * * *', paused: false });

    // v2 changes the nightly one and drops the hourly one.
    const v2 = release(queue, [['0 4 * * *', { name: 'nightly', tz: 'Europe/Paris' }]]);
    await v2.q.start({ workers: false });
    expect(await api.schedules.get('nightly')).toMatchObject({ cron: '0 4 * * *', tz: 'Europe/Paris' });
    expect(await api.schedules.get('hourly')).toMatchObject({ paused: true, pausedReason: 'removed' });

    // A v1 process restarts mid-deploy: it changes nothing, and says why.
    const v1again = release(queue, [['0 3 * * *', { name: 'nightly' }], ['0 * * * *', { name: 'hourly' }]]);
    await v1again.q.start({ workers: false });
    expect(await api.schedules.get('nightly')).toMatchObject({ cron: '0 4 * * *' });
    expect(await api.schedules.get('hourly')).toMatchObject({ paused: true, pausedReason: 'removed' });
    expect(v1again.logger.lines.join('\n')).toMatch(/older than the ones in force/);

    // Another v2 process: same declaration, nothing to do.
    const v2again = release(queue, [['0 4 * * *', { name: 'nightly', tz: 'Europe/Paris' }]]);
    await v2again.q.start({ workers: false });
    expect(v2again.logger.lines).toEqual([]);

    // The runtime schedule of the same queue was never touched; the removed one can be resumed by code only, or removed.
    expect(await api.schedules.get('deploys:tenant')).toMatchObject({ source: 'runtime', paused: false, cron: '0 1 * * *' });
    await expect(api.schedules.resume('hourly')).rejects.toMatchObject({ code: 'SCHEDULE_OWNED_BY_CODE' });
    await expect(api.schedules.upsert({ name: 'nightly', queue, cron: '0 5 * * *' })).rejects.toMatchObject({ code: 'SCHEDULE_OWNED_BY_CODE' });
    await expect(api.schedules.remove('nightly')).rejects.toMatchObject({ code: 'SCHEDULE_OWNED_BY_CODE' });

    // v3 brings the hourly one back as it was: the database has seen that declaration, so it needs a version.
    const v3 = release(queue, [['0 4 * * *', { name: 'nightly', tz: 'Europe/Paris' }], ['0 * * * *', { name: 'hourly', version: 1 }]]);
    await v3.q.start({ workers: false });
    const hourly = (await api.schedules.get('hourly'))!;
    expect(hourly).toMatchObject({ paused: false, pausedReason: null });
    expect(hourly.nextTickAt!.getTime()).toBeGreaterThan(Date.now() - 5_000);
    const code = await api.schedules.list({ queue, source: 'code' });
    expect(code.map((s) => s.name)).toEqual(['hourly', 'nightly']);
  });

  test('an operator\'s pause of a code schedule outlives deploys; a code name taken by a runtime schedule is refused and logged', async () => {
    const queue = 'deploys-2';
    const api = fx.make({ ticker: false });
    await api.schedules.upsert({ name: 'taken', queue, cron: '0 1 * * *' });
    const v1 = release(queue, [['0 3 * * *', { name: 'kept-paused' }], ['0 2 * * *', { name: 'taken' }]]);
    await v1.q.start({ workers: false });
    expect(v1.logger.lines.join('\n')).toMatch(/"taken" of queue "deploys-2" is not declared/);
    expect(await api.schedules.get('taken')).toMatchObject({ source: 'runtime', cron: '0 1 * * *' });
    await api.schedules.pause('kept-paused');
    const v2 = release(queue, [['30 3 * * *', { name: 'kept-paused' }]]);
    await v2.q.start({ workers: false });
    expect(await api.schedules.get('kept-paused')).toMatchObject({ cron: '30 3 * * *', paused: true, pausedReason: 'operator' });
  });

  test('a schedule for a queue without a handler here fails the start; two of one name fail at once', async () => {
    const q = fx.make({ ticker: false });
    q.recurring('orphan', '0 3 * * *');
    await expect(q.start()).rejects.toThrow(/no handler in this process/);
    const r = fx.make({ ticker: false });
    r.work('twice', async () => {});
    r.recurring('twice', '0 3 * * *');
    expect(() => r.recurring('twice', '0 4 * * *')).toThrow(/two schedules of this process are named "twice"/);
  });

  test('ticks of a started engine wake its workers: the job runs', async () => {
    const q = fx.make({ ticker: { intervalMs: 200 } });
    let ran = 0;
    q.work('runs', async () => {
      ran += 1;
    });
    q.recurring('runs', '* * * * * *', { payload: { hello: 'tick' } });
    await q.start();
    await waitFor(() => ran >= 2, 10_000);
    await q.stop();
    expect((await testSignals(q).ticker.passRan.count) > 0).toBe(true);
  });
});
