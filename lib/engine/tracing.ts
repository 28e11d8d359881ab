import { context, propagation, SpanKind, SpanStatusCode, trace, type Link, type Tracer, type TracerProvider } from '@opentelemetry/api';
import type { Job } from './types.js';

/**
 * Trace context across the queue. At enqueue the active OpenTelemetry context is injected into a
 * W3C carrier stored with the job; the handler then runs in a CONSUMER span linked to it (a link,
 * not a parent: a retry days later is not part of the request that enqueued the job). Without an
 * SDK every call here is the API's no-op, and nothing is stored.
 */
export type TraceCarrier = Record<string, string>;

const TRACER_NAME = 'nestjs-pg-queue';

/**
 * The registered SDK's tracer, or undefined when no SDK is registered: then a job's span would be
 * the API's no-op, and the worker skips it (and the ProxyTracer `trace.getTracer` makes anew on
 * every call without an SDK). Asked per job, so an SDK registered (or disabled) later is seen.
 */
export function jobTracer(): Tracer | undefined {
  const provider = trace.getTracerProvider() as TracerProvider & { getDelegateTracer?: (name: string) => Tracer | undefined };
  // The API's global provider is a proxy that knows whether a delegate (an SDK) was set; any other
  // provider (another copy of the API registered its own) is asked for a tracer as before.
  return typeof provider.getDelegateTracer === 'function' ? provider.getDelegateTracer(TRACER_NAME) : provider.getTracer(TRACER_NAME);
}

export function captureTraceContext(): TraceCarrier | null {
  const carrier: TraceCarrier = {};
  propagation.inject(context.active(), carrier);
  return Object.keys(carrier).length > 0 ? carrier : null;
}

/** Runs `fn` in the job's CONSUMER span of `tracer` (see jobTracer: without an SDK, `fn` runs as it is). */
export function runInJobSpan<R>(job: Job, carrier: TraceCarrier | null, fn: () => Promise<R>, tracer = jobTracer()): Promise<R> {
  if (tracer === undefined) return fn();
  const links: Link[] = [];
  if (carrier) {
    const producer = trace.getSpanContext(propagation.extract(context.active(), carrier));
    if (producer) links.push({ context: producer });
  }
  return tracer.startActiveSpan(
    `process ${job.queue}`,
    {
      kind: SpanKind.CONSUMER,
      links,
      attributes: {
        'messaging.system': 'nestjs-pg-queue',
        'messaging.destination.name': job.queue,
        'messaging.message.id': job.id,
        'pgqueue.attempt': job.attempt,
        'pgqueue.lease_token': job.leaseToken,
      },
    },
    async (span) => {
      try {
        return await fn();
      } catch (error) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: describeThrown(error) });
        throw error;
      } finally {
        span.end();
      }
    },
  );
}

/**
 * A thrown value as text, without throwing: String() itself throws for an object without a
 * prototype or with a throwing toString(), and that must not replace the handler's own failure.
 */
function describeThrown(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return Object.prototype.toString.call(error);
  }
}
