import { TestSignal, type AttemptOutcome, type EngineTestSignals } from '../../lib/testing/test-signals.js';

export { testSignals } from '../../lib/testing/test-signals.js';

/**
 * Waits until this engine's worker ended an attempt of job `jobId` with `outcome` (any outcome when
 * none is given); attempts of other jobs, and other outcomes of this one (a retry before the success
 * awaited), are left for other waits.
 */
export function attemptEnded(signals: EngineTestSignals, jobId: string, outcome?: AttemptOutcome, timeoutMs?: number) {
  return signals.worker.attemptEnded.waitFor((e) => e.jobId === jobId && (outcome === undefined || e.outcome === outcome), timeoutMs);
}

/** Waits until a claim of this engine took job `jobId` (it is running from then on). */
export function claimed(signals: EngineTestSignals, jobId: string, timeoutMs?: number) {
  return signals.worker.batchClaimed.waitFor((b) => b.jobIds.includes(jobId), timeoutMs);
}

/**
 * Waits for `count` claim statements of `queue` sent from now on, and returns the jobs they took
 * (earlier claims kept by the signal are forgotten first). "Claims ran and found nothing" without
 * sleeping a guessed number of poll intervals.
 */
export async function nextClaims(signals: EngineTestSignals, queue: string, count: number, timeoutMs?: number): Promise<string[]> {
  const claims = signals.worker.batchClaimed;
  claims.clear((b) => b.queue === queue);
  const taken: string[] = [];
  for (let n = 0; n < count; n++) taken.push(...(await claims.waitFor((b) => b.queue === queue, timeoutMs)).jobIds);
  return taken;
}

/** Waits for `ids` to end with `outcome` (default succeeded), in any order. */
export async function allEnded(signals: EngineTestSignals, ids: readonly string[], outcome: AttemptOutcome = 'succeeded', timeoutMs?: number): Promise<void> {
  await Promise.all(ids.map((id) => attemptEnded(signals, id, outcome, timeoutMs)));
}

/**
 * A signal of the test's own, for what happens in the test's process rather than in a service: a
 * handler's progress, a spy session's notifications. Awaited like the engine's (values kept until
 * a wait takes them), so a test does not poll the array a handler pushes to.
 */
export function localSignal<T>(name: string): TestSignal<T> {
  return new TestSignal<T>(name);
}

/** The next `count` values of `signal` (kept or still to come), in order. */
export async function nextValues<T>(signal: TestSignal<T>, count: number, timeoutMs?: number): Promise<T[]> {
  const values: T[] = [];
  for (let n = 0; n < count; n++) values.push(await signal.next(timeoutMs));
  return values;
}
