import { Inject, Injectable, Optional } from '@nestjs/common';
import type { Observable } from 'rxjs';
import {
  CLUSTER_EVENTS_OFF,
  CLUSTER_EVENTS_OFF_FIX,
  InvalidOptionError,
  PgQueue,
  type ClusterJobEvent,
  type DeadJobPage,
  type EngineStats,
  type EnqueueCallOptions,
  type EnqueuedIds,
  type EnqueueOptions,
  type EnqueueResult,
  type KeyedEnqueueOptions,
  type DeduplicationOptions,
  type JobEvent,
  type JobEventRecord,
  type FlowNode,
  type EnqueuedFlow,
  type ChildResult,
  type GroupLimits,
  type GroupLimitsInput,
  type GroupLimitsRecord,
  type QueueLimits,
  type QueueLimitsInput,
  type JobRecord,
  type JobDefinition,
  type JobToEnqueue,
  type OperatorNote,
  type QueueAuditRecord,
  type JobPage,
  type DeadErrorGroup,
  type Throughput,
  type JobEffectRecord,
  type ReplayOutcome,
  type ScheduleCalls,
} from './engine/index.js';
import { clusterEvents$, jobEvents$ } from './nest/job-events.js';
import { PG_QUEUE_ENGINE } from './pg-queue.constants.js';
import { PgQueueOrchestrator } from './nest/pg-queue.orchestrator.js';

/** Options of `QueueService.enqueue`: when and how the job runs, and on which connection. */
export type QueueEnqueueOptions<T = unknown> = EnqueueOptions<T> & EnqueueCallOptions;

// The operator calls take the engine's own parameter types, so the two can never drift apart.
/** Which dead jobs `listDead` returns: `{ queue?, errorCode?, limit? (default 50), cursor? }`. */
export type DeadJobFilter = NonNullable<Parameters<PgQueue['listDead']>[0]>;
/** Which dead jobs `replayDead` replays: `{ queue, errorCode?, limit? (default 100), actor?, reason? }`. */
export type ReplayDeadFilter = Parameters<PgQueue['replayDead']>[0];
/** Which dead jobs `purgeDead` deletes: `{ olderThan, queue?, batchSize?, actor?, reason? }`. */
export type PurgeDeadFilter = Parameters<PgQueue['purgeDead']>[0];
/** `{ actor?, reason?, delete? }`: `delete: true` removes the row instead of keeping it as `cancelled`. */
export type DiscardOptions = NonNullable<Parameters<PgQueue['discard']>[1]>;
/** `{ queue, status, errorCode?, limit? (default 50), cursor? }`: a page of `listJobs`. */
export type JobListFilter = Parameters<PgQueue['listJobs']>[0];
/** `{ windowMs? (default 15 min), bucketMs?, maxRows? }`: the `throughput` read. */
export type ThroughputOptions = NonNullable<Parameters<PgQueue['throughput']>[0]>;
/** `{ limit? (default 50), before? }`: a page of `queueHistory`. */
export type QueueHistoryOptions = NonNullable<Parameters<PgQueue['queueHistory']>[1]>;
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
  private clusterJobEvents$: Observable<ClusterJobEvent> | undefined;

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
   * `queue`, its schema validates the payload (typed by the schema's input: the handler gets its
   * output) and its version is stored. With `orderingKey`, jobs of one key run
   * one at a time, in enqueue order (a dead job holds its key until it is replayed or discarded).
   * With `unique` or `debounce` (docs/unique-jobs.md) it resolves to `{ id, deduplicated }`: no job is
   * added while another holds the key, and `id` is then that job's.
   */
  enqueue<T, I = T>(queue: string | JobDefinition<T, I>, payload: NoInfer<I>, options: KeyedEnqueueOptions<T> & EnqueueCallOptions): Promise<EnqueueResult>;
  enqueue<T, I = T>(queue: string | JobDefinition<T, I>, payload: NoInfer<I>, options?: EnqueueOptions<T> & EnqueueCallOptions): Promise<string>;
  enqueue<T, I = T>(queue: string | JobDefinition<T, I>, payload: NoInfer<I>, options?: QueueEnqueueOptions<T> & DeduplicationOptions<T>): Promise<string | EnqueueResult>;
  enqueue<T, I = T>(queue: string | JobDefinition<T, I>, payload: NoInfer<I>, options?: QueueEnqueueOptions<T> & DeduplicationOptions<T>): Promise<string | EnqueueResult> {
    return this.engine.enqueue<T, I>(queue, payload, options);
  }

  /**
   * Adds several jobs (all or none); ids are returned in input order, with `deduplicated[i]` beside
   * them (true where a job with `unique` or `debounce` was deduplicated: its id is the holder's).
   */
  enqueueMany<T = unknown, I = T>(jobs: readonly JobToEnqueue<T, I>[], options?: EnqueueCallOptions): Promise<EnqueuedIds> {
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
   * A page of a queue's jobs of one status (`pending`, `scheduled`, `running`, `succeeded`,
   * `cancelled`, `dead`), without payloads, optionally of one error code. Each page reads a bounded
   * part of the status's index: a short page with a `nextCursor` (`walkedOut`) is not the last.
   */
  listJobs(filter: JobListFilter): Promise<JobPage> {
    return this.engine.listJobs(filter);
  }

  /** A queue's dead jobs grouped by error code: count, oldest and newest death, the newest message. */
  deadGroups(queue: string, options: { limit?: number } = {}): Promise<DeadErrorGroup[]> {
    return this.engine.deadGroups(queue, options);
  }

  /**
   * Jobs that finished per time bucket over the last minutes (default 15), per queue and in total,
   * for every process: read from the table at a bounded cost (see `PgQueue.throughput`).
   */
  throughput(options: ThroughputOptions = {}): Promise<Throughput> {
    return this.engine.throughput(options);
  }

  /**
   * The job's effect records (`ctx.effect`): each effect's name, idempotency key, status, tries,
   * and its result.
   */
  effects(id: string): Promise<JobEffectRecord[]> {
    return this.engine.getJobEffects(id);
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

  /**
   * Adds a flow: a job and the jobs it waits for (`children`, which may have children too), in one
   * transaction (yours, with `client`). The job runs once every child has succeeded (or was
   * discarded) and reads their return values with `ctx.childResults()` (docs/flows.md).
   */
  enqueueFlow(flow: FlowNode, options: EnqueueCallOptions = {}): Promise<EnqueuedFlow> {
    return this.engine.enqueueFlow(flow, options);
  }

  /** A flow job's children, by id, a page at a time (default 100), with their states and results. */
  listChildren(id: string, page: { after?: string; limit?: number } = {}): Promise<ChildResult[]> {
    return this.engine.listChildren(id, page);
  }

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

  /**
   * Stops claims of `queue` in every process; running jobs finish. `{ actor, reason }` go to the
   * queue's audit trail (`queueHistory`). `QUEUE_NOT_FOUND` for an undeclared queue.
   */
  pause(queue: string, note: OperatorNote = {}): Promise<void> {
    return this.engine.pauseQueue(queue, note);
  }

  /** Lets every process claim `queue` again, and wakes its workers; recorded as `pause` is. */
  resume(queue: string, note: OperatorNote = {}): Promise<void> {
    return this.engine.resumeQueue(queue, note);
  }

  /**
   * The queue's pauses and resumes, newest first (who, why, and whether it was paused before), at
   * most `limit` (default 50); pass the last record's `id` as `before` for the next page.
   */
  queueHistory(queue: string, options: QueueHistoryOptions = {}): Promise<QueueAuditRecord[]> {
    return this.engine.queueHistory(queue, options);
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

  /**
   * The job events of every process on this database that publishes them (`events.crossProcess`
   * on), this one's included, each with the `origin` process's `workerId`: this process's as they
   * happen, the others' through NOTIFY. Best effort (see docs/module.md): lost while this
   * process's listener is down or when their process dies before its next flush, dropped (and
   * counted) when its buffer is full, in no order across processes. It completes when the module
   * shuts down. Throws `InvalidOptionError` naming `events.crossProcess` while it is off.
   */
  get clusterEvents$(): Observable<ClusterJobEvent> {
    if (this.engine.clusterEventTypes.length === 0) {
      throw new InvalidOptionError('events.crossProcess', CLUSTER_EVENTS_OFF('QueueService.clusterEvents$'), CLUSTER_EVENTS_OFF_FIX());
    }
    return (this.clusterJobEvents$ ??= clusterEvents$(this.engine));
  }
}
