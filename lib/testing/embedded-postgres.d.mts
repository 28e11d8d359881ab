// Types for lib/testing/embedded-postgres.mjs (plain JS so that it runs under plain node before any build).
import type { ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';

export interface EmbeddedPostgresOptions {
  /** Port on 127.0.0.1; default: a free one (never 5432). */
  port?: number;
  /** Directory holding initdb and postgres; default: $PG_BIN_DIR, else the embedded-postgres platform package. */
  binDir?: string;
  /** The binaries of a platform package to use instead of embedded-postgres's (what `loadEmbeddedPlatform()` returns). */
  platform?: { initdb: string; postgres: string };
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

/**
 * Resolves embedded-postgres (from `from`, default this file) and imports its platform package.
 * Rejects with an Error whose `code` is EMBEDDED_POSTGRES_MISSING or EMBEDDED_POSTGRES_PLATFORM_MISSING.
 */
export function loadEmbeddedPlatform(from?: string | URL): Promise<{ pkg: string; initdb: string; postgres: string }>;

// Shared with scripts/pgbouncer.mjs.
export interface OsUser {
  name: string;
  uid: number;
  gid: number;
}
export function ensureOsUser(): OsUser;
export function chownTree(dir: string, user: OsUser): Promise<void>;
export function freePort(): Promise<number>;
export function logTail(file: string, lines?: number, missing?: string): Promise<string>;
export function within(promise: Promise<unknown>, ms: number): Promise<boolean>;
export function once<T>(fn: () => T): () => T;
export function stopWatched(child: ChildProcess, watchdog: Socket, exited: Promise<unknown>, root: string, escalate: [string, number][]): Promise<void>;
