import { context, propagation, trace, SpanKind } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { checkHealth, renderPrometheus, RetryableJobError } from '../../lib/engine/index.js';
import { engineFixture, waitFor, waitForStatus } from '../support/engine.js';

let fx: Awaited<ReturnType<typeof engineFixture>>;
beforeAll(async () => {
  fx = await engineFixture('observability');
});
afterAll(() => fx.close());

describe('trace context travels with the job', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(provider);
  });
  afterAll(() => {
    trace.disable();
    propagation.disable();
    context.disable();
  });

  test('the handler runs in a consumer span linked to the context active at enqueue', async () => {
    const q = fx.make();
    let handlerTraceId = '';
    q.work('traced', async () => {
      handlerTraceId = trace.getActiveSpan()?.spanContext().traceId ?? '';
    });
    await q.start();
    const tracer = trace.getTracer('test');
    const { id, producerTraceId, producerSpanId } = await tracer.startActiveSpan('http POST /signup', async (span) => {
      const jobId = await q.enqueue('traced', {});
      span.end();
      return { id: jobId, producerTraceId: span.spanContext().traceId, producerSpanId: span.spanContext().spanId };
    });
    await waitForStatus(q, id, 'succeeded');
    const stored = (await fx.pool.query(`SELECT trace_context FROM pgqueue.jobs WHERE id = $1`, [id])).rows[0].trace_context;
    expect(stored.traceparent).toContain(producerTraceId);
    await provider.forceFlush();
    const consumer = exporter.getFinishedSpans().find((s) => s.name === 'process traced');
    expect(consumer).toBeDefined();
    expect(consumer!.kind).toBe(SpanKind.CONSUMER);
    expect(consumer!.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[producerTraceId, producerSpanId]]);
    expect(consumer!.attributes['messaging.message.id']).toBe(id);
    expect(handlerTraceId).toBe(consumer!.spanContext().traceId);
  });
});

test('without an SDK nothing is stored and handlers run as usual', async () => {
  const q = fx.make();
  q.work('untraced', async () => {});
  await q.start();
  const id = await q.enqueue('untraced', {});
  await waitForStatus(q, id, 'succeeded');
  expect((await fx.pool.query(`SELECT trace_context FROM pgqueue.jobs WHERE id = $1`, [id])).rows[0].trace_context).toBeNull();
});

test('the Prometheus exposition carries counters, histograms and the database snapshot', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  q.work('measured', async (job) => {
    if (job.attempt === 1) throw new RetryableJobError('try again', { code: 'TRY_AGAIN', retryAfterMs: 10 });
  });
  await q.start();
  const id = await q.enqueue('measured', {});
  await waitForStatus(q, id, 'succeeded');
  const text = renderPrometheus(q.metrics, await q.stats());
  expect(text).toContain('# TYPE pgqueue_jobs_retried_total counter');
  expect(text).toMatch(/^pgqueue_jobs_retried_total\{queue="measured",code="TRY_AGAIN",attempt="1"\} 1$/m);
  expect(text).toMatch(/^pgqueue_jobs_succeeded_total\{queue="measured"\} 1$/m);
  expect(text).toMatch(/^pgqueue_claim_wait_ms_count\{queue="measured"\} 2$/m);
  expect(text).toMatch(/^pgqueue_claim_wait_ms_bucket\{queue="measured",le="\+Inf"\} 2$/m);
  // Live statuses exactly, zeros included; finished jobs only over the recent window (history is not counted).
  expect(text).toMatch(/^pgqueue_jobs\{queue="measured",status="pending"\} 0$/m);
  expect(text).not.toMatch(/^pgqueue_jobs\{[^}]*status="succeeded"/m);
  expect(text).toContain('# HELP pgqueue_jobs_finished_recent Jobs per queue that finished (succeeded, cancelled) within the last 60 s, from the database.');
  expect(text).toMatch(/^pgqueue_jobs_finished_recent\{queue="measured",status="succeeded"\} 1$/m);
  expect(text).toMatch(/^pgqueue_jobs_finished_recent\{queue="measured",status="cancelled"\} 0$/m);
  expect(text).toMatch(/^pgqueue_worker_slots\{queue="measured"\} 10$/m);
  expect(text).toMatch(/^pgqueue_listener_up 1$/m);
  // Every sample line is well formed.
  for (const line of text.trim().split('\n')) expect(line).toMatch(/^(# (HELP|TYPE) .+|[a-z_]+(\{.*\})? [-+0-9.eInfNa]+)$/);
});

test('health fails on the age of the oldest claimable job, not on counts, and names the queue', async () => {
  const q = fx.make();
  await fx.insertJobs('stuck-queue', 1);
  expect((await checkHealth(q, { maxClaimableAgeMs: 60_000 })).healthy).toBe(true);
  await fx.pool.query(`UPDATE pgqueue.jobs SET available_at = now() - interval '10 minutes' WHERE queue_name = 'stuck-queue'`);
  const report = await checkHealth(q, { maxClaimableAgeMs: 60_000 });
  expect(report.healthy).toBe(false);
  expect(report.problems).toEqual([expect.stringMatching(/queue "stuck-queue": the oldest claimable job has waited 6\d\d s \(limit 60 s\)/)]);
  await q.pauseQueue('stuck-queue');
  expect((await checkHealth(q, { maxClaimableAgeMs: 60_000 })).healthy).toBe(true);
});

test('health fails when the listener has been down too long', async () => {
  const q = fx.make({ notifier: { reconnectMinMs: 60_000, reconnectMaxMs: 60_000 } });
  await q.start();
  await waitFor(() => q.notifier.listening);
  await q.notifier.disconnectForTest();
  await waitFor(() => !q.notifier.listening);
  await new Promise((r) => setTimeout(r, 60));
  const report = await checkHealth(q, { maxListenerDownMs: 50 });
  expect(report.problems).toEqual([expect.stringMatching(/LISTEN connection has been down/)]);
});
