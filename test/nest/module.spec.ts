import 'reflect-metadata';
import { Injectable, Module, Scope, type INestApplicationContext } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { Test, type TestingModule } from '@nestjs/testing';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  drainQueues as deprecatedDrainQueues,
  InvalidOptionError,
  JobHandler,
  PG_QUEUE_ENGINE,
  PgQueueModule,
  QueueService,
  type Job,
  type JobContext,
  type PgQueue,
  type PgQueueModuleOptions,
  type PgQueueOptionsFactory,
} from '../../lib/index.js';
import { drainQueues, DrainQueuesError } from '../../lib/testing/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { CapturingLogger } from '../support/nest.js';
import { nextValues, testSignals } from '../support/signals.js';

interface Greeting {
  name: string;
}

/** Handlers record what they received; each test uses queues of its own. */
const received: { queue: string; id: string; payload: unknown; attempt: number }[] = [];

@Injectable()
class GreetingJobs {
  @JobHandler('greetings', { concurrency: 2, leaseMs: 5_000 })
  async greet(job: Job<Greeting>, ctx: JobContext): Promise<void> {
    received.push({ queue: job.queue, id: job.id, payload: job.payload, attempt: ctx.attempt });
  }
}

@Injectable()
class AsyncGreetingJobs {
  @JobHandler('async-greetings')
  async greet(job: Job<Greeting>): Promise<void> {
    received.push({ queue: job.queue, id: job.id, payload: job.payload, attempt: job.attempt });
  }
}

@Injectable()
class ApiOnlyJobs {
  @JobHandler('api-only')
  async handle(job: Job<Greeting>): Promise<void> {
    received.push({ queue: job.queue, id: job.id, payload: job.payload, attempt: job.attempt });
  }
}

@Injectable()
class FirstHandler {
  @JobHandler('contested')
  async handle(): Promise<void> {}
}

@Injectable()
class SecondHandler {
  @JobHandler('contested')
  async process(): Promise<void> {}
}

@Injectable()
class BadLeaseJobs {
  @JobHandler('bad-lease', { leaseMs: 10 })
  async handle(): Promise<void> {}
}

@Injectable()
class MisspeltJobs {
  @JobHandler('misspelt', { backoff: { base: 100 } } as never)
  async handle(): Promise<void> {}
}

/** Ordering keys and fair shares pass through the module to the engine. */
@Injectable()
class OrderedJobs {
  static readonly seen: { id: string; key: string | null }[] = [];
  @JobHandler('ordered', { concurrency: 4, fairShare: 0.5 })
  async handle(job: Job<{ n: number }>): Promise<void> {
    OrderedJobs.seen.push({ id: job.id, key: job.orderingKey });
  }
}

describe('PgQueueModule', () => {
  let database: TestDatabase;
  const opened: INestApplicationContext[] = [];

  beforeAll(async () => {
    database = await createTestDatabase('module');
  });

  afterEach(async () => {
    for (const app of opened.splice(0)) await app.close();
  });

  afterAll(async () => {
    await database?.drop();
  });

  const fast = (): PgQueueModuleOptions => ({ connectionString: database.url, pollIntervalMs: 100, reaper: { intervalMs: 100 } });

  async function compile(imports: unknown[], providers: unknown[] = [], logger = new CapturingLogger()): Promise<TestingModule> {
    const moduleRef = await Test.createTestingModule({ imports: imports as never[], providers: providers as never[] })
      .setLogger(logger)
      .compile();
    opened.push(moduleRef);
    return moduleRef;
  }

  async function boot(imports: unknown[], providers: unknown[] = [], logger = new CapturingLogger()) {
    const moduleRef = await compile(imports, providers, logger);
    await moduleRef.init();
    return { app: moduleRef, queue: moduleRef.get(QueueService), engine: moduleRef.get<PgQueue>(PG_QUEUE_ENGINE), logger };
  }

  it('forRoot boots, discovers the handler and processes a typed job', async () => {
    const { app, queue } = await boot([PgQueueModule.forRoot(fast())], [GreetingJobs]);
    const id = await queue.enqueue<Greeting>('greetings', { name: 'Ada' });
    await drainQueues(app, { timeoutMs: 10_000 });
    expect(received).toContainEqual({ queue: 'greetings', id, payload: { name: 'Ada' }, attempt: 1 });
    expect(await queue.get(id)).toMatchObject({ status: 'succeeded', attemptCount: 1 });
  });

  it('forRootAsync reads its options from ConfigService', async () => {
    const { app, queue } = await boot(
      [
        ConfigModule.forRoot({ ignoreEnvFile: true, load: [() => ({ QUEUE_DATABASE_URL: database.url })] }),
        PgQueueModule.forRootAsync({
          imports: [ConfigModule],
          inject: [ConfigService],
          useFactory: (config: ConfigService): PgQueueModuleOptions => ({
            connectionString: config.getOrThrow<string>('QUEUE_DATABASE_URL'),
            pollIntervalMs: 100,
          }),
        }),
      ],
      [AsyncGreetingJobs],
    );
    const [a, b] = await queue.enqueueMany<Greeting>([
      { queue: 'async-greetings', payload: { name: 'Grace' } },
      { queue: 'async-greetings', payload: { name: 'Linus' } },
    ]);
    await drainQueues(app);
    expect(await queue.get(a!)).toMatchObject({ status: 'succeeded' });
    expect(await queue.get(b!)).toMatchObject({ status: 'succeeded' });
  });

  it('forRootAsync accepts a PgQueueOptionsFactory class', async () => {
    @Injectable()
    class QueueConfig implements PgQueueOptionsFactory {
      createPgQueueOptions(): PgQueueModuleOptions {
        return { connectionString: database.url, pollIntervalMs: 100, queues: ['from-factory'] };
      }
    }
    const { queue } = await boot([PgQueueModule.forRootAsync({ useClass: QueueConfig })]);
    // Declared by the `queues` option: this process can enqueue without a handler.
    expect(await queue.enqueue('from-factory', { n: 1 })).toMatch(/^\d+$/);
  });

  it('reaperIntervalMs still works for one minor version, with a warning naming reaper.intervalMs', async () => {
    const { engine, logger } = await boot([PgQueueModule.forRoot({ connectionString: database.url, reaperIntervalMs: 1_234 })]);
    expect(engine.hostablePasses.find((pass) => pass.name === 'reaper')?.intervalMs).toBe(1_234);
    expect(logger.messages('warn')).toContainEqual(expect.stringMatching(/"reaperIntervalMs" is deprecated .* use "reaper.intervalMs"/));
  });

  describe('fails at start with a message naming the option', () => {
    const cases: [string, PgQueueModuleOptions, RegExp][] = [
      ['no connection', {}, /Invalid option "connectionString": neither connectionString nor pool is set/],
      ['a bad shutdownTimeoutMs', { connectionString: 'postgres://x/y', shutdownTimeoutMs: -1 }, /Invalid option "shutdownTimeoutMs": -1 is not an integer from 0/],
      ['a bad reaper interval', { connectionString: 'postgres://x/y', reaper: { intervalMs: 1.5 } }, /Invalid option "reaper.intervalMs"/],
      ['a bad reaper interval, by its deprecated name', { connectionString: 'postgres://x/y', reaperIntervalMs: 1.5 }, /Invalid option "reaper.intervalMs"/],
      ['both names of the reaper interval, disagreeing', { connectionString: 'postgres://x/y', reaperIntervalMs: 100, reaper: { intervalMs: 200 } }, /Invalid option "reaperIntervalMs": it is set to 100 and "reaper.intervalMs" to 200/],
      ['a misspelt reaper option', { connectionString: 'postgres://x/y', reaper: { intervallMs: 100 } as never }, /Invalid option "reaper.intervallMs": it is not an option of the reaper/],
      ['a misspelt scheduler option', { connectionString: 'postgres://x/y', scheduler: { batchsize: 10 } as never }, /Invalid option "scheduler.batchsize": it is not an option of the scheduler/],
      ['a misspelt pruner option', { connectionString: 'postgres://x/y', pruner: { retention: 10 } as never }, /Invalid option "pruner.retention": it is not an option of the pruner/],
      ['an interval past what a timer can wait', { connectionString: 'postgres://x/y', pollIntervalMs: 2 ** 31 }, /Invalid option "pollIntervalMs": 2147483648 is not an integer from 10 to 2147483647/],
      ['an engine option the module passes on', { connectionString: 'postgres://x/y', statementTimeoutMs: 5 }, /Invalid option "statementTimeoutMs"/],
      ['a bad preparedStatements (an engine option the module passes on)', { connectionString: 'postgres://x/y', preparedStatements: 'false' as never }, /Invalid option "preparedStatements": "false" is not a boolean/],
      ['a misspelt option', { connectionString: 'postgres://x/y', shutdownTimeout: 5 } as PgQueueModuleOptions, /Invalid option "shutdownTimeout": it is not an option of PgQueueModule/],
      ['a bad migrations mode', { connectionString: 'postgres://x/y', migrations: 'sometimes' as never }, /Invalid option "migrations": "sometimes" is not one of "auto", "verify", "off"/],
      ['a bad schema', { connectionString: 'postgres://x/y', schema: 'Bad-Schema' }, /Invalid option "schema"/],
      ['a bad handler default', { connectionString: 'postgres://x/y', handlerDefaults: { concurrency: 0 } }, /Invalid option "handlerDefaults.concurrency"/],
      ['a bad pruner option', { connectionString: 'postgres://x/y', pruner: { retentionMs: -1 } }, /Invalid option "pruner.retentionMs"/],
      ['a bad queue name', { connectionString: 'postgres://x/y', queues: ['ok', 'not ok'] }, /Invalid option "queues\[1\]"/],
      ['a bad health threshold', { connectionString: 'postgres://x/y', health: { maxClaimableAgeMs: -1 } }, /Invalid option "health\.maxClaimableAgeMs": -1 is not an integer from 0/],
      ['a misspelt health option', { connectionString: 'postgres://x/y', health: { maxAgeMs: 1 } as never }, /Invalid option "health\.maxAgeMs": it is not an option of the health check/],
      ['a bad metrics timeout', { connectionString: 'postgres://x/y', metrics: { timeoutMs: 0 } }, /Invalid option "metrics\.timeoutMs": 0 is not an integer from 1/],
      ['a misspelt metrics option', { connectionString: 'postgres://x/y', metrics: { timeout: 1 } as never }, /Invalid option "metrics\.timeout": it is not an option of the metrics scrape/],
      ['a misspelt handler default', { connectionString: 'postgres://x/y', handlerDefaults: { concurency: 2 } as never }, /Invalid option "handlerDefaults\.concurency": it is not an option of a handler/],
      ['a bad handler fairShare default', { connectionString: 'postgres://x/y', handlerDefaults: { fairShare: 2 } }, /Invalid option "handlerDefaults\.fairShare": 2 is not a number from 0 to 1/],
    ];
    for (const [name, options, message] of cases) {
      it(name, async () => {
        const failure = compile([PgQueueModule.forRoot(options)]);
        await expect(failure).rejects.toThrow(InvalidOptionError);
        await expect(failure).rejects.toThrow(message);
      });
    }

    it('from a forRootAsync factory', async () => {
      const failure = compile([PgQueueModule.forRootAsync({ useFactory: () => ({ connectionString: database.url, poolSize: 0 }) })]);
      await expect(failure).rejects.toThrow(/Invalid option "poolSize"/);
    });

    it('on a handler, naming the method', async () => {
      const moduleRef = await compile([PgQueueModule.forRoot(fast())], [BadLeaseJobs]);
      await expect(moduleRef.init()).rejects.toThrow(/Invalid option "BadLeaseJobs\.handle\.leaseMs": 10 is not an integer from 200/);
    });

    it('on a misspelt handler option, naming the method', async () => {
      const moduleRef = await compile([PgQueueModule.forRoot(fast())], [MisspeltJobs]);
      await expect(moduleRef.init()).rejects.toThrow(/Invalid option "MisspeltJobs\.handle\.backoff\.base": it is not an option of backoff/);
    });
  });

  it('refuses two handlers for one queue, naming both', async () => {
    const moduleRef = await compile([PgQueueModule.forRoot(fast())], [FirstHandler, SecondHandler]);
    const init = moduleRef.init();
    await expect(init).rejects.toThrow(InvalidOptionError);
    await expect(init).rejects.toThrow(/queue "contested" has two handlers: FirstHandler\.handle \(in RootTestModule\) and SecondHandler\.process \(in RootTestModule\)/);
  });

  it('with processing: false enqueues but never claims', async () => {
    const apiOnly = await boot([PgQueueModule.forRoot({ ...fast(), processing: false, queues: ['api-only'] })], [ApiOnlyJobs]);
    expect(apiOnly.logger.messages('warn', 'PgQueue').join('\n')).toMatch(/processing is false: the handlers of api-only will not run/);
    const id = await apiOnly.queue.enqueue<Greeting>('api-only', { name: 'Barbara' });
    expect(apiOnly.engine.worker('api-only')).toBeUndefined();
    // Five of this process's reaper passes (100 ms apart) run; nothing in it claims the job.
    await nextValues(testSignals(apiOnly.engine).reaper.passRan, 5);
    expect(await apiOnly.queue.get(id)).toMatchObject({ status: 'pending', attemptCount: 0 });
    expect(received.some((r) => r.id === id)).toBe(false);

    // A processing instance on the same database takes it at once.
    const worker = await boot([PgQueueModule.forRoot(fast())], [ApiOnlyJobs]);
    await drainQueues(worker.app);
    expect(await apiOnly.queue.get(id)).toMatchObject({ status: 'succeeded', attemptCount: 1 });
  });

  it('closes the pool it created, and never one it was given', async () => {
    const owned = await boot([PgQueueModule.forRoot(fast())]);
    await owned.app.close();
    opened.splice(opened.indexOf(owned.app), 1);
    expect((owned.engine.pool as pg.Pool & { ended: boolean }).ended).toBe(true);
    await owned.app.close(); // closing twice is harmless

    const pool = new pg.Pool({ connectionString: database.url, max: 4 });
    try {
      const given = await boot([PgQueueModule.forRoot({ pool, pollIntervalMs: 100 })], [GreetingJobs]);
      expect(given.engine.pool).toBe(pool);
      const id = await given.queue.enqueue<Greeting>('greetings', { name: 'Edsger' });
      await drainQueues(given.app);
      await given.app.close();
      opened.splice(opened.indexOf(given.app), 1);
      const { rows } = await pool.query<{ status: string }>('SELECT status FROM pgqueue.job_rows WHERE id = $1', [id]);
      expect(rows[0]!.status).toBe('succeeded');
    } finally {
      await pool.end();
    }
  });

  it('passes orderingKey (enqueue) and fairShare (@JobHandler) through to the engine', async () => {
    const { app, queue, engine } = await boot([PgQueueModule.forRoot(fast())], [OrderedJobs]);
    expect(engine.worker('ordered')!.options.fairShare).toBe(0.5);
    const ids = await queue.enqueueMany([1, 2, 3].map((n) => ({ queue: 'ordered', payload: { n }, options: { orderingKey: 'account:7' } })));
    await drainQueues(app);
    // One key runs one job at a time, in enqueue order, even with four slots.
    expect(OrderedJobs.seen.map((s) => s.id)).toEqual(ids);
    expect(OrderedJobs.seen.map((s) => s.key)).toEqual(['account:7', 'account:7', 'account:7']);
    await expect(queue.enqueue('ordered', {}, { orderingKey: '' })).rejects.toThrow(/option "orderingKey" is .*; it must be a string of 1-256 characters/);
  });

  it('is global: a feature module injects QueueService without importing it', async () => {
    @Injectable()
    class Signup {
      constructor(readonly queue: QueueService) {}
    }
    @Module({ providers: [Signup], exports: [Signup] })
    class FeatureModule {}
    const { app } = await boot([PgQueueModule.forRoot(fast()), FeatureModule]);
    expect(app.get(Signup).queue).toBeInstanceOf(QueueService);
  });

  it('drainQueues rejects after its timeout, listing what is left', async () => {
    const { app, queue } = await boot([PgQueueModule.forRoot({ ...fast(), processing: false, queues: ['greetings'] })], [GreetingJobs]);
    const id = await queue.enqueue<Greeting>('greetings', { name: 'Alan' });
    const failure = drainQueues(app, { timeoutMs: 200, queues: ['greetings'] });
    await expect(failure).rejects.toThrow(new RegExp(`drainQueues: jobs still unfinished after 200 ms: greetings: \\d+ pending \\(id [\\d, ]*${id}`));
    await expect(failure).rejects.toMatchObject({ code: 'DRAIN_TIMEOUT' });
    await expect(failure).rejects.toBeInstanceOf(DrainQueuesError);
  });

  it('drainQueues of an application without PgQueueModule fails with ENGINE_NOT_FOUND', async () => {
    const moduleRef = await Test.createTestingModule({}).compile();
    await expect(drainQueues(moduleRef)).rejects.toMatchObject({ code: 'ENGINE_NOT_FOUND', message: expect.stringMatching(/no PgQueue engine in this application/) });
    await moduleRef.close();
  });

  it('the root export drainQueues (deprecated) is the one of nestjs-pg-queue/testing', () => {
    expect(deprecatedDrainQueues).toBe(drainQueues);
  });
});
