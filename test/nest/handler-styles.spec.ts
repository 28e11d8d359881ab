import 'reflect-metadata';
import { Inject, Injectable, Scope } from '@nestjs/common';
import { REQUEST } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import {
  InvalidOptionError,
  JobHandler,
  OnQueueEvent,
  PG_QUEUE_ENGINE,
  PgQueueModule,
  PermanentJobError,
  Processor,
  QueueService,
  type Job,
  type JobContext,
  type JobProcessor,
  type PgQueue,
  type QueueEvent,
} from '../../lib/index.js';
import { drainQueues } from '../../lib/testing/index.js';
import { CapturingLogger, nestSuite } from '../support/nest.js';

@Injectable()
class Greeter {
  greet(name: string): string {
    return `hello ${name}`;
  }
}

@Processor('processed', { concurrency: 2 })
class GreetingProcessor implements JobProcessor<{ name: string }> {
  static readonly seen: string[] = [];
  constructor(private readonly greeter: Greeter) {}
  async process(job: Job<{ name: string }>, ctx: JobContext): Promise<void> {
    GreetingProcessor.seen.push(`${this.greeter.greet(job.payload.name)} #${ctx.attempt}`);
  }
}

@Processor('contested')
class ContestedProcessor {
  async process(): Promise<void> {}
}

@Injectable()
class ContestedMethod {
  @JobHandler('contested')
  async handle(): Promise<void> {}
}

@Processor('no-process')
class NoProcessMethod {}

/** A request-scoped provider: a fresh instance per attempt, REQUEST is { job, ctx }. */
@Injectable({ scope: Scope.REQUEST })
class PerAttempt {
  static readonly instances = new Set<PerAttempt>();
  constructor(@Inject(REQUEST) readonly request: { job: Job<{ n: number }>; ctx: JobContext }) {
    PerAttempt.instances.add(this);
  }
}

@Injectable()
class ScopedJobs {
  static readonly seen: { n: number; requestJob: string; attempt: number }[] = [];
  constructor(private readonly perAttempt: PerAttempt) {}
  @JobHandler('scoped', { concurrency: 2 })
  async handle(job: Job<{ n: number }>, ctx: JobContext): Promise<void> {
    ScopedJobs.seen.push({ n: job.payload.n, requestJob: this.perAttempt.request.job.id, attempt: this.perAttempt.request.ctx.attempt });
    if (job.payload.n === 0 && ctx.attempt === 1) throw new Error('once more');
  }
}

@Injectable()
class EventListeners {
  static readonly failed: QueueEvent<'failed'>[] = [];
  static readonly all: string[] = [];
  @OnQueueEvent('failed', { queue: 'evented' })
  onFailed(event: QueueEvent<'failed'>): void {
    EventListeners.failed.push(event);
  }
  @OnQueueEvent('*')
  async onAny(event: QueueEvent): Promise<void> {
    if (event.queue === 'evented') EventListeners.all.push(event.type);
    if (event.type === 'claimed') throw new Error('a listener that fails');
  }
}

@Injectable()
class EventedJobs {
  @JobHandler('evented', { maxAttempts: 3 })
  async handle(job: Job<{ fail: boolean }>): Promise<void> {
    if (job.payload.fail) throw new PermanentJobError('no', { code: 'NOPE' });
  }
}

describe('handler styles: @Processor classes, request-scoped handlers, @OnQueueEvent', () => {
  const suite = nestSuite('styles');

  async function compile(providers: unknown[], logger = new CapturingLogger()) {
    const app = await Test.createTestingModule({ imports: [PgQueueModule.forRoot({ connectionString: suite.url, pollIntervalMs: 100 })], providers: providers as never[] })
      .setLogger(logger)
      .compile();
    suite.opened(app);
    return { app, logger };
  }

  it('runs a @Processor class with its options and its dependencies', async () => {
    const { app } = await compile([GreetingProcessor, Greeter]);
    await app.init();
    expect(app.get<PgQueue>(PG_QUEUE_ENGINE).handlerOptions('processed')).toMatchObject({ concurrency: 2 });
    await app.get(QueueService).enqueue('processed', { name: 'Ada' });
    await drainQueues(app);
    expect(GreetingProcessor.seen).toEqual(['hello Ada #1']);
  });

  it('refuses a @Processor and a @JobHandler of one queue, naming both', async () => {
    const { app } = await compile([ContestedProcessor, ContestedMethod]);
    const error = await app.init().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as Error).message).toMatch(/queue "contested" has two handlers: ContestedProcessor\.process .* and ContestedMethod\.handle/);
  });

  it('refuses a @Processor without process()', async () => {
    const { app } = await compile([NoProcessMethod]);
    await expect(app.init()).rejects.toThrow(/NoProcessMethod has no process\(job, ctx\) method/);
  });

  it('gives a request-scoped handler a provider tree per attempt, with REQUEST = { job, ctx }', async () => {
    const { app } = await compile([ScopedJobs, PerAttempt]);
    await app.init();
    const queue = app.get(QueueService);
    const ids = await queue.enqueueMany([0, 1, 2].map((n) => ({ queue: 'scoped', payload: { n }, options: { delayMs: 0 } })));
    await drainQueues(app, { timeoutMs: 20_000 });
    for (const id of ids) expect(await queue.get(id)).toMatchObject({ status: 'succeeded' });
    // Job 0 ran twice (it failed once): four attempts, four trees, each REQUEST its own attempt.
    expect(ScopedJobs.seen.map((s) => s.n).sort()).toEqual([0, 0, 1, 2]);
    expect(PerAttempt.instances.size).toBe(4);
    expect(ScopedJobs.seen.filter((s) => s.n === 0).map((s) => s.attempt).sort()).toEqual([1, 2]);
    for (const seen of ScopedJobs.seen) expect(seen.requestJob).toBe(ids[seen.n]);
  });

  it('calls @OnQueueEvent listeners of this process, by type and queue; a listener that throws is logged and harms nothing', async () => {
    const { app, logger } = await compile([EventListeners, EventedJobs]);
    await app.init();
    const queue = app.get(QueueService);
    const good = await queue.enqueue('evented', { fail: false });
    const bad = await queue.enqueue('evented', { fail: true });
    await drainQueues(app);
    expect(await queue.get(good)).toMatchObject({ status: 'succeeded' });
    expect(await queue.get(bad)).toMatchObject({ status: 'dead' });
    expect(EventListeners.failed).toEqual([expect.objectContaining({ type: 'failed', jobId: bad, code: 'NOPE', dead: true })]);
    expect(EventListeners.all.filter((t) => t === 'claimed')).toHaveLength(2);
    expect(EventListeners.all.filter((t) => t === 'succeeded')).toHaveLength(1);
    expect(logger.messages('error').filter((m) => m.includes("@OnQueueEvent('*') EventListeners.onAny failed: a listener that fails"))).toHaveLength(2);
  });
});
