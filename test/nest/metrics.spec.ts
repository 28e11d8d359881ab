import 'reflect-metadata';
import { Injectable } from '@nestjs/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobHandler, PROMETHEUS_CONTENT_TYPE, type Job, type JobContext } from '../../lib/index.js';
import { QUEUES, type DeliverWebhook, type GenerateReport, type ImportCatalog } from '../../sample-app/jobs/job-payloads.js';
import { familyType, value } from '../support/prometheus.js';
import { aborted, bootSampleApp, Gates, insertGhostClaim, type SampleApp } from '../support/sample-app.js';
import { allEnded, attemptEnded } from '../support/signals.js';
import { expireLease } from '../support/time-travel.js';

interface Probe {
  mode: 'ok' | 'block';
}

const gates = new Gates();

/** Test handlers beside the sample's: jobs that wait for the test, honouring or ignoring their signal. */
@Injectable()
class ProbeJobs {
  /** Waits for its gate, but stops at once when its signal aborts (a cancel, a lost lease). */
  @JobHandler('probe', { concurrency: 2, prefetch: 0, leaseMs: 30_000, backoff: { baseMs: 0, maxMs: 0 } })
  async probe(job: Job<Probe>, ctx: JobContext): Promise<void> {
    if (job.payload.mode === 'block') await Promise.race([gates.wait(job.id), aborted(ctx.signal)]);
  }

  /** Ignores its signal: the worker gives up on it when the (short) lease is about to expire. */
  @JobHandler('deaf', { concurrency: 1, prefetch: 0, leaseMs: 400 })
  async deaf(job: Job): Promise<void> {
    await gates.wait(job.id);
  }
}

/**
 * The must-show: every figure of the reference, driven by real events (lease expiries,
 * a lost fence, retries, dead jobs), read back from the sample app's `GET /metrics` over HTTP.
 */
describe('GET /metrics', () => {
  let s: SampleApp;
  const scrape = async () => {
    const response = await s.get('/metrics');
    expect(response.status).toBe(200);
    return response.text();
  };
  // Each test waits for the attempts it is about on the worker's signal, then scrapes once: the
  // worker counts an outcome after its write committed and before it signals, so by then both the
  // counters and the database's gauges show it.

  beforeAll(async () => {
    s = await bootSampleApp(
      'metrics',
      {
        pollIntervalMs: 100,
        // The reaper runs when the test says (engine.reapOnce()), so the order of events is the test's.
        reaper: { intervalMs: 600_000 },
        scheduler: { intervalMs: 50 },
        queues: ['backlog'],
      },
      [ProbeJobs],
    );
  });

  afterAll(async () => {
    gates.openAll();
    await s?.close();
  });

  it('is Prometheus text with the right content type', async () => {
    const response = await s.get('/metrics');
    expect(response.headers.get('content-type')).toBe(PROMETHEUS_CONTENT_TYPE);
    const text = await response.text();
    for (const line of text.trim().split('\n')) expect(line).toMatch(/^(# (HELP|TYPE) [a-z_]+ .+|[a-z_]+(\{.*\})? [-+0-9.eInfNa]+)$/);
    for (const [family, type] of [
      ['pgqueue_lease_expired_total', 'counter'],
      ['pgqueue_lease_lost_total', 'counter'],
      ['pgqueue_jobs_retried_total', 'counter'],
      ['pgqueue_jobs_dead_total', 'counter'],
      ['pgqueue_heartbeat_failures_total', 'counter'],
      ['pgqueue_claim_wait_seconds', 'histogram'],
      ['pgqueue_completion_latency_seconds', 'histogram'],
      ['pgqueue_claim_query_duration_seconds', 'histogram'],
      ['pgqueue_handler_duration_seconds', 'histogram'],
      ['pgqueue_database_up', 'gauge'],
      ['pgqueue_oldest_claimable_age_seconds', 'gauge'],
      ['pgqueue_oldest_dead_age_seconds', 'gauge'],
      ['pgqueue_running_near_lease_expiry', 'gauge'],
      ['pgqueue_jobs', 'gauge'],
      ['pgqueue_jobs_finished_recent', 'gauge'],
      ['pgqueue_worker_saturation', 'gauge'],
      ['pgqueue_database_lock_waits', 'gauge'],
      ['pgqueue_pool_connections', 'gauge'],
    ]) {
      expect(familyType(text, family!), family).toBe(type);
    }
  });

  it('has a zero series for every closed label set of each handled queue from start-up, so increase() sees the first event', async () => {
    const text = await scrape(); // before any job of this file
    for (const queue of ['probe', 'deaf', QUEUES.webhooks]) {
      for (const counter of ['jobs_claimed', 'jobs_succeeded', 'jobs_released', 'heartbeats', 'heartbeat_failures']) {
        expect(value(text, `pgqueue_${counter}_total`, { queue }), `${counter} of ${queue}`).toBe(0);
      }
      for (const reason of ['lease_lost', 'cancelled', 'finished']) {
        for (const operation of ['start', 'complete', 'fail', 'heartbeat', 'release', 'effect']) {
          expect(value(text, 'pgqueue_lease_lost_total', { queue, reason, operation }), `${reason}/${operation} of ${queue}`).toBe(0);
        }
      }
      for (const code of ['LEASE_EXPIRED', 'MAX_RUNTIME', 'REAP_FAILED']) {
        expect(value(text, 'pgqueue_lease_expired_total', { queue, code }), `${code} of ${queue}`).toBe(0);
      }
    }
    // Open label sets (error codes) have no zero series; a queue not handled here has none either.
    expect(text).not.toMatch(/^pgqueue_jobs_retried_total\{/m);
    expect(value(text, 'pgqueue_jobs_claimed_total', { queue: 'backlog' })).toBeUndefined();
  });

  it('counts retries by error code and attempt, successes, and their latencies', async () => {
    const id = await s.queue.enqueue<DeliverWebhook>(QUEUES.webhooks, { url: 'https://example.test/hook', event: 'paid', failuresBeforeSuccess: 2 });
    await attemptEnded(s.signals, id, 'succeeded', 15_000);
    const text = await scrape();
    expect(value(text, 'pgqueue_jobs_succeeded_total', { queue: QUEUES.webhooks })).toBe(1);
    expect(await s.queue.get(id)).toMatchObject({ status: 'succeeded', attemptCount: 3 });
    expect(value(text, 'pgqueue_jobs_retried_total', { queue: QUEUES.webhooks, code: 'RECEIVER_UNAVAILABLE', attempt: 1 })).toBe(1);
    expect(value(text, 'pgqueue_jobs_retried_total', { queue: QUEUES.webhooks, code: 'RECEIVER_UNAVAILABLE', attempt: 2 })).toBe(1);
    expect(value(text, 'pgqueue_jobs_claimed_total', { queue: QUEUES.webhooks })).toBe(3);
    expect(value(text, 'pgqueue_jobs_finished_recent', { queue: QUEUES.webhooks, status: 'succeeded' })).toBe(1);
    // History is not a live status: no pgqueue_jobs series for it.
    expect(value(text, 'pgqueue_jobs', { queue: QUEUES.webhooks, status: 'succeeded' })).toBeUndefined();
    expect(value(text, 'pgqueue_jobs', { queue: QUEUES.webhooks, status: 'pending' })).toBe(0);
    // Claim latency per claim, completion latency per success, the claim statement's duration.
    expect(value(text, 'pgqueue_claim_wait_seconds_count', { queue: QUEUES.webhooks })).toBe(3);
    expect(value(text, 'pgqueue_claim_wait_seconds_bucket', { queue: QUEUES.webhooks, le: '+Inf' })).toBe(3);
    expect(value(text, 'pgqueue_completion_latency_seconds_count', { queue: QUEUES.webhooks })).toBe(1);
    expect(value(text, 'pgqueue_handler_duration_seconds_count', { queue: QUEUES.webhooks })).toBe(3);
    expect(value(text, 'pgqueue_claim_query_duration_seconds_count', { queue: QUEUES.webhooks })).toBeGreaterThanOrEqual(3);
  });

  it('counts dead jobs by code, and ages the oldest one', async () => {
    const id = await s.queue.enqueue<ImportCatalog>(QUEUES.imports, { version: 1, source: 's3://bucket/catalog.csv' });
    await attemptEnded(s.signals, id, 'dead', 15_000);
    const text = await scrape();
    expect(value(text, 'pgqueue_jobs_dead_total', { queue: QUEUES.imports, code: 'UNSUPPORTED_VERSION', attempt: 1 })).toBe(1);
    expect(await s.queue.get(id)).toMatchObject({ status: 'dead' });
    expect(value(text, 'pgqueue_jobs', { queue: QUEUES.imports, status: 'dead' })).toBe(1);
    // The scrape's now() is later than the dead write's: the age is above zero from the first scrape.
    const age = value(text, 'pgqueue_oldest_dead_age_seconds', { queue: QUEUES.imports })!;
    expect(age).toBeGreaterThan(0);
    expect(age).toBeLessThan(60);
  });

  it('counts heartbeats of a job that outlives its lease on progress', async () => {
    // 4 pages of 400 ms: 1.6 s on a 2 s lease; a heartbeat writes once a third of the lease has passed.
    const id = await s.queue.enqueue<GenerateReport>(QUEUES.reports, { reportId: 'm1', pages: 4, msPerPage: 400 });
    await attemptEnded(s.signals, id, 'succeeded', 15_000);
    const text = await scrape();
    expect(value(text, 'pgqueue_jobs_succeeded_total', { queue: QUEUES.reports })).toBe(1);
    expect(value(text, 'pgqueue_heartbeats_total', { queue: QUEUES.reports })).toBeGreaterThanOrEqual(1);
    expect(value(text, 'pgqueue_heartbeat_failures_total', { queue: QUEUES.reports })).toBe(0);
  });

  it('counts the attempt of a handler that ignored its signal until the lease was about to expire', async () => {
    const id = await s.queue.enqueue('deaf', {}, { maxAttempts: 1 });
    // Aborted a margin before the 400 ms lease ends, abandoned half a margin later, recorded (fenced,
    // while the lease was still ours) as a LEASE_EXPIRED failure: its only attempt, so dead.
    await attemptEnded(s.signals, id, 'dead', 15_000);
    const text = await scrape();
    expect(value(text, 'pgqueue_jobs_dead_total', { queue: 'deaf', code: 'LEASE_EXPIRED', attempt: 1 })).toBe(1);
    expect(await s.queue.get(id)).toMatchObject({ status: 'dead', lastErrorCode: 'LEASE_EXPIRED' });
    expect(value(text, 'pgqueue_lease_lost_total', { queue: 'deaf', reason: 'lease_lost', operation: 'fail' })).toBe(0);
    gates.open(id); // its late return changes nothing
  });

  it('shows saturation, near-expiry, a refused completion after the lease expired, and the reaper’s recoveries', async () => {
    const id = await s.queue.enqueue<Probe>('probe', { mode: 'block' });
    await gates.whenStarted(id);
    let text = await scrape();
    expect(value(text, 'pgqueue_worker_slots', { queue: 'probe' })).toBe(2);
    expect(value(text, 'pgqueue_worker_busy_slots', { queue: 'probe' })).toBe(1);
    expect(value(text, 'pgqueue_worker_saturation', { queue: 'probe' })).toBe(0.5);
    expect(value(text, 'pgqueue_jobs', { queue: 'probe', status: 'running' })).toBe(1);
    expect(value(text, 'pgqueue_running_near_lease_expiry', { queue: 'probe' })).toBe(0);

    // The database's view of the lease is what counts: bring its end within the 5 s window...
    await s.sql.query(`UPDATE pgqueue.jobs SET lease_expires_at = now() + interval '2 seconds' WHERE id = $1`, [id]);
    expect(value(await scrape(), 'pgqueue_running_near_lease_expiry', { queue: 'probe' })).toBe(1);

    // ...then past it (a pause of the process would do the same): the handler's completion is refused.
    await expireLease(s.sql, id);
    gates.open(id);
    await attemptEnded(s.signals, id, 'lost', 15_000);
    text = await scrape();
    expect(value(text, 'pgqueue_lease_lost_total', { queue: 'probe', reason: 'lease_lost', operation: 'complete' })).toBe(1);
    expect(value(text, 'pgqueue_jobs_succeeded_total', { queue: 'probe' })).toBe(0);
    expect(await s.queue.get(id)).toMatchObject({ status: 'running' }); // nothing written: the reaper's turn
    expect(value(text, 'pgqueue_lease_expired_total', { queue: 'probe', code: 'LEASE_EXPIRED' })).toBe(0);

    // Two ghosts of a vanished worker: one with attempts left, one on its last attempt.
    const ghost = await insertGhostClaim(s.sql, 'probe', { mode: 'ok' }, { count: 1, max: 5 });
    const lastAttempt = await insertGhostClaim(s.sql, 'probe', { mode: 'ok' }, { count: 2, max: 2 });
    const reaped = await s.engine.reapOnce();
    expect(reaped).toMatchObject({ reaped: 3, dead: 1 });

    await allEnded(s.signals, [id, ghost], 'succeeded', 15_000);
    text = await scrape();
    expect(value(text, 'pgqueue_jobs_succeeded_total', { queue: 'probe' })).toBe(2);
    expect(value(text, 'pgqueue_lease_expired_total', { queue: 'probe', code: 'LEASE_EXPIRED' })).toBe(3);
    expect(value(text, 'pgqueue_jobs_dead_total', { queue: 'probe', code: 'LEASE_EXPIRED', attempt: 2 })).toBe(1);
    expect(value(text, 'pgqueue_jobs_finished_recent', { queue: 'probe', status: 'succeeded' })).toBe(2);
    expect(value(text, 'pgqueue_jobs', { queue: 'probe', status: 'dead' })).toBe(1);
    expect(await s.queue.get(id)).toMatchObject({ status: 'succeeded', attemptCount: 2 });
    expect(await s.queue.get(ghost)).toMatchObject({ status: 'succeeded', attemptCount: 2 });
    expect(await s.queue.get(lastAttempt)).toMatchObject({ status: 'dead', lastErrorCode: 'LEASE_EXPIRED' });
    expect((await s.queue.history(id)).map((e) => [e.kind, e.errorCode])).toEqual([
      ['lost_fence', 'LEASE_LOST'],
      ['lease_expired', 'LEASE_EXPIRED'],
    ]);
  });

  it('counts the refused write of a cancelled running job as a lost fence with reason "cancelled"', async () => {
    const id = await s.queue.enqueue<Probe>('probe', { mode: 'block' });
    await gates.whenStarted(id);
    const response = await s.post(`/jobs/${id}/cancel`, { reason: 'metrics test' });
    expect(response.status).toBe(200);
    // The handler's signal aborted (it honours it) and it threw at once; its failure write was refused.
    await attemptEnded(s.signals, id, 'cancelled', 15_000);
    const text = await scrape();
    expect(value(text, 'pgqueue_lease_lost_total', { queue: 'probe', reason: 'cancelled', operation: 'fail' })).toBe(1);
    expect(await s.queue.get(id)).toMatchObject({ status: 'cancelled' });
    expect(value(text, 'pgqueue_jobs_finished_recent', { queue: 'probe', status: 'cancelled' })).toBe(1);
  });

  it('ages the oldest claimable job, and shows a paused queue', async () => {
    const id = await s.queue.enqueue('backlog', {}); // no handler anywhere: it waits
    await s.sql.query(`UPDATE pgqueue.jobs SET available_at = now() - interval '90 seconds' WHERE id = $1`, [id]);
    let text = await scrape();
    expect(value(text, 'pgqueue_jobs', { queue: 'backlog', status: 'pending' })).toBe(1);
    const age = value(text, 'pgqueue_oldest_claimable_age_seconds', { queue: 'backlog' })!;
    expect(age).toBeGreaterThanOrEqual(90);
    expect(age).toBeLessThan(100);
    expect(value(text, 'pgqueue_queue_paused', { queue: 'backlog' })).toBe(0);
    expect(value(text, 'pgqueue_worker_slots', { queue: 'backlog' })).toBeUndefined(); // not handled here

    await s.queue.pause('backlog');
    text = await scrape();
    expect(value(text, 'pgqueue_queue_paused', { queue: 'backlog' })).toBe(1);
    await s.queue.resume('backlog');
    expect(value(await scrape(), 'pgqueue_queue_paused', { queue: 'backlog' })).toBe(0);
  });

  it('shows connection use and the listener', async () => {
    const text = await scrape();
    expect(value(text, 'pgqueue_listener_up')).toBe(1);
    expect(value(text, 'pgqueue_listener_down_seconds')).toBe(0);
    expect(value(text, 'pgqueue_pool_connections', { state: 'total' })).toBeGreaterThanOrEqual(1);
    expect(value(text, 'pgqueue_pool_connections', { state: 'waiting' })).toBe(0);
    expect(value(text, 'pgqueue_database_connections')).toBeGreaterThanOrEqual(2); // the pool's and the listener's
    expect(value(text, 'pgqueue_database_lock_waits')).toBe(0);
  });
});
