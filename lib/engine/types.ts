import type pg from 'pg';

/**
 * The job and handler types: a leaf of the engine's import graph (it imports no engine module), so every engine file can use them without joining a circle
 * (test/structure.spec.ts holds the line).
 */

/**
 * Anything that runs a query: a pool, a client, a caller's transaction (ctx.complete's `tx`, the
 * `client` of enqueue), or an adapter with `query(config)`.
 */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(config: pg.QueryConfig): Promise<pg.QueryResult<R>>;
}

/** States of a job. `scheduled` is pending work that is not due yet. */
export type JobStatus = 'scheduled' | 'pending' | 'running' | 'succeeded' | 'dead' | 'cancelled';

/**
 * The statuses `stats()` counts exactly: work not finished yet, and dead jobs (an unresolved
 * operational state, not history).
 */
export type LiveJobStatus = Exclude<JobStatus, FinishedJobStatus>;

/** Finished jobs that are history (kept for retention, or forever): counted only over a recent window. */
export type FinishedJobStatus = 'succeeded' | 'cancelled';

/** What a handler receives: one claimed attempt of a job. */
export interface Job<T = unknown> {
  /** PostgreSQL `bigint`, as a string. */
  readonly id: string;
  readonly queue: string;
  readonly payload: T;
  readonly priority: number;
  /** 1 on the first attempt; replays and shutdown releases give attempts back. */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** The fencing token of this claim: grows with every claim, never reset. */
  readonly leaseToken: string;
  /**
   * Stable across attempts and replays (`<schema>:<queue>:<id>`): pass it to every external system
   * that deduplicates (payment APIs, mail providers, webhooks), so a retried side effect happens once.
   */
  readonly idempotencyKey: string;
  /** The job's ordering key, if it was enqueued with one: jobs of one key run one at a time, in order. */
  readonly orderingKey: string | null;
  /** The job's group, if it was enqueued with one (see flow control: groups and their limits). */
  readonly group: string | null;
  /** In a flow (enqueueFlow): the parent that waits for this job, which reads its return value; else null. */
  readonly parentId: string | null;
  readonly createdAt: Date;
  /** When this attempt must end at the latest (the maximum runtime); no heartbeat extends past it. */
  readonly deadlineAt: Date;
  /**
   * The version of the payload's shape it was enqueued with (a `defineJob` version), or null for a
   * job enqueued without a definition. A handler with a definition gets its payload upcast to the
   * definition's version; this stays the stored one.
   */
  readonly version: number | null;
}

/** Why a handler's signal was aborted. */
export type AbortCode = 'LEASE_EXPIRED' | 'MAX_RUNTIME' | 'SHUTDOWN' | 'LEASE_LOST' | 'CANCELLED';

export interface JobContext {
  /** Aborted before the lease can expire, at the maximum runtime, on shutdown, or when the fence is lost. */
  readonly signal: AbortSignal;
  readonly attempt: number;
  /** The lease token (fencing token) of this attempt. */
  readonly token: string;
  /**
   * Report progress: renews the lease (throttled: no write while most of it is left), never past the
   * job's deadline. Call it after real progress, not on a timer. Rejects with `LeaseLostError` when
   * the worker no longer owns the job (and aborts `signal`).
   */
  heartbeat(): Promise<void>;
  /**
   * Fenced transactional completion: runs `work` in a transaction that first locks the job's row
   * with the fence predicate, then marks the job succeeded in the same transaction. If the lease
   * was lost, `work` never runs (or its writes roll back) and this rejects with LeaseLostError.
   * The transaction is open only for `work`. Pass `{ client }` to use a transaction you opened
   * (you then commit it: when the handler returns, the worker reads whether you did; a rollback or
   * a failed COMMIT is an ordinary failed attempt, with your error or COMPLETION_NOT_COMMITTED).
   */
  complete<R>(work: (tx: Queryable) => Promise<R>, options?: CompleteOptions): Promise<R>;
  /**
   * An external side effect with a durable record: `call` receives an idempotency key stable
   * across attempts and replays; a confirmed effect is not repeated on a later attempt (its stored
   * result is returned), and one that an earlier attempt started without confirming is reconciled
   * (`options.reconcile`) or called again with the same key.
   */
  effect<R>(name: string, call: (idempotencyKey: string) => Promise<R>, options?: EffectOptions<R>): Promise<R>;
  /**
   * In a flow's parent (enqueueFlow): its children, by id, with their handlers' return values, a
   * page at a time (default: up to 10,000 after `after`). Empty for a job without children.
   */
  childResults<R = unknown>(page?: { after?: string; limit?: number }): Promise<ChildResult<R>[]>;
}

/** A flow child as its parent's handler reads it (`ctx.childResults()`). */
export interface ChildResult<R = unknown> {
  id: string;
  queue: string;
  /** 'succeeded', or 'cancelled' when an operator discarded (or cancelled) it. */
  status: string;
  /** Its handler's return value (null when it returned nothing, or was discarded). */
  result: R | null;
  /** Resolved by an operator, not by succeeding: its result is null. */
  discarded: boolean;
}

/** What a reconcile function reports after asking the destination about an uncertain effect. */
export type Reconciliation<R> = { done: true; result: R } | { done: false };

export interface EffectOptions<R> {
  /**
   * Called instead of assuming, when an earlier attempt started this effect but never confirmed it
   * (it crashed, or lost its lease, between the call and the record). Look the key up at the
   * destination: `{ done: true, result }` records the effect without calling again;
   * `{ done: false }` calls again with the same key. Without it, the call is repeated with the
   * same key, which is right for destinations that deduplicate. Also asked, when given, for the
   * result of an effect that happened but whose result could not be stored.
   */
  reconcile?: (idempotencyKey: string) => Promise<Reconciliation<R>>;
}

export interface CompleteOptions {
  /** Run inside this already-open transaction (any `pg` client, or an adapter with `query(config)`). */
  client?: Queryable;
  /** Give up taking the job's row lock after this long (default 5000 ms). */
  lockTimeoutMs?: number;
}

export type JobHandlerFn<T = unknown> = (job: Job<T>, ctx: JobContext) => unknown;

export interface BackoffOptions {
  /** Cap of the first retry's delay; each later attempt doubles the cap. */
  baseMs: number;
  /** No retry waits longer than this. */
  maxMs: number;
}

/** Per-queue handler configuration. Every field has a default (see `HANDLER_DEFAULTS`). */
export interface HandlerOptions {
  /** Handlers of this queue running at once in this process. */
  concurrency: number;
  /** Jobs claimed beyond the free slots, to keep slots busy between claims. Their leases run while they wait. */
  prefetch: number;
  /** Length of a lease; a heartbeat renews it to this length again. */
  leaseMs: number;
  /** The hard limit of one attempt (used when the job was enqueued without one). */
  maxRuntimeMs: number;
  /** Attempts before a job is dead (used when the job was enqueued without a value). */
  maxAttempts: number;
  /** How many attempts an error that is neither permanent nor retryable gets, at most. */
  unknownErrorAttempts: number;
  backoff: BackoffOptions;
  /**
   * Share of each claim taken oldest-first whatever the priority (0 to 1; 0 = strict priority).
   * It bounds how long a due job can wait under a flood of higher-priority work: at least one job
   * in every ceil(1 / fairShare) claimed is the oldest claimable one.
   */
  fairShare: number;
  /** The handler's signal aborts this long before the lease would expire in the database. */
  abortMarginMs: number | undefined;
  /**
   * The queue's flow control, declared when the workers start (the last process to start wins;
   * changeable at run time with `PgQueue.setLimits`): a field left out keeps what the database
   * has, `null` removes that limit. See docs/flow-control.md.
   */
  limits: QueueLimitsInput | undefined;
  /**
   * Rate limits a handler reports (RateLimitedError) that give the attempt back, per job; past
   * this, each one counts as an attempt (code RATE_LIMITED). Default 20.
   */
  maxRateLimitedRetries: number;
}

/** At most `limit` claims per `windowMs` (a sliding window over claim times, by database time). */
export interface RateLimit {
  limit: number;
  windowMs: number;
}

/** A queue's flow control as stored (null: no such limit). See docs/flow-control.md. */
export interface QueueLimits {
  /** Jobs of the queue running at once across every process (prefetched ones included). */
  globalConcurrency: number | null;
  /** Jobs of one group running at once across every process, unless the group has its own. */
  groupConcurrency: number | null;
  /** Claims of the queue per window. */
  rateLimit: RateLimit | null;
  /** Claims of one group per window, unless the group has its own. */
  groupRateLimit: RateLimit | null;
  /** Claims share the queue between groups by weighted round-robin. */
  groupFairness: boolean;
}

/** A group's own settings (null: the queue's default). */
export interface GroupLimits {
  /** Its jobs running at once (0 holds the group). */
  concurrency: number | null;
  /** Jobs per turn of the round-robin (1 to 1000; default 1). */
  weight: number;
  /** Its claims per window (limit 0 holds the group). */
  rateLimit: RateLimit | null;
}

/** A queue's limits, as given: a field left out keeps its value, `null` removes it. */
export interface QueueLimitsInput {
  globalConcurrency?: number | null;
  groupConcurrency?: number | null;
  rateLimit?: RateLimit | null;
  groupRateLimit?: RateLimit | null;
  groupFairness?: boolean;
}

/** A group's own settings, as given: a field left out keeps its value, `null` goes back to the queue's default. */
export interface GroupLimitsInput {
  concurrency?: number | null;
  weight?: number | null;
  rateLimit?: RateLimit | null;
}

/** A group with settings of its own (or a throttle running), as listGroupLimits returns it. */
export interface GroupLimitsRecord extends GroupLimits {
  group: string;
  /** A handler reported the group's rate limit (RateLimitedError): nothing of it is claimed before this. */
  throttledUntil: Date | null;
}

/** What flow control holds back in one queue (`QueueStats.flow`), from the database: aggregates, the top groups only. */
export interface FlowStats {
  queue: string;
  limits: QueueLimits;
  /** A handler reported the queue's rate limit: nothing of it is claimed before this. */
  throttledUntil: Date | null;
  /** Running jobs (slots in use) against `limits.globalConcurrency`. */
  running: number;
  /** Claims in the current window against `limits.rateLimit` (null without one). */
  claimsInWindow: number | null;
  /** Waiting jobs that a rate limit or a throttle holds back right now. */
  heldByRateLimit: number;
  /** Groups with running or waiting jobs. */
  groupCount: number;
  /** The groups with the most running and waiting jobs (the `topGroups` of `stats()`, default 10). */
  topGroups: {
    group: string;
    waiting: number;
    running: number;
    /** Its concurrency limit (its own, or the queue's default), or null. */
    concurrency: number | null;
    rateLimit: number | null;
    claimsInWindow: number | null;
    throttledUntil: Date | null;
  }[];
}
