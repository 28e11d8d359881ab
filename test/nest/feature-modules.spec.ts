import 'reflect-metadata';
import { Controller, Get, Injectable, Module, Param, type INestApplication } from '@nestjs/common';
import { APP_FILTER, NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DatabaseUnavailableError,
  InjectQueue,
  InvalidOptionError,
  JobHandler,
  JobStateError,
  PG_QUEUE_ENGINE,
  PgQueueExceptionFilter,
  PgQueueModule,
  Queue,
  QueueService,
  REAPER_INTERVAL_NAME,
  type Job,
  type PgQueue,
  type PgQueueModuleOptions,
} from '../../lib/index.js';
import { drainQueues } from '../../lib/testing/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { CapturingLogger, nestSuite } from '../support/nest.js';

interface WelcomeEmail {
  to: string;
}

const sent: { id: string; to: string; priority: number }[] = [];

@Injectable()
class EmailJobs {
  @JobHandler('emails')
  async send(job: Job<WelcomeEmail>): Promise<void> {
    sent.push({ id: job.id, to: job.payload.to, priority: job.priority });
  }
}

@Injectable()
class SignupService {
  constructor(@InjectQueue('emails') readonly emails: Queue<WelcomeEmail>) {}
}

@Module({
  imports: [PgQueueModule.registerQueue({ name: 'emails', defaults: { priority: 5 } })],
  providers: [EmailJobs, SignupService],
  exports: [SignupService],
})
class EmailsModule {}

/** A queue only this feature module enqueues to (no handler anywhere): registerQueue declares it. */
@Module({ imports: [PgQueueModule.registerQueue({ name: 'audit-log' })], providers: [] })
class AuditModule {}

describe('feature modules: forRoot once, registerQueue and @InjectQueue', () => {
  const suite = nestSuite('feature');

  const options = (extra: Partial<PgQueueModuleOptions> = {}): PgQueueModuleOptions => ({ connectionString: suite.url, pollIntervalMs: 100, ...extra });

  async function boot(imports: unknown[], providers: unknown[] = [], logger = new CapturingLogger()) {
    const app = await Test.createTestingModule({ imports: imports as never[], providers: providers as never[] })
      .setLogger(logger)
      .compile();
    suite.opened(app);
    await app.init();
    return { app, logger };
  }

  it('injects a typed handle whose verbs are bound to the queue, with its defaults', async () => {
    const { app } = await boot([PgQueueModule.forRoot(options()), EmailsModule, AuditModule]);
    const { emails } = app.get(SignupService);
    expect(emails).toBeInstanceOf(Queue);
    expect(emails.name).toBe('emails');
    const first = await emails.enqueue({ to: 'ada@example.com' });
    const [second] = await emails.enqueueMany([{ payload: { to: 'grace@example.com' }, options: { priority: 9 } }]);
    await drainQueues(app);
    expect(sent).toContainEqual({ id: first, to: 'ada@example.com', priority: 5 });
    expect(sent).toContainEqual({ id: second, to: 'grace@example.com', priority: 9 });
    expect(await emails.get(first)).toMatchObject({ queue: 'emails', status: 'succeeded', payload: { to: 'ada@example.com' } });
    // A job of another queue is not this handle's.
    const other = await app.get<Queue<{ what: string }>>('PgQueue:queue:audit-log').enqueue({ what: 'x' });
    expect(await emails.get(other)).toBeUndefined();
    await emails.pause();
    expect(await emails.stats()).toMatchObject({ queue: 'emails', paused: true });
    await emails.resume();
    expect(await emails.stats()).toMatchObject({ queue: 'emails', paused: false, counts: expect.objectContaining({ pending: 0 }) });
  });

  it('unique and debounce through the handle and QueueService: { id, deduplicated }, the handle defaults applied, ids with deduplicated[]', async () => {
    const { app } = await boot([PgQueueModule.forRoot(options({ processing: false })), EmailsModule, AuditModule]);
    const { emails } = app.get(SignupService);
    const service = app.get(QueueService);
    const first = await emails.enqueue({ to: 'once@example.com' }, { unique: { key: 'welcome:once', while: 'unfinished' } });
    const again = await service.enqueue<WelcomeEmail>('emails', { to: 'once@example.com' }, { unique: { key: 'welcome:once', while: 'unfinished' } });
    expect(first.deduplicated).toBe(false);
    expect(again).toEqual({ id: first.id, deduplicated: true });
    expect((await emails.get(first.id))?.priority).toBe(5);
    const debounced = await service.enqueue<WelcomeEmail>('emails', { to: 'a@example.com' }, { debounce: { key: 'digest', delayMs: 60_000 } });
    const moved = await emails.enqueue({ to: 'b@example.com' }, { debounce: { key: 'digest', delayMs: 60_000 } });
    expect(moved).toEqual({ id: debounced.id, deduplicated: true });
    expect((await emails.get(debounced.id))?.payload).toEqual({ to: 'b@example.com' });
    const ids = await emails.enqueueMany([{ payload: { to: 'x@example.com' }, options: { unique: { key: 'welcome:once', while: 'unfinished' } } }, { payload: { to: 'y@example.com' } }]);
    expect(ids[0]).toBe(first.id);
    expect(ids.deduplicated).toEqual([true, false]);
    // Without a key, the id alone, as before.
    const plain: string = await emails.enqueue({ to: 'plain@example.com' });
    expect(typeof plain).toBe('string');
  });

  it('declares a registered queue at start, so a module without its handler can enqueue to it', async () => {
    const { app } = await boot([PgQueueModule.forRoot(options()), AuditModule]);
    const audit = app.get<Queue<{ what: string }>>('PgQueue:queue:audit-log');
    const id = await audit.enqueue({ what: 'signup' });
    expect(await audit.get(id)).toMatchObject({ status: 'pending' });
    expect(await app.get(QueueService).get(id)).toMatchObject({ queue: 'audit-log' });
  });

  it('refuses a second forRoot before anything starts, naming both importers and the fix', async () => {
    @Module({ imports: [PgQueueModule.forRoot(options({ pollIntervalMs: 200 }))] })
    class ReportsModule {}
    const logger = new CapturingLogger();
    const attempt = Test.createTestingModule({ imports: [PgQueueModule.forRoot(options()), ReportsModule] })
      .setLogger(logger)
      .compile()
      .then(async (app) => {
        suite.opened(app);
        await app.init();
      });
    const error = await attempt.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as Error).message).toMatch(/PgQueueModule\.forRoot\(\) \(or forRootAsync\(\)\) is imported 2 times \(by .*ReportsModule.*\)/);
    expect((error as Error).message).toMatch(/in feature modules import PgQueueModule\.registerQueue\(\{ name \}\)/);
  });

  it('says what to import when registerQueue finds no forRoot', async () => {
    const error = await Test.createTestingModule({ imports: [EmailsModule] })
      .setLogger(new CapturingLogger())
      .compile()
      .catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/registerQueue\(\{ name: "emails" \}\) found no PgQueueModule\.forRoot\(\)/);
  });

  it('refuses a bad queue name at registration', () => {
    expect(() => PgQueueModule.registerQueue({ name: 'not ok' })).toThrow(/Invalid option "registerQueue\[0\]\.name": "not ok" is not a valid queue name/);
  });

  it('leaves nothing running when its start fails: the interval name taken, the engine stopped', async () => {
    @Injectable()
    class TakesTheName {
      constructor(registry: SchedulerRegistry) {
        registry.addInterval(REAPER_INTERVAL_NAME, setInterval(() => {}, 60_000));
      }
    }
    const logger = new CapturingLogger();
    const app = await Test.createTestingModule({ imports: [ScheduleModule.forRoot(), PgQueueModule.forRoot(options())], providers: [TakesTheName] })
      .setLogger(logger)
      .compile();
    const engine = app.get<PgQueue>(PG_QUEUE_ENGINE);
    const error = await app.init().catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/could not register its interval "pg-queue:reaper" with the app's SchedulerRegistry/);
    // Stopped: a stopped engine refuses work instead of running passes on a closed pool.
    expect(engine.processing).toBe(false);
    const registry = app.get(SchedulerRegistry);
    expect(registry.getIntervals()).toEqual([REAPER_INTERVAL_NAME]);
    clearInterval(registry.getInterval(REAPER_INTERVAL_NAME));
    registry.deleteInterval(REAPER_INTERVAL_NAME);
    await app.close();
    expect(logger.messages('error').join('\n')).toMatch(/Could not start/);
  });
});

describe('autoStart: false, startProcessing() and stopProcessing()', () => {
  const suite = nestSuite('autostart');

  it('starts no worker until asked, stops them on request, and starts them again', async () => {
    const app = await Test.createTestingModule({
      imports: [PgQueueModule.forRoot({ connectionString: suite.url, pollIntervalMs: 100, autoStart: false }), EmailsModule],
    })
      .setLogger(new CapturingLogger())
      .compile();
    suite.opened(app);
    await app.init();
    const queue = app.get(QueueService);
    const { emails } = app.get(SignupService);
    expect(queue.processing).toBe(false);
    const id = await emails.enqueue({ to: 'later@example.com' });
    // The engine's own passes run; claims do not: the job stays pending while no worker runs.
    const engine = app.get<PgQueue>(PG_QUEUE_ENGINE);
    await engine.reapOnce();
    expect(await emails.get(id)).toMatchObject({ status: 'pending' });
    await queue.startProcessing();
    expect(queue.processing).toBe(true);
    await drainQueues(app);
    expect(await emails.get(id)).toMatchObject({ status: 'succeeded' });
    await queue.stopProcessing();
    expect(queue.processing).toBe(false);
    const next = await emails.enqueue({ to: 'after-stop@example.com' });
    expect(await emails.get(next)).toMatchObject({ status: 'pending' });
    await queue.startProcessing();
    await drainQueues(app);
    expect(await emails.get(next)).toMatchObject({ status: 'succeeded' });
  });

  it('refuses startProcessing in an API-only process', async () => {
    const app = await Test.createTestingModule({ imports: [PgQueueModule.forRoot({ connectionString: suite.url, processing: false })] })
      .setLogger(new CapturingLogger())
      .compile();
    suite.opened(app);
    await app.init();
    await expect(app.get(QueueService).startProcessing()).rejects.toThrow(/processing is false in this process/);
  });
});

describe('PgQueueExceptionFilter', () => {
  let database: TestDatabase;
  let app: INestApplication;
  let base: string;

  @Controller()
  class ProbeController {
    constructor(private readonly queue: QueueService) {}
    @Get('enqueue/:queue')
    enqueue(@Param('queue') queue: string) {
      return this.queue.enqueue(queue, { n: 1 });
    }
    @Get('replay/:id')
    replay(@Param('id') id: string) {
      return this.queue.replay(id);
    }
    @Get('down')
    down(): never {
      throw new DatabaseUnavailableError('127.0.0.1:1/x', new Error('connect ECONNREFUSED'));
    }
    @Get('other')
    other(): never {
      throw new Error('not ours');
    }
  }

  beforeAll(async () => {
    database = await createTestDatabase('filter');
    @Module({
      imports: [PgQueueModule.forRoot({ connectionString: database.url, queues: ['known'] })],
      controllers: [ProbeController],
      providers: [{ provide: APP_FILTER, useClass: PgQueueExceptionFilter }],
    })
    class HttpModule {}
    app = await NestFactory.create(HttpModule, { logger: new CapturingLogger() });
    await app.listen(0, '127.0.0.1');
    base = await app.getUrl();
  });
  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  it('maps bad input to 400, not found to 404, a wrong state to 409, the database away to 503', async () => {
    const known = await (await fetch(`${base}/enqueue/known`)).text();
    const cases: [string, number, string][] = [
      ['/enqueue/unknown-queue', 400, 'UNKNOWN_QUEUE'],
      ['/replay/999999999', 404, 'JOB_NOT_FOUND'],
      [`/replay/${known}`, 409, 'JOB_NOT_DEAD'],
      ['/down', 503, 'DATABASE_UNAVAILABLE'],
    ];
    for (const [path, status, code] of cases) {
      const response = await fetch(`${base}${path}`);
      expect({ path, status: response.status }).toEqual({ path, status });
      const body = (await response.json()) as { statusCode: number; code: string; message: string };
      expect(body).toMatchObject({ statusCode: status, code });
      expect(body.message.length).toBeGreaterThan(10);
    }
    // Errors that are not the queue's are left to Nest (a 500 without our body).
    const other = await fetch(`${base}/other`);
    expect(other.status).toBe(500);
    expect(JSON.stringify(await other.json())).not.toMatch(/code/);
  });

  it('rethrows outside HTTP', () => {
    const filter = new PgQueueExceptionFilter();
    const error = new JobStateError('JOB_NOT_FOUND', 'x');
    expect(() => filter.catch(error, { getType: () => 'rpc' } as never)).toThrow(error);
  });
});

/** The app's own ScheduleModule and @Interval beside the module's passes: nothing doubled. */
@Injectable()
class Ticker {
  static ticks = 0;
  @Interval(50)
  tick(): void {
    Ticker.ticks += 1;
  }
}

describe('the app-level ScheduleModule with feature modules', () => {
  it('runs the app interval once per period and the module registers its passes once', async () => {
    const database = await createTestDatabase('feature-schedule');
    try {
      const app = await Test.createTestingModule({ imports: [ScheduleModule.forRoot(), PgQueueModule.forRoot({ connectionString: database.url }), EmailsModule], providers: [Ticker] })
        .setLogger(new CapturingLogger())
        .compile();
      await app.init();
      const registry = app.get(SchedulerRegistry);
      expect(registry.getIntervals().filter((name) => name.startsWith('pg-queue:')).sort()).toEqual(['pg-queue:pruner', 'pg-queue:reaper']);
      const started = Date.now();
      Ticker.ticks = 0;
      await new Promise((r) => setTimeout(r, 500));
      const periods = Math.floor((Date.now() - started) / 50);
      await app.close();
      expect(Ticker.ticks).toBeLessThanOrEqual(periods + 1);
    } finally {
      await database.drop();
    }
  });
});

describe('defineJob in the Nest module', () => {
  it('registerQueue({ job }) validates at enqueue, @JobHandler(definition, { upcast }) gets the current shape', async () => {
    const { z } = await import('zod');
    const { defineJob } = await import('../../lib/index.js');
    const Welcome = defineJob('welcome', { schema: z.object({ to: z.email(), name: z.string() }), version: 2 });
    const received: unknown[] = [];
    @Injectable()
    class WelcomeJobs {
      @JobHandler(Welcome, { upcast: { 1: (old: { email: string }) => ({ to: old.email, name: 'friend' }) } })
      async send(job: Job<{ to: string; name: string }>): Promise<void> {
        received.push(job.payload);
      }
    }
    @Module({ imports: [PgQueueModule.registerQueue({ job: Welcome })], providers: [WelcomeJobs] })
    class WelcomeModule {}
    const database = await createTestDatabase('feature-define');
    try {
      const app = await Test.createTestingModule({ imports: [PgQueueModule.forRoot({ connectionString: database.url, pollIntervalMs: 100 }), WelcomeModule] })
        .setLogger(new CapturingLogger())
        .compile();
      await app.init();
      const welcome = app.get<Queue<{ to: string; name: string }>>('PgQueue:queue:welcome');
      await expect(welcome.enqueue({ to: 'nope', name: 'x' })).rejects.toMatchObject({ code: 'INVALID_PAYLOAD', path: 'payload.to' });
      await welcome.enqueue({ to: 'ada@example.com', name: 'Ada' });
      // A definition's handle deduplicates too, validating first (a refused payload takes no key).
      await expect(welcome.enqueue({ to: 'nope', name: 'x' }, { unique: { key: 'ada', while: 'ever' } })).rejects.toMatchObject({ code: 'INVALID_PAYLOAD' });
      const once = await welcome.enqueue({ to: 'ada@example.com', name: 'Ada' }, { unique: { key: 'ada', while: 'ever' } });
      expect(await welcome.enqueue({ to: 'ada@example.com', name: 'Ada' }, { unique: { key: 'ada', while: 'ever' } })).toEqual({ id: once.id, deduplicated: true });
      // A job of the previous shape (version 1), as an older deploy enqueued it.
      await app.get(QueueService).enqueue('welcome', { email: 'grace@example.com' } as never);
      await drainQueues(app);
      expect(received).toEqual(expect.arrayContaining([{ to: 'ada@example.com', name: 'Ada' }, { to: 'grace@example.com', name: 'friend' }]));
      await app.close();
    } finally {
      await database.drop();
    }
  });

  it('refuses upcast on a handler declared by queue name', async () => {
    @Injectable()
    class Wrong {
      @JobHandler('wrong', { upcast: {} })
      async handle(): Promise<void> {}
    }
    const app = await Test.createTestingModule({ imports: [PgQueueModule.forRoot({ connectionString: 'postgres://127.0.0.1:1/none' })], providers: [Wrong] })
      .setLogger(new CapturingLogger())
      .compile();
    await expect(app.init()).rejects.toThrow(/Wrong\.handle\.upcast.*upcasters need a job definition/);
    await app.close();
  });
});
