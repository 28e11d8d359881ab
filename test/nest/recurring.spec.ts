import 'reflect-metadata';
import { Injectable } from '@nestjs/common';
import { ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError, JobHandler, PgQueueHealthIndicator, PgQueueModule, Processor, QueueService, Recurring, type Job, type JobProcessor } from '../../lib/index.js';
import { CapturingLogger, nestSuite } from '../support/nest.js';
import { waitFor } from '../support/engine.js';

@Injectable()
class ReportJobs {
  static readonly ran: { payload: unknown }[] = [];
  @JobHandler('nest-reports')
  @Recurring('0 3 * * *', { tz: 'Europe/Paris', payload: { kind: 'nightly' }, name: 'reports:nightly' })
  @Recurring('* * * * * *', { payload: { kind: 'every-second' }, name: 'reports:fast', missed: 'none' })
  async handle(job: Job<{ kind: string }>): Promise<void> {
    ReportJobs.ran.push({ payload: job.payload });
  }
}

@Recurring('0 0 * * 0', { payload: { weekly: true } })
@Processor('nest-cleanup')
class CleanupProcessor implements JobProcessor {
  async process(): Promise<void> {}
}

@Injectable()
class Stray {
  @Recurring('0 3 * * *')
  async notAHandler(): Promise<void> {}
}

describe('@Recurring', () => {
  const suite = nestSuite('recurring');

  async function compile(providers: unknown[], imports: unknown[] = []) {
    const logger = new CapturingLogger();
    const app = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ connectionString: suite.url, pollIntervalMs: 100, ticker: { intervalMs: 200 } }), ...(imports as never[])],
      providers: providers as never[],
    })
      .setLogger(logger)
      .compile();
    suite.opened(app);
    return { app, logger };
  }

  it('declares the schedules of @JobHandler methods and @Processor classes at start; their ticks run the handler', async () => {
    // With the app's own ScheduleModule: the ticks never go through it (no interval or cron of ours in its registry).
    const { app } = await compile([ReportJobs, CleanupProcessor], [ScheduleModule.forRoot()]);
    await app.init();
    const queue = app.get(QueueService);
    const schedules = await queue.schedules.list({ source: 'code' });
    expect(schedules.map((s) => [s.name, s.queue, s.cron, s.tz])).toEqual([
      ['nest-cleanup', 'nest-cleanup', '0 0 * * 0', 'UTC'],
      ['reports:fast', 'nest-reports', '* * * * * *', 'UTC'],
      ['reports:nightly', 'nest-reports', '0 3 * * *', 'Europe/Paris'],
    ]);
    await waitFor(() => ReportJobs.ran.length >= 2, 10_000);
    expect(ReportJobs.ran[0]).toEqual({ payload: { kind: 'every-second' } });
    const registry = app.get(SchedulerRegistry);
    expect(registry.getCronJobs().size).toBe(0);
    expect(registry.getIntervals().filter((name) => name.includes('tick'))).toEqual([]);
    // Operators see them: next and last tick, counts, and health while no tick is late.
    const fast = (await queue.schedules.get('reports:fast'))!;
    expect(fast.lastTickAt).not.toBeNull();
    expect(fast.ticks.run).toBeGreaterThanOrEqual(2);
    const health = await app.get(PgQueueHealthIndicator).isHealthy();
    expect(health.pgQueue.limits.maxScheduleLateMs).toBe(60_000);
    await queue.schedules.pause('reports:fast');
  });

  it('refuses @Recurring on a method that is not a handler, naming it', async () => {
    const { app } = await compile([Stray]);
    const error = await app.init().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as Error).message).toMatch(/Stray\.notAHandler has @Recurring but no @JobHandler/);
  });

  it('names the decorated method in a bad schedule\'s error', async () => {
    @Injectable()
    class BadCron {
      @JobHandler('nest-bad')
      @Recurring('0 25 * * *')
      async handle(): Promise<void> {}
    }
    const { app } = await compile([BadCron]);
    await expect(app.init()).rejects.toThrow(/"BadCron\.handle @Recurring\.cron"/);
  });
});
