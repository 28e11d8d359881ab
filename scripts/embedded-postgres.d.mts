// Types for scripts/embedded-postgres.mjs (plain JS so that it runs under plain node).

export interface EmbeddedPostgresOptions {
  /** Port on 127.0.0.1; default: a free one (never 5432). */
  port?: number;
  /** Directory holding initdb and postgres; default: $PG_BIN_DIR, else the embedded-postgres platform package. */
  binDir?: string;
  /** PostgreSQL major: 15 (default), or one with a devDependency alias `embedded-postgres-<major>`; default $PG_MAJOR. */
  major?: number;
  /** Extra `-c name=value` server settings; they override the defaults. */
  serverOptions?: Record<string, string | number | boolean>;
  /** How long to wait for the server to accept connections; default 30 000 ms. */
  startTimeoutMs?: number;
}

export interface EmbeddedPostgres {
  /** postgres://postgres@127.0.0.1:<port>/postgres (trust auth). */
  readonly url: string;
  readonly port: number;
  /** The cluster's data directory, inside a temp dir that stop() (or the watchdog) deletes. */
  readonly dataDir: string;
  /** The postmaster's pid. */
  readonly pid: number;
  /** Stops the server (SIGINT, waits for exit) and deletes the temp dir. Idempotent. */
  stop(): Promise<void>;
}

export function startEmbeddedPostgres(options?: EmbeddedPostgresOptions): Promise<EmbeddedPostgres>;

/** The majors this checkout can start, ascending (15 and each `embedded-postgres-<major>` alias). */
export function pgMajors(): number[];
