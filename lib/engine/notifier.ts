import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { requireInteger, resolveSection, section, TIMER_MAX_MS, timerMs } from './config.js';
import { listen, ping } from './store/listener.js';
import type { LogThrottle } from './log-throttle.js';
import type { EngineLogger } from './logger.js';
import type { MaintenanceService } from './maintenance/service.js';
import type { NotifierTestSignals } from './test-signals.js';

export interface NotifierConfig {
  /** First reconnect delay after the listener connection drops; doubles up to the maximum. */
  reconnectMinMs: number;
  reconnectMaxMs: number;
  /**
   * This often the listener proves that it hears: a probe NOTIFY sent through the engine's pool,
   * and a query on the listener connection itself.
   */
  probeIntervalMs: number;
  /**
   * The probe must be heard within this; the listener connection must also connect, LISTEN and
   * answer its query within it. Otherwise it is marked down and reconnects.
   */
  probeTimeoutMs: number;
}

/**
 * Probe every 15 s, heard within 5 s: a listener that went deaf is down within 20 s, a third of
 * health's default `maxListenerDownMs` (60 s). Each probe costs one pool query and one
 * notification that every listener on the schema's channel receives (n processes: n / 15 s each),
 * so a shorter interval buys little but grows with the fleet. 5 s is far above a NOTIFY's
 * delivery time (milliseconds), so a loaded server or a GC pause does not cost a reconnect.
 * The reconnect backoff is capped at 5 s, and a connection the engine's pool opens (the database
 * is back) ends the wait at once.
 */
export const NOTIFIER_DEFAULTS: NotifierConfig = { reconnectMinMs: 100, reconnectMaxMs: 5_000, probeIntervalMs: 15_000, probeTimeoutMs: 5_000 };

export const NOTIFIER_OPTIONS = section<NotifierConfig>(
  'the listener',
  { reconnectMinMs: timerMs(1), reconnectMaxMs: timerMs(1), probeIntervalMs: timerMs(10), probeTimeoutMs: timerMs(10) },
  NOTIFIER_DEFAULTS,
  // The ping became a probe that proves the listener hears.
  { pingIntervalMs: { use: 'notifier.probeIntervalMs', moveTo: 'probeIntervalMs' } },
);

/**
 * Consecutive connections that LISTENed without error and then missed their probe before the
 * one-time warning about transaction pooling: one could be a hiccup, several in a row are a
 * session that cannot hear.
 */
export const DEAF_ATTEMPTS_BEFORE_WARNING = 3;

/** The listener's kind of failure in the LogThrottle, and the subject of its lines. */
const LISTENER = 'Listener connection';

/** NOTIFY topic of the listener's own probe (payload `*probe:<notifier>.<n>`): wakes nothing. */
const PROBE_TOPIC = '*probe';

/** Sends `payload` on the channel through the engine's pool, the way producers notify. */
export type ProbeSender = (payload: string) => Promise<unknown>;

type Failure = 'unreachable' | 'dropped' | 'deaf';

interface Probe {
  /** When it was sent (epoch ms): a missed probe's listener counts as down from here. */
  sentAt: number;
  /** Its NOTIFY committed: only then does not hearing it say anything about the listener. */
  committed: boolean;
  timer: NodeJS.Timeout;
}

/**
 * One LISTEN connection per process, shared by every queue. Notifications only wake loops: a
 * worker always reads the table, and its poll finds every committed job even while this
 * connection is down. On every (re)connect all subscribers are woken, since anything sent while
 * the connection was down is lost.
 *
 * A connection that is open is not one that hears: a half-open socket, or a session behind a
 * transaction-pooling proxy, accepts LISTEN and never delivers a notification. So the listener
 * counts as listening only once it has heard its own probe, a NOTIFY sent through the engine's
 * pool (the producers' path), after each (re)connect, and again every `probeIntervalMs`.
 */
export class Notifier implements MaintenanceService {
  readonly name = 'listener';
  readonly config: NotifierConfig;
  private readonly subscribers = new Map<string, Set<(argument: string) => void>>();
  /** Tells this notifier's probes from other processes' on the same channel. */
  private readonly probeId = randomBytes(6).toString('hex');
  private probeCount = 0;
  private client: pg.Client | undefined;
  private stopped = true;
  private reconnectDelayMs: number;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private probeTimer: NodeJS.Timeout | undefined;
  private probe: Probe | undefined;
  private downSinceMs: number | undefined = Date.now();
  /**
   * Why the last connection attempt ended: the database could not be reached (connect failed), an
   * open connection dropped or stopped answering, or it LISTENed and missed its probe.
   */
  private lastFailure: Failure | undefined;
  private deafAttempts = 0;
  private warnedDeaf = false;
  /** Resolves `start()`: the first connection heard its probe, or failed. */
  private settleStart: (() => void) | undefined;
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: NotifierTestSignals | undefined;

  constructor(
    private readonly connection: pg.ClientConfig,
    private readonly channel: string,
    private readonly sendProbe: ProbeSender,
    private readonly logger: EngineLogger,
    private readonly failures: LogThrottle,
    config?: Partial<NotifierConfig>,
  ) {
    this.config = resolveSection(NOTIFIER_OPTIONS, config, 'notifier');
    requireInteger('notifier.reconnectMaxMs', this.config.reconnectMaxMs, this.config.reconnectMinMs, TIMER_MAX_MS);
    this.reconnectDelayMs = this.config.reconnectMinMs;
  }

  /** Whether LISTEN is active and its probe was heard since the last (re)connect. */
  get listening(): boolean {
    return this.downSinceMs === undefined;
  }

  /** Milliseconds the listener has been down (0 when listening). */
  get downForMs(): number {
    return this.downSinceMs === undefined ? 0 : Date.now() - this.downSinceMs;
  }

  /**
   * Calls `fn` on each notification for `topic`. A payload is a queue name (work to claim), or
   * `*<topic>` / `*<topic>:<argument>` for the engine's own signals (queue names cannot start
   * with '*'); `fn` receives the argument.
   */
  subscribe(topic: string, fn: (argument: string) => void): () => void {
    let set = this.subscribers.get(topic);
    if (!set) this.subscribers.set(topic, (set = new Set()));
    set.add(fn);
    return () => set.delete(fn);
  }

  /**
   * Connects; resolves once listening (the first probe heard) or after the first failure (it keeps
   * retrying), so within a connect, a LISTEN and a probe timeout at most.
   */
  async start(): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    const settled = new Promise<void>((resolve) => (this.settleStart = resolve));
    void this.connect();
    await settled;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    this.endProbing();
    const client = this.client;
    this.client = undefined;
    this.downSinceMs ??= Date.now();
    this.settle();
    if (client) await endWithin(client, this.config.probeTimeoutMs);
  }

  /**
   * The engine's pool opened a connection: the database takes connections again. A listener whose
   * last attempt could not connect retries now, so it listens again when claims resume rather than
   * up to `reconnectMaxMs` later. Only then: a connection that merely dropped, or a deaf session
   * (say, through a transaction pooler), reconnects on its backoff whatever the pool does.
   */
  databaseReachable(): void {
    if (this.stopped || this.client || this.reconnectTimer === undefined || this.lastFailure !== 'unreachable') return;
    clearTimeout(this.reconnectTimer);
    void this.connect();
  }

  /** Drops the listener connection as a network failure would (reconnect follows): for tests. */
  async disconnectForTest(): Promise<void> {
    await this.client?.end();
  }

  private async connect(): Promise<void> {
    this.reconnectTimer = undefined;
    // Every step on this connection (connect, LISTEN, the query) answers within the probe timeout.
    const timeoutMs = this.config.probeTimeoutMs;
    const client = new pg.Client({ ...this.connection, keepAlive: true, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs });
    client.on('notification', (message) => this.dispatch(client, message.payload ?? ''));
    client.on('error', (error) => this.lost(client, 'dropped', error.message));
    client.on('end', () => this.lost(client, 'dropped'));
    this.client = client;
    try {
      await client.connect();
    } catch (error) {
      this.lost(client, 'unreachable', (error as Error).message);
      return;
    }
    try {
      await listen(client, this.channel);
    } catch (error) {
      this.lost(client, 'dropped', (error as Error).message);
      return;
    }
    if (this.stopped || this.client !== client) {
      await endWithin(client, this.config.probeTimeoutMs);
      return;
    }
    // Connected and LISTENing, not yet listening: that takes a probe heard (see heard()).
    this.sendProbeOn(client);
    this.probeTimer = setInterval(() => {
      if (this.probe) return; // the last one is still out: one at a time
      const sentAt = Date.now();
      this.sendProbeOn(client);
      // The listener's own connection answers too, so a half-open socket is found even while the
      // pool cannot send (then the probe proves nothing).
      ping(client).catch((error: Error) => this.lost(client, 'dropped', `it did not answer a query: ${error.message}`, sentAt));
    }, this.config.probeIntervalMs);
    this.probeTimer.unref();
  }

  private sendProbeOn(client: pg.Client): void {
    this.probeCount += 1;
    const payload = `${PROBE_TOPIC}:${this.probeId}.${this.probeCount}`;
    const probe: Probe = {
      sentAt: Date.now(),
      committed: false,
      timer: setTimeout(() => this.judge(client, probe), this.config.probeTimeoutMs),
    };
    probe.timer.unref();
    this.probe = probe;
    this.sendProbe(payload).then(
      () => void (probe.committed = true),
      // The pool cannot send: that is the workers' problem to report, not evidence about the
      // listener; its own query (above) still checks the connection.
      () => {},
    );
  }

  /** The probe's time is up and it was not heard. */
  private judge(client: pg.Client, probe: Probe): void {
    if (this.probe !== probe || this.client !== client) return;
    this.probe = undefined;
    if (!probe.committed) {
      // Not sent in time (a busy or unreachable pool): inconclusive. The next interval tries again.
      this.settle();
      return;
    }
    // A NOTIFY that committed in time and is still not heard: this session does not receive what
    // producers send (a half-open socket, or LISTEN through a transaction pooler).
    this.lost(client, 'deaf', `its probe NOTIFY (sent through the pool) was not heard within ${this.config.probeTimeoutMs} ms`, probe.sentAt);
  }

  /**
   * One of our probes reached the current connection: it hears what producers send. A late one
   * (judged already) counts too, it is the same evidence.
   */
  private heard(): void {
    if (this.probe) clearTimeout(this.probe.timer);
    this.probe = undefined;
    this.deafAttempts = 0;
    this.lastFailure = undefined;
    if (this.downSinceMs === undefined) return;
    this.failures.recovered(LISTENER);
    this.downSinceMs = undefined;
    this.reconnectDelayMs = this.config.reconnectMinMs;
    this.settle();
    this.wakeAll();
    this.testSignals?.listening.signal({ at: Date.now() });
  }

  /**
   * Ends the connection (a failed or deaf one is not asked to close politely: its peer may never
   * answer) and reconnects with backoff. `since`: when the failed check was sent.
   */
  private lost(client: pg.Client, why: Failure, reason?: string, since = Date.now()): void {
    if (this.client !== client) return;
    this.client = undefined;
    this.endProbing();
    this.downSinceMs ??= since;
    client.connection.stream.destroy();
    this.lastFailure = why;
    this.deafAttempts = why === 'deaf' ? this.deafAttempts + 1 : 0;
    this.settle();
    this.testSignals?.lost.signal({ why });
    if (this.stopped) return;
    // Once the deaf session has been explained, its every reconnect is no news: logged, not warned.
    // Bounded: during an outage it fails at every step of its backoff.
    const level = why === 'deaf' && this.warnedDeaf ? 'log' : 'warn';
    this.failures.failed(
      LISTENER,
      reason ?? 'it ended',
      level,
      `Listener connection lost${reason ? ` (${reason})` : ''}; reconnecting in ${this.reconnectDelayMs} ms. Workers keep polling meanwhile.`,
    );
    if (this.deafAttempts >= DEAF_ATTEMPTS_BEFORE_WARNING && !this.warnedDeaf) {
      this.warnedDeaf = true;
      this.logger.warn(
        `The listener connected and LISTENed ${this.deafAttempts} times in a row but never heard its probe NOTIFY, which the pool sent: its connection does not receive notifications, as through PgBouncer in transaction mode. ` +
          'Point listenConnectionString at a direct (session) connection to PostgreSQL. Until then workers find jobs only by polling, and cancels reach running handlers only at their next heartbeat.',
      );
    }
    this.reconnectTimer = setTimeout(() => void this.connect(), this.reconnectDelayMs);
    this.reconnectTimer.unref();
    this.reconnectDelayMs = Math.min(this.config.reconnectMaxMs, this.reconnectDelayMs * 2);
  }

  private endProbing(): void {
    clearInterval(this.probeTimer);
    this.probeTimer = undefined;
    if (this.probe) clearTimeout(this.probe.timer);
    this.probe = undefined;
  }

  private settle(): void {
    this.settleStart?.();
    this.settleStart = undefined;
  }

  private dispatch(client: pg.Client, payload: string): void {
    const split = payload.startsWith('*') ? payload.indexOf(':') : -1;
    const topic = split === -1 ? payload : payload.slice(0, split);
    const argument = split === -1 ? '' : payload.slice(split + 1);
    if (topic === PROBE_TOPIC) {
      if (client === this.client && argument.startsWith(`${this.probeId}.`)) this.heard();
      return;
    }
    for (const fn of this.subscribers.get(topic) ?? []) fn(argument);
    this.testSignals?.notification.signal({ topic, argument });
  }

  /** After a (re)connect: every queue's loop claims once, since wake-ups may have been missed. */
  private wakeAll(): void {
    for (const [topic, set] of this.subscribers) if (!topic.startsWith('*')) for (const fn of set) fn('');
  }
}

/** A polite end (Terminate), bounded: a peer that never answers gets its socket destroyed. */
async function endWithin(client: pg.Client, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const ended = client.end().catch(() => {});
  const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  await Promise.race([ended, late]);
  clearTimeout(timer);
  client.connection.stream.destroy();
}
