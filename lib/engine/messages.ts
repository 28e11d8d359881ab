/**
 * Messages the engine writes or throws, as functions (like the Nest side's pg-queue.messages.ts):
 * one place to read what a user is told, and each says what happened and what to do. None
 * includes a job's payload.
 */

export const HOSTED_PASS_UNKNOWN = (name: string) => `"${String(name).slice(0, 80)}" is not a fixed-interval pass a host can run`;

export const JOB_EVENT_LISTENER_FAILED = (error: unknown) =>
  `A job event listener (onJobEvent) threw: ${String((error as Error)?.message ?? error).slice(0, 300)}. The event still reached the other listeners; fix the listener.`;
