import { describe } from './config.js';
import type { Queryable } from './db.js';
import { InvalidJobError } from './errors.js';
import { isQueueName } from './identifiers.js';
import { payloadJson } from './json.js';
import { isJobDefinition, payloadToEnqueue, type JobDefinition } from './job-definition.js';
import { JOB_NOT_AN_OBJECT, JOB_OPTION_INVALID, JOB_OPTIONS_NOT_AN_OBJECT, JOB_QUEUE_NAME_INVALID, JOBS_NOT_AN_ARRAY, QUEUE_NOT_DECLARED_FOR_ENQUEUE } from './messages.js';
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
  /**
   * The job's group (a tenant, an account), 1-256 characters: what `groupConcurrency`, group rate
   * limits and fairness between groups count by. Independent of `orderingKey`, and combinable.
   */
  group?: string;
}

export interface EnqueueCallOptions {
  /**
   * Enqueue on this client (inside the caller's transaction): the job exists, and workers are
   * woken, only if that transaction commits.
   */
  client?: Queryable;
}

/** One job of `enqueueMany`. `T`: a definition's payload type (its schema's output); `I`: what the payload is given as (its input). */
export interface JobToEnqueue<T = unknown, I = T> {
  /** The queue's name, or a job definition (`defineJob`): its queue, its schema validates the payload, its version is stored. */
  queue: string | JobDefinition<T, I>;
  payload: I;
  options?: EnqueueOptions;
}

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

  /** The largest payload it takes, in bytes of JSON (flows are checked against it too). */
  get maxPayloadBytes(): number {
    return this.deps.maxPayloadBytes;
  }

  async enqueueMany(jobs: readonly JobToEnqueue[], call: EnqueueCallOptions = {}): Promise<string[]> {
    if (!Array.isArray(jobs)) throw new InvalidJobError('INVALID_JOB_OPTION', JOBS_NOT_AN_ARRAY());
    if (jobs.length === 0) return [];
    const rows: EnqueueRow[] = [];
    for (const [index, job] of jobs.entries()) {
      const where = jobs.length > 1 ? `jobs[${index}]` : 'job';
      // A definition's schema may be async: every payload of the batch is validated before any row is built.
      const definition = job !== null && typeof job === 'object' && isJobDefinition(job.queue) ? job.queue : undefined;
      const payload = definition ? await payloadToEnqueue(definition, job.payload, where) : job?.payload;
      rows.push(this.toRow(job, where, definition ? { queue: definition.queue, payload, version: definition.version } : undefined));
    }
    for (const queue of new Set(rows.map((r) => r.q))) {
      if (!(await this.deps.isKnownQueue(queue, call.client ?? this.deps.db))) {
        throw new InvalidJobError('UNKNOWN_QUEUE', QUEUE_NOT_DECLARED_FOR_ENQUEUE(queue));
      }
    }
    return this.deps.store.enqueue(call.client ?? this.deps.db, { jobs: rows, channel: this.deps.channel, schedulerTopic: this.deps.schedulerTopic });
  }

  private toRow(job: JobToEnqueue, where: string, defined?: { queue: string; payload: unknown; version: number }): EnqueueRow {
    if (job === null || typeof job !== 'object') {
      throw new InvalidJobError('INVALID_JOB_OPTION', JOB_NOT_AN_OBJECT(where, describe(job)));
    }
    const { options = {} } = job;
    const queue = defined ? defined.queue : job.queue;
    const payload = defined ? defined.payload : job.payload;
    if (!isQueueName(queue)) {
      throw new InvalidJobError('INVALID_QUEUE_NAME', JOB_QUEUE_NAME_INVALID(where, describe(queue)));
    }
    const json = payloadJson(payload, `${where} (queue "${queue}")`, this.deps.maxPayloadBytes);
    if (options === null || typeof options !== 'object') {
      throw new InvalidJobError('INVALID_JOB_OPTION', JOB_OPTIONS_NOT_AN_OBJECT(where, describe(options)));
    }
    const { priority = 0, runAt, delayMs, maxAttempts, maxRuntimeMs, orderingKey, group } = options;
    const bad = (option: string, value: unknown, expected: string) =>
      new InvalidJobError('INVALID_JOB_OPTION', JOB_OPTION_INVALID(where, option, describe(value), expected));
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
    if (group !== undefined && !(typeof group === 'string' && group.length >= 1 && group.length <= 256)) {
      throw bad('group', group, 'a string of 1-256 characters');
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
      v: defined?.version ?? null,
      g: group ?? null,
    };
  }
}
