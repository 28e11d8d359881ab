import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JobHandler, PermanentJobError, PgQueueModule, QueueService, getQueueToken, type Job, type JobContext, type PgQueueModuleOptions, type Queue } from '../../lib/index.js';
import { RunJobError, runJob } from '../../lib/testing/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { CapturingLogger } from '../support/nest.js';

interface Work {
  kind: 'ok' | 'fail' | 'flaky' | 'hang';
  n?: number;
}

/** The handler of 'work' holds 'hang' jobs until released (or aborted), so a timeout can be seen without racing it. */
let release: () => void = () => {};
const attemptsSeen = new Map<number, number>();

@Injectable()
class WorkJobs {
  @JobHandler('work', { maxAttempts: 3, backoff: { baseMs: 10, maxMs: 20 } })
  async run(job: Job<Work>, ctx: JobContext): Promise<void> {
    const { kind, n = 0 } = job.payload;
    attemptsSeen.set(n, (attemptsSeen.get(n) ?? 0) + 1);
    if (kind === 'fail') throw new PermanentJobError('cannot do this one', { code: 'CANNOT' });
    if (kind === 'flaky' && job.attempt === 1) throw new Error('first attempt fails');
    if (kind === 'hang') {
      await new Promise<void>((resolve) => {
        release = resolve;
        ctx.signal.addEventListener('abort', () => resolve(), { once: true });
      });
    }
  }
}

@Module({ imports: [PgQueueModule.registerQueue({ name: 'work', defaults: { priority: 7 } })], providers: [WorkJobs] })
class WorkModule {}

describe('runJob', () => {
  let database: TestDatabase;
  const opened: INestApplicationContext[] = [];

  beforeAll(async () => {
    database = await createTestDatabase('runjob');
  });
  afterEach(async () => {
    release();
    for (const app of opened.splice(0)) await app.close();
  });
  afterAll(async () => {
    await database?.drop();
  });

  async function boot(extra: Partial<PgQueueModuleOptions> = {}) {
    const app = await Test.createTestingModule({ imports: [PgQueueModule.forRoot({ connectionString: database.url, pollIntervalMs: 100, ...extra }), WorkModule] })
      .setLogger(new CapturingLogger())
      .compile();
    opened.push(app);
    await app.init();
    return app;
  }

  it('resolves with the final record of a job that succeeds, retries included', async () => {
    const app = await boot();
    const ok = await runJob<Work>(app, 'work', { kind: 'ok', n: 1 });
    expect(ok).toMatchObject({ queue: 'work', status: 'succeeded', payload: { kind: 'ok', n: 1 }, attemptCount: 1 });
    expect(ok.finishedAt).toBeInstanceOf(Date);

    const flaky = await runJob<Work>(app, 'work', { kind: 'flaky', n: 2 });
    expect(flaky).toMatchObject({ status: 'succeeded', attemptCount: 2 });
    expect(attemptsSeen.get(2)).toBe(2);
  });

  it('resolves with the dead record of a job that fails permanently, and takes enqueue options', async () => {
    const app = await boot();
    const dead = await runJob<Work>(app, 'work', { kind: 'fail', n: 3 }, { priority: 2 });
    expect(dead).toMatchObject({ status: 'dead', lastErrorCode: 'CANNOT', lastErrorMessage: 'cannot do this one', attemptCount: 1, priority: 2 });
  });

  it('takes a queue handle from registerQueue, whose defaults apply', async () => {
    const app = await boot();
    const handle = app.get<Queue<Work>>(getQueueToken('work'));
    expect(await runJob(app, handle, { kind: 'ok', n: 4 })).toMatchObject({ status: 'succeeded', priority: 7 });
  });

  it('rejects at the timeout, saying what state the job is stuck in', async () => {
    const app = await boot();
    const failure = await runJob<Work>(app, 'work', { kind: 'hang', n: 5 }, { timeoutMs: 3_000 }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(RunJobError);
    const error = failure as RunJobError;
    expect(error.code).toBe('RUN_JOB_TIMEOUT');
    expect(error.message).toMatch(/^runJob: job \d+ of queue "work" did not finish within 3000 ms: it is running \(attempt 1 of 3, lease until .*the handler has not returned\)/);
    expect(error.job).toMatchObject({ status: 'running', payload: { kind: 'hang', n: 5 } });
  });

  it('says so when the job is pending and not claimed (the queue is paused)', async () => {
    const app = await boot();
    const handle = app.get<Queue<Work>>(getQueueToken('work'));
    await handle.pause();
    const error = (await runJob(app, handle, { kind: 'ok' }, { timeoutMs: 100 }).catch((e: unknown) => e)) as RunJobError;
    await handle.resume();
    expect(error.code).toBe('RUN_JOB_TIMEOUT');
    expect(error.message).toMatch(/it is pending, not claimed \(attempt 0: is the queue paused, or is an earlier job of its ordering key unfinished\?\)/);
  });

  it('says so when the job is delayed beyond the timeout', async () => {
    const app = await boot();
    const error = (await runJob<Work>(app, 'work', { kind: 'ok' }, { delayMs: 3_600_000, timeoutMs: 100 }).catch((e: unknown) => e)) as RunJobError;
    expect(error.code).toBe('RUN_JOB_TIMEOUT');
    expect(error.message).toMatch(/it is scheduled for \S+ \(a delayed job, not attempted yet\)\. Raise timeoutMs/);
  });

  it('refuses when the workers are not running (autoStart: false), and writes nothing', async () => {
    const app = await boot({ autoStart: false });
    const queue = app.get(QueueService);
    const before = (await queue.stats()).queues.find((q) => q.queue === 'work')?.counts;
    const error = (await runJob<Work>(app, 'work', { kind: 'ok' }).catch((e: unknown) => e)) as RunJobError;
    expect(error).toBeInstanceOf(RunJobError);
    expect(error.code).toBe('WORKERS_NOT_RUNNING');
    expect(error.message).toMatch(/the workers of this application are not running.*startProcessing\(\)/);
    expect((await queue.stats()).queues.find((q) => q.queue === 'work')?.counts).toEqual(before);

    await queue.startProcessing();
    expect(await runJob<Work>(app, 'work', { kind: 'ok' })).toMatchObject({ status: 'succeeded' });
  });

  it('refuses a queue without a handler in this application', async () => {
    const app = await boot();
    const error = (await runJob(app, 'elsewhere', {}).catch((e: unknown) => e)) as RunJobError;
    expect(error.code).toBe('WORKERS_NOT_RUNNING');
    expect(error.message).toContain(`no worker of queue "elsewhere" runs in this application. Give the queue a @JobHandler('elsewhere')`);
  });

  it('refuses an application without the module', async () => {
    const app = await Test.createTestingModule({}).compile();
    opened.push(app);
    const error = (await runJob(app, 'work', {}).catch((e: unknown) => e)) as RunJobError;
    expect(error.code).toBe('ENGINE_NOT_FOUND');
  });
});
