import pg from 'pg';
import type { Queryable } from './store/statement.js';

export type { Queryable } from './store/statement.js';

/**
 * `host:port/database` of connection settings, as pg itself resolves them (a connection string,
 * separate fields, PG* environment variables, its defaults), for messages: never the user or the
 * password. A pool's settings and a client's alike.
 */
export function describeTarget(config: pg.ClientConfig): string {
  try {
    // Constructing a client only resolves its settings; it connects nothing.
    return targetOf(new pg.Client(config)) ?? 'the configured database';
  } catch {
    return 'the configured database';
  }
}

/** The target of a connection that says where it goes (a pg.Client or PoolClient does), else undefined. */
export function targetOf(db: Queryable): string | undefined {
  const { host, port, database } = db as { host?: unknown; port?: unknown; database?: unknown };
  if (typeof host !== 'string' || typeof port !== 'number') return undefined;
  return `${host.includes(':') ? `[${host}]` : host}:${port}/${typeof database === 'string' ? database : ''}`;
}
