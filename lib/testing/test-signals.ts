import { ENABLE_TEST_SIGNALS, PgQueue, type EngineTestSignals } from '../engine/index.js';
import { PG_QUEUE_ENGINE } from '../pg-queue.constants.js';
import { ENGINE_NOT_FOUND } from '../pg-queue.messages.js';
import type { ProviderSource } from './drain-queues.js';

export { TestSignal, TEST_SIGNAL_TIMEOUT_DEFAULT_MS, type AttemptOutcome, type EngineTestSignals } from '../engine/index.js';

/**
 * Turns on the test signals of an engine (or of the engine in a Nest application or TestingModule)
 * and returns them: `await signals.reaper.passRan.waitFor((p) => p.reaped > 0)` instead of polling
 * the table. Values are kept from this call on, so call it before the engine starts (or before the
 * action whose signal you await) and no event is missed. Idempotent.
 *
 * For the project's own tests: not exported from the package's root, and not a stable API.
 */
export function testSignals(source: PgQueue | ProviderSource): EngineTestSignals {
  const engine = source instanceof PgQueue ? source : resolveEngine(source);
  return engine[ENABLE_TEST_SIGNALS]();
}

function resolveEngine(app: ProviderSource): PgQueue {
  try {
    return app.get<unknown, PgQueue>(PG_QUEUE_ENGINE, { strict: false });
  } catch {
    throw new Error(ENGINE_NOT_FOUND('testSignals'));
  }
}
