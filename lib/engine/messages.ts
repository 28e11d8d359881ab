/**
 * Messages the engine writes or throws, as functions (like the Nest side's pg-queue.messages.ts):
 * one place to read what a user is told, and each says what happened and what to do. None
 * includes a job's payload.
 */

export const HOSTED_PASS_UNKNOWN = (name: string) => `"${String(name).slice(0, 80)}" is not a fixed-interval pass a host can run`;

export const JOB_EVENT_LISTENER_FAILED = (error: unknown) =>
  `A job event listener (onJobEvent) threw: ${String((error as Error)?.message ?? error).slice(0, 300)}. The event still reached the other listeners; fix the listener.`;

export const JOB_NOT_FOUND = (id: string) => `Job ${id} does not exist.`;

export const JOB_NOT_DELETABLE = (id: string, status: string) =>
  `Job ${id} is ${status}: only succeeded, dead or cancelled jobs can be deleted. Cancel it first.`;

export const JOB_NOT_REPLAYABLE = (id: string, status: string) =>
  `Job ${id} is ${status}, not dead: only dead jobs can be replayed.${status === 'pending' || status === 'scheduled' || status === 'running' ? ' It will run (or is running) anyway.' : ''}`;

export const JOB_REFUSED = (id: string, status: string, allowed: readonly string[], verb: string) =>
  `Job ${id} is ${status}: only ${allowed.join(', ')} jobs can be ${verb}.`;

export const QUEUE_NOT_DECLARED = (queue: string, verb: 'pause' | 'resume') =>
  `Queue "${String(queue).slice(0, 128)}" is not declared; nothing to ${verb}.`;

// ---------------------------------------------------------------------------------------------
// Enqueue (producer.ts, json.ts)

export const PAYLOAD_NOT_JSON = (where: string, problem: string, path: string) =>
  `${where}: the payload is not JSON: ${problem} at ${path}. Convert it to JSON-safe values (strings, numbers, booleans, null, arrays, plain objects). Nothing was enqueued.`;

export const PAYLOAD_TOO_LARGE = (where: string, bytes: number, maxBytes: number) =>
  `${where}: the payload is ${bytes} bytes of JSON, over the limit of ${maxBytes}. Store large data elsewhere (a table, an object store) and enqueue a reference to it.`;

// ---------------------------------------------------------------------------------------------
// A handler's context (effects.ts, transactional-completion.ts)

export const EFFECT_NAME_REFUSED = (name: unknown) => `${JSON.stringify(String(name).slice(0, 80))} is not accepted`;

export const EFFECT_NAME_FIX = () => 'Use 1-200 letters, digits, "_", ".", ":" or "-".';

export const EFFECT_INSIDE_COMPLETE = (jobId: string, name: string) =>
  `Job ${jobId}: ctx.effect("${name}") was called inside ctx.complete's work. Call the effect before ctx.complete, and write its result in the completion's transaction.`;

export const EFFECT_RESULT_TOO_LARGE = (bytes: number, maxBytes: number) => `it is ${bytes} bytes of JSON, over ${maxBytes}`;

export const EFFECT_RESULT_NOT_STORED = (name: string, when: string, problem?: string) =>
  `Effect "${name}" happened in ${when}, but its result could not be stored${problem ? ` (${problem.slice(0, 300)})` : ''}. ` +
  'It is recorded as done and will not be called again. Return what a later attempt needs (an id, a status), not the whole response; ' +
  'with a reconcile function, a replay asks the destination for the result instead.';

export const FENCE_LOCK_TIMEOUT = (jobId: string, lockTimeoutMs: number) =>
  `Job ${jobId}: its row stayed locked for ${lockTimeoutMs} ms (an operator's cancellation?); nothing was written.`;

export const CLIENT_NOT_IN_TRANSACTION = (jobId: string) =>
  `Job ${jobId}: ctx.complete({ client }) needs a client inside a transaction: call client.query('BEGIN') first, and COMMIT after ctx.complete returns. ` +
  'Nothing was written; outside a transaction the work would commit on its own even if the completion were refused.';

// ---------------------------------------------------------------------------------------------
// A claimed attempt (lease.ts, worker.ts)

/** The message of a JobAbortedError, the reason of an aborted ctx.signal. */
export const LEASE_ABORTED = (jobId: string, why: string) => `Job ${jobId}: ${why}`;

export const LEASE_LOST_ABORT = (reason: string) => `the worker no longer owns the job (${reason})`;

export const ABORT_MARGIN_TOO_LARGE = (marginMs: number, attemptLeaseMs: number) =>
  `${marginMs} ms is more than half the lease of an attempt (${attemptLeaseMs} ms, the shorter of leaseMs and maxRuntimeMs)`;

export const ABORT_MARGIN_FIX = () => 'Use a smaller margin, or a longer lease and maximum runtime.';

/** The subjects of a worker's repeated failures in the LogThrottle (and the start of their lines). */
export const CLAIM_KIND = (queue: string) => `Claim on queue "${queue}"`;
export const WRITE_KIND = (queue: string) => `Queue "${queue}": writing a job's outcome`;

export const CLAIM_FAILED = (kind: string, reason: string) => `${kind} failed: ${reason}. Retrying at the next poll.`;

export const OUTCOME_WRITE_FAILED = (kind: string, reason: string) => `${kind} failed: ${reason}. The reaper will recover the job when its lease expires.`;

export const HANDLER_DID_NOT_STOP = (jobId: string, queue: string) => `Job ${jobId} (queue "${queue}") did not stop at shutdown; its lease is released.`;

export const WRITES_PENDING_AT_SHUTDOWN = (queue: string, timeoutMs: number) =>
  `Queue "${queue}": outcome writes still pending after ${timeoutMs} ms at shutdown; leaving them to the reaper.`;

export const START_RENEWAL_FAILED = (jobId: string, queue: string, reason: string) =>
  `Job ${jobId} (queue "${queue}"): its lease could not be renewed before it started (${reason}); it is released.`;

export const THREW_AFTER_COMPLETE = (jobId: string, queue: string) => `Job ${jobId} (queue "${queue}") threw after ctx.complete() committed; it stays succeeded.`;

export const THREW_AFTER_CLIENT_COMPLETE = (jobId: string, queue: string) =>
  `Job ${jobId} (queue "${queue}") threw after its ctx.complete() transaction committed; it stays succeeded.`;

export const COMPLETION_NOT_COMMITTED = (jobId: string) =>
  `Job ${jobId}: the handler returned after ctx.complete({ client }), but its transaction did not commit (it was rolled back, or is still open). Commit it before the handler returns.`;

export const SIGNAL_IGNORED = (jobId: string, queue: string, code: string) => `Job ${jobId} (queue "${queue}") ignored its aborted signal (${code}); its slot is freed.`;

export const HANDLER_DID_NOT_SETTLE = () => 'the handler did not settle after its signal was aborted';
