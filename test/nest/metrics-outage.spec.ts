import 'reflect-metadata';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QUEUES, type DeliverWebhook } from '../../sample-app/jobs/job-payloads.js';
import { attemptEnded } from '../support/signals.js';
import { familyType, value } from '../support/prometheus.js';
import { bootSampleApp, type SampleApp } from '../support/sample-app.js';

const STATEMENT_TIMEOUT_MS = 4_000;
/** The client-side bound of a statement: statementTimeoutMs plus CLIENT_TIMEOUT_SLACK_MS. */
const QUERY_TIMEOUT_MS = STATEMENT_TIMEOUT_MS + 1_000;

/** The families read from the database: left out while it does not answer. */
const DATABASE_FAMILIES = [
  'pgqueue_jobs',
  'pgqueue_jobs_finished_recent',
  'pgqueue_oldest_claimable_age_seconds',
  'pgqueue_oldest_dead_age_seconds',
  'pgqueue_running_near_lease_expiry',
  'pgqueue_queue_paused',
  'pgqueue_database_connections',
  'pgqueue_database_lock_waits',
];

/**
 * `GET /metrics` while the sample app's database is unreachable (its pool and listener go through
 * a proxy the test cuts or blackholes): this process's counters and histograms stay scrapeable,
 * the database's gauges are left out, and `pgqueue_database_up` says 0.
 */
describe('GET /metrics with the database down', () => {
  let s: SampleApp;
  const scrape = async () => {
    const response = await s.get('/metrics');
    expect(response.status).toBe(200);
    return response.text();
  };

  beforeAll(async () => {
    s = await bootSampleApp('metricsoutage', { poolSize: 4, pollIntervalMs: 100, statementTimeoutMs: STATEMENT_TIMEOUT_MS, metrics: { timeoutMs: 500 } }, [], { viaProxy: true });
    const id = await s.queue.enqueue<DeliverWebhook>(QUEUES.webhooks, { url: 'https://example.test/hook', event: 'paid' });
    await attemptEnded(s.signals, id, 'succeeded');
  });

  afterAll(() => s?.close());

  it('reads 1 while the database answers', async () => {
    const text = await scrape();
    expect(value(text, 'pgqueue_database_up')).toBe(1);
    expect(familyType(text, 'pgqueue_database_up')).toBe('gauge');
    for (const family of DATABASE_FAMILIES) expect(familyType(text, family), family).toBe('gauge');
  });

  it('answers a blackholed database before its statement timeout, with the counters, the histograms and database_up 0', async () => {
    s.proxy!.blackhole(); // the stats query hangs: nothing answers, nothing is reset
    const started = performance.now();
    const text = await scrape();
    // Bounded by the scrape's own timeout, not by the query's (which a scrape must not wait out).
    expect(performance.now() - started).toBeLessThan(QUERY_TIMEOUT_MS);
    expect(value(text, 'pgqueue_database_up')).toBe(0);
    expect(value(text, 'pgqueue_jobs_succeeded_total', { queue: QUEUES.webhooks })).toBe(1);
    expect(value(text, 'pgqueue_jobs_claimed_total', { queue: QUEUES.webhooks })).toBe(1);
    expect(value(text, 'pgqueue_claim_wait_seconds_count', { queue: QUEUES.webhooks })).toBe(1);
    // This process's own gauges need no database.
    expect(value(text, 'pgqueue_worker_slots', { queue: QUEUES.webhooks })).toBeGreaterThan(0);
    expect(value(text, 'pgqueue_pool_connections', { state: 'total' })).toBeDefined();
    for (const family of DATABASE_FAMILIES) expect(familyType(text, family), family).toBeUndefined();
  });

  it('answers a cut network at once, likewise, and reads 1 again once the database is back', async () => {
    s.proxy!.cut(); // every connection reset, new ones refused
    const text = await scrape();
    expect(value(text, 'pgqueue_database_up')).toBe(0);
    expect(value(text, 'pgqueue_jobs_succeeded_total', { queue: QUEUES.webhooks })).toBe(1);
    for (const family of DATABASE_FAMILIES) expect(familyType(text, family), family).toBeUndefined();

    // Back once the pool reaches the database again: a claim that returns says so.
    s.signals.worker.batchClaimed.clear();
    s.proxy!.heal();
    await s.signals.worker.batchClaimed.next(3 * QUERY_TIMEOUT_MS);
    const back = await scrape();
    expect(value(back, 'pgqueue_database_up')).toBe(1);
    expect(value(back, 'pgqueue_jobs', { queue: QUEUES.webhooks, status: 'pending' })).toBe(0);
    expect(value(back, 'pgqueue_jobs_succeeded_total', { queue: QUEUES.webhooks })).toBe(1);
    // One warning for the whole outage (not one per scrape), and one line when it is over.
    const outage = (level: 'warn' | 'log') => s.logger.messages(level).filter((m) => m.startsWith('Metrics: '));
    expect(outage('warn')).toEqual([expect.stringMatching(/^Metrics: the database snapshot failed \(no answer within 500 ms\); \/metrics leaves out/)]);
    expect(outage('log')).toEqual(['Metrics: the database answers again; /metrics has its gauges back.']);
  });
});
