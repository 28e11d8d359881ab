import 'reflect-metadata';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Cron, CronExpression, Interval, ScheduleModule, SchedulerRegistry, Timeout } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  PG_QUEUE_ENGINE,
  PgQueueModule,
  PRUNER_INTERVAL_NAME,
  QueueService,
  REAPER_INTERVAL_NAME,
  type PgQueue,
  type PgQueueModuleOptions,
} from '../../lib/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { CapturingLogger } from '../support/nest.js';
import { testSignals } from '../support/signals.js';
import { engineInternals } from '../../lib/engine/internals.js';

/** The application's own scheduled task, as most Nest apps have one. */
const TICK_MS = 100;

@Injectable()
class Heartbeat {
  static ticks = 0;
  @Interval(TICK_MS)
  tick(): void {
    Heartbeat.ticks += 1;
  }
}

@Injectable()
class NightlyReports {
  @Cron(CronExpression.EVERY_DAY_AT_MIDNIGHT)
  compile(): void {}

  @Timeout(60_000)
  warmUp(): void {}
}

/**
 * How often `count()` grows while `windowMs` passes: real time on purpose, since what is checked
 * is how often a timer fires. A timer with period `periodMs` fires at most
 * N+1 times in N periods (Node never fires an interval early, only late), so the bound needs no
 * assumption about how busy the machine is.
 */
async function measure(count: () => number, windowMs: number, periodMs: number): Promise<{ fired: number; periods: number }> {
  const before = count();
  const startedAt = performance.now();
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  const fired = count() - before;
  return { fired, periods: Math.ceil((performance.now() - startedAt) / periodMs) };
}

describe('PgQueueModule and @nestjs/schedule', () => {
  let database: TestDatabase;
  const opened: INestApplicationContext[] = [];

  beforeAll(async () => {
    database = await createTestDatabase('schedule');
  });

  afterEach(async () => {
    for (const app of opened.splice(0)) await app.close();
  });

  afterAll(async () => {
    await database?.drop();
  });

  const fast = (): PgQueueModuleOptions => ({ connectionString: database.url, pollIntervalMs: 100, reaper: { intervalMs: 100 } });

  async function boot(imports: unknown[], providers: unknown[] = [], logger = new CapturingLogger()) {
    const app = await Test.createTestingModule({ imports: imports as never[], providers: providers as never[] })
      .setLogger(logger)
      .compile();
    opened.push(app);
    await app.init();
    const engine = app.get<PgQueue>(PG_QUEUE_ENGINE);
    testSignals(engine); // on before the orphans of the test exist: no pass that reaps them is missed
    return { app, engine, logger };
  }

  /** The app's SchedulerRegistry, or undefined when the app has no ScheduleModule. */
  function registryOf(app: INestApplicationContext): SchedulerRegistry | undefined {
    try {
      return app.get(SchedulerRegistry, { strict: false });
    } catch {
      return undefined;
    }
  }

  /** A job whose worker vanished (running, lease expired): only the reaper moves it on. */
  async function orphanJob(): Promise<string> {
    const pool = new pg.Pool({ connectionString: database.url });
    try {
      const { rows } = await pool.query<{ id: string }>(
        `INSERT INTO pgqueue.jobs (queue_name, payload, status, attempt_count, max_attempts, lease_owner, lease_token,
                                   lease_expires_at, deadline_at, claimed_at, backoff_base_ms, backoff_max_ms)
         VALUES ('orphans', '{}', 'running', 1, 5, 'gone:1', 1, now() - interval '1 second', now() + interval '1 minute', now(), 0, 0)
         RETURNING id`,
      );
      return rows[0]!.id;
    } finally {
      await pool.end();
    }
  }

  async function expectReaped(app: INestApplicationContext, id: string): Promise<void> {
    const queue = app.get(QueueService);
    // Whichever timer runs the pass (the engine's or the app's SchedulerRegistry), it signals.
    await testSignals(app).reaper.passRan.waitFor((p) => p.reaped > 0, 5_000);
    const reaped = (await queue.get(id))!;
    expect(reaped.status).not.toBe('running');
    expect(reaped.leaseOwner).toBeNull();
    expect((await queue.history(id)).map((e) => e.kind)).toContain('lease_expired');
  }

  it("does not make the application's own @Interval fire twice when the app imports ScheduleModule too", async () => {
    await boot([ScheduleModule.forRoot(), PgQueueModule.forRoot(fast())], [Heartbeat]);
    const { fired, periods } = await measure(() => Heartbeat.ticks, 10 * TICK_MS, TICK_MS);
    expect(fired).toBeGreaterThan(0);
    expect(fired).toBeLessThanOrEqual(periods + 1);
  });

  it("without ScheduleModule runs the passes on the engine's own timers and registers nothing", async () => {
    const { app, engine } = await boot([PgQueueModule.forRoot({ ...fast(), queues: ['orphans'] })]);
    expect(registryOf(app)).toBeUndefined();
    expect(engineInternals(engine).reaper['runner'].running).toBe(true);
    expect(engineInternals(engine).pruner!['runner'].running).toBe(true);
    await expectReaped(app, await orphanJob());

    await app.close();
    opened.splice(opened.indexOf(app), 1);
    expect(engineInternals(engine).reaper['runner'].running).toBe(false);
    expect(engineInternals(engine).pruner!['runner'].running).toBe(false);
  });

  it('with ScheduleModule runs the passes from SchedulerRegistry, on one timer each, and removes them at shutdown', async () => {
    const { app, engine } = await boot([ScheduleModule.forRoot(), PgQueueModule.forRoot({ ...fast(), queues: ['orphans'] })]);
    const registry = app.get(SchedulerRegistry);
    expect(registry.getIntervals()).toEqual(expect.arrayContaining([REAPER_INTERVAL_NAME, PRUNER_INTERVAL_NAME]));
    // Never both timers: the engine's own ones stay off.
    expect(engineInternals(engine).reaper['runner'].running).toBe(false);
    expect(engineInternals(engine).pruner!['runner'].running).toBe(false);

    // Exactly one timer runs the reaper's pass: at most N+1 passes in N intervals.
    let passes = 0;
    const reaper = engineInternals(engine).reaper;
    const reapOnce = reaper.runOnce.bind(reaper);
    reaper.runOnce = () => {
      passes += 1;
      return reapOnce();
    };
    const { fired, periods } = await measure(() => passes, 10 * fast().reaper!.intervalMs!, fast().reaper!.intervalMs!);
    expect(fired).toBeGreaterThan(0);
    expect(fired).toBeLessThanOrEqual(periods + 1);

    await expectReaped(app, await orphanJob());

    await app.close();
    opened.splice(opened.indexOf(app), 1);
    expect(registry.getIntervals()).not.toContain(REAPER_INTERVAL_NAME);
    expect(registry.getIntervals()).not.toContain(PRUNER_INTERVAL_NAME);
  });

  it('with pruner: false registers no pruner', async () => {
    const { app, engine } = await boot([ScheduleModule.forRoot(), PgQueueModule.forRoot({ ...fast(), pruner: false })]);
    expect(engine.hostablePasses.map((pass) => pass.name)).toEqual(['reaper']);
    expect(app.get(SchedulerRegistry).getIntervals()).toContain(REAPER_INTERVAL_NAME);
    expect(app.get(SchedulerRegistry).getIntervals()).not.toContain(PRUNER_INTERVAL_NAME);
  });

  it('warns at bootstrap about @Cron, @Interval and @Timeout methods when the app has no ScheduleModule, naming them and the fix', async () => {
    const { logger } = await boot([PgQueueModule.forRoot(fast())], [NightlyReports, Heartbeat]);
    const warnings = logger.messages('warn', 'PgQueue');
    expect(warnings).toHaveLength(1);
    for (const method of ['NightlyReports.compile (@Cron)', 'NightlyReports.warmUp (@Timeout)', 'Heartbeat.tick (@Interval)']) {
      expect(warnings[0]).toContain(method);
    }
    expect(warnings[0]).toMatch(/will not run: this application does not import ScheduleModule/);
    expect(warnings[0]).toMatch(/add ScheduleModule\.forRoot\(\) to your AppModule's imports/);
  });

  it('does not warn when the app imports ScheduleModule', async () => {
    const { logger } = await boot([ScheduleModule.forRoot(), PgQueueModule.forRoot(fast())], [NightlyReports]);
    expect(logger.messages('warn', 'PgQueue')).toEqual([]);
    expect(logger.messages('warn').join('\n')).not.toMatch(/ScheduleModule/);
  });
});
