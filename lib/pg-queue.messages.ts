/**
 * Every message the Nest module writes or throws, as functions. Messages say what happened and
 * what to do; none includes a job's payload.
 */

export const DUPLICATE_HANDLER = (queue: string, first: string, second: string) =>
  `queue "${queue}" has two handlers: ${first} and ${second}`;

export const DUPLICATE_HANDLER_FIX = () =>
  'A queue has exactly one handler per process: remove one @JobHandler, or give one of them another queue.';

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

export const QUEUE_NOT_DECLARED_YET = (queue: string) =>
  `Queue "${queue}" is not declared in the database yet: registered queues are declared when the application starts (app.init() or app.listen()). Call this after the start.`;

export const FOR_ROOT_TWICE = (count: number, importers: readonly string[]) =>
  `PgQueueModule.forRoot() (or forRootAsync()) is imported ${count} times${importers.length ? ` (by ${importers.join(', ')})` : ''}: each would start an engine of its own`;

export const FOR_ROOT_TWICE_FIX = () =>
  'Import PgQueueModule.forRoot() once, in the root module; in feature modules import PgQueueModule.registerQueue({ name }) and inject the queue with @InjectQueue(name).';

export const FOR_ROOT_MISSING = (queue: string) =>
  `PgQueueModule.registerQueue({ name: "${queue}" }) found no PgQueueModule.forRoot(): import PgQueueModule.forRoot() (or forRootAsync()) once, in the root module (it is global unless isGlobal: false; with isGlobal: false, import it in this feature module too).`;

export const PROCESSING_OFF = () =>
  'processing is false in this process (an API-only process): it has no workers to start. Set processing: true (the default) where handlers should run.';

export const WORKERS_STARTED = (queues: readonly string[]) => (queues.length ? `Workers started for ${queues.join(', ')}.` : 'No handlers in this process: no workers to start.');

export const WORKERS_NOT_AUTOSTARTED = () => 'autoStart is false: the workers start when QueueService.startProcessing() is called.';

export const INTERVAL_TAKEN = (name: string, reason: string) => `PgQueueModule could not register its interval "${name}" with the app's SchedulerRegistry (${reason})`;

export const INTERVAL_TAKEN_FIX = () =>
  'Names starting with "pg-queue:" belong to PgQueueModule: rename your own interval, and import PgQueueModule.forRoot() only once.';

export const EVENT_LISTENER_FAILED = (where: string, type: string, message: string) =>
  `@OnQueueEvent('${type}') ${where} failed: ${message.slice(0, 300)}. The job's transition is not affected.`;

export const RECURRING_WITHOUT_HANDLER = (method: string) => `${method} has @Recurring but no @JobHandler: its ticks would have no queue`;

export const RECURRING_WITHOUT_HANDLER_FIX = () => 'Put @Recurring on the @JobHandler method of the queue it runs (or on a @Processor class).';
