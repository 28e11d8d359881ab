import { Inject, Injectable, Optional } from '@nestjs/common';
import type { Observable } from 'rxjs';
import {
  InvalidOptionError,
  PgQueue,
  type DeadJobPage,
  type EngineStats,
  type EnqueueCallOptions,
  type EnqueueOptions,
  type JobEvent,
  type JobEventRecord,
  type GroupLimits,
  type GroupLimitsInput,
  type GroupLimitsRecord,
  type QueueLimits,
  type QueueLimitsInput,
  type JobRecord,
  type JobDefinition,
  type JobToEnqueue,
  type OperatorNote,
  type ReplayOutcome,
  type ScheduleCalls,
} from './engine/index.js';
import { jobEvents$ } from './nest/job-events.js';
import { PG_QUEUE_ENGINE } from './pg-queue.constants.js';
import { PgQueueOrchestrator } from './nest/pg-queue.orchestrator.js';

/** Options of `QueueService.enqueue`: when and how the job runs, and on which connection. */
export type QueueEnqueueOptions = EnqueueOptions & EnqueueCallOptions;

// The operator calls take the engine's own parameter types, so the two can never drift apart.
/** Which dead jobs `listDead` returns: `{ queue?, errorCode?, limit? (default 50), cursor? }`. */
export type DeadJobFilter = NonNullable<Parameters<PgQueue['listDead']>[0]>;
/** Which dead jobs `replayDead` replays: `{ queue, errorCode?, limit? (default 100), actor?, reason? }`. */
export type ReplayDeadFilter = Parameters<PgQueue['replayDead']>[0];
/** Which dead jobs `purgeDead` deletes: `{ olderThan, queue?, batchSize?, actor?, reason? }`. */
export type PurgeDeadFilter = Parameters<PgQueue['purgeDead']>[0];
/** `{ actor?, reason?, delete? }`: `delete: true` removes the row instead of keeping it as `cancelled`. */
export type DiscardOptions = NonNullable<Parameters<PgQueue['discard']>[1]>;
/** `{ nearExpiryMs? }`: the window of `runningNearExpiry` (default 5000 ms). */
export type StatsOptions = NonNullable<Parameters<PgQueue['stats']>[0]>;

/**
 * Enqueue jobs, read them back, and operate the queue. Inject it anywhere once `PgQueueModule` is
 * imported. Every method is one call into the engine: there is one way to do each thing.
 *
 * Payload types are the caller's: share one type between the producer and the handler, and
 * `enqueue<T>` / `Job<T>` check both sides.
 *
 * ```ts
 * export interface SendEmail { to: string; template: string }
 * await queue.enqueue<SendEmail>('emails', { to, template: 'welcome' }, { priority: 5 });
 * // handler: @JobHandler('emails') send(job: Job<SendEmail>, ctx: JobContext) { … }
 * ```
 *
 * Operator calls (replay, cancel, discard, purge) take `{ actor, reason }`: both are written to the
 * job's history (or to `purges`), so an audit can tell who did what and why. Refusals throw
 * `JobStateError` with a code (`JOB_NOT_FOUND`, `JOB_NOT_DEAD`, `JOB_NOT_CANCELLABLE`,
 * `JOB_NOT_FINISHED`, `QUEUE_NOT_FOUND`); bad arguments throw `InvalidOptionError`.
 *
 * While the database cannot be reached, every method rejects with `DatabaseUnavailableError`
 * (`DATABASE_UNAVAILABLE`, the target named, the driver's error as `cause`); a statement that waited
 * out `statementTimeoutMs` (a transaction holding the job's row) rejects with `DatabaseTimeoutError`
 * (`DATABASE_TIMEOUT`). Never the driver's raw error.
 *
 * @publicApi
 */
@Injectable()
export class QueueService {
  private readonly jobEvents$: Observable<JobEvent>;

  constructor(
    @Inject(PG_QUEUE_ENGINE) private readonly engine: PgQueue,
    @Optional() private readonly orchestrator?: PgQueueOrchestrator,
  ) {
    this.jobEvents$ = jobEvents$(engine);
  }

  /**
   * Adds one job and returns its id. Everything is validated before any SQL runs: a bad job
   * throws `InvalidJobError` (unknown queue, payload not JSON or too large, bad option) and nothing
   * is written. With `client`, the job is written in the caller's transaction: it exists, and
   * workers are woken, only if that transaction commits. With a job definition (`defineJob`) as
   * `queue`, its schema validates the payload and its version is stored. With `orderingKey`, jobs of one key run
   * one at a time, in enqueue order (a dead job holds its key until it is replayed or discarded).
   */
  enqueue<T>(queue: string | JobDefinition<T>, payload: T, options?: QueueEnqueueOptions): Promise<string> {
    return this.engine.enqueue<T>(queue, payload, options);
  }

  /** Adds several jobs in one statement (all or none); ids are returned in input order. */
  enqueueMany<T = unknown>(jobs: readonly JobToEnqueue<T>[], options?: EnqueueCallOptions): Promise<string[]> {
    return this.engine.enqueueMany(jobs, options);
  }

  /** The job's current record, or `undefined` when there is no job with that id. */
  get<T = unknown>(id: string): Promise<JobRecord<T> | undefined> {
    return this.engine.getJob<T>(id);
  }

  /**
   * The job's audit trail, oldest first: every exceptional transition (retry scheduled, lease
   * expired, lost fence, dead, replayed, cancelled, discarded, released), with who asked and why
   * for an operator's. The happy path (claim, success) writes no rows.
   */
  history(id: string): Promise<JobEventRecord[]> {
    return this.engine.getJobEvents(id);
  }

  /**
   * Declares queues so this process can enqueue to them before any worker has started. The
   * `queues` option of the module does this at start; a queue with a handler is declared anyway.
   */
  declareQueues(queues: readonly string[]): Promise<void> {
    return this.engine.declareQueues(queues);
  }

  /**
   * Dead jobs, oldest death first, of one queue or all, optionally only those that died with
   * `errorCode`, a page at a time: pass the page's `nextCursor` as `cursor` for the next one
   * (`undefined` on the last page).
   */
  listDead(filter: DeadJobFilter = {}): Promise<DeadJobPage> {
    return this.engine.listDead(filter);
  }

  /**
   * Replays a dead job in place: the same id (and idempotency key) and history, a fresh attempt
   * budget; a `replayed` row records who and why. Throws `JobStateError` `JOB_NOT_DEAD` for a job
   * in any other state, `JOB_NOT_FOUND` when there is none.
   */
  replay(id: string, note: OperatorNote = {}): Promise<void> {
    return this.engine.replay(id, note);
  }

  /** Replays dead jobs by id (at most 1,000 per call), reporting each one's outcome instead of throwing. */
  replayMany(ids: readonly string[], note: OperatorNote = {}): Promise<ReplayOutcome[]> {
    return this.engine.replayMany(ids, note);
  }

  /**
   * Replays the oldest dead jobs of a queue, optionally only those that died with `errorCode`, at
   * most `limit` (default 100) per call. Fix the cause first.
   */
  replayDead(filter: ReplayDeadFilter): Promise<ReplayOutcome[]> {
    return this.engine.replayDead(filter);
  }

  /**
   * Cancels a scheduled, pending or running job. A running job's handler is aborted (`ctx.signal`,
   * code `CANCELLED`) on whichever process runs it, and its late completion is refused. Throws
   * `JobStateError` `JOB_NOT_CANCELLABLE` for a finished job.
   */
  cancel(id: string, note: OperatorNote = {}): Promise<void> {
    return this.engine.cancel(id, note);
  }

  /**
   * Resolves a dead job without running it: it becomes `cancelled` and keeps its history (and
   * releases its ordering key). With `delete: true` the row and its history are deleted instead,
   * recorded in `purges` (any finished job can be deleted). Throws `JobStateError` `JOB_NOT_DEAD`
   * (or `JOB_NOT_FINISHED` with `delete`).
   */
  discard(id: string, options: DiscardOptions = {}): Promise<void> {
    return this.engine.discard(id, options);
  }

  /**
   * Deletes the dead jobs that died before `olderThan` (of one queue, or all) in bounded batches,
   * recording each batch's ids in `purges`; returns how many it deleted. The only way dead jobs
   * are ever removed: no timer does it.
   */
  purgeDead(filter: PurgeDeadFilter): Promise<number> {
    return this.engine.purgeDead(filter);
  }

  /** Stops claims of `queue` in every process; running jobs finish. `QUEUE_NOT_FOUND` for an undeclared queue. */
  /**
   * Sets a queue's flow control for every process: `globalConcurrency`, `groupConcurrency`,
   * `rateLimit` / `groupRateLimit` (`{ limit, windowMs }`), `groupFairness`. A field left out keeps
   * its value, `null` removes that limit (docs/flow-control.md).
   */
  setLimits(queue: string, limits: QueueLimitsInput): Promise<QueueLimits> {
    return this.engine.setLimits(queue, limits);
  }

  getLimits(queue: string): Promise<QueueLimits> {
    return this.engine.getLimits(queue);
  }

  /** A group's own settings in `queue` (`concurrency`, `weight`, `rateLimit`); `null` goes back to the queue's default. */
  setGroupLimits(queue: string, group: string, limits: GroupLimitsInput): Promise<GroupLimits> {
    return this.engine.setGroupLimits(queue, group, limits);
  }

  /** The groups of `queue` with settings of their own (or a throttle running), a page at a time. */
  listGroupLimits(queue: string, page: { after?: string; limit?: number } = {}): Promise<GroupLimitsRecord[]> {
    return this.engine.listGroupLimits(queue, page);
  }

  pause(queue: string): Promise<void> {
    return this.engine.pauseQueue(queue);
  }

  /** Lets every process claim `queue` again, and wakes its workers. */
  resume(queue: string): Promise<void> {
    return this.engine.resumeQueue(queue);
  }

  /**
   * A snapshot for dashboards and alerts: per queue, jobs per live status (scheduled, pending,
   * running, dead) and those that finished (succeeded, cancelled) within `recentWindowMs`
   * (default 60 s), the age of the oldest claimable and of the oldest dead job, running jobs near
   * lease expiry, ordering keys blocked by a dead job, paused or not, and this process's busy
   * slots; the listener, the pool and the database's connections and lock waits. Counts come from
   * the database (every process's jobs); retained history is never counted, so the read costs the
   * same however much of it is kept.
   */
  stats(options: StatsOptions = {}): Promise<EngineStats> {
    return this.engine.stats(options);
  }

  /**
   * Starts this process's workers: with `autoStart: false` they do not start with the application,
   * and this is when they do (after a warm-up, a leader election, a feature flag); after
   * `stopProcessing()` it starts them again. Does nothing when they are running. Throws
   * `InvalidOptionError` in a `processing: false` process (it has no workers).
   */
  startProcessing(): Promise<void> {
    return this.module('startProcessing').startProcessing();
  }

  /**
   * Stops this process's workers as shutdown does (no new claims; running handlers get
   * `shutdownTimeoutMs`, then are aborted and their jobs released), and keeps the rest: enqueue,
   * reads, operators' calls, maintenance.
   */
  stopProcessing(): Promise<void> {
    return this.module('stopProcessing').stopProcessing();
  }

  /**
   * Recurring jobs' schedules, as rows (docs/recurring-jobs.md): `upsert` and `remove` schedules
   * created at run time (per tenant: never touched by deploys), `list` and `get` every schedule with
   * its next and last tick and its run, missed and skipped counts, `pause` and `resume` any.
   * Code schedules are declared with `@Recurring`.
   */
  get schedules(): ScheduleCalls {
    return this.engine.schedules;
  }

  /** Whether this process's workers are running. */
  get processing(): boolean {
    return this.engine.processing;
  }

  private module(what: string): PgQueueOrchestrator {
    if (!this.orchestrator) throw new InvalidOptionError(`QueueService.${what}`, 'this QueueService was not created by PgQueueModule', 'Get QueueService from the application (app.get(QueueService)) or inject it.');
    return this.orchestrator;
  }

  /**
   * What happens to jobs in this process, as it happens: claimed, succeeded, failed (retry or
   * dead), lease lost (with the reason and the refused operation), released, reaped, heartbeat
   * failed. Never carries payloads. It completes when the module shuts down.
   */
  get events$(): Observable<JobEvent> {
    return this.jobEvents$;
  }
}
