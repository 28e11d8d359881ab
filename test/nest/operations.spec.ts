import 'reflect-metadata';
import { Injectable } from '@nestjs/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  InvalidOptionError,
  JobHandler,
  JobStateError,
  PermanentJobError,
  PgQueueHealthIndicator,
  type DeadJobPage,
  type EngineStats,
  type Job,
  type JobContext,
  type JobEvent,
  type JobEventRecord,
  type ReplayOutcome,
} from '../../lib/index.js';
import { QUEUES, type ImportCatalog } from '../../sample-app/jobs/job-payloads.js';
import { attemptEnded } from '../support/signals.js';
import { aborted, bootSampleApp, Gates, type SampleApp } from '../support/sample-app.js';

interface Op {
  mode: 'ok' | 'block' | 'fail' | 'broken-until-fixed';
  code?: string;
}

const gates = new Gates();
/** Why each job's signal aborted (the abort code), once it did. */
const abortedWith = new Map<string, string>();
/** The idempotency key each attempt saw. */
const keysSeen = new Map<string, string[]>();
let importerFixed = false;

@Injectable()
class OpsJobs {
  @JobHandler('ops', { concurrency: 4, prefetch: 0 })
  async run(job: Job<Op>, ctx: JobContext): Promise<void> {
    keysSeen.set(job.id, [...(keysSeen.get(job.id) ?? []), job.idempotencyKey]);
    ctx.signal.addEventListener('abort', () => abortedWith.set(job.id, (ctx.signal.reason as { code: string }).code), { once: true });
    switch (job.payload.mode) {
      case 'ok':
        return;
      case 'block':
        return Promise.race([gates.wait(job.id), aborted(ctx.signal)]);
      case 'fail':
        throw new PermanentJobError('refused by the test', { code: job.payload.code ?? 'BAD_INPUT' });
      case 'broken-until-fixed':
        if (!importerFixed) throw new PermanentJobError('the importer is broken', { code: 'IMPORTER_BROKEN' });
    }
  }

  /** One slot and no prefetch: a second job waits, claimable, while the first holds the slot. */
  @JobHandler('slow', { concurrency: 1, prefetch: 0 })
  async slow(job: Job): Promise<void> {
    await gates.wait(job.id);
  }
}

/** The sample's operator endpoints over HTTP, and the QueueService calls behind them. */
describe('operating the queue', () => {
  let s: SampleApp;
  const json = async <T>(response: Response | Promise<Response>): Promise<T> => (await response).json() as Promise<T>;
  const statusOf = async (id: string) => (await s.queue.get(id))?.status;
  /** The next attempt of `id` ended so (signals of the engine: no polling). */
  const ended = (id: string, outcome: 'succeeded' | 'dead') => attemptEnded(s.signals, id, outcome);

  beforeAll(async () => {
    s = await bootSampleApp(
      'operations',
      { pollIntervalMs: 100, reaper: { intervalMs: 200 }, scheduler: { intervalMs: 50 }, health: { maxClaimableAgeMs: 1_000 } },
      [OpsJobs],
    );
  });

  afterAll(async () => {
    gates.openAll();
    await s?.close();
  });

  describe('dead jobs', () => {
    it('lists them a page at a time, by queue and error code', async () => {
      const imports = await s.queue.enqueueMany<ImportCatalog>(
        [1, 2, 3].map((n) => ({ queue: QUEUES.imports, payload: { version: 1, source: `s3://bucket/${n}.csv` } })),
      );
      const other = await s.queue.enqueue<Op>('ops', { mode: 'fail', code: 'BAD_INPUT' });
      await Promise.all([...imports, other].map((id) => ended(id, 'dead')));

      const first = await json<DeadJobPage>(s.get(`/dead?queue=${QUEUES.imports}&limit=2`));
      expect(first.jobs).toHaveLength(2);
      expect(first.nextCursor).toEqual(expect.any(String));
      const second = await json<DeadJobPage>(s.get(`/dead?queue=${QUEUES.imports}&limit=2&cursor=${encodeURIComponent(first.nextCursor!)}`));
      expect(second.jobs).toHaveLength(1);
      expect(second.nextCursor).toBeUndefined();
      expect([...first.jobs, ...second.jobs].map((j) => j.id).sort()).toEqual([...imports].sort());
      expect(first.jobs[0]).toMatchObject({ queue: QUEUES.imports, lastErrorCode: 'UNSUPPORTED_VERSION', attemptCount: 1 });

      const byCode = await json<DeadJobPage>(s.get('/dead?errorCode=BAD_INPUT'));
      expect(byCode.jobs.map((j) => j.id)).toEqual([other]);
      // The same call without HTTP.
      expect((await s.queue.listDead({ queue: 'ops', errorCode: 'BAD_INPUT' })).jobs.map((j) => j.id)).toEqual([other]);
    });

    it('answers 400 with the queue’s code and message for a bad cursor or limit', async () => {
      const badCursor = await s.get('/dead?cursor=not-a-cursor');
      expect(badCursor.status).toBe(400);
      expect(await badCursor.json()).toMatchObject({ code: 'INVALID_OPTION', message: expect.stringContaining('"cursor"') });
      const badLimit = await s.get('/dead?limit=0');
      expect(badLimit.status).toBe(400);
      expect(await badLimit.json()).toMatchObject({ code: 'INVALID_OPTION', message: expect.stringContaining('"limit"') });
      expect((await s.get('/dead?queue=a&queue=b')).status).toBe(400);
    });

    it('replay keeps the id and the idempotency key, and appends to the history who and why', async () => {
      importerFixed = false;
      const id = await s.queue.enqueue<Op>('ops', { mode: 'broken-until-fixed' });
      await ended(id, 'dead');

      importerFixed = true;
      const response = await s.post(`/jobs/${id}/replay`, { reason: 'importer fixed in v2.3' }, { 'x-actor': 'ada@example.com' });
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ id, replayed: true });
      await ended(id, 'succeeded');

      expect(await s.queue.get(id)).toMatchObject({ id, status: 'succeeded', attemptCount: 1 }); // a fresh budget
      const keys = keysSeen.get(id)!;
      expect(keys).toHaveLength(2);
      expect(new Set(keys).size).toBe(1);
      const history = await json<JobEventRecord[]>(s.get(`/jobs/${id}/history`));
      expect(history.map((e) => [e.kind, e.fromStatus, e.toStatus])).toEqual([
        ['dead', 'running', 'dead'],
        ['replayed', 'dead', 'pending'],
      ]);
      expect(history[1]).toMatchObject({ actor: 'ada@example.com', message: 'importer fixed in v2.3' });
    });

    it('refuses to replay a job that is not dead: 409 JOB_NOT_DEAD with a message that says why', async () => {
      const id = await s.queue.enqueue<Op>('ops', { mode: 'ok' });
      await ended(id, 'succeeded');
      const response = await s.post(`/jobs/${id}/replay`, { reason: 'by mistake' });
      expect(response.status).toBe(409);
      expect(await response.json()).toEqual({
        statusCode: 409,
        error: 'Conflict',
        code: 'JOB_NOT_DEAD',
        message: `Job ${id} is succeeded, not dead: only dead jobs can be replayed.`,
      });
      await expect(s.queue.replay(id)).rejects.toThrow(JobStateError);
      expect(await s.queue.history(id)).toEqual([]);

      const missing = await s.post('/jobs/999999999/replay', {});
      expect(missing.status).toBe(404);
      expect(await missing.json()).toMatchObject({ code: 'JOB_NOT_FOUND', message: 'Job 999999999 does not exist.' });
      const notAnId = await s.post('/jobs/abc/replay', {});
      expect(notAnId.status).toBe(400);
      expect(await notAnId.json()).toMatchObject({ code: 'INVALID_OPTION', message: expect.stringContaining('"abc" is not a job id') });
      expect((await s.post(`/jobs/${id}/replay`, { reason: 42 })).status).toBe(400);
      expect((await s.post(`/jobs/${id}/replay`, {}, { 'x-actor': 'x'.repeat(201) })).status).toBe(400);
    });

    it('replays a queue’s dead jobs of one error code in bulk', async () => {
      const ids = await Promise.all([1, 2].map(() => s.queue.enqueue<Op>('ops', { mode: 'fail', code: 'BULK_CODE' })));
      await Promise.all(ids.map((id) => ended(id, 'dead')));
      const response = await s.post('/queues/ops/dead/replay', { errorCode: 'BULK_CODE', reason: 'bulk' });
      expect(response.status).toBe(200);
      const outcomes = await json<ReplayOutcome[]>(response);
      expect(outcomes.map((o) => o.id).sort()).toEqual([...ids].sort());
      expect(outcomes.every((o) => o.replayed)).toBe(true);
      // They fail again (the cause was not fixed): dead, with both deaths and the replay in history.
      await Promise.all(ids.map((id) => ended(id, 'dead')));
      for (const id of ids) expect(await s.queue.history(id)).toHaveLength(3);
      expect((await s.queue.history(ids[0]!)).map((e) => e.kind)).toEqual(['dead', 'replayed', 'dead']);
    });

    it('discards a dead job (kept as cancelled), then deletes it, recording the purge', async () => {
      const id = await s.queue.enqueue<Op>('ops', { mode: 'fail', code: 'DISCARD_ME' });
      await ended(id, 'dead');
      const discard = await s.post(`/jobs/${id}/discard`, { reason: 'not needed' }, { 'x-actor': 'ops-bot' });
      expect(discard.status).toBe(200);
      expect(await discard.json()).toEqual({ id, deleted: false });
      expect(await statusOf(id)).toBe('cancelled');
      expect((await s.queue.history(id)).at(-1)).toMatchObject({ kind: 'discarded', actor: 'ops-bot', message: 'not needed' });

      const again = await s.post(`/jobs/${id}/discard`, {});
      expect(again.status).toBe(409);
      expect(await again.json()).toMatchObject({ code: 'JOB_NOT_DEAD' });

      expect((await s.post(`/jobs/${id}/discard`, { delete: true, reason: 'cleanup' })).status).toBe(200);
      expect((await s.get(`/jobs/${id}`)).status).toBe(404);
      const history = await s.get(`/jobs/${id}/history`);
      expect(history.status).toBe(404);
      expect(await history.json()).toMatchObject({ code: 'JOB_NOT_FOUND' });
      const { rows } = await s.sql.query(`SELECT reason, removed, removed_ids::text[] AS ids FROM pgqueue.purges WHERE $1 = ANY(removed_ids)`, [id]);
      expect(rows).toEqual([{ reason: 'cleanup', removed: 1, ids: [id] }]);
    });

    it('purges dead jobs older than a date through QueueService, recording what it removed', async () => {
      const id = await s.queue.enqueue<Op>('ops', { mode: 'fail', code: 'PURGE_ME' });
      await ended(id, 'dead');
      const before = (await s.queue.listDead({ queue: 'ops' })).jobs.length;
      expect(before).toBeGreaterThanOrEqual(1);
      const removed = await s.queue.purgeDead({ olderThan: new Date(Date.now() + 60_000), queue: 'ops', actor: 'test', reason: 'retention' });
      expect(removed).toBe(before);
      expect((await s.queue.listDead({ queue: 'ops' })).jobs).toEqual([]);
      expect(await s.queue.get(id)).toBeUndefined();
      const { rows } = await s.sql.query(`SELECT actor, removed FROM pgqueue.purges WHERE $1 = ANY(removed_ids)`, [id]);
      expect(rows).toEqual([{ actor: 'test', removed: before }]);
      await expect(s.queue.purgeDead({ olderThan: new Date('nope') })).rejects.toThrow(InvalidOptionError);
    });
  });

  it('cancel of a running job aborts its handler, on the events$ stream too; a second cancel is 409', async () => {
    const events: JobEvent[] = [];
    const subscription = s.queue.events$.subscribe((event) => events.push(event));
    try {
      const id = await s.queue.enqueue<Op>('ops', { mode: 'block' });
      await gates.whenStarted(id);
      const response = await s.post(`/jobs/${id}/cancel`, { reason: 'customer asked' }, { 'x-actor': 'support' });
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ id, cancelled: true });

      // The attempt ends once the handler's refused write is recorded: aborted, lost, then ended.
      await attemptEnded(s.signals, id, 'cancelled');
      expect(abortedWith.get(id)).toBe('CANCELLED');
      const lost = events.find((e) => e.type === 'lease_lost' && e.jobId === id);
      expect(lost).toMatchObject({ type: 'lease_lost', queue: 'ops', reason: 'cancelled', operation: 'fail' });
      expect(events.some((e) => e.type === 'claimed' && e.jobId === id)).toBe(true);
      expect(await s.queue.get(id)).toMatchObject({ status: 'cancelled' });
      // The operator's cancel, then the handler's refused write.
      expect((await s.queue.history(id)).map((e) => [e.kind, e.actor, e.message, e.errorCode])).toEqual([
        ['cancelled', 'support', 'customer asked', null],
        ['lost_fence', null, null, 'CANCELLED'],
      ]);

      const again = await s.post(`/jobs/${id}/cancel`);
      expect(again.status).toBe(409);
      expect(await again.json()).toMatchObject({
        code: 'JOB_NOT_CANCELLABLE',
        message: `Job ${id} is cancelled: only scheduled, pending, running jobs can be cancelled.`,
      });
      expect((await s.post('/jobs/999999999/cancel')).status).toBe(404);
    } finally {
      subscription.unsubscribe();
    }
  });

  it('pause and resume show in /stats; a paused queue is not claimed', async () => {
    const queueStats = async () => (await json<EngineStats>(s.get('/stats'))).queues.find((q) => q.queue === 'ops')!;
    const pause = await s.post('/queues/ops/pause');
    expect(pause.status).toBe(200);
    expect(await pause.json()).toEqual({ queue: 'ops', paused: true });
    expect(await queueStats()).toMatchObject({ paused: true, pausedAt: expect.any(String) });

    const id = await s.queue.enqueue<Op>('ops', { mode: 'ok' });
    // Two more claim statements of the queue ran after the enqueue, and neither took the job.
    const claims = s.signals.worker.batchClaimed;
    claims.clear();
    for (let n = 0; n < 2; n++) expect((await claims.waitFor((b) => b.queue === 'ops')).jobIds).toEqual([]);
    expect(await statusOf(id)).toBe('pending');
    expect((await queueStats()).counts.pending).toBe(1);

    const resume = await s.post('/queues/ops/resume');
    expect(await resume.json()).toEqual({ queue: 'ops', paused: false });
    await ended(id, 'succeeded');
    expect(await queueStats()).toMatchObject({ paused: false, pausedAt: null, slots: { busy: 0, total: 4 } });

    const unknown = await s.post('/queues/no-such-queue/pause');
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ code: 'QUEUE_NOT_FOUND', message: expect.stringContaining('"no-such-queue" is not declared') });
  });

  describe('health', () => {
    it('goes down (503) when a queue’s oldest claimable job is older than the threshold, and up once it drains', async () => {
      const healthy = await s.get('/health');
      expect(healthy.status).toBe(200);
      expect(await healthy.json()).toMatchObject({ status: 'ok', info: { pgQueue: { status: 'up', problems: [] } } });

      const holder = await s.queue.enqueue('slow', {});
      await gates.whenStarted(holder);
      const waiting = await s.queue.enqueue('slow', {});
      // It has waited 10 s (by the database's clock) behind the busy slot; the module's limit is 1 s.
      await s.sql.query(`UPDATE pgqueue.jobs SET available_at = now() - interval '10 seconds' WHERE id = $1`, [waiting]);
      const down = await s.get('/health');
      expect(down.status).toBe(503);
      expect(await down.json()).toMatchObject({
        status: 'error',
        error: {
          pgQueue: {
            status: 'down',
            problems: [expect.stringMatching(/^queue "slow": the oldest claimable job has waited 1\d s \(limit 1 s\)$/)],
            oldestClaimableQueue: 'slow',
            limits: { maxClaimableAgeMs: 1_000 },
          },
        },
      });

      gates.open(holder);
      gates.open(waiting);
      await ended(waiting, 'succeeded');
      const up = await s.get('/health');
      expect(up.status).toBe(200);
      expect(await up.json()).toMatchObject({ status: 'ok', info: { pgQueue: { status: 'up', oldestClaimableAgeMs: null } } });
    });

    it('takes thresholds per call over the module’s, and validates them', async () => {
      const indicator = s.app.get(PgQueueHealthIndicator);
      const holder = await s.queue.enqueue('slow', {});
      await gates.whenStarted(holder);
      const waiting = await s.queue.enqueue('slow', {});
      await s.sql.query(`UPDATE pgqueue.jobs SET available_at = now() - interval '10 seconds' WHERE id = $1`, [waiting]);
      try {
        expect((await indicator.isHealthy()).pgQueue.status).toBe('down');
        const lenient = await indicator.isHealthy('queue', { maxClaimableAgeMs: 60_000 });
        expect(lenient).toEqual({
          queue: {
            status: 'up',
            problems: [],
            oldestClaimableAgeMs: expect.any(Number),
            oldestClaimableQueue: 'slow',
            mostLateSchedule: null,
            listener: { listening: true, downForMs: 0 },
            limits: { maxClaimableAgeMs: 60_000, maxListenerDownMs: 60_000, maxScheduleLateMs: 60_000, timeoutMs: 5_000 },
          },
        });
        // Paused queues are exempt: their age is expected to grow.
        await s.queue.pause('slow');
        expect((await indicator.isHealthy()).pgQueue.status).toBe('up');
        await s.queue.resume('slow');
        await expect(indicator.isHealthy('q', { maxClaimableAgeMs: -1 })).rejects.toThrow(/Invalid option "thresholds.maxClaimableAgeMs"/);
        await expect(indicator.isHealthy('q', { maxAge: 1 } as never)).rejects.toThrow(/Invalid option "thresholds.maxAge": it is not an option/);
      } finally {
        gates.open(holder);
        gates.open(waiting);
        await ended(waiting, 'succeeded');
      }
    });
  });
});
