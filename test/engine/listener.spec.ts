import pg from 'pg';
import { checkHealth } from '../../lib/engine/index.js';
import { DEAF_ATTEMPTS_BEFORE_WARNING } from '../../lib/engine/notifier.js';
import { createTestDatabase } from '../support/database.js';
import { engineFixture, testLogger, waitFor } from '../support/engine.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { engineInternals } from '../../lib/engine/internals.js';
import { attemptEnded, localSignal, nextValues, testSignals } from '../support/signals.js';

/**
 * The listener proves that it hears: a probe NOTIFY sent through the engine's pool (the path every
 * producer uses) that its LISTEN connection must receive within a timeout. Each test routes the
 * connection it breaks through a TCP proxy, or gives the listener a session that cannot hear.
 */

let fx: Awaited<ReturnType<typeof engineFixture>>;
const proxies: TcpProxy[] = [];
beforeAll(async () => {
  fx = await engineFixture('listener');
});
afterAll(async () => {
  await fx.close();
  await Promise.all(proxies.map((p) => p.close()));
});

/** A proxy in front of the test's server, and the test database's URL through it. */
async function proxied(): Promise<{ proxy: TcpProxy; url: string }> {
  const target = new URL(fx.url);
  const proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
  proxies.push(proxy);
  const url = new URL(fx.url);
  url.port = String(proxy.port);
  return { proxy, url: url.toString() };
}

/** Counts the probe NOTIFYs on the schema's channel, as any other session on the database sees them. */
async function probeCounter() {
  const spy = new pg.Client({ connectionString: fx.url });
  await spy.connect();
  const counter = { probes: localSignal<void>('spy.probe'), end: () => spy.end() };
  spy.on('notification', (message) => {
    if (message.payload?.startsWith('*probe:')) counter.probes.signal();
  });
  await spy.query(`LISTEN "pgqueue:wake"`);
  return counter;
}

test('a half-open (blackholed) listener is reported down within a probe interval and timeout, fails health, and listens again once the network heals', async () => {
  const { proxy, url } = await proxied();
  const probeIntervalMs = 200;
  const probeTimeoutMs = 300;
  const reconnectMaxMs = 200;
  // Polling effectively off: a pickup below proves a NOTIFY reached the listener.
  const q = fx.make({ pollIntervalMs: 60_000, listenConnectionString: url, notifier: { probeIntervalMs, probeTimeoutMs, reconnectMinMs: 50, reconnectMaxMs } });
  const signals = testSignals(q);
  q.work('half-open', async () => {});
  await q.start();
  await signals.notifier.listening.next();

  // Nothing is forwarded any more and nothing is reset: the socket looks open, nothing arrives.
  proxy.blackhole();
  // The next probe is sent within an interval and judged a timeout later (x2 for a loaded machine).
  await signals.notifier.lost.next(2 * (probeIntervalMs + probeTimeoutMs));
  expect(engineInternals(q).notifier.listening).toBe(false);
  // Down since the unheard probe was sent, a timeout before it was judged.
  const { listener } = await q.stats();
  expect(listener.listening).toBe(false);
  expect(listener.downForMs).toBeGreaterThanOrEqual(probeTimeoutMs);

  // It stays down while the network is gone (reconnects hang until their timeout); health says so.
  const maxListenerDownMs = probeTimeoutMs;
  // Real time on purpose: health judges how long the listener has been down by the clock.
  await waitFor(() => engineInternals(q).notifier.downForMs > maxListenerDownMs, 5 * maxListenerDownMs);
  const report = await checkHealth(q, { maxListenerDownMs });
  expect(report.healthy).toBe(false);
  expect(report.problems).toEqual([expect.stringMatching(/LISTEN connection has been down/)]);
  expect(report.stats.listener.listening).toBe(false);

  // Healed: the attempt in flight times out at worst, the next one listens and hears wake-ups.
  proxy.heal();
  await signals.notifier.listening.next(2 * (probeTimeoutMs + reconnectMaxMs + probeTimeoutMs));
  const id = await q.enqueue('half-open', {});
  await attemptEnded(signals, id, 'succeeded', 5_000);
  expect((await checkHealth(q, { maxListenerDownMs })).healthy).toBe(true);
  await q.stop();
});

test('a listener whose LISTEN succeeds on a session that never hears the channel is reported down, and one warning names listenConnectionString', async () => {
  // Another database on the same server: LISTEN succeeds there, but the NOTIFYs the pool sends in
  // the queue's database never arrive (as through PgBouncer in transaction mode).
  const elsewhere = await createTestDatabase('listener-elsewhere');
  const logger = { ...testLogger(), log: (line: string) => void logger.lines.push(`log: ${line}`) };
  const q = fx.make({
    logger,
    failureLogIntervalMs: 0, // every deaf attempt is logged: they are counted here
    listenConnectionString: elsewhere.url,
    notifier: { probeIntervalMs: 100, probeTimeoutMs: 200, reconnectMinMs: 20, reconnectMaxMs: 50 },
  });
  const lost = testSignals(q).notifier.lost;
  try {
    await q.start();
    const misses = () => logger.lines.filter((line) => /^(warn|log): Listener connection lost \(its probe NOTIFY .* was not heard/.test(line)).length;
    // Twice as many deaf attempts as it takes to warn: the warning must still have come once.
    for (let n = 0; n < 2 * DEAF_ATTEMPTS_BEFORE_WARNING; n++) await lost.waitFor((l) => l.why === 'deaf', 20_000);
    expect(misses()).toBeGreaterThanOrEqual(2 * DEAF_ATTEMPTS_BEFORE_WARNING);
    expect(engineInternals(q).notifier.listening).toBe(false);
    const report = await checkHealth(q, { maxListenerDownMs: 100 });
    expect(report.problems).toEqual([expect.stringMatching(/LISTEN connection has been down/)]);
    const warnings = logger.lines.filter((line) => line.includes('listenConnectionString'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^warn: .*direct \(session\) connection/);
    // After it, the deaf reconnects are routine: logged, no longer warned.
    const lastWarning = logger.lines.lastIndexOf(warnings[0]!);
    expect(logger.lines.slice(lastWarning + 1).filter((line) => line.startsWith('warn: '))).toEqual([]);
  } finally {
    await q.stop();
    await elsewhere.drop();
  }
});

test('probes do not wake queue workers', async () => {
  const counter = await probeCounter();
  const q = fx.make({ pollIntervalMs: 60_000, notifier: { probeIntervalMs: 20 } });
  const signals = testSignals(q);
  let claims = 0;
  q.work('quiet', async () => {}, {}, { claimed: () => void claims++ });
  try {
    await q.start();
    // The start's own claim (nothing there), then silence: no poll within the test.
    await signals.notifier.listening.next();
    await signals.worker.batchClaimed.next();
    const before = claims;
    expect(before).toBeGreaterThanOrEqual(1);
    counter.probes.clear();
    await nextValues(counter.probes, 20);
    expect(claims).toBe(before);
    expect(engineInternals(q).notifier.listening).toBe(true);
  } finally {
    await q.stop();
    await counter.end();
  }
});

test('when the database comes back, the listener listens again once the pool reconnects, not after its backoff', async () => {
  // Pool and listener both through the proxy: for this engine, the database goes away and returns.
  const { proxy, url } = await proxied();
  const lines = localSignal<{ at: number; line: string }>('comeback.lines');
  const logger = { log: () => {}, warn: (line: string) => lines.signal({ at: Date.now(), line }), error: (line: string) => lines.signal({ at: Date.now(), line }) };
  // Every failure logged (failureLogIntervalMs 0): the test reads the backoff from the lines.
  const q = fx.make({ connectionString: url, logger, failureLogIntervalMs: 0, notifier: { reconnectMinMs: 50, reconnectMaxMs: 60_000 } });
  const signals = testSignals(q);
  q.work('comeback', async () => {});
  await q.start();
  await signals.notifier.listening.next();

  proxy.cut();
  // Its reconnects are refused and its backoff doubles: wait until the next retry is seconds away.
  const reconnectDelay = (line: string) => Number(/^Listener connection lost .* reconnecting in (\d+) ms/.exec(line)?.[1]);
  const found = await lines.waitFor(({ line }) => reconnectDelay(line) >= 3_200);
  const retry = { at: found.at, delayMs: reconnectDelay(found.line) };
  signals.worker.batchClaimed.clear(); // claims before the cut
  proxy.heal();
  await signals.worker.batchClaimed.next();
  // Claims have resumed (the pool connected again); the listener follows before its pending retry.
  await signals.notifier.listening.next(2 * retry.delayMs);
  expect(Date.now()).toBeLessThan(retry.at + retry.delayMs);
  await q.stop();
});
