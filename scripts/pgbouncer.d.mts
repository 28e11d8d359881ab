// Types for scripts/pgbouncer.mjs (plain JS so that it runs under plain node).

export type PoolMode = 'session' | 'transaction';

export const POOL_MODES: readonly PoolMode[];

/** The one-line message (and `code: 'PGBOUNCER_MISSING'`) when no pgbouncer binary is found. */
export const PGBOUNCER_MISSING: string;

export interface PgBouncerOptions {
  /** The PostgreSQL server behind it (its host, port and user are used; trust auth). */
  upstream: string;
  /** Default 'transaction'. */
  poolMode?: PoolMode;
  /** Extra `[pgbouncer]` settings; they override the defaults (e.g. `{ default_pool_size: 1 }`). */
  settings?: Record<string, string | number>;
  /** How long to wait for its admin console to answer; default 10 000 ms. */
  startTimeoutMs?: number;
}

export interface PgBouncer {
  /** postgres://<user>@127.0.0.1:<port>/<upstream's database>. */
  readonly url: string;
  readonly port: number;
  readonly poolMode: PoolMode;
  /** Its log, inside a temp dir that stop() (or the watchdog) deletes. */
  readonly logFile: string;
  readonly pid: number;
  /** `databaseUrl` (a database of the upstream server) as reached through this bouncer. */
  via(databaseUrl: string): string;
  /** Stops it (SIGTERM, waits for exit) and deletes the temp dir. Idempotent. */
  stop(): Promise<void>;
}

/** The binary ($PGBOUNCER_BIN, PATH, /usr/sbin/pgbouncer); throws PGBOUNCER_MISSING. */
export function locatePgBouncer(): string;
/** `pgbouncer --version`'s first line. */
export function pgBouncerVersion(binary?: string): string;
export function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer>;
