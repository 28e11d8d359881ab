import type pg from 'pg';
import { quoteIdentifier } from '../identifiers.js';

/** The LISTEN connection's statements (see notifier.ts). */

export async function listen(client: pg.Client, channel: string): Promise<void> {
  await client.query(`LISTEN ${quoteIdentifier(channel)}`);
}

/** A query on the listener's own connection, so a half-open socket is found. */
export async function ping(client: pg.Client): Promise<void> {
  await client.query('SELECT 1');
}
