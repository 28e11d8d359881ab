import pg from 'pg';
import { KeyHandoffs } from '../../lib/engine/maintenance/key-handoffs.js';
import { LogThrottle } from '../../lib/engine/log-throttle.js';
import { createStore } from '../../lib/engine/store/index.js';

// A pass that fails (the database is away) is retried soon, but not every retryMs for the whole
// outage: the delay doubles from retryMs up to intervalMs, and one pass that works resets it.
test('failed key handoff passes back off, doubling from retryMs up to intervalMs', async () => {
  // Nothing listens on port 1: every connect fails at once.
  const pool = new pg.Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 1_000 });
  pool.on('error', () => {});
  const delays: number[] = [];
  let handoffs: KeyHandoffs | undefined;
  const silent = { log() {}, warn() {}, error() {}, debug() {} };
  // The runner calls the service's error hook before it logs, so each logged failure sees the delay
  // the service chose after it.
  const throttle = new (class extends LogThrottle {
    override failed(what: string, reason: string): void {
      delays.push(handoffs!.nextPassInMs);
      super.failed(what, reason);
    }
  })(silent, 0);
  handoffs = new KeyHandoffs(pool, createStore('pgqueue'), 'pgqueue_wake', throttle, { intervalMs: 160, retryMs: 10 });
  handoffs.start();
  try {
    await vi.waitFor(() => expect(delays.length).toBeGreaterThanOrEqual(7), { timeout: 20_000, interval: 20 });
  } finally {
    await handoffs.stop();
    await pool.end();
  }
  expect(delays.slice(0, 7)).toEqual([10, 20, 40, 80, 160, 160, 160]);
});
