import type { FlowStats } from './types.js';
import type { FinishedJobStatus, JobStatus, LiveJobStatus } from './types.js';

/** The records the engine's calls return (the store maps rows to them). */

/** Who asks for an operator's action, and why: recorded in the job's history. */
export interface OperatorNote {
  actor?: string;
  reason?: string;
}

export interface ReplayOutcome {
  id: string;
  replayed: boolean;
  /** The job's status now (`pending` when replayed; undefined when there is no such job). */
  status: JobStatus | undefined;
}

export interface DeadJobPage {
  jobs: DeadJobSummary[];
  /** Pass as `cursor` for the next page; undefined on the last page. */
  nextCursor: string | undefined;
}

export interface DeadJobSummary {
  id: string;
  queue: string;
  priority: number;
  attemptCount: number;
  maxAttempts: number | null;
  lastErrorCode: string | null;
  lastErrorMessage: string | null;
  leaseToken: string;
  createdAt: Date;
  finishedAt: Date;
}

/** What `stats()` counts per queue: live statuses exactly, history over a recent window. */
export type QueueCounts = Record<LiveJobStatus, number> & {
  /**
   * Jobs that finished within the last `EngineStats.recentWindowMs`, per status: throughput, not
   * retention (what is kept longer is never counted, so the read does not grow with it).
   */
  recent: Record<FinishedJobStatus, number>;
};

export interface QueueStats {
  queue: string;
  paused: boolean;
  pausedAt: Date | null;
  /** Jobs per live status, exactly (0 when none), and the recently finished ones. */
  counts: QueueCounts;
  /** Age of the oldest claimable (pending) job: alert on this, not on counts. */
  oldestClaimableAgeMs: number | null;
  oldestDeadAgeMs: number | null;
  /** Running jobs whose lease ends within `nearExpiryMs`. */
  runningNearExpiry: number;
  /** Ordering keys held by a dead job: their later jobs wait until it is replayed or discarded. */
  blockedKeys: number;
  /** Flow parents of this queue held by a dead child until it is replayed or discarded (docs/flows.md). */
  blockedFlows: number;
  /** This process's handler slots for the queue (busy / total), when it handles it. */
  slots: { busy: number; total: number } | undefined;
  /** Flow control, when the queue has it on (limits, fairness, group settings): what it holds back. */
  flow: FlowStats | undefined;
}

/** What this process knows of itself, without asking the database (`processStats()`). */
export interface ProcessStats {
  at: Date;
  /**
   * The LISTEN connection. `listening` only once it has heard its own probe NOTIFY (sent through
   * the pool) since it last connected; `downForMs` counts from the drop, or from the probe it missed.
   */
  listener: { listening: boolean; downForMs: number };
  pool: { total: number; idle: number; waiting: number };
  /** The handler slots of each queue this process handles (the same figures as `QueueStats.slots`). */
  workers: { queue: string; busy: number; total: number }[];
}

/** `stats()`: this process's figures and the database's snapshot. */
export interface EngineStats extends ProcessStats {
  /** The window of `counts.recent`, in ms (the `recentWindowMs` option of `stats()`). */
  recentWindowMs: number;
  queues: QueueStats[];
  database: { connections: number; lockWaits: number };
  /** Recurring jobs (docs/recurring-jobs.md): per queue, and the latest schedules. */
  schedules: ScheduleStats;
}

/** A recurring job's schedule, as `schedules.list()` and `schedules.get()` return it. */
export interface ScheduleRecord {
  name: string;
  queue: string;
  /** 'code': declared by `@Recurring` (or `PgQueue.recurring`), kept by deploys; 'runtime': `schedules.upsert`, never touched by code. */
  source: 'code' | 'runtime';
  cron: string;
  tz: string;
  payload: unknown;
  priority: number;
  maxAttempts: number | null;
  maxRuntimeMs: number | null;
  group: string | null;
  /** What ticks missed while every process was down become: `latest` runs the latest once, `all` each, `none` none. */
  missed: 'latest' | 'all' | 'none';
  /** A tick handled later than this after it fell due is missed. */
  missedAfterMs: number;
  /** `missed: 'all'`: at most this many missed ticks run (the latest). */
  maxMissedRuns: number;
  /** false (default): a tick is skipped while the previous tick's job is unfinished (scheduled, pending or running). */
  overlap: boolean;
  /** A code schedule's definition hash (what deploys compare); null for a runtime schedule. */
  definitionHash: string | null;
  /** The next tick not handled yet; null when the pattern has none left. */
  nextTickAt: Date | null;
  /** The last tick handled (run or skipped). */
  lastTickAt: Date | null;
  /** The job of the last tick that ran. */
  lastJobId: string | null;
  /** Every tick so far: run (a job), missed (dropped by the missed policy), skipped (overlap). */
  ticks: { run: number; missed: number; skipped: number };
  paused: boolean;
  pausedAt: Date | null;
  /** 'operator': `schedules.pause()`; 'removed': the code that declared it no longer does. */
  pausedReason: 'operator' | 'removed' | null;
  /** How long its next tick has been due without being handled (0 when not due, or paused). */
  lateMs: number;
  createdAt: Date;
  updatedAt: Date;
}

/** The schedules of one queue, in `stats().schedules.queues`. */
export interface ScheduleQueueStats {
  queue: string;
  active: number;
  paused: number;
  /** The lateness of its most late active schedule (0: none is late). */
  maxLateMs: number;
  /** The soonest next tick of its active schedules. */
  nextTickAt: Date | null;
  lastTickAt: Date | null;
  /** The sums of its schedules' tick counts (durable, across every process). */
  ticks: { run: number; missed: number; skipped: number };
}

/** A schedule whose next tick is late (due and not handled). */
export interface LateSchedule {
  name: string;
  queue: string;
  nextTickAt: Date;
  lateMs: number;
}

export interface ScheduleStats {
  queues: ScheduleQueueStats[];
  /** The most late active schedules, at most 10, late by more than a second. */
  late: LateSchedule[];
}

export interface JobRecord<T = unknown> {
  id: string;
  queue: string;
  payload: T;
  status: JobStatus;
  priority: number;
  /** When it is (or was last) due; null while a flow parent waits for its children. */
  availableAt: Date | null;
  attemptCount: number;
  maxAttempts: number | null;
  leaseOwner: string | null;
  leaseToken: string;
  leaseExpiresAt: Date | null;
  deadlineAt: Date | null;
  claimedAt: Date | null;
  heartbeatAt: Date | null;
  releaseCount: number;
  lastErrorCode: string | null;
  lastErrorMessage: string | null;
  createdAt: Date;
  finishedAt: Date | null;
  /** Its group (flow control), or null. */
  group: string | null;
  /** In a flow: the parent that waits for it, or null. */
  parentId: string | null;
  /** A flow parent still waiting for its children. */
  awaitingChildren: boolean;
}

export interface JobEventRecord {
  id: string;
  at: Date;
  kind: string;
  fromStatus: JobStatus | null;
  toStatus: JobStatus | null;
  attempt: number | null;
  leaseToken: string | null;
  /** The process, for a worker's transitions. */
  worker: string | null;
  /** Who asked, for an operator's transitions (replay, cancel, discard). */
  actor: string | null;
  errorCode: string | null;
  message: string | null;
  /** In a flow parent's history: the child this event happened to (its deaths, discards, replays). */
  childId?: string;
}

/** A job as a listing shows it (`listJobs`): no payload, the error message cut to 200 characters. */
export interface JobSummary {
  id: string;
  status: JobStatus;
  priority: number;
  attemptCount: number;
  maxAttempts: number | null;
  lastErrorCode: string | null;
  lastErrorMessage: string | null;
  orderingKey: string | null;
  leaseOwner: string | null;
  leaseExpiresAt: Date | null;
  /** null while a flow parent waits for its children. */
  availableAt: Date | null;
  createdAt: Date;
  finishedAt: Date | null;
}

export interface JobPage {
  jobs: JobSummary[];
  /** Pass as `cursor` for the next page; undefined on the last page. */
  nextCursor: string | undefined;
  /**
   * The page walked as far as one page may (`walked` entries of the status's index) before it was
   * full: a short page that is not the last (a rare filter, or a quiet queue beside busy ones).
   */
  walkedOut: boolean;
}

/** A queue's dead jobs of one error code (`deadGroups`). */
export interface DeadErrorGroup {
  /** null: jobs that died without a code. */
  errorCode: string | null;
  count: number;
  oldestAt: Date;
  newestAt: Date;
  /** The newest one's message (cut to 300 characters); null for jobs without a code. */
  lastMessage: string | null;
}

/** One bucket of the throughput read, as the store returns it (`throughput` aggregates them). */
export interface ThroughputBucket {
  status: 'succeeded' | 'dead';
  queue: string;
  /** 0: the newest `bucketMs`. */
  bucket: number;
  count: number;
  oldestAgeMs: number;
}

/** Jobs that finished per time bucket over the last minutes, in every process (`throughput`). */
export interface Throughput {
  at: Date;
  windowMs: number;
  bucketMs: number;
  /** Per queue that finished a job in the window, oldest bucket first (the last is the newest `bucketMs`). */
  queues: { queue: string; succeeded: number[]; dead: number[] }[];
  /** Every queue together, in the same buckets. */
  total: { succeeded: number[]; dead: number[] };
  /**
   * null when every job that finished in the window was counted. Otherwise the read hit its cap
   * (`maxRows` per status) and the counts are complete only for the newest `completeForMs`.
   */
  completeForMs: number | null;
}

/** One pause or resume of a queue, from its audit trail (`queueHistory`). */
export interface QueueAuditRecord {
  id: string;
  queue: string;
  at: Date;
  kind: 'paused' | 'resumed';
  /** Whether the queue was paused before the call: a pause of a paused queue changed nothing. */
  wasPaused: boolean;
  /** Who asked (`{ actor }` of pause/resume), and why. */
  actor: string | null;
  reason: string | null;
}

export interface JobEffectRecord {
  name: string;
  idempotencyKey: string;
  /** 'started' without 'confirmed' is an uncertain outcome: reconciled or retried by the next attempt. */
  status: 'started' | 'confirmed';
  result: unknown;
  /** false: the effect happened but its result could not be stored (`result` is null); it is never called again. */
  resultStored: boolean;
  /** Calls (or reconciliations) started for this effect, over all attempts. */
  attempts: number;
  leaseToken: string;
  startedAt: Date;
  confirmedAt: Date | null;
}
