/**
 * Every message the Nest module writes or throws, as functions. Messages say what happened and
 * what to do; none includes a job's payload.
 */

export const DUPLICATE_HANDLER = (queue: string, first: string, second: string) =>
  `queue "${queue}" has two handlers: ${first} and ${second}`;

export const DUPLICATE_HANDLER_FIX = () =>
  'A queue has exactly one handler per process: remove one @JobHandler, or give one of them another queue.';

export const NON_STATIC_HANDLER = (where: string, queue: string) =>
  `@JobHandler('${queue}') on ${where} is ignored: ${where.split('.')[0]} is request-scoped (or depends on a request-scoped provider). ` +
  'Jobs do not run inside an HTTP request, so there is no request to build it for. Move the handler to a singleton provider.';

export const HANDLERS_FOUND = (count: number, queues: readonly string[]) =>
  count === 0 ? 'No @JobHandler methods found: this process only enqueues.' : `Handlers for ${count} queue(s): ${queues.join(', ')}.`;

export const PROCESSING_DISABLED = (queues: readonly string[]) =>
  `processing is false: the handlers of ${queues.join(', ')} will not run in this process (it only enqueues).`;

export const SCHEDULE_MODULE_MISSING = (methods: readonly string[]) =>
  `${methods.join(', ')} will not run: this application does not import ScheduleModule (PgQueueModule does not import it for the app). ` +
  "To run them, add ScheduleModule.forRoot() to your AppModule's imports (from @nestjs/schedule).";

export const STARTED = (workerId: string, schema: string, processing: boolean) =>
  `Started as ${workerId} on schema "${schema}"${processing ? '' : ' (processing: false, no workers)'}.`;

export const START_FAILED = (message: string) => `Could not start: ${message}`;

export const STOPPING = (inFlight: number, timeoutMs: number) =>
  inFlight === 0
    ? 'Stopping: no jobs in flight.'
    : `Stopping: waiting up to ${timeoutMs} ms for ${inFlight} job(s) in flight; unfinished ones are then aborted and released.`;

export const STOPPED = (ms: number) => `Stopped in ${ms} ms.`;

export const PASS_FAILED = (service: string, message: string) => `${service} pass failed: ${message}. It runs again at the next interval.`;

export const ENGINE_NOT_FOUND = (what: string) =>
  `${what}: no PgQueue engine in this application. Import PgQueueModule.forRoot() (or forRootAsync()) in the module you pass.`;

export const DRAIN_TIMEOUT = (timeoutMs: number, left: string) => `drainQueues: jobs still unfinished after ${timeoutMs} ms: ${left}.`;

export const HEALTH_NO_ANSWER = (timeoutMs: number) => `the database did not answer the health check within ${timeoutMs} ms`;

export const HEALTH_UNREACHABLE = (target: string, reason: string) => `the database at ${target} cannot be reached (${reason})`;

export const HEALTH_FAILED = (message: string) => `the health check could not read the queue: ${message.slice(0, 300)}`;
