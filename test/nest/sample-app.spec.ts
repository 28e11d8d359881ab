import 'reflect-metadata';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PG_QUEUE_ENGINE, QueueService, type PgQueue } from '../../lib/index.js';
import { drainQueues } from '../../lib/testing/index.js';
import { AppModule } from '../../sample-app/app.module.js';
import { FakePaymentGateway } from '../../sample-app/fake-payment-gateway.js';
import { QUEUES, type ChargeCustomer, type DeliverWebhook, type GenerateReport, type ImportCatalog } from '../../sample-app/jobs/job-payloads.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { CapturingLogger } from '../support/nest.js';

/**
 * The sample app, booted the way a user's e2e test would boot theirs: its real module, a real
 * HTTP server on a free port, a database of its own, and `drainQueues` instead of sleeps.
 */
describe('sample app', () => {
  let database: TestDatabase;
  let app: INestApplication;
  let base: string;
  let queue: QueueService;
  let gateway: FakePaymentGateway;
  const logger = new CapturingLogger();

  beforeAll(async () => {
    database = await createTestDatabase('sampleapp');
    const moduleRef = await Test.createTestingModule({
      imports: [AppModule.register({ connectionString: database.url, pollIntervalMs: 100, reaper: { intervalMs: 200 } })],
    })
      .setLogger(logger)
      .compile();
    app = moduleRef.createNestApplication();
    await app.listen(0, '127.0.0.1');
    base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    queue = app.get(QueueService);
    gateway = app.get(FakePaymentGateway);
  });

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const post = (body: unknown) =>
    fetch(`${base}/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('runs each example to its expected end state', async () => {
    // Over QueueService, with the payload types the handlers use.
    const charge = await queue.enqueue<ChargeCustomer>(QUEUES.payments, { customerId: 'c1', amountCents: 1299, simulateLostResponse: true });
    const plainCharge = await queue.enqueue<ChargeCustomer>(QUEUES.payments, { customerId: 'c2', amountCents: 500 });
    // 8 pages of 300 ms: 2.4 s, longer than the handler's 2 s lease, so only heartbeats keep it.
    const report = await queue.enqueue<GenerateReport>(QUEUES.reports, { reportId: 'r1', pages: 8, msPerPage: 300 });
    // Over HTTP.
    const webhookResponse = await post({ queue: QUEUES.webhooks, payload: { url: 'https://example.test/hook', event: 'paid', failuresBeforeSuccess: 1 } satisfies DeliverWebhook });
    expect(webhookResponse.status).toBe(201);
    const { id: webhook } = (await webhookResponse.json()) as { id: string };
    const importResponse = await post({ queue: QUEUES.imports, payload: { version: 1, source: 's3://bucket/catalog.csv' } satisfies ImportCatalog });
    const { id: badImport } = (await importResponse.json()) as { id: string };

    await drainQueues(app, { timeoutMs: 20_000 });

    // (a) The first charge's response was lost: attempt 2 called again with the same key, and the
    // gateway charged once.
    const charged = await queue.get(charge);
    expect(charged).toMatchObject({ status: 'succeeded', attemptCount: 2, lastErrorCode: 'GATEWAY_TIMEOUT' });
    expect(await queue.get(plainCharge)).toMatchObject({ status: 'succeeded', attemptCount: 1 });
    const charges = gateway.charges();
    expect(charges).toHaveLength(2);
    expect(new Set(charges.map((c) => c.idempotencyKey)).size).toBe(2);
    const chargeKey = charges.find((c) => c.customerId === 'c1')!.idempotencyKey;
    expect(chargeKey).toBe(`pgqueue:${QUEUES.payments}:${charge}`);
    expect(gateway.callsFor(chargeKey)).toBe(2);

    // (b) The long job outlived its lease on heartbeats alone.
    const reported = await queue.get(report);
    expect(reported).toMatchObject({ status: 'succeeded', attemptCount: 1 });
    expect(reported!.heartbeatAt).toBeInstanceOf(Date);
    const engine = app.get<PgQueue>(PG_QUEUE_ENGINE);
    expect(engine.metrics.count('heartbeats', { queue: QUEUES.reports })).toBeGreaterThan(0);
    expect(await queue.history(report)).toEqual([]);

    // (c) Transient failure, then success on attempt 2.
    const delivered = await queue.get(webhook);
    expect(delivered!.status).toBe('succeeded');
    expect(delivered!.attemptCount).toBeGreaterThanOrEqual(2);
    expect((await queue.history(webhook)).map((e) => [e.kind, e.errorCode])).toEqual([['retry_scheduled', 'RECEIVER_UNAVAILABLE']]);

    // (d) Permanent failure: dead after one attempt, with its code.
    const dead = await queue.get(badImport);
    expect(dead).toMatchObject({ status: 'dead', attemptCount: 1, lastErrorCode: 'UNSUPPORTED_VERSION' });
    expect((await queue.history(badImport)).map((e) => e.kind)).toEqual(['dead']);

    // The same outcomes over HTTP.
    const response = await fetch(`${base}/jobs/${badImport}`);
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({
      id: badImport,
      queue: QUEUES.imports,
      state: 'dead',
      attempts: 1,
      lastError: { code: 'UNSUPPORTED_VERSION', message: 'payload version 1 is not supported (expected 2)' },
    });
    expect(await (await fetch(`${base}/jobs/${webhook}`)).json()).toMatchObject({ state: 'succeeded', attempts: 2 });
    expect(await (await fetch(`${base}/jobs/${report}`)).json()).toMatchObject({ state: 'succeeded', progress: { page: 8, pages: 8 } });
    expect(await (await fetch(`${base}/payments/charges`)).json()).toHaveLength(2);

    expect(logger.messages('error')).toEqual([]);
  });

  it('answers 400 with the queue\u2019s message for bad input', async () => {
    const unknownQueue = await post({ queue: 'no-such-queue', payload: {} });
    expect(unknownQueue.status).toBe(400);
    expect(await unknownQueue.json()).toMatchObject({ code: 'UNKNOWN_QUEUE', message: expect.stringContaining('Queue "no-such-queue" is not declared') });

    const negativeDelay = await post({ queue: QUEUES.payments, payload: { customerId: 'c', amountCents: 1 }, options: { delayMs: -5 } });
    expect(negativeDelay.status).toBe(400);
    expect(await negativeDelay.json()).toMatchObject({ code: 'INVALID_JOB_OPTION', message: expect.stringContaining('"delayMs" is -5') });

    const badName = await post({ queue: 'has spaces', payload: {} });
    expect(badName.status).toBe(400);
    expect(await badName.json()).toMatchObject({ code: 'INVALID_QUEUE_NAME' });

    const notAnObject = await post(['payments']);
    expect(notAnObject.status).toBe(400);

    const unknownOption = await post({ queue: QUEUES.payments, payload: {}, options: { priorty: 1 } });
    expect(unknownOption.status).toBe(400);
    expect(await unknownOption.json()).toMatchObject({ message: expect.stringContaining('Unknown option "priorty"') });
  });

  it('answers 404 for a job that does not exist', async () => {
    expect((await fetch(`${base}/jobs/999999999`)).status).toBe(404);
    expect((await fetch(`${base}/jobs/not-a-number`)).status).toBe(404);
  });

  it('reports health through @nestjs/terminus', async () => {
    const response = await fetch(`${base}/health`);
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({
      status: 'ok',
      info: { pgQueue: { status: 'up', problems: [], listener: { listening: true, downForMs: 0 } } },
      error: {},
    });
  });
});
