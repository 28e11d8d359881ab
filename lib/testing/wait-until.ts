/** One look of `waitUntil`: done (with a value), or not yet (with what is left, for the timeout's message). */
export type Look<T> = { done: true; value: T } | { done: false; left: string };

/**
 * The test kit's one poller (drainQueues and runJob): `look` every `intervalMs` until it says done,
 * resolving with its value; when it is still not done at `timeoutMs`, rejects with
 * `timedOut(left)` of the last look. `look` gets the time remaining, so it can ask the database
 * about what falls due before the deadline. The last look runs at the deadline itself.
 */
export async function waitUntil<T>(
  look: (remainingMs: number) => Promise<Look<T>>,
  options: { timeoutMs: number; intervalMs: number },
  timedOut: (left: string) => Error,
): Promise<T> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    const remainingMs = Math.max(0, deadline - Date.now());
    const result = await look(remainingMs);
    if (result.done) return result.value;
    if (remainingMs === 0) throw timedOut(result.left);
    await new Promise((r) => setTimeout(r, Math.min(options.intervalMs, remainingMs)));
  }
}
