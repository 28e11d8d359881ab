import 'reflect-metadata';
import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { PgQueue } from '../../lib/engine/index.js';
import { InvalidOptionError, OnQueueEvent, PgQueueModule, QueueService, type ClusterJobEvent, type ClusterQueueEvent, type PgQueueModuleOptions } from '../../lib/index.js';
import { testLogger, waitForOutcome } from '../support/engine.js';
import { CapturingLogger, nestSuite } from '../support/nest.js';
import { localSignal, nextValues, testSignals } from '../support/signals.js';

const heard = localSignal<ClusterQueueEvent<'succeeded'>>('nest.cluster.succeeded');

@Injectable()
class ClusterListeners {
  @OnQueueEvent('succeeded', { from: 'cluster' })
  onSucceeded(event: ClusterQueueEvent<'succeeded'>): void {
    heard.signal(event);
  }
}

@Injectable()
class ClaimedListener {
  @OnQueueEvent('claimed', { from: 'cluster' })
  onClaimed(): void {}
}

describe("@OnQueueEvent(type, { from: 'cluster' }) and QueueService.clusterEvents$", () => {
  const suite = nestSuite('cluster_events');

  async function compile(options: Partial<PgQueueModuleOptions>, providers: unknown[]) {
    const app = await Test.createTestingModule({ imports: [PgQueueModule.forRoot({ connectionString: suite.url, pollIntervalMs: 100, ...options })], providers: providers as never[] })
      .setLogger(new CapturingLogger())
      .compile();
    return suite.opened(app);
  }

  it('hears the events of another process, with its origin, beside this process\'s own stream', async () => {
    const app = await compile({ workerId: 'nest-b', events: { crossProcess: true } }, [ClusterListeners]);
    await app.init();
    const queue = app.get(QueueService);
    const streamed = localSignal<ClusterJobEvent>('clusterEvents$');
    const subscription = queue.clusterEvents$.subscribe((event) => streamed.signal(event));
    const own: string[] = [];
    queue.events$.subscribe((event) => own.push(event.jobId));

    const other = new PgQueue({ connectionString: suite.url, workerId: 'engine-a', logger: testLogger(), events: { crossProcess: true } });
    testSignals(other);
    other.work('cluster-nest', async () => {});
    try {
      await other.start();
      const id = await other.enqueue('cluster-nest', {});
      await waitForOutcome(other, id, 'succeeded');
      expect(await heard.next()).toMatchObject({ type: 'succeeded', queue: 'cluster-nest', jobId: id, origin: 'engine-a' });
      expect((await nextValues(streamed, 2)).map((e) => [e.type, e.jobId, e.origin])).toEqual([
        ['claimed', id, 'engine-a'],
        ['succeeded', id, 'engine-a'],
      ]);
      expect(own).not.toContain(id);
    } finally {
      subscription.unsubscribe();
      await other.stop(1_000);
    }
  });

  it('a cluster listener while events.crossProcess is off fails the start, naming the option', async () => {
    const app = await compile({}, [ClusterListeners]);
    const error = await app.init().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect(error).toMatchObject({ option: 'events.crossProcess' });
    expect((error as Error).message).toMatch(/@OnQueueEvent\('succeeded', \{ from: 'cluster' \}\) ClusterListeners\.onSucceeded asks for the job events of other processes/);
  });

  it('so does one of a type the option does not list', async () => {
    const app = await compile({ events: { crossProcess: ['failed', 'succeeded'] } }, [ClaimedListener]);
    const error = await app.init().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as Error).message).toMatch(/"claimed" events of other processes.*lists only "failed", "succeeded".*Add "claimed" to events\.crossProcess/);
  });

  it('clusterEvents$ while the option is off throws, naming it', async () => {
    const app = await compile({}, []);
    await app.init();
    expect(() => app.get(QueueService).clusterEvents$).toThrow(/Invalid option "events\.crossProcess": QueueService\.clusterEvents\$ asks for/);
  });
});
