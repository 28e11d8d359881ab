import pg from 'pg';
import { requireInteger, withDefaults } from './config.js';
import { quoteIdentifier } from './identifiers.js';
import type { EngineLogger } from './logger.js';

export interface NotifierConfig {
  /** First reconnect delay after the listener connection drops; doubles up to the maximum. */
  reconnectMinMs: number;
  reconnectMaxMs: number;
  /** A query on the listener connection this often, to notice a half-open connection. */
  pingIntervalMs: number;
}

export const NOTIFIER_DEFAULTS: NotifierConfig = { reconnectMinMs: 100, reconnectMaxMs: 5_000, pingIntervalMs: 30_000 };

/**
 * One LISTEN connection per process, shared by every queue. Notifications only wake loops: a
 * worker always reads the table, and its poll finds every committed job even while this
 * connection is down. On every (re)connect all subscribers are woken, since anything sent while
 * the connection was down is lost.
 */
export class Notifier {
  readonly config: NotifierConfig;
  private readonly subscribers = new Map<string, Set<(argument: string) => void>>();
  private client: pg.Client | undefined;
  private stopped = true;
  private reconnectDelayMs: number;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private downSinceMs: number | undefined = Date.now();

  constructor(
    private readonly connection: pg.ClientConfig,
    private readonly channel: string,
    private readonly logger: EngineLogger,
    config?: Partial<NotifierConfig>,
  ) {
    this.config = withDefaults(NOTIFIER_DEFAULTS, config);
    requireInteger('notifier.reconnectMinMs', this.config.reconnectMinMs, 1);
    requireInteger('notifier.reconnectMaxMs', this.config.reconnectMaxMs, this.config.reconnectMinMs);
    requireInteger('notifier.pingIntervalMs', this.config.pingIntervalMs, 100);
    this.reconnectDelayMs = this.config.reconnectMinMs;
  }

  /** Whether LISTEN is active right now. */
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

  /** Connects; resolves once listening or after the first failure (it keeps retrying). */
  async start(): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    await this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    clearInterval(this.pingTimer);
    const client = this.client;
    this.client = undefined;
    this.downSinceMs ??= Date.now();
    await client?.end().catch(() => {});
  }

  /** Drops the listener connection as a network failure would (reconnect follows): for tests. */
  async disconnectForTest(): Promise<void> {
    await this.client?.end();
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ ...this.connection, keepAlive: true });
    client.on('notification', (message) => this.dispatch(message.payload ?? ''));
    client.on('error', (error) => this.lost(client, error));
    client.on('end', () => this.lost(client));
    this.client = client;
    try {
      await client.connect();
      await client.query(`LISTEN ${quoteIdentifier(this.channel)}`);
    } catch (error) {
      this.lost(client, error as Error);
      return;
    }
    if (this.stopped || this.client !== client) {
      await client.end().catch(() => {});
      return;
    }
    if (this.downSinceMs !== undefined && this.reconnectDelayMs > this.config.reconnectMinMs) {
      this.logger.log(`Listener reconnected after ${Date.now() - this.downSinceMs} ms.`);
    }
    this.downSinceMs = undefined;
    this.reconnectDelayMs = this.config.reconnectMinMs;
    clearInterval(this.pingTimer);
    this.pingTimer = setInterval(() => {
      client.query('SELECT 1').catch((error: Error) => this.lost(client, error));
    }, this.config.pingIntervalMs);
    this.pingTimer.unref();
    this.wakeAll();
  }

  private lost(client: pg.Client, error?: Error): void {
    if (this.client !== client) return;
    this.client = undefined;
    clearInterval(this.pingTimer);
    this.downSinceMs ??= Date.now();
    client.end().catch(() => {});
    if (this.stopped) return;
    this.logger.warn(
      `Listener connection lost${error ? ` (${error.message})` : ''}; reconnecting in ${this.reconnectDelayMs} ms. Workers keep polling meanwhile.`,
    );
    this.reconnectTimer = setTimeout(() => void this.connect(), this.reconnectDelayMs);
    this.reconnectTimer.unref();
    this.reconnectDelayMs = Math.min(this.config.reconnectMaxMs, this.reconnectDelayMs * 2);
  }

  private dispatch(payload: string): void {
    const split = payload.startsWith('*') ? payload.indexOf(':') : -1;
    const topic = split === -1 ? payload : payload.slice(0, split);
    const argument = split === -1 ? '' : payload.slice(split + 1);
    for (const fn of this.subscribers.get(topic) ?? []) fn(argument);
  }

  /** After a (re)connect: every queue's loop claims once, since wake-ups may have been missed. */
  private wakeAll(): void {
    for (const [topic, set] of this.subscribers) if (!topic.startsWith('*')) for (const fn of set) fn('');
  }
}
