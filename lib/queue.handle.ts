import {
  JobStateError,
  type EnqueueCallOptions,
  type EnqueuedIds,
  type EnqueueOptions,
  type EnqueueResult,
  type KeyedEnqueueOptions,
  type DeduplicationOptions,
  type GroupLimits,
  type GroupLimitsInput,
  type JobDefinition,
  type JobRecord,
  type OperatorNote,
  type PgQueue,
  type QueueLimits,
  type QueueLimitsInput,
  type QueueStats,
} from './engine/index.js';
import { QUEUE_NOT_DECLARED_YET } from './pg-queue.messages.js';

/** What `registerQueue` takes: the queue's name, and enqueue options every job of it gets unless a call says otherwise. */
export interface RegisterQueueOptions {
  /** The queue's name; with `job`, it may be left out (the definition's queue). */
  name?: string;
  /** A job definition (`defineJob`): the handle validates each payload with its schema and stores its version. */
  job?: JobDefinition;
  /**
   * Enqueue options applied to every job of this handle (a call's own options win, field by field).
   * Not `unique` or `debounce`: a key belongs to one job, so it is given per call.
   */
  defaults?: EnqueueOptions;
}

/** The injection token of the queue handle `name` (what `@InjectQueue(name)` injects). */
export function getQueueToken(name: string): string {
  return `PgQueue:queue:${name}`;
}

/** One job of `Queue.enqueueMany`: a payload, with options of its own or not. */
export type QueueJobToEnqueue<T, I = T> = { payload: I; options?: EnqueueOptions<T> & DeduplicationOptions<T> };

/**
 * One queue, bound: `QueueService`'s verbs (each one call into the engine, as theirs are) with the queue's name filled in and its `defaults`
 * applied, typed by the payload. Registered per feature module with
 * `PgQueueModule.registerQueue({ name: 'emails' })` and injected with `@InjectQueue('emails')`:
 *
 * ```ts
 * constructor(@InjectQueue('emails') private readonly emails: Queue<WelcomeEmail>) {}
 * await this.emails.enqueue({ to: 'ada@example.com' }, { delayMs: 60_000 });
 * ```
 *
 * `T` is the payload as stored and read back (`get`); `I` what `enqueue` takes, the same unless
 * the handle's definition has a schema that transforms: `Queue<z.output<S>, z.input<S>>`.
 *
 * @publicApi
 */
export class Queue<T = unknown, I = T> {
  constructor(
    /** The queue's name. */
    readonly name: string,
    private readonly engine: PgQueue,
    /** Enqueue options every job of this handle gets unless a call says otherwise. */
    readonly defaults: Readonly<EnqueueOptions> = {},
    /** The job definition of the queue's jobs, if it was registered with one. */
    readonly definition?: JobDefinition<T, I>,
  ) {}

  private get target(): string | JobDefinition<T, I> {
    return this.definition ?? this.name;
  }

  /**
   * Adds one job (see `QueueService.enqueue`): the handle's defaults, then `options`. With `unique`
   * or `debounce`, resolves to `{ id, deduplicated }`.
   */
  enqueue(payload: I, options: KeyedEnqueueOptions<T> & EnqueueCallOptions): Promise<EnqueueResult>;
  enqueue(payload: I, options?: EnqueueOptions<T> & EnqueueCallOptions): Promise<string>;
  enqueue(payload: I, options?: EnqueueOptions<T> & DeduplicationOptions<T> & EnqueueCallOptions): Promise<string | EnqueueResult>;
  enqueue(payload: I, options?: EnqueueOptions<T> & DeduplicationOptions<T> & EnqueueCallOptions): Promise<string | EnqueueResult> {
    return this.engine.enqueue<T, I>(this.target, payload, { ...this.defaults, ...options });
  }

  /** Adds several jobs, all or none; ids in input order, with `deduplicated[i]` beside them (see `QueueService.enqueueMany`). */
  enqueueMany(jobs: readonly QueueJobToEnqueue<T, I>[], options?: EnqueueCallOptions): Promise<EnqueuedIds> {
    return this.engine.enqueueMany(
      jobs.map((job) => ({ queue: this.target, payload: job.payload, options: { ...this.defaults, ...job.options } })),
      options,
    );
  }

  /** The job's record, or `undefined` when there is none in this queue. */
  async get(id: string): Promise<JobRecord<T> | undefined> {
    const job = await this.engine.getJob<T>(id);
    return job?.queue === this.name ? job : undefined;
  }

  /** This queue's flow control for every process (see `QueueService.setLimits`). */
  setLimits(limits: QueueLimitsInput): Promise<QueueLimits> {
    return this.engine.setLimits(this.name, limits);
  }

  getLimits(): Promise<QueueLimits> {
    return this.engine.getLimits(this.name);
  }

  /** A group's own settings in this queue (see `QueueService.setGroupLimits`). */
  setGroupLimits(group: string, limits: GroupLimitsInput): Promise<GroupLimits> {
    return this.engine.setGroupLimits(this.name, group, limits);
  }

  /** Stops claims of this queue in every process; running jobs finish. `{ actor, reason }` go to its audit trail. */
  pause(note: OperatorNote = {}): Promise<void> {
    return this.engine.pauseQueue(this.name, note);
  }

  /** Lets every process claim this queue again. */
  resume(note: OperatorNote = {}): Promise<void> {
    return this.engine.resumeQueue(this.name, note);
  }

  /** This queue's figures of `QueueService.stats()` (counts, oldest claimable age, paused, slots). */
  async stats(options: Parameters<PgQueue['stats']>[0] = {}): Promise<QueueStats> {
    const { queues } = await this.engine.stats(options);
    const found = queues.find((q) => q.queue === this.name);
    // Registered queues are declared at bootstrap; before it (or after a drop) there is no row.
    if (!found) throw new JobStateError('QUEUE_NOT_FOUND', QUEUE_NOT_DECLARED_YET(this.name));
    return found;
  }
}
