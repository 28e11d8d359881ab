import 'reflect-metadata';
import { Injectable } from '@nestjs/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobHandler, type Job, type JobContext } from '../../lib/index.js';
import { QUEUES, type DeliverWebhook, type GenerateReport, type ImportCatalog } from '../../sample-app/jobs/job-payloads.js';
import { waitFor } from '../support/engine.js';
import { promtoolCheckMetrics, value } from '../support/prometheus.js';
import { aborted, bootSampleApp, Gates, insertGhostClaim, type SampleApp } from '../support/sample-app.js';

const gates = new Gates();

/** Waits for its gate (or its signal): a job the test holds running while it moves the lease. */
@Injectable()
class HeldJobs {
  @JobHandler('held', { concurrency: 2, prefetch: 0, leaseMs: 30_000 })
  async held(job: Job, ctx: JobContext): Promise<void> {
    await Promise.race([gates.wait(job.id), aborted(ctx.signal)]);
  }
}

/**
 * Prometheus's own linter on the sample app's real `GET /metrics`, after real events (claims, a
 * retry, a dead job, heartbeats, a lease expiry, a refused completion), with the database up and
 * with it unreachable. Needs promtool (Debian package `prometheus`): `npm run test:prometheus`.
 */
describe('promtool check metrics on GET /metrics', () => {
  let s: SampleApp;
  const scrape = async () => {
    const response = await s.get('/metrics');
    expect(response.status).toBe(200);
    return response.text();
  };

  beforeAll(async () => {
    promtoolCheckMetrics(''); // one clear line, and every test fails, when promtool is missing
    s = await bootSampleApp(
      'promtool',
      { pollIntervalMs: 100, reaper: { intervalMs: 600_000 }, scheduler: { intervalMs: 50 }, statementTimeoutMs: 1_000, metrics: { timeoutMs: 500 } },
      [HeldJobs],
      { viaProxy: true },
    );
  });

  afterAll(async () => {
    gates.openAll();
    await s?.close();
  });

  it('passes with no warnings after claims, a retry, a dead job, heartbeats, a lease expiry and a lost fence', async () => {
    await s.queue.enqueue<DeliverWebhook>(QUEUES.webhooks, { url: 'https://example.test/hook', event: 'paid', failuresBeforeSuccess: 1 });
    await s.queue.enqueue<ImportCatalog>(QUEUES.imports, { version: 1, source: 's3://bucket/catalog.csv' });
    await s.queue.enqueue<GenerateReport>(QUEUES.reports, { reportId: 'p1', pages: 3, msPerPage: 400 });
    const held = await s.queue.enqueue('held', {});
    await waitFor(() => gates.started.has(held));
    // Its lease ends (by the database's clock) before its handler returns: the completion is refused.
    await s.sql.query(`UPDATE pgqueue.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [held]);
    gates.open(held);
    await insertGhostClaim(s.sql, 'held', {}, { count: 1, max: 1 });
    await waitFor(async () => {
      const text = await scrape();
      return [
        value(text, 'pgqueue_jobs_retried_total', { queue: QUEUES.webhooks, code: 'RECEIVER_UNAVAILABLE', attempt: 1 }) === 1,
        value(text, 'pgqueue_jobs_succeeded_total', { queue: QUEUES.webhooks }) === 1,
        value(text, 'pgqueue_jobs_dead_total', { queue: QUEUES.imports, code: 'UNSUPPORTED_VERSION', attempt: 1 }) === 1,
        value(text, 'pgqueue_jobs_succeeded_total', { queue: QUEUES.reports }) === 1,
        value(text, 'pgqueue_lease_lost_total', { queue: 'held', reason: 'lease_lost', operation: 'complete' }) === 1,
      ].every(Boolean);
    }, 20_000);
    expect(await s.engine.reapOnce()).toMatchObject({ reaped: 2, dead: 1 });

    const text = await scrape();
    expect(value(text, 'pgqueue_lease_expired_total', { queue: 'held', code: 'LEASE_EXPIRED' })).toBe(2);
    expect(value(text, 'pgqueue_heartbeats_total', { queue: QUEUES.reports })).toBeGreaterThanOrEqual(1);
    expect(promtoolCheckMetrics(text)).toEqual({ status: 0, problems: '' });
  });

  it('passes with the database unreachable, and so does the scrape after it is back', async () => {
    s.proxy!.cut();
    const down = await scrape();
    expect(value(down, 'pgqueue_database_up')).toBe(0);
    expect(promtoolCheckMetrics(down)).toEqual({ status: 0, problems: '' });
    s.proxy!.heal();
    const up = await waitFor(async () => {
      const text = await scrape().catch(() => undefined);
      return text !== undefined && value(text, 'pgqueue_database_up') === 1 ? text : undefined;
    }, 15_000);
    expect(promtoolCheckMetrics(up)).toEqual({ status: 0, problems: '' });
  });
});
