import type pg from 'pg';
import { browseStatements, type BrowsableStatus, type BrowsePage, type BrowseParams } from './browse.js';
import { claimStatements } from './claim.js';
import { effectStatements } from './effects.js';
import { enqueueStatements } from './enqueue.js';
import { fenceStatements } from './fence.js';
import { flowStatements } from './flow.js';
import { flowStatements as flowTreeStatements } from './flows.js';
import { finishStatements, promoteReleasedKeys, releasingKeys, type KeyRelease } from './finish.js';
import { maintenanceStatements } from './maintenance.js';
import { operatorStatements, type DeadPage, type DeadPageParams, type PurgeParams } from './operator.js';
import { readStatements } from './reads.js';
import { uniqueStatements } from './unique.js';
import { scheduleStatements } from './schedules.js';
import { execute, sendText, statementContext, STATEMENT_TIMEOUT_DEFAULT_MS, type Queryable, type Statement, type StoreOptions } from './statement.js';

/**
 * The store: every statement of the engine as a typed function over a connection (the pool, a
 * transaction's client, or a caller's client), with named parameters and mapped records. One
 * store per engine (per schema); `statements` holds the statements themselves (name, text, how
 * their parameters become `$n`), for plan tests and probes.
 */

export type { Queryable, Statement, StatementText, StoreOptions, TransactionOptions } from './statement.js';
export { CLIENT_TIMEOUT_SLACK_MS, STATEMENT_TIMEOUT_DEFAULT_MS, transaction } from './statement.js';
export { decodeLoss, lost, LOSS_CODES, type FencedOutcome, type FenceParams, type FenceState, type LossCode } from './fence.js';
export type { KeyRelease, CompletionRow } from './finish.js';
export type { ClaimedJob, ClaimedJobs, ClaimGate, ClaimParams, Renewal } from './claim.js';
export type { FlowLock, ThrottleOutcome } from './flow.js';
export type { ChildResultRow, FlowRow } from './flows.js';
export type { EnqueueRow } from './enqueue.js';
export type { DebounceOutcome, DebounceRow, DebouncedJob, UniqueOutcome, UniqueRow, UniqueScope } from './unique.js';
export type { ReapedJob } from './maintenance.js';
export type { BegunEffect } from './effects.js';
export type { QueueFigures, UnfinishedGroup } from './reads.js';
export { BROWSABLE_STATUSES, BROWSE_WALK_MAX, type BrowsableStatus } from './browse.js';
export type { AdvanceOutcome, DueSchedule, ScheduleDefinition, SchedulePlan } from './schedules.js';
export { listen, ping } from './listener.js';

function allStatements(schemaName: string, options: StoreOptions) {
  const ctx = statementContext(schemaName, options);
  return {
    ctx,
    statements: {
      ...enqueueStatements(ctx),
      ...claimStatements(ctx),
      ...flowStatements(ctx),
      ...flowTreeStatements(ctx),
      ...fenceStatements(ctx),
      ...finishStatements(ctx),
      ...maintenanceStatements(ctx),
      ...operatorStatements(ctx),
      ...effectStatements(ctx),
      ...readStatements(ctx),
      ...browseStatements(ctx),
      ...uniqueStatements(ctx),
      ...scheduleStatements(ctx),
    },
  };
}

export type Statements = ReturnType<typeof allStatements>['statements'];

/** Each statement as a function: `(db, params)`, or `(db)` for a statement without parameters. */
type Bound<S> = {
  readonly [K in keyof S]: S[K] extends Statement<infer P, infer R> ? (db: Queryable, ...params: [P] extends [void] ? [] : [P]) => Promise<R> : never;
};

export type Store = Bound<Omit<Statements, 'requireTransaction' | `listDead${string}` | `purgeDead${string}` | `browse${string}`>> & {
  readonly schema: string;
  readonly statementTimeoutMs: number;
  readonly statements: Statements;
  /** A page of dead jobs, by the statement of its filter (see listDeadPage in operator.ts). A null filter is no filter. */
  listDeadPage(db: Queryable, params: DeadPageParams & { queue: string | null; code: string | null }): Promise<DeadPage>;
  /** A page of a queue's jobs of one status, by the statement of the status (see browse in browse.ts). */
  browse(db: Queryable, params: BrowseParams & { status: BrowsableStatus }): Promise<BrowsePage>;
  /** One bounded batch of an explicit purge, of every queue or one (see purgeDeadBatch in operator.ts). */
  purgeDeadBatch(db: Queryable, params: PurgeParams & { queue: string | null }): Promise<{ removed: number; keys: KeyRelease }>;
  /** Fails with the server's 25P01 unless `db` is inside a transaction block (see requireTransaction in fence.ts). */
  requireTransaction(db: Queryable): Promise<void>;
  /** A write that may release ordering keys, and the promotion of their next heads, in one transaction (see releasingKeys). */
  releasingKeys<R extends { keys: KeyRelease }>(pool: pg.Pool, channel: string, write: (db: Queryable) => Promise<R>, onDeferred?: () => void): Promise<R>;
  /** The promotion after a write that released keys, in the caller's transaction; true when some keys were handed off. */
  promoteReleasedKeys(db: Queryable, channel: string, keys: KeyRelease): Promise<boolean>;
};

export function createStore(schemaName: string, options: StoreOptions = { statementTimeoutMs: STATEMENT_TIMEOUT_DEFAULT_MS }): Store {
  const { ctx, statements } = allStatements(schemaName, options);
  const bound = Object.fromEntries(
    Object.entries(statements).map(([key, statement]) => [key, (db: Queryable, params: unknown) => execute(db, statement as Statement<unknown, unknown>, params)]),
  ) as unknown as Bound<Statements>;
  const s = statements;
  return {
    ...bound,
    schema: ctx.schema,
    statementTimeoutMs: ctx.statementTimeoutMs,
    statements,
    listDeadPage(db, { queue, code, ...page }) {
      if (queue !== null && code !== null) return execute(db, s.listDeadOfQueueWithCode, { ...page, queue, code });
      if (queue !== null) return execute(db, s.listDeadOfQueue, { ...page, queue });
      if (code !== null) return execute(db, s.listDeadWithCode, { ...page, code });
      return execute(db, s.listDead, page);
    },
    browse(db, { status, ...page }) {
      const statement = { pending: s.browsePending, scheduled: s.browseScheduled, running: s.browseRunning, succeeded: s.browseSucceeded, cancelled: s.browseCancelled, dead: s.browseDead }[status];
      return execute(db, statement, page);
    },
    purgeDeadBatch(db, { queue, ...batch }) {
      return queue === null ? execute(db, s.purgeDead, batch) : execute(db, s.purgeDeadOfQueue, { ...batch, queue });
    },
    requireTransaction: (db) => sendText(db, s.requireTransaction),
    releasingKeys: (pool, channel, write, onDeferred) => releasingKeys(pool, bound.promoteKeyHeads, ctx.statementTimeoutMs, channel, write, onDeferred),
    promoteReleasedKeys: (db, channel, keys) => promoteReleasedKeys(db, bound.promoteKeyHeads, channel, keys),
  };
}

