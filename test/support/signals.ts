import type { AttemptOutcome, EngineTestSignals } from '../../lib/testing/test-signals.js';

export { testSignals } from '../../lib/testing/test-signals.js';

/**
 * Waits until this engine's worker ended an attempt of job `jobId` with `outcome` (any outcome when
 * none is given); attempts of other jobs, and other outcomes of this one (a retry before the success
 * awaited), are left for other waits.
 */
export function attemptEnded(signals: EngineTestSignals, jobId: string, outcome?: AttemptOutcome, timeoutMs?: number) {
  return signals.worker.attemptEnded.waitFor((e) => e.jobId === jobId && (outcome === undefined || e.outcome === outcome), timeoutMs);
}

/** Waits for `ids` to end with `outcome` (default succeeded), in any order. */
export async function allEnded(signals: EngineTestSignals, ids: readonly string[], outcome: AttemptOutcome = 'succeeded', timeoutMs?: number): Promise<void> {
  await Promise.all(ids.map((id) => attemptEnded(signals, id, outcome, timeoutMs)));
}
