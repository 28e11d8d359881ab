import { describe } from './config.js';
import type { Queryable } from './db.js';
import { InvalidJobError } from './errors.js';
import { isQueueName } from './identifiers.js';
import type { EnqueueRow, Store } from './store/index.js';
import { captureTraceContext } from './tracing.js';

export interface EnqueueOptions {
  /** Higher runs first among due jobs, from -1000 to 1000 (default 0). A preference, not FIFO. */
  priority?: number;
  /** Not before this time. */
  runAt?: Date;
  /** Not before this many milliseconds from now (database time). */
  delayMs?: number;
  /** Overrides the handler's max attempts for this job. */
  maxAttempts?: number;
  /** Overrides the handler's maximum runtime per attempt for this job. */
  maxRuntimeMs?: number;
  /**
   * Jobs of one key (per queue) run one at a time, in enqueue order: a job is claimable only once
   * every earlier job of its key has succeeded or been cancelled. 1-256 characters.
   */
  orderingKey?: string;
}

export interface EnqueueCallOptions {
  /**
   * Enqueue on this client (inside the caller's transaction): the job exists, and workers are
   * woken, only if that transaction commits.
   */
  client?: Queryable;
}

export interface JobToEnqueue<T = unknown> {
  queue: string;
  payload: T;
  options?: EnqueueOptions;
}

/** The largest payload accepted by default: 256 KiB of JSON text. */
export const MAX_PAYLOAD_BYTES_DEFAULT = 256 * 1024;

const PRIORITY_MIN = -1000;
const PRIORITY_MAX = 1000;
const INT32_MAX = 2_147_483_647;

export interface ProducerDeps {
  readonly db: Queryable;
  readonly store: Store;
  readonly channel: string;
  readonly maxPayloadBytes: number;
  /** Payload of the NOTIFY that wakes schedulers. */
  readonly schedulerTopic: string;
  /**
   * Whether a queue is declared; reads on `db` when it must look (a caller's transaction: asking
   * the pool for a second connection while the caller holds one can wait forever).
   */
  readonly isKnownQueue: (queue: string, db: Queryable) => Promise<boolean>;
}

/**
 * Enqueue: validates everything before any SQL runs (a bad job is an error for its producer,
 * never a row that poisons a worker), then inserts and wakes workers in one statement.
 */
export class Producer {
  constructor(private readonly deps: ProducerDeps) {}

  async enqueueMany(jobs: readonly JobToEnqueue[], call: EnqueueCallOptions = {}): Promise<string[]> {
    if (!Array.isArray(jobs)) throw new InvalidJobError('INVALID_JOB_OPTION', 'enqueueMany expects an array of { queue, payload, options }.');
    if (jobs.length === 0) return [];
    const rows: EnqueueRow[] = [];
    for (const [index, job] of jobs.entries()) rows.push(this.toRow(job, jobs.length > 1 ? `jobs[${index}]` : 'job'));
    for (const queue of new Set(rows.map((r) => r.q))) {
      if (!(await this.deps.isKnownQueue(queue, call.client ?? this.deps.db))) {
        throw new InvalidJobError(
          'UNKNOWN_QUEUE',
          `Queue "${queue}" is not declared. Check the name, or declare it (a handler for it declares it when its worker starts; producers can declare it with declareQueues()). Nothing was enqueued.`,
        );
      }
    }
    return this.deps.store.enqueue(call.client ?? this.deps.db, { jobs: rows, channel: this.deps.channel, schedulerTopic: this.deps.schedulerTopic });
  }

  private toRow(job: JobToEnqueue, where: string): EnqueueRow {
    if (job === null || typeof job !== 'object') {
      throw new InvalidJobError('INVALID_JOB_OPTION', `${where} must be an object { queue, payload, options }, not ${describe(job)}.`);
    }
    const { queue, payload, options = {} } = job;
    if (!isQueueName(queue)) {
      throw new InvalidJobError(
        'INVALID_QUEUE_NAME',
        `${where}: queue name ${describe(queue)} is not valid. Use 1-128 characters: letters, digits, "_", ".", ":" or "-", starting with a letter or digit.`,
      );
    }
    const json = serializePayload(payload, `${where} (queue "${queue}")`);
    const bytes = Buffer.byteLength(json);
    if (bytes > this.deps.maxPayloadBytes) {
      throw new InvalidJobError(
        'PAYLOAD_TOO_LARGE',
        `${where} (queue "${queue}"): the payload is ${bytes} bytes of JSON, over the limit of ${this.deps.maxPayloadBytes}. Store large data elsewhere (a table, an object store) and enqueue a reference to it.`,
      );
    }
    if (options === null || typeof options !== 'object') {
      throw new InvalidJobError('INVALID_JOB_OPTION', `${where}: options must be an object, not ${describe(options)}.`);
    }
    const { priority = 0, runAt, delayMs, maxAttempts, maxRuntimeMs, orderingKey } = options;
    const bad = (option: string, value: unknown, expected: string) =>
      new InvalidJobError('INVALID_JOB_OPTION', `${where}: option "${option}" is ${describe(value)}; it must be ${expected}. Nothing was enqueued.`);
    if (!Number.isInteger(priority) || priority < PRIORITY_MIN || priority > PRIORITY_MAX) {
      throw bad('priority', priority, `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`);
    }
    if (runAt !== undefined && !(runAt instanceof Date && Number.isFinite(runAt.getTime()))) throw bad('runAt', runAt, 'a valid Date');
    if (delayMs !== undefined && !(typeof delayMs === 'number' && Number.isFinite(delayMs) && delayMs >= 0 && delayMs <= Number.MAX_SAFE_INTEGER)) {
      throw bad('delayMs', delayMs, 'a finite number of milliseconds >= 0');
    }
    if (runAt !== undefined && delayMs !== undefined) throw bad('delayMs', delayMs, 'omitted when runAt is given (pick one)');
    if (maxAttempts !== undefined && !(Number.isInteger(maxAttempts) && maxAttempts >= 1 && maxAttempts <= INT32_MAX)) {
      throw bad('maxAttempts', maxAttempts, 'an integer >= 1');
    }
    if (maxRuntimeMs !== undefined && !(Number.isInteger(maxRuntimeMs) && maxRuntimeMs >= 1 && maxRuntimeMs <= INT32_MAX)) {
      throw bad('maxRuntimeMs', maxRuntimeMs, 'an integer number of milliseconds >= 1');
    }
    if (orderingKey !== undefined && !(typeof orderingKey === 'string' && orderingKey.length >= 1 && orderingKey.length <= 256)) {
      throw bad('orderingKey', orderingKey, 'a string of 1-256 characters');
    }
    return {
      q: queue,
      json,
      pr: priority,
      at: runAt?.toISOString() ?? null,
      d: delayMs === undefined ? null : Math.round(delayMs),
      ma: maxAttempts ?? null,
      mr: maxRuntimeMs ?? null,
      tc: captureTraceContext(),
      k: orderingKey ?? null,
    };
  }
}

/**
 * JSON.stringify silently turns NaN into null and drops functions, and throws a bare TypeError on
 * BigInt and cycles. A job payload must survive the round trip, so those are errors here, with the
 * path of the offending value.
 */
export function serializePayload(payload: unknown, where: string): string {
  const fail = (path: string, problem: string) =>
    new InvalidJobError('PAYLOAD_NOT_JSON', `${where}: the payload is not JSON: ${problem} at ${path}. Convert it to JSON-safe values (strings, numbers, booleans, null, arrays, plain objects). Nothing was enqueued.`);
  const stack: unknown[] = [];
  const visit = (value: unknown, path: string): void => {
    switch (typeof value) {
      case 'string':
      case 'boolean':
        return;
      case 'number':
        if (!Number.isFinite(value)) throw fail(path, `${value} is not a finite number`);
        return;
      case 'bigint':
        throw fail(path, 'a BigInt (use a string or number)');
      case 'undefined':
        if (path === '$') throw fail(path, 'undefined');
        return;
      case 'function':
      case 'symbol':
        throw fail(path, `a ${typeof value}`);
    }
    if (value === null) return;
    if (stack.includes(value)) throw fail(path, 'a cycle (an object that contains itself)');
    if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return; // Date and friends
    if (value instanceof Map || value instanceof Set) throw fail(path, `a ${value.constructor.name} (use an array or a plain object)`);
    stack.push(value);
    if (Array.isArray(value)) value.forEach((item, i) => visit(item, `${path}[${i}]`));
    else for (const [key, item] of Object.entries(value as object)) visit(item, `${path}.${key}`);
    stack.pop();
  };
  visit(payload, '$');
  return JSON.stringify(payload);
}
