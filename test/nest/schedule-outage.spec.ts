import 'reflect-metadata';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { PgQueueModule, QueueService } from '../../lib/index.js';
import { adminUrl, createTestDatabase } from '../support/database.js';
import { CapturingLogger } from '../support/nest.js';
import { testSignals } from '../support/signals.js';
import { startTcpProxy } from '../support/tcp-proxy.js';

// The reaper's and pruner's passes run from the app's SchedulerRegistry (not the engine's timers)
// when it imports ScheduleModule: their failures during an outage are logged bounded too.

describe('the maintenance passes under SchedulerRegistry while the database is away', () => {
  it('log at most one line per pass per failureLogIntervalMs, with counts, and one recovery line', async () => {
    const server = new URL(adminUrl());
    const proxy = await startTcpProxy(server.hostname, Number(server.port || 5432));
    const database = await createTestDatabase('scheduleoutage');
    const url = new URL(database.url);
    url.host = `127.0.0.1:${proxy.port}`;
    const logger = new CapturingLogger();
    const intervalMs = 1_000;
    const moduleRef = await Test.createTestingModule({
      imports: [
        ScheduleModule.forRoot(),
        PgQueueModule.forRoot({ connectionString: url.toString(), reaper: { intervalMs: 50 }, pruner: { intervalMs: 50 }, failureLogIntervalMs: intervalMs }),
      ],
    })
      .setLogger(logger)
      .compile();
    const app = moduleRef.createNestApplication();
    try {
      await app.init();
      app.get(QueueService); // the module is up
      const signals = testSignals(app);
      const cutAt = performance.now();
      proxy.cut();
      // Real time on purpose: the outage must span more than two failureLogIntervalMs windows for
      // the bounded log ("failed N more times in the last 1 s") to show.
      await sleep(2_500);
      signals.reaper.passRan.clear();
      signals.pruner.passRan.clear();
      proxy.heal();
      // A pass signals at its end, before its host logs the recovery: after each pass's second
      // success since the heal, the first one's line is written.
      for (const passRan of [signals.reaper.passRan, signals.pruner.passRan] as const) {
        await passRan.next(10_000);
        await passRan.next(10_000);
      }
      const recovered = (pass: string) => logger.messages('log', 'PgQueue').some((line) => line.startsWith(`${pass} pass works again after `));
      expect([recovered('Reaper'), recovered('Pruner')]).toEqual([true, true]);
      const windowMs = performance.now() - cutAt;
      const bound = Math.ceil(windowMs / intervalMs) + 2;
      for (const pass of ['Reaper', 'Pruner']) {
        const lines = logger.lines.filter((line) => line.context === 'PgQueue' && line.message.startsWith(`${pass} pass `));
        expect({ pass, count: lines.length <= bound }).toEqual({ pass, count: true });
        expect(lines.some((line) => line.level === 'error' && new RegExp(`^${pass} pass failed \\d+ more times? in the last 1 s \\(last error: `).test(line.message))).toBe(true);
      }
    } finally {
      proxy.heal();
      await app.close();
      await database.drop();
      await proxy.close();
    }
  });
});
