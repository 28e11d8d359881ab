import 'reflect-metadata';
import type { INestApplication, Provider } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import pg from 'pg';
import { PG_QUEUE_ENGINE, QueueService, type PgQueue, type PgQueueModuleOptions } from '../../lib/index.js';
import { AppModule } from '../../sample-app/app.module.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { testSignals } from './signals.js';
import { CapturingLogger } from './nest.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';

/**
 * The sample app on a database of its own and a real HTTP server on a free port, as a user's e2e
 * test would boot theirs; `extraProviders` adds a test's own handlers beside the sample's. With
 * `viaProxy`, the app reaches its database (pool and listener) through a TCP proxy of its own
 * (`proxy`) that the test can cut or blackhole; with `throughPort`, through a port the test gives
 * (its own proxy); `sql` always connects directly. `globalPrefix`: the app's `setGlobalPrefix`.
 */
export async function bootSampleApp(
  label: string,
  options: Omit<PgQueueModuleOptions, 'connectionString'>,
  extraProviders: Provider[] = [],
  { viaProxy = false, throughPort, globalPrefix }: { viaProxy?: boolean; throughPort?: number; globalPrefix?: string } = {},
) {
  const database: TestDatabase = await createTestDatabase(label);
  const logger = new CapturingLogger();
  let proxy: TcpProxy | undefined;
  let connectionString = database.url;
  if (viaProxy) {
    const target = new URL(database.url);
    proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
    const url = new URL(database.url);
    url.host = `127.0.0.1:${proxy.port}`;
    connectionString = url.toString();
  } else if (throughPort !== undefined) {
    const url = new URL(database.url);
    url.host = `127.0.0.1:${throughPort}`;
    connectionString = url.toString();
  }
  const moduleRef = await Test.createTestingModule({
    imports: [AppModule.register({ connectionString, ...options }, extraProviders)],
  })
    .setLogger(logger)
    .compile();
  const app: INestApplication = moduleRef.createNestApplication();
  if (globalPrefix !== undefined) app.setGlobalPrefix(globalPrefix);
  await app.listen(0, '127.0.0.1');
  const base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  // For fixtures the API cannot make (a ghost claim, a backdated job); closed with the app.
  const sql = new pg.Pool({ connectionString: database.url, max: 2 });
  sql.on('error', () => {});
  return {
    app,
    base,
    database,
    logger,
    sql,
    proxy,
    queue: app.get(QueueService),
    engine: app.get<PgQueue>(PG_QUEUE_ENGINE),
    /** The engine's test signals, on from boot (see lib/engine/test-signals.ts). */
    signals: testSignals(app),
    get: (path: string) => fetch(`${base}${path}`),
    post: (path: string, body?: unknown, headers: Record<string, string> = {}) =>
      fetch(`${base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    async close() {
      proxy?.heal();
      await app.close();
      await proxy?.close();
      await sql.end();
      await database.drop();
    },
  };
}

export type SampleApp = Awaited<ReturnType<typeof bootSampleApp>>;

/**
 * Gates a test opens by job id: a handler that awaits `gates.wait(job.id)` runs until the test calls
 * `gates.open(job.id)` (either may come first). `started` holds the ids whose handler began.
 */
export class Gates {
  readonly started = new Set<string>();
  private readonly gates = new Map<string, { promise: Promise<void>; open: () => void }>();
  private readonly starts = new Map<string, { promise: Promise<void>; resolve: () => void }>();

  wait(id: string): Promise<void> {
    this.started.add(id);
    this.start(id).resolve();
    return this.get(id).promise;
  }

  /** Resolves once job `id`'s handler reached its gate (at once if it already did). */
  whenStarted(id: string): Promise<void> {
    return this.start(id).promise;
  }

  private start(id: string) {
    let start = this.starts.get(id);
    if (!start) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      start = { promise, resolve };
      this.starts.set(id, start);
    }
    return start;
  }

  open(id: string): void {
    this.get(id).open();
  }

  openAll(): void {
    for (const gate of this.gates.values()) gate.open();
  }

  private get(id: string) {
    let gate = this.gates.get(id);
    if (!gate) {
      let open!: () => void;
      const promise = new Promise<void>((resolve) => (open = resolve));
      gate = { promise, open };
      this.gates.set(id, gate);
    }
    return gate;
  }
}

/** Rejects with the signal's reason once it aborts: race a wait against it to honour the signal. */
export function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
}

/** A claim whose worker vanished: a running row with an expired lease, owned by nobody alive. */
export async function insertGhostClaim(sql: pg.Pool, queue: string, payload: unknown, attempt: { count: number; max: number }): Promise<string> {
  const { rows } = await sql.query<{ id: string }>(
    `INSERT INTO pgqueue.jobs (queue_name, payload, status, attempt_count, max_attempts, lease_owner, lease_token,
                               lease_expires_at, deadline_at, claimed_at, backoff_base_ms, backoff_max_ms)
     VALUES ($1, $2, 'running', $3, $4, 'gone:1', 1, now() - interval '1 second', now() + interval '1 hour', now() - interval '2 seconds', 0, 0)
     RETURNING id`,
    [queue, JSON.stringify(payload), attempt.count, attempt.max],
  );
  return rows[0]!.id;
}
