import { InvalidOptionError, InvalidPayloadError, PermanentJobError, RetryableJobError } from './errors.js';
import { isQueueName } from './identifiers.js';
import { INVALID_PAYLOAD, JOB_VERSION_TOO_NEW, JOB_VERSION_UNSUPPORTED, QUEUE_NAME_FIX, QUEUE_NAME_INVALID } from './messages.js';

/**
 * The Standard Schema interface (https://standardschema.dev), as much of it as the queue reads:
 * zod, valibot, arktype and the others implement it, so none of them is a dependency. Written out
 * here, as the standard intends, rather than imported.
 */
export interface StandardSchema<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

export type StandardResult<Output> = { readonly value: Output; readonly issues?: undefined } | { readonly issues: readonly StandardIssue[] };

export interface StandardIssue {
  readonly message: string;
  readonly path?: readonly (PropertyKey | { readonly key: PropertyKey })[] | undefined;
}

/** What a schema's validation outputs: the payload a handler gets (`Job<T>`), and what is stored. */
export type SchemaOutput<S> = S extends StandardSchema<unknown, infer Output> ? Output : never;

/**
 * What a schema accepts: the payload a producer gives `enqueue` (Standard Schema's `InferInput`).
 * It differs from the output where the schema transforms (`z.string().transform(…)`) or fills
 * defaults (`z.number().default(3)`: optional in, present out).
 */
export type SchemaInput<S> = S extends StandardSchema<infer Input, unknown> ? Input : never;

/**
 * A job's definition, shared by producer and handler: its queue, the payload's types, optionally a
 * validator, and the version of the payload's shape (stored with every job enqueued through it).
 * `T` is the payload the handler gets (the schema's output, what is stored), `I` what `enqueue`
 * takes (the schema's input); without a schema they are one type.
 */
export interface JobDefinition<T = unknown, I = T> {
  readonly queue: string;
  readonly schema: StandardSchema<I, T> | undefined;
  /** The payload shape's version, from 1. */
  readonly version: number;
  /** Types only: the payload type handlers get (never set). */
  readonly payloadType?: T;
  /** Types only: the payload type producers give (never set). */
  readonly inputType?: I;
}

/** Options of `defineJob`. */
export interface DefineJobOptions<S> {
  /** Any Standard Schema validator (zod, valibot, …), sync or async. */
  schema?: S;
  /** The payload shape's version (default 1): raise it when the shape changes, and give the handler an upcaster. */
  version?: number;
}

/**
 * Defines a job once, for producer and handler:
 *
 * ```ts
 * export const WelcomeEmail = defineJob('emails', { schema: z.object({ to: z.email() }), version: 2 });
 * await queue.enqueue(WelcomeEmail, { to: 'ada@example.com' }); // validated, typed
 * ```
 *
 * With a schema, `enqueue` takes the schema's input type and the handler's `Job<T>` has its output
 * type (they differ where it transforms or fills defaults). Enqueue validates the payload and
 * stores the validator's output (a refusal is
 * `InvalidJobError` `INVALID_PAYLOAD`, nothing written); the handler's side validates again before
 * the handler runs, after upcasting an older version (a mismatch makes the job dead with
 * `INVALID_PAYLOAD`).
 */
export function defineJob<S extends StandardSchema>(queue: string, options: DefineJobOptions<S> & { schema: S }): JobDefinition<SchemaOutput<S>, SchemaInput<S>>;
export function defineJob<T>(queue: string, options?: DefineJobOptions<never>): JobDefinition<T>;
export function defineJob(queue: string, options: DefineJobOptions<StandardSchema> = {}): JobDefinition {
  if (!isQueueName(queue)) throw new InvalidOptionError('defineJob queue', QUEUE_NAME_INVALID(queue), QUEUE_NAME_FIX());
  const { schema, version = 1 } = options;
  if (schema !== undefined && typeof schema?.['~standard']?.validate !== 'function') {
    throw new InvalidOptionError(`defineJob('${queue}').schema`, 'it is not a Standard Schema validator (no ~standard.validate)', 'Pass a zod, valibot or other Standard Schema object, or leave schema out.');
  }
  if (!Number.isInteger(version) || version < 1 || version > 2_147_483_647) {
    throw new InvalidOptionError(`defineJob('${queue}').version`, `${String(version)} is not a whole number from 1`, 'Use 1 for the first shape, and raise it by one when the shape changes.');
  }
  return Object.freeze({ queue, schema, version });
}

export function isJobDefinition(value: unknown): value is JobDefinition {
  return typeof value === 'object' && value !== null && typeof (value as JobDefinition).queue === 'string' && typeof (value as JobDefinition).version === 'number';
}

/** Where an issue is: `payload.user.email`. */
function pathOf(issue: StandardIssue | undefined): string {
  return ['payload', ...(issue?.path ?? []).map((part) => String(typeof part === 'object' ? part.key : part))].join('.');
}

/** The issues of a failed validation in a line: `payload.to: Invalid email; payload.n: Required`. */
function describeIssues(issues: readonly StandardIssue[]): string {
  return issues
    .slice(0, 5)
    .map((issue) => `${pathOf(issue)}: ${issue.message}`)
    .join('; ')
    .concat(issues.length > 5 ? `; and ${issues.length - 5} more` : '');
}

/** Runs the definition's validator: its output, or the issues. A validator that throws is a refusal too. */
async function validate<T>(definition: JobDefinition<T, unknown>, payload: unknown): Promise<{ ok: true; value: T } | { ok: false; why: string; path: string }> {
  if (!definition.schema) return { ok: true, value: payload as T };
  let result: StandardResult<T>;
  try {
    result = await definition.schema['~standard'].validate(payload);
  } catch (error) {
    return { ok: false, why: `the validator threw: ${error instanceof Error ? error.message : String(error)}`, path: 'payload' };
  }
  if (result.issues) return { ok: false, why: describeIssues(result.issues), path: pathOf(result.issues[0]) };
  return { ok: true, value: result.value };
}

/** At enqueue: the payload to store (the validator's output), or `InvalidPayloadError` (`INVALID_PAYLOAD`). */
export async function payloadToEnqueue<T>(definition: JobDefinition<T, unknown>, payload: unknown, where?: string): Promise<T> {
  const result = await validate(definition, payload);
  if (!result.ok) {
    const message = INVALID_PAYLOAD(definition.queue, definition.version, result.why);
    throw new InvalidPayloadError(result.path, 'does not match the schema', where ? `${where}: ${message} Nothing was enqueued.` : message);
  }
  return result.value;
}

/** Upcasters of a handler: `upcast[k]` turns a payload of version k into one of version k + 1. */
export type Upcasters = Readonly<Record<number, (payload: never) => unknown>>;

/**
 * Before the handler: a stored payload of `version` (NULL, from an enqueue without a definition,
 * counts as version 1) brought to the definition's version by the handler's upcasters, then
 * validated. A version with no path of upcasters to the current one is dead (`PermanentJobError`
 * `INVALID_PAYLOAD`: deploy an upcaster, then replay it); a newer version than this handler knows
 * (a producer deployed ahead of this worker) is retried with backoff, for a newer worker to take;
 * a payload the validator refuses is dead.
 */
export async function payloadForHandler<T>(definition: JobDefinition<T, unknown>, upcast: Upcasters, storedVersion: number | null, payload: unknown): Promise<T> {
  let version = storedVersion ?? 1;
  if (version > definition.version) throw new RetryableJobError(JOB_VERSION_TOO_NEW(definition.queue, version, definition.version), { code: 'JOB_VERSION_TOO_NEW' });
  let value = payload;
  while (version < definition.version) {
    const step = upcast[version];
    if (typeof step !== 'function') throw new PermanentJobError(JOB_VERSION_UNSUPPORTED(definition.queue, version, definition.version), { code: 'INVALID_PAYLOAD' });
    value = await step(value as never);
    version += 1;
  }
  const result = await validate(definition, value);
  if (!result.ok) throw new PermanentJobError(INVALID_PAYLOAD(definition.queue, definition.version, result.why), { code: 'INVALID_PAYLOAD' });
  return result.value;
}

/** Checks a handler's upcasters against its definition when it is registered: each key a version below the current one. */
export function checkUpcasters(where: string, definition: JobDefinition, upcast: unknown): Upcasters {
  if (upcast === undefined) return {};
  if (typeof upcast !== 'object' || upcast === null) throw new InvalidOptionError(`${where}.upcast`, 'it is not an object', 'Pass { [fromVersion]: (payload) => nextVersionPayload }.');
  for (const [key, fn] of Object.entries(upcast)) {
    const from = Number(key);
    if (!Number.isInteger(from) || from < 1 || from >= definition.version) {
      throw new InvalidOptionError(`${where}.upcast.${key}`, `version ${key} is not below the definition's version ${definition.version}`, 'Key each upcaster by the version it upgrades from (1 to version - 1).');
    }
    if (typeof fn !== 'function') throw new InvalidOptionError(`${where}.upcast.${key}`, 'it is not a function', 'Pass (payload) => the payload of the next version.');
  }
  return upcast as Upcasters;
}
