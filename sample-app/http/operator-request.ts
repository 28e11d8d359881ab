import { BadRequestException } from '@nestjs/common';
import type { OperatorNote } from '../../lib/index.js';

/** `job_events.actor` holds at most 200 characters. */
const ACTOR_MAX = 200;

/**
 * Who asks and why, for the job's history. The reason comes from the body (`{ "reason": "…" }`);
 * the actor from the `x-actor` header here, from your authentication in a real admin UI
 * (`req.user.email`): never let a client claim to be someone else in an audit trail.
 */
export function operatorNote(body: unknown, actor: string | undefined): OperatorNote {
  const fields = bodyObject(body);
  if (fields.reason !== undefined && typeof fields.reason !== 'string') throw new BadRequestException('"reason" must be a string.');
  if (actor !== undefined && (actor.length === 0 || actor.length > ACTOR_MAX)) {
    throw new BadRequestException(`The x-actor header must have 1-${ACTOR_MAX} characters.`);
  }
  return { actor, reason: fields.reason };
}

/** The body's fields; an absent body is an empty one (every operator field is optional). */
export function bodyObject(body: unknown): Record<string, unknown> {
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body)) throw new BadRequestException('The body must be a JSON object.');
  return body as Record<string, unknown>;
}

/** A single query parameter (`?queue=a&queue=b` is refused rather than half-used). */
export function queryString(query: Record<string, unknown>, name: string): string | undefined {
  const value = query[name];
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string') throw new BadRequestException(`Give "${name}" once, as a string.`);
  return value;
}

/** A number from the query or the body; its range is the queue's to check (InvalidOptionError → 400). */
export function optionalNumber(value: unknown, name: string): number | undefined {
  if (value === undefined || value === '') return undefined;
  const n = typeof value === 'string' ? Number(value) : value;
  if (typeof n !== 'number' || Number.isNaN(n)) throw new BadRequestException(`"${name}" must be a number.`);
  return n;
}
