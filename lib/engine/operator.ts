import { requireInteger } from './config.js';
import { InvalidOptionError, JobStateError } from './errors.js';
import { isJobId } from './identifiers.js';
import { JOB_NOT_DELETABLE, JOB_NOT_FOUND, JOB_NOT_REPLAYABLE, JOB_REFUSED, QUEUE_NOT_DECLARED } from './messages.js';
import type { DeadErrorGroup, DeadJobPage, JobPage, OperatorNote, QueueAuditRecord, ReplayOutcome, Throughput } from './records.js';
import { BROWSABLE_STATUSES, BROWSE_WALK_MAX, transaction, type BrowsableStatus, type Store } from './store/index.js';
import { checkGroup, checkGroupLimits, checkQueueLimits } from './flow-control.js';
import type { GroupLimits, GroupLimitsInput, JobStatus, QueueLimits, QueueLimitsInput } from './types.js';
import type pg from 'pg';

/** Replays and purges work in bounded batches of at most this many jobs per call. */
export const OPERATOR_BATCH_MAX = 1_000;

/** A page of listJobs holds at most this many jobs. */
export const LIST_JOBS_MAX = 200;
/** The throughput read: the last 15 minutes by default, at most an hour (its cost is what finished in the window). */
const THROUGHPUT_WINDOW_MS_DEFAULT = 15 * 60_000;
const THROUGHPUT_WINDOW_MS_MAX = 60 * 60_000;
/** Rows the throughput read takes per status, at most: the bound of its cost at any throughput. */
const THROUGHPUT_ROWS_DEFAULT = 20_000;
const THROUGHPUT_ROWS_MAX = 200_000;

/** What the operator calls need of the engine. */
export interface OperatorDeps {
  readonly db: pg.Pool;
  readonly store: Store;
  readonly channel: string;
  /** A statement left key handoffs to apply (see key-handoffs.ts). */
  readonly keysDeferred: () => void;
  /** A job was discarded, cancelled or replayed: a flow parent waiting for it may be ready (see maintenance/flows.ts). */
  readonly flowsChanged?: () => void;
}

/**
 * The operator's calls (pause and resume with their audit trail, cancel, discard, replay, list and purge dead jobs): their
 * arguments checked before any SQL runs, their refusals as JobStateError with a code. PgQueue
 * exposes each one, wrapped in its mapping of database failures (see PgQueue.call).
 */
export class OperatorCalls {
  constructor(private readonly deps: OperatorDeps) {}

  /** Pauses or resumes a queue, recording who asked and why in its audit trail (queue_audit). */
  async setPaused(queue: string, paused: boolean, note: OperatorNote = {}): Promise<void> {
    const params = { queue, paused, channel: this.deps.channel, actor: checkedActor(note.actor), reason: boundedNote(note.reason) };
    const { found } = await this.deps.store.setQueuePaused(this.deps.db, params);
    if (!found) throw new JobStateError('QUEUE_NOT_FOUND', QUEUE_NOT_DECLARED(queue, paused ? 'pause' : 'resume'));
  }

  /**
   * Sets a queue's flow control (fields left out keep their value, null removes a limit) and wakes
   * its workers in every process: a limit raised or removed lets them take more at once.
   */
  async setLimits(queue: string, limits: QueueLimitsInput): Promise<QueueLimits> {
    const checked = checkQueueLimits('limits', limits);
    const stored = await this.deps.store.setLimits(this.deps.db, { queue, limits: checked });
    if (!stored) throw new JobStateError('QUEUE_NOT_FOUND', QUEUE_NOT_DECLARED(queue, 'limit'));
    await this.deps.store.notify(this.deps.db, { channel: this.deps.channel, payload: queue });
    return stored;
  }

  async getLimits(queue: string): Promise<QueueLimits> {
    const stored = await this.deps.store.getLimits(this.deps.db, { queue });
    if (!stored) throw new JobStateError('QUEUE_NOT_FOUND', QUEUE_NOT_DECLARED(queue, 'read the limits of'));
    return stored;
  }

  /** Sets a group's own settings (fields left out keep their value, null goes back to the queue's default). */
  async setGroupLimits(queue: string, group: string, limits: GroupLimitsInput): Promise<GroupLimits> {
    const checked = checkGroupLimits('limits', limits);
    const { store, db } = this.deps;
    const params = { queue, group: checkGroup('group', group), limits: checked };
    const stored = await transaction(
      db,
      async (client) => {
        const set = await store.setGroupLimits(client, params);
        if (set) {
          await store.forgetDefaultGroups(client, { queue, group: params.group });
          await store.refreshFlow(client, { queue });
        }
        return set;
      },
      { statementTimeoutMs: store.statementTimeoutMs },
    );
    if (!stored) throw new JobStateError('QUEUE_NOT_FOUND', QUEUE_NOT_DECLARED(queue, 'limit'));
    await this.deps.store.notify(this.deps.db, { channel: this.deps.channel, payload: queue });
    return stored;
  }

  /** The groups of `queue` with settings of their own, by name, a page at a time (after `after`). */
  listGroupLimits(queue: string, page: { after?: string; limit?: number } = {}) {
    const limit = page.limit === undefined ? 100 : requireInteger('limit', page.limit, 1, OPERATOR_BATCH_MAX);
    return this.deps.store.listGroupLimits(this.deps.db, { queue, after: page.after ?? '', limit });
  }

  /** A queue's pauses and resumes, newest first, a page at a time (`before`: the last page's last id). */
  queueHistory(queue: string, options: { limit?: number; before?: string } = {}): Promise<QueueAuditRecord[]> {
    const limit = requireInteger('limit', options.limit ?? 50, 1, OPERATOR_BATCH_MAX);
    const before = options.before === undefined ? null : checkedId(options.before);
    return this.deps.store.queueAudit(this.deps.db, { queue, before, limit });
  }

  cancel(id: string, note: OperatorNote): Promise<void> {
    return this.endJob(id, ['scheduled', 'pending', 'running'], 'cancelled', note, 'JOB_NOT_CANCELLABLE', 'cancelled');
  }

  async discard(id: string, note: OperatorNote & { delete?: boolean } = {}): Promise<void> {
    if (!note.delete) {
      await this.endJob(id, ['dead'], 'discarded', note, 'JOB_NOT_DEAD', 'discarded');
      return;
    }
    const params = { id: checkedId(id), actor: checkedActor(note.actor), reason: boundedNote(note.reason) };
    const row = await this.deps.store.releasingKeys(this.deps.db, this.deps.channel, (db) => this.deps.store.deleteJob(db, params), this.deps.keysDeferred);
    if (row.removed === 1) return;
    if (row.status === null) throw new JobStateError('JOB_NOT_FOUND', JOB_NOT_FOUND(id));
    throw new JobStateError('JOB_NOT_FINISHED', JOB_NOT_DELETABLE(id, row.status));
  }

  async replay(id: string, note: OperatorNote = {}): Promise<void> {
    const [outcome] = await this.replayMany([id], note);
    if (outcome?.replayed) return;
    if (!outcome?.status) throw new JobStateError('JOB_NOT_FOUND', JOB_NOT_FOUND(id));
    throw new JobStateError('JOB_NOT_DEAD', JOB_NOT_REPLAYABLE(id, outcome.status));
  }

  async replayMany(ids: readonly string[], note: OperatorNote = {}): Promise<ReplayOutcome[]> {
    if (ids.length > OPERATOR_BATCH_MAX) {
      throw new InvalidOptionError('ids', `${ids.length} ids`, `Replay at most ${OPERATOR_BATCH_MAX} jobs per call.`);
    }
    return this.deps.store.replay(this.deps.db, { ids: ids.map(checkedId), actor: checkedActor(note.actor), reason: boundedNote(note.reason), channel: this.deps.channel });
  }

  async replayDead(filter: { queue: string; errorCode?: string; limit?: number } & OperatorNote): Promise<ReplayOutcome[]> {
    const limit = requireInteger('limit', filter.limit ?? 100, 1, OPERATOR_BATCH_MAX);
    const page = await this.listDead({ queue: filter.queue, errorCode: filter.errorCode, limit });
    if (page.jobs.length === 0) return [];
    return this.replayMany(
      page.jobs.map((j) => j.id),
      filter,
    );
  }

  async listDead(filter: { queue?: string; errorCode?: string; limit?: number; cursor?: string } = {}): Promise<DeadJobPage> {
    const limit = requireInteger('limit', filter.limit ?? 50, 1, OPERATOR_BATCH_MAX);
    const after = filter.cursor === undefined ? null : parseCursor(filter.cursor, 'listDead');
    // One statement per filter, each walking its own index (see listDeadPage in store/operator.ts). A null
    // filter is no filter, as undefined is.
    const queue = filter.queue ?? null;
    const code = filter.errorCode ?? null;
    const { jobs, lastCursor } = await this.deps.store.listDeadPage(this.deps.db, { after, limit, queue, code });
    return { jobs, nextCursor: jobs.length === limit ? lastCursor : undefined };
  }

  /**
   * A page of a queue's jobs of one status (see browse in store/browse.ts): each page walks at most
   * BROWSE_WALK_MAX entries of the status's index, so it may come back short with a `nextCursor`
   * (`walkedOut`) when the filter is rare or the queue quiet beside busy ones.
   */
  async listJobs(filter: { queue: string; status: BrowsableStatus; errorCode?: string; limit?: number; cursor?: string }): Promise<JobPage> {
    if (!BROWSABLE_STATUSES.includes(filter.status)) {
      throw new InvalidOptionError('status', `${JSON.stringify(String(filter.status).slice(0, 20))} is not a status`, `Pass one of ${BROWSABLE_STATUSES.join(', ')}.`);
    }
    const limit = requireInteger('limit', filter.limit ?? 50, 1, LIST_JOBS_MAX);
    const after = filter.cursor === undefined ? null : parseCursor(filter.cursor, 'listJobs');
    const page = await this.deps.store.browse(this.deps.db, {
      status: filter.status,
      queue: filter.queue,
      code: filter.errorCode ?? null,
      after: after && { sortAt: after.finishedAt, id: after.id },
      limit,
      walk: BROWSE_WALK_MAX,
    });
    if (page.jobs.length === limit) return { jobs: page.jobs, nextCursor: page.lastCursor, walkedOut: false };
    const walkedOut = page.walked === BROWSE_WALK_MAX;
    return { jobs: page.jobs, nextCursor: walkedOut ? page.lastWalked : undefined, walkedOut };
  }

  /** A queue's dead jobs grouped by error code, most jobs first, at most `limit` (default 100) codes. */
  deadGroups(queue: string, options: { limit?: number } = {}): Promise<DeadErrorGroup[]> {
    const limit = requireInteger('limit', options.limit ?? 100, 1, OPERATOR_BATCH_MAX);
    return this.deps.store.deadGroups(this.deps.db, { queue, limit });
  }

  /**
   * Jobs that finished (succeeded, dead) per bucket over the last `windowMs`, per queue and in
   * total, in every process: the store's throughput read, at most `maxRows` rows per status.
   */
  async throughput(options: { windowMs?: number; bucketMs?: number; maxRows?: number } = {}): Promise<Throughput> {
    const windowMs = requireInteger('windowMs', options.windowMs ?? THROUGHPUT_WINDOW_MS_DEFAULT, 1_000, THROUGHPUT_WINDOW_MS_MAX);
    const bucketMs = requireInteger('bucketMs', options.bucketMs ?? Math.max(1_000, Math.round(windowMs / 30)), 100, windowMs);
    const cap = requireInteger('maxRows', options.maxRows ?? THROUGHPUT_ROWS_DEFAULT, 1, THROUGHPUT_ROWS_MAX);
    const buckets = Math.ceil(windowMs / bucketMs);
    const rows = await this.deps.store.throughput(this.deps.db, { windowMs, bucketMs, cap });
    const empty = () => ({ succeeded: new Array<number>(buckets).fill(0), dead: new Array<number>(buckets).fill(0) });
    const total = empty();
    const byQueue = new Map<string, ReturnType<typeof empty>>();
    const read = { succeeded: { n: 0, oldestMs: 0 }, dead: { n: 0, oldestMs: 0 } };
    for (const row of rows) {
      read[row.status].n += row.count;
      read[row.status].oldestMs = Math.max(read[row.status].oldestMs, row.oldestAgeMs);
      // Oldest first: bucket 0 (the newest) is the last element. A row a clock tick past the window is dropped.
      const index = buckets - 1 - row.bucket;
      if (index < 0 || index >= buckets) continue;
      let queue = byQueue.get(row.queue);
      if (!queue) byQueue.set(row.queue, (queue = empty()));
      queue[row.status][index]! += row.count;
      total[row.status][index]! += row.count;
    }
    const capped = (['succeeded', 'dead'] as const).filter((status) => read[status].n >= cap).map((status) => read[status].oldestMs);
    return {
      at: new Date(),
      windowMs,
      bucketMs,
      queues: [...byQueue].sort(([a], [b]) => a.localeCompare(b)).map(([queue, counts]) => ({ queue, ...counts })),
      total,
      completeForMs: capped.length === 0 ? null : Math.min(...capped),
    };
  }

  async purgeDead(filter: { olderThan: Date; queue?: string; batchSize?: number } & OperatorNote): Promise<number> {
    if (!(filter.olderThan instanceof Date) || !Number.isFinite(filter.olderThan.getTime())) {
      throw new InvalidOptionError('olderThan', 'it is not a valid Date', 'Pass the date before which dead jobs are removed.');
    }
    const batchSize = requireInteger('batchSize', filter.batchSize ?? 500, 1, OPERATOR_BATCH_MAX);
    // A statement for all queues and one for a queue, each walking its own index (see purgeDeadBatch in store/operator.ts).
    const queue = filter.queue ?? null;
    const batch = { olderThan: filter.olderThan, limit: batchSize, actor: checkedActor(filter.actor), reason: boundedNote(filter.reason), queue };
    let removed = 0;
    for (;;) {
      const row = await this.deps.store.releasingKeys(this.deps.db, this.deps.channel, (db) => this.deps.store.purgeDeadBatch(db, batch), this.deps.keysDeferred);
      removed += row.removed;
      if (row.removed < batchSize) return removed;
    }
  }

  private async endJob(
    id: string,
    allowed: JobStatus[],
    kind: string,
    note: OperatorNote,
    refusal: 'JOB_NOT_CANCELLABLE' | 'JOB_NOT_DEAD',
    verb: string,
  ): Promise<void> {
    const params = { id: checkedId(id), allowed, kind, actor: checkedActor(note.actor), reason: boundedNote(note.reason), channel: this.deps.channel };
    const row = await this.deps.store.releasingKeys(this.deps.db, this.deps.channel, (db) => this.deps.store.cancel(db, params), this.deps.keysDeferred);
    if (row.previousStatus === undefined) throw new JobStateError('JOB_NOT_FOUND', JOB_NOT_FOUND(id));
    if (!row.applied) {
      throw new JobStateError(refusal, JOB_REFUSED(id, row.previousStatus, allowed, verb));
    }
    this.deps.flowsChanged?.();
    // Cancelling a flow's parent cancels what it waits for (children, theirs, …), a bounded page
    // at a time; one that finished meanwhile is left as it is.
    if (kind === 'cancelled') {
      for (;;) {
        const descendants = await this.deps.store.unfinishedDescendants(this.deps.db, { id: params.id, limit: OPERATOR_BATCH_MAX });
        let cancelled = 0;
        for (const child of descendants) {
          const childParams = { ...params, id: child, allowed: ['scheduled', 'pending', 'running'] as JobStatus[], reason: params.reason ?? `its flow's parent ${params.id} was cancelled` };
          const done = await this.deps.store.releasingKeys(this.deps.db, this.deps.channel, (db) => this.deps.store.cancel(db, childParams), this.deps.keysDeferred);
          if (done.applied) cancelled += 1;
        }
        if (descendants.length < OPERATOR_BATCH_MAX || cancelled === 0) break;
      }
    }
  }
}

/** A cursor of listDead or listJobs: a timestamp as the database wrote it, and an id. */
function parseCursor(cursor: string, call: string): { finishedAt: string; id: string } {
  const match = /^(\d{4}-[^|]{1,60})\|(\d{1,19})$/.exec(cursor);
  if (!match) throw new InvalidOptionError('cursor', `it is not a cursor from ${call}`, 'Pass the nextCursor of the previous page.');
  return { finishedAt: match[1]!, id: match[2]! };
}

function checkedId(id: string): string {
  if (!isJobId(id)) {
    throw new InvalidOptionError('id', `${JSON.stringify(String(id).slice(0, 40))} is not a job id`, 'Job ids are the decimal strings enqueue returned.');
  }
  return id;
}

/** Who asked: stored as given (never shortened, an identity cut short would mislead), so it must fit. */
function checkedActor(actor: string | undefined): string | null {
  if (actor === undefined) return null;
  if (typeof actor !== 'string' || actor.length === 0 || actor.length > 200) {
    throw new InvalidOptionError('actor', `${JSON.stringify(String(actor).slice(0, 40))}… is not 1-200 characters`, 'Pass a short identity (a user name or id, a service name).');
  }
  return actor;
}

/** Operator notes are stored with the history: bounded, like error messages. */
function boundedNote(text: string | undefined): string | null {
  if (text === undefined) return null;
  return text.length > 1_000 ? `${text.slice(0, 999)}…` : text;
}
