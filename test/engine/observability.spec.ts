import { context, metrics as otel, propagation, trace, SpanKind } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { DataPointType, MeterProvider, MetricReader, type HistogramMetricData, type SumMetricData } from '@opentelemetry/sdk-metrics';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { checkHealth, EngineMetrics, HISTOGRAM_BUCKETS, renderPrometheus, RetryableJobError, type HistogramName, type ProcessStats } from '../../lib/engine/index.js';
import { engineFixture, waitFor, waitForOutcome } from '../support/engine.js';
import { histogramQuantile, value } from '../support/prometheus.js';
import { testSignals } from '../support/signals.js';
import { engineInternals } from '../../lib/engine/internals.js';

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
    await waitForOutcome(q, id, 'succeeded');
    const stored = (await fx.pool.query(`SELECT trace_context FROM pgqueue.job_rows WHERE id = $1`, [id])).rows[0].trace_context;
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
  await waitForOutcome(q, id, 'succeeded');
  expect((await fx.pool.query(`SELECT trace_context FROM pgqueue.job_rows WHERE id = $1`, [id])).rows[0].trace_context).toBeNull();
});

test('the Prometheus exposition carries counters, histograms and the database snapshot', async () => {
  const q = fx.make({ scheduler: { intervalMs: 20 } });
  q.work('measured', async (job) => {
    if (job.attempt === 1) throw new RetryableJobError('try again', { code: 'TRY_AGAIN', retryAfterMs: 10 });
  });
  await q.start();
  const id = await q.enqueue('measured', {});
  await waitForOutcome(q, id, 'succeeded');
  const text = renderPrometheus(q.metrics, await q.stats());
  expect(text).toContain('# TYPE pgqueue_jobs_retried_total counter');
  expect(text).toMatch(/^pgqueue_jobs_retried_total\{queue="measured",code="TRY_AGAIN",attempt="1"\} 1$/m);
  expect(text).toMatch(/^pgqueue_jobs_succeeded_total\{queue="measured"\} 1$/m);
  expect(text).toMatch(/^pgqueue_claim_wait_seconds_count\{queue="measured"\} 2$/m);
  expect(text).toMatch(/^pgqueue_claim_wait_seconds_bucket\{queue="measured",le="\+Inf"\} 2$/m);
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
  const signals = testSignals(q);
  await signals.notifier.listening.next();
  await engineInternals(q).notifier.disconnectForTest();
  await signals.notifier.lost.next();
  // Real time on purpose: "down for longer than 50 ms" is what is checked.
  await new Promise((r) => setTimeout(r, 60));
  const report = await checkHealth(q, { maxListenerDownMs: 50 });
  expect(report.problems).toEqual([expect.stringMatching(/LISTEN connection has been down/)]);
});

describe('durations are in seconds, in buckets that resolve what they measure', () => {
  /** A real OpenTelemetry SDK, read on demand. */
  class Reader extends MetricReader {
    protected override async onShutdown(): Promise<void> {}
    protected override async onForceFlush(): Promise<void> {}
  }
  const reader = new Reader();
  const provider = new MeterProvider({ readers: [reader] });
  beforeAll(() => otel.setGlobalMeterProvider(provider));
  afterAll(async () => {
    otel.disable();
    await provider.shutdown();
  });
  const noDatabase: ProcessStats = { at: new Date(), listener: { listening: true, downForMs: 0 }, pool: { total: 0, idle: 0, waiting: 0 }, workers: [] };

  test('a job due 30 s before its claim waited 30 s, in the exposition and on OpenTelemetry', async () => {
    await fx.insertJobs('waited', 1, { availableInSeconds: -30 });
    const q = fx.make(); // after the SDK is installed: its metrics take their meter when built
    q.work('waited', async () => {});
    await q.start();
    await testSignals(q).worker.attemptEnded.waitFor((e) => e.queue === 'waited' && e.outcome === 'succeeded');
    const text = renderPrometheus(q.metrics, await q.stats());
    expect(value(text, 'pgqueue_claim_wait_seconds_count', { queue: 'waited' })).toBe(1);
    expect(value(text, 'pgqueue_claim_wait_seconds_sum', { queue: 'waited' })).toBeGreaterThanOrEqual(30);
    expect(value(text, 'pgqueue_claim_wait_seconds_sum', { queue: 'waited' })).toBeLessThan(40);
    expect(value(text, 'pgqueue_claim_wait_seconds_bucket', { queue: 'waited', le: 30 })).toBe(0);
    expect(value(text, 'pgqueue_completion_latency_seconds_sum', { queue: 'waited' })).toBeLessThan(10);
    expect(value(text, 'pgqueue_handler_duration_seconds_count', { queue: 'waited' })).toBe(1);
    expect(value(text, 'pgqueue_claim_query_duration_seconds_sum', { queue: 'waited' })).toBeLessThan(10);

    const { resourceMetrics } = await reader.collect();
    const published = resourceMetrics.scopeMetrics.filter((s) => s.scope.name === 'nestjs-pg-queue').flatMap((s) => s.metrics);
    const wait = published.find((m) => m.descriptor.name === 'pgqueue.claim_wait') as HistogramMetricData;
    expect(wait.descriptor.unit).toBe('s');
    expect(wait.dataPointType).toBe(DataPointType.HISTOGRAM);
    const [point] = wait.dataPoints.filter((p) => p.attributes.queue === 'waited');
    expect(point!.value.count).toBe(1);
    expect(point!.value.sum).toBeGreaterThanOrEqual(30);
    expect(point!.value.sum).toBeLessThan(40);
    expect(point!.value.buckets.boundaries).toEqual(HISTOGRAM_BUCKETS.claim_wait_seconds);
    for (const name of ['pgqueue.completion_latency', 'pgqueue.handler_duration', 'pgqueue.claim_query_duration']) {
      expect(published.find((m) => m.descriptor.name === name)?.descriptor.unit, name).toBe('s');
    }
    // The closed label sets start at zero there too: a lost fence that never happened is a 0.
    const lost = published.find((m) => m.descriptor.name === 'pgqueue.lease_lost') as SumMetricData;
    const zero = lost.dataPoints.find((p) => p.attributes.queue === 'waited' && p.attributes.reason === 'cancelled' && p.attributes.operation === 'heartbeat');
    expect(zero?.value).toBe(0);
  });

  /**
   * Over the range each histogram is for, neighbouring bounds are at most 5/3 apart, so a quantile
   * read from the buckets (as histogram_quantile does) is within 5/3 of the true one; below it,
   * within 2.5×.
   */
  const RANGES: [HistogramName, low: number, high: number, ratio: number][] = [
    ['claim_wait_seconds', 1, 900, 5 / 3],
    ['claim_wait_seconds', 0.005, 1, 2.5],
    ['completion_latency_seconds', 1, 900, 5 / 3],
    ['handler_duration_seconds', 1, 900, 5 / 3],
    ['handler_duration_seconds', 0.005, 1, 2.5],
    ['claim_query_duration_seconds', 0.001, 0.1, 5 / 3],
    ['claim_query_duration_seconds', 0.1, 10, 2.5],
  ];
  test.each(RANGES)('%s between %d s and %d s: quantiles read from the exposed buckets are within %d× of the true ones', (name, low, high, ratio) => {
    const metrics = new EngineMetrics();
    const values = Array.from({ length: 500 }, (_, i) => low * (high / low) ** (i / 499));
    for (const v of values) metrics.observe(name, v, { queue: 'q' });
    const text = renderPrometheus(metrics, noDatabase);
    for (const q of [0.5, 0.9, 0.99]) {
      const truth = values[Math.ceil(q * values.length) - 1]!;
      const read = histogramQuantile(text, `pgqueue_${name}`, { queue: 'q' }, q);
      expect(read / truth, `p${q * 100}: ${read} s read for ${truth} s`).toBeLessThanOrEqual(ratio);
      expect(truth / read, `p${q * 100}: ${read} s read for ${truth} s`).toBeLessThanOrEqual(ratio);
    }
  });

  test('the former names, in milliseconds, still record, in seconds under the new names', () => {
    const metrics = new EngineMetrics();
    metrics.observe('claim_wait_ms', 1_500, { queue: 'q' });
    metrics.observe('claim_wait_seconds', 0.5, { queue: 'q' });
    expect(metrics.histogramSnapshot()).toEqual([
      expect.objectContaining({ name: 'claim_wait_seconds', labels: { queue: 'q' }, count: 2, sum: 2, bounds: HISTOGRAM_BUCKETS.claim_wait_seconds }),
    ]);
  });

  test('labels given in another order, or a number as a string, are the same series', () => {
    const metrics = new EngineMetrics();
    metrics.increment('jobs_retried', { queue: 'q', code: 'X', attempt: 1 });
    metrics.increment('jobs_retried', { attempt: '1', code: 'X', queue: 'q' });
    const text = renderPrometheus(metrics, noDatabase);
    expect(text.match(/^pgqueue_jobs_retried_total\{.*$/gm)).toEqual(['pgqueue_jobs_retried_total{queue="q",code="X",attempt="1"} 2']);
  });

  test('claim waits spread over 0.2 to 20 s read a p99 under 20 s (the old buckets, 10 s then 30 s, read 29.6 s)', () => {
    const metrics = new EngineMetrics();
    for (let i = 1; i <= 100; i++) metrics.observe('claim_wait_seconds', i * 0.2, { queue: 'q' });
    const text = renderPrometheus(metrics, noDatabase);
    expect(histogramQuantile(text, 'pgqueue_claim_wait_seconds', { queue: 'q' }, 0.99)).toBeLessThanOrEqual(20);
    expect(histogramQuantile(text, 'pgqueue_claim_wait_seconds', { queue: 'q' }, 0.99)).toBeGreaterThan(19);
    expect(value(text, 'pgqueue_claim_wait_seconds_bucket', { queue: 'q', le: 20 })).toBe(100);
    expect(value(text, 'pgqueue_claim_wait_seconds_sum', { queue: 'q' })).toBeCloseTo(1010, 6);
  });
});
