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
