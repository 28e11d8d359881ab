import 'reflect-metadata';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QUEUES } from '../../sample-app/jobs/job-payloads.js';
import { adminUrl } from '../support/database.js';
import { bootSampleApp, type SampleApp } from '../support/sample-app.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

/** A proxy in front of the test server: `cut()` is an outage for whatever connects through it. */
function serverProxy(): Promise<TcpProxy> {
  const server = new URL(adminUrl());
  return startTcpProxy(server.hostname, Number(server.port || 5432));
}

/** The exception filter's body: exactly these fields, no stack. */
const SHORT_BODY = ['code', 'error', 'message', 'statusCode'];

describe('the sample app while its database is away', () => {
  let proxy: TcpProxy;
  let sample: SampleApp;
  let target: string;

  beforeAll(async () => {
    proxy = await serverProxy();
    sample = await bootSampleApp('sampleoutage', { pollIntervalMs: 100, statementTimeoutMs: 300 }, [], { throughPort: proxy.port });
    target = `127.0.0.1:${proxy.port}/${sample.database.name}`;
  });
  afterAll(async () => {
    proxy?.heal();
    await sample?.close();
    await proxy?.close();
  });

  it('answers 503 with a short body (code DATABASE_UNAVAILABLE, the database named) on every endpoint, and logs no stack trace', async () => {
    const id = await sample.queue.enqueue(QUEUES.reports, { reportId: 'r1', pages: 1, msPerPage: 1 }, { delayMs: 3_600_000 });
    proxy.cut();
    const requests: [string, () => Promise<Response>][] = [
      ['GET /stats', () => sample.get('/stats')],
      [`GET /jobs/${id}`, () => sample.get(`/jobs/${id}`)],
      [`GET /jobs/${id}/history`, () => sample.get(`/jobs/${id}/history`)],
      ['GET /dead', () => sample.get('/dead')],
      ['POST /jobs', () => sample.post('/jobs', { queue: QUEUES.payments, payload: { customerId: 'c9', amountCents: 100 } })],
      [`POST /jobs/${id}/cancel`, () => sample.post(`/jobs/${id}/cancel`, {})],
      [`POST /jobs/${id}/replay`, () => sample.post(`/jobs/${id}/replay`, {})],
      ['POST /queues/reports/pause', () => sample.post('/queues/reports/pause')],
    ];
    for (const [request, send] of requests) {
      const response = await send();
      const body = (await response.json()) as Record<string, unknown>;
      expect({ request, status: response.status, fields: Object.keys(body).sort() }).toEqual({ request, status: 503, fields: SHORT_BODY });
      expect(body).toMatchObject({ statusCode: 503, error: 'Service Unavailable', code: 'DATABASE_UNAVAILABLE' });
      expect(body.message).toContain(`The database at ${target} cannot be reached`);
    }
    // Health already said "down" (terminus answers 503); its problem now names the database.
    const health = await sample.get('/health');
    expect(health.status).toBe(503);
    const report = (await health.json()) as { error: { pgQueue: { status: string; problems: string[] } } };
    expect(report.error.pgQueue.status).toBe('down');
    expect(report.error.pgQueue.problems).toEqual([expect.stringMatching(new RegExp(`^the database at ${target.replace(/\./g, '\\.')} cannot be reached \\(`))]);
    // Nest's fallback for an unknown error logs it with its stack, once per request.
    expect(sample.logger.lines.filter((line) => line.context === 'ExceptionsHandler')).toEqual([]);
  });

  it('answers 503 DATABASE_TIMEOUT when an operator call waits out statementTimeoutMs on a held row', async () => {
    proxy.heal();
    const held = await createHeldJob(sample);
    try {
      const response = await sample.post(`/jobs/${held.id}/discard`, {});
      const body = (await response.json()) as Record<string, unknown>;
      expect(response.status).toBe(503);
      expect(Object.keys(body).sort()).toEqual(SHORT_BODY);
      expect(body).toMatchObject({ statusCode: 503, error: 'Service Unavailable', code: 'DATABASE_TIMEOUT' });
      expect(body.message).toMatch(/statementTimeoutMs \(300 ms\)/);
    } finally {
      await held.release();
    }
  });
});

/** A dead job whose row a transaction of `sample.sql` holds until `release()`. */
async function createHeldJob(sample: SampleApp) {
  const { rows } = await sample.sql.query<{ id: string }>(
    `INSERT INTO pgqueue.jobs (queue_name, payload, status, finished_at) VALUES ($1, '{}', 'dead', now()) RETURNING id`,
    [QUEUES.imports],
  );
  const id = rows[0]!.id;
  const holder = await sample.sql.connect();
  await holder.query('BEGIN');
  await holder.query('SELECT 1 FROM pgqueue.jobs WHERE id = $1 FOR UPDATE', [id]);
  return {
    id,
    async release() {
      await holder.query('ROLLBACK');
      holder.release();
    },
  };
}
