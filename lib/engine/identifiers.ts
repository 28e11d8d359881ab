import { InvalidOptionError } from './errors.js';

/**
 * Schema names are interpolated into SQL text (PostgreSQL cannot bind identifiers), so they are
 * validated against a strict pattern first and then quoted anyway. Lower case only: an unquoted
 * mention in psql then names the same schema. At most 57 characters, so that the NOTIFY channel
 * derived from it (`<schema>:wake`) stays within PostgreSQL's 63-byte identifier limit.
 */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,56}$/;

export const DEFAULT_SCHEMA = 'pgqueue';

export function validateSchemaName(schema: unknown): string {
  if (typeof schema !== 'string' || !SCHEMA_NAME.test(schema)) {
    const shown = typeof schema === 'string' ? JSON.stringify(schema.slice(0, 80)) : typeof schema;
    throw new InvalidOptionError(
      'schema',
      `${shown} is not an accepted schema name`,
      'Use 1-57 characters: lower-case letters, digits and underscores, not starting with a digit (for example "pgqueue").',
    );
  }
  return schema;
}

/** Quotes an identifier that has already passed validation. */
export function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** Queue names: what the jobs table's CHECK constraint accepts, checked before any SQL runs. */
const QUEUE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

export function isQueueName(name: unknown): name is string {
  return typeof name === 'string' && QUEUE_NAME.test(name);
}

/** The NOTIFY channel of a schema: enqueues and promotions wake that schema's workers only. */
/** A job id: the decimal string of a positive PostgreSQL bigint. */
export function isJobId(id: unknown): id is string {
  return typeof id === 'string' && /^[1-9]\d{0,18}$/.test(id) && BigInt(id) <= 9_223_372_036_854_775_807n;
}

export function wakeChannel(schema: string): string {
  return `${schema}:wake`;
}
