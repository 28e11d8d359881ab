import { describe } from './config.js';
import type { Queryable } from './db.js';
import { EnqueueBatcher } from './enqueue-batcher.js';
import { InternalError, InvalidJobError } from './errors.js';
import { isQueueName } from './identifiers.js';
import { payloadJson } from './json.js';
import { isJobDefinition, payloadToEnqueue, type JobDefinition } from './job-definition.js';
import {
  DEBOUNCE_MERGE_NEEDS_TRANSACTION,
  DEBOUNCE_SETS_RUN_TIME_FIX,
  JOB_NOT_AN_OBJECT,
  JOB_OPTION_INVALID,
  JOB_OPTIONS_CONFLICT,
  JOB_OPTIONS_NOT_AN_OBJECT,
  JOB_QUEUE_NAME_INVALID,
  JOBS_NOT_AN_ARRAY,
  QUEUE_NOT_DECLARED_FOR_ENQUEUE,
  UNIQUE_OR_DEBOUNCE_FIX,
  UNIQUE_RACE_ROUNDS_EXCEEDED,
  UNIQUE_WITH_ORDERING_KEY_FIX,
} from './messages.js';
import { sqlState } from './pg-errors.js';
import type { DebounceRow, EnqueueRow, Store, UniqueRow, UniqueScope } from './store/index.js';
import { captureTraceContext } from './tracing.js';

export interface EnqueueOptions<T = unknown> {
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

/** `unique` and `debounce` (docs/unique-jobs.md): with either, `enqueue` returns `{ id, deduplicated }`. */
export interface DeduplicationOptions<T = unknown> {
  /**
   * Deduplicates by key (docs/unique-jobs.md): no job is added while another job of the queue holds
   * `key` (in `periodMs`'s current bucket, if given) in the scope `while` names. Enforced by a unique
   * index, so concurrent producers never both add one. `enqueue` then returns `{ id, deduplicated }`.
   */
  unique?: UniqueOptions;
  /**
   * Keeps one waiting job per key whose run time moves to `delayMs` from each enqueue (never past
   * `maxWaitMs` after the first), its payload replaced by the last one or merged (docs/unique-jobs.md).
   * `enqueue` then returns `{ id, deduplicated }`.
   */
  debounce?: DebounceOptions<T>;
}

/** Enqueue options with `unique` or `debounce`: an enqueue with these returns `{ id, deduplicated }`. */
export type KeyedEnqueueOptions<T = unknown> = EnqueueOptions<T> & DeduplicationOptions<T> & ({ unique: UniqueOptions } | { debounce: DebounceOptions<T> });

/** What `while` a unique key is held: see docs/unique-jobs.md#scopes. */
export type UniqueWhile = UniqueScope;

export interface UniqueOptions {
  /** 1-256 characters, per queue. */
  key: string;
  /**
   * `'pending'`: while the job waits for its first claim (scheduled or pending); `'unfinished'`:
   * until it succeeds or is cancelled (a dead job still holds it, through its replay);
   * `'ever'`: while the job's row exists (the pruner's deletion of succeeded jobs ends it).
   */
  while: UniqueWhile;
  /**
   * Buckets the key by period (database time): the key is held per bucket, buckets start at
   * multiples of `periodMs` since the Unix epoch. With `while: 'ever'`, at most one job per key per
   * period: a throttle. 1 ms to 10 years.
   */
  periodMs?: number;
}

export interface DebounceOptions<T = unknown> {
  /** 1-256 characters, per queue (debounce keys and unique keys are separate). */
  key: string;
  /** The job runs this long after the last enqueue of its key (database time), ms >= 0. */
  delayMs: number;
  /**
   * ...but never later than this long after the first enqueue of the waiting job (>= delayMs).
   * Without it, enqueues closer together than `delayMs` postpone the job for as long as they go on.
   */
  maxWaitMs?: number;
  /**
   * Makes the waiting job's payload from its stored payload (`previous`, as JSON) and the new one,
   * instead of replacing it. Runs in a transaction that holds the waiting job's row (your `client`'s,
   * which must then be inside a transaction, or one of the engine's).
   */
  merge?(previous: T, next: T): T;
}

/** What `enqueue` with `unique` or `debounce` returns. */
export interface EnqueueResult {
  /** The new job's id, or the id of the job that holds the key (deduplicated). */
  id: string;
  /** True when no job was added: another job held the key (a debounce then moved it and replaced its payload). */
  deduplicated: boolean;
}

/**
 * `enqueueMany`'s ids, in input order (the id of a deduplicated job is the one that holds its
 * key), with `deduplicated[i]` telling whether job `i` was deduplicated (always false without
 * `unique` or `debounce`).
 */
export type EnqueuedIds = string[] & { readonly deduplicated: readonly boolean[] };

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
  options?: EnqueueOptions<T> & DeduplicationOptions<T>;
}

/** A unique key's period: 1 ms to 10 years. */
const PERIOD_MAX_MS = 10 * 365 * 86_400_000;
const UNIQUE_SCOPES: readonly UniqueScope[] = ['pending', 'unfinished', 'ever'];
/**
 * Rounds of "the key's holder let go of it before we could read it" before an enqueue gives up:
 * each round means another producer's job took the key and finished its scope between two of our
 * statements, so even one repeat is rare.
 */
const UNIQUE_RACE_ROUNDS = 100;

/** How a job is deduplicated, validated. */
type Dedupe =
  | { kind: 'unique'; key: string; scope: UniqueScope; periodMs: number | null }
  | { kind: 'debounce'; key: string; delayMs: number; maxWaitMs: number | null; merge: ((previous: unknown, next: unknown) => unknown) | undefined };

/** A validated job of a batch, with its place in the batch. */
interface Prepared {
  index: number;
  where: string;
  row: EnqueueRow;
  payload: unknown;
  definition: JobDefinition | undefined;
  dedupe: Dedupe | undefined;
}

type Outcome = { id: string; deduplicated: boolean };

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
  /** Runs `fn` in a transaction of the engine's own (a pool client): for batches of deduplicated jobs. */
  readonly transaction: <R>(fn: (db: Queryable) => Promise<R>) => Promise<R>;
}

/**
 * Enqueue: validates everything before any SQL runs (a bad job is an error for its producer,
 * never a row that poisons a worker), then inserts and wakes workers in one statement.
 */
export class Producer {
  /** Concurrent plain enqueues on the engine's pool share a statement and a commit (enqueue-batcher.ts). */
  private readonly batcher: EnqueueBatcher<EnqueueRow>;

  constructor(private readonly deps: ProducerDeps) {
    this.batcher = new EnqueueBatcher(
      (rows) => deps.store.enqueue(deps.db, { jobs: rows, channel: deps.channel, schedulerTopic: deps.schedulerTopic }),
      // A keyed job locks its ordering key's row (store/enqueue.ts), which a caller's open
      // transaction may hold: it never shares a statement.
      (row) => ({ chars: row.json.length, shareable: row.k === null }),
    );
  }

  /** The largest payload it takes, in bytes of JSON (flows are checked against it too). */
  get maxPayloadBytes(): number {
    return this.deps.maxPayloadBytes;
  }

  async enqueueMany(jobs: readonly JobToEnqueue[], call: EnqueueCallOptions = {}): Promise<EnqueuedIds> {
    if (!Array.isArray(jobs)) throw new InvalidJobError('INVALID_JOB_OPTION', JOBS_NOT_AN_ARRAY());
    if (jobs.length === 0) return withDeduplicated([], []);
    const prepared: Prepared[] = [];
    for (const [index, job] of jobs.entries()) {
      const where = jobs.length > 1 ? `jobs[${index}]` : 'job';
      // A definition's schema may be async: every payload of the batch is validated before any row is built.
      const definition = job !== null && typeof job === 'object' && isJobDefinition(job.queue) ? job.queue : undefined;
      const payload = definition ? await payloadToEnqueue(definition, job.payload, where) : job?.payload;
      const row = this.toRow(job, where, definition ? { queue: definition.queue, payload, version: definition.version } : undefined);
      prepared.push({ index, where, row, payload, definition, dedupe: dedupeOf(job.options ?? {}, where) });
    }
    const db = call.client ?? this.deps.db;
    for (const queue of new Set(prepared.map((p) => p.row.q))) {
      if (!(await this.deps.isKnownQueue(queue, db))) {
        throw new InvalidJobError('UNKNOWN_QUEUE', QUEUE_NOT_DECLARED_FOR_ENQUEUE(queue));
      }
    }
    if (!prepared.some((p) => p.dedupe)) {
      // The plain path: one statement, no key; on the engine's pool, shared with concurrent calls.
      const rows = prepared.map((p) => p.row);
      const ids = call.client
        ? await this.deps.store.enqueue(db, { jobs: rows, channel: this.deps.channel, schedulerTopic: this.deps.schedulerTopic })
        : await this.batcher.add(rows);
      return withDeduplicated(ids, ids.map(() => false));
    }
    const merging = prepared.find((p) => p.dedupe?.kind === 'debounce' && p.dedupe.merge);
    if (merging && call.client) {
      try {
        await this.deps.store.requireTransaction(call.client);
      } catch (error) {
        if (sqlState(error) !== '25P01') throw error;
        throw new InvalidJobError('INVALID_JOB_OPTION', DEBOUNCE_MERGE_NEEDS_TRANSACTION(merging.where));
      }
    }
    const write = (on: Queryable) => this.enqueueWithKeys(on, prepared);
    // A batch may take more than one statement (its plain, unique and debounced jobs; a raced
    // key's follow-up): in a transaction, so it stays all or none. A merge reads under a row lock.
    const outcomes = call.client || (jobs.length === 1 && !merging) ? await write(db) : await this.deps.transaction(write);
    return withDeduplicated(
      outcomes.map((o) => o.id),
      outcomes.map((o) => o.deduplicated),
    );
  }

  /** A batch with deduplicated jobs: its plain jobs, its unique ones, then its debounced ones, on `db`. */
  private async enqueueWithKeys(db: Queryable, prepared: readonly Prepared[]): Promise<Outcome[]> {
    const outcomes: Outcome[] = new Array(prepared.length);
    const plain = prepared.filter((p) => !p.dedupe);
    if (plain.length > 0) {
      const ids = await this.deps.store.enqueue(db, { jobs: plain.map((p) => p.row), channel: this.deps.channel, schedulerTopic: this.deps.schedulerTopic });
      plain.forEach((p, k) => (outcomes[p.index] = { id: ids[k]!, deduplicated: false }));
    }
    const unique = prepared.filter((p) => p.dedupe?.kind === 'unique');
    if (unique.length > 0) await this.insertUnique(db, unique, outcomes);
    const debounced = prepared.filter((p) => p.dedupe?.kind === 'debounce');
    if (debounced.length > 0) await this.upsertDebounced(db, debounced, outcomes);
    return outcomes;
  }

  /**
   * Unique jobs: one statement inserts them or finds their keys' holders. A key whose holder
   * committed while the statement waited for it is read by a second statement (its snapshot is
   * newer); if that holder let go of the key meanwhile (claimed, finished), the job is inserted again.
   */
  private async insertUnique(db: Queryable, items: readonly Prepared[], outcomes: Outcome[]): Promise<void> {
    const { store, channel, schedulerTopic } = this.deps;
    let left = items;
    for (let round = 0; left.length > 0; round++) {
      if (round === UNIQUE_RACE_ROUNDS) throw new InternalError(UNIQUE_RACE_ROUNDS_EXCEEDED(UNIQUE_RACE_ROUNDS));
      const rows = left.map((p) => uniqueRow(p));
      const inserted = await store.enqueueUnique(db, { jobs: rows, channel, schedulerTopic });
      const raced: { item: Prepared; pe: number | null }[] = [];
      inserted.forEach((o, k) => {
        if (o.id !== null) outcomes[left[k]!.index] = { id: o.id, deduplicated: !o.created };
        else raced.push({ item: left[k]!, pe: o.periodMs });
      });
      if (raced.length === 0) return;
      const holders = await store.uniqueHolders(db, { keys: raced.map(({ item, pe }) => ({ q: item.row.q, uk: (item.dedupe as { key: string }).key, pe })) });
      const again: Prepared[] = [];
      holders.forEach((id, k) => {
        if (id !== null) outcomes[raced[k]!.item.index] = { id, deduplicated: true };
        else again.push(raced[k]!.item);
      });
      left = again;
    }
  }

  /**
   * Debounced jobs: the batch's enqueues of one key collapse into one (the last one's fields, the
   * payloads merged in order when a merge is given), the first of them reporting what happened to
   * the key and the others deduplicated. Keys without a merge take one upsert; keys with one are
   * read under lock, merged, and written back, again for any key whose job appeared meanwhile.
   */
  private async upsertDebounced(db: Queryable, items: readonly Prepared[], outcomes: Outcome[]): Promise<void> {
    const groups = new Map<string, Prepared[]>();
    for (const item of items) {
      const name = JSON.stringify([item.row.q, (item.dedupe as { key: string }).key]);
      groups.set(name, [...(groups.get(name) ?? []), item]);
    }
    const all = [...groups.values()];
    const report = (group: readonly Prepared[], id: string, created: boolean) =>
      group.forEach((item, k) => (outcomes[item.index] = { id, deduplicated: k > 0 || !created }));
    const keyOf = (q: string, dk: string) => JSON.stringify([q, dk]);
    const { store, channel, schedulerTopic } = this.deps;

    const replacing = all.filter((group) => !group.some((item) => debounceOf(item).merge));
    if (replacing.length > 0) {
      const done = await store.enqueueDebounced(db, { jobs: replacing.map((group) => debounceRow(group.at(-1)!, group.at(-1)!.row.json)), channel, schedulerTopic, locked: null });
      const byKey = new Map(done.map((o) => [keyOf(o.q, o.dk), o]));
      for (const group of replacing) {
        const o = byKey.get(keyOf(group[0]!.row.q, debounceOf(group[0]!).key));
        if (!o) throw new InternalError('a debounce upsert without a guard left a key out');
        report(group, o.id, o.created);
      }
    }

    let merging = all.filter((group) => group.some((item) => debounceOf(item).merge));
    for (let round = 0; merging.length > 0; round++) {
      if (round === UNIQUE_RACE_ROUNDS) throw new InternalError(UNIQUE_RACE_ROUNDS_EXCEEDED(UNIQUE_RACE_ROUNDS));
      const keys = merging.map((group) => ({ q: group[0]!.row.q, dk: debounceOf(group[0]!).key }));
      const locked = await store.lockDebounced(db, { keys });
      const stored = new Map(locked.map((job) => [keyOf(job.q, job.dk), job]));
      const rows: DebounceRow[] = [];
      for (const group of merging) {
        const last = group.at(-1)!;
        const held = stored.get(keyOf(last.row.q, debounceOf(last).key));
        let payload: unknown;
        let has = held !== undefined;
        if (held) payload = held.payload;
        for (const item of group) {
          const { merge } = debounceOf(item);
          payload = has && merge ? merge(payload, item.payload) : item.payload;
          has = true;
        }
        // A merge's output is a new payload: validated as any payload is, by the definition's schema too.
        if (last.definition) payload = await payloadToEnqueue(last.definition, payload, last.where);
        rows.push(debounceRow(last, payloadJson(payload, `${last.where} (queue "${last.row.q}", debounce.merge's result)`, this.deps.maxPayloadBytes)));
      }
      const done = await store.enqueueDebounced(db, { jobs: rows, channel, schedulerTopic, locked: locked.map((job) => job.id) });
      const byKey = new Map(done.map((o) => [keyOf(o.q, o.dk), o]));
      const again: Prepared[][] = [];
      for (const group of merging) {
        const o = byKey.get(keyOf(group[0]!.row.q, debounceOf(group[0]!).key));
        if (o) report(group, o.id, o.created);
        else again.push(group);
      }
      merging = again;
    }
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

/**
 * The batch's ids with their `deduplicated` flags beside them: not enumerable, so the array still
 * equals the plain array of its ids (a test's `toEqual(ids)`, `assert.deepStrictEqual`), and
 * spreads and serialises as before.
 */
function withDeduplicated(ids: string[], deduplicated: boolean[]): EnqueuedIds {
  return Object.defineProperty(ids, 'deduplicated', { value: deduplicated, enumerable: false }) as EnqueuedIds;
}

function debounceOf(item: Prepared): Extract<Dedupe, { kind: 'debounce' }> {
  return item.dedupe as Extract<Dedupe, { kind: 'debounce' }>;
}

function uniqueRow({ row, dedupe }: Prepared): UniqueRow {
  const unique = dedupe as Extract<Dedupe, { kind: 'unique' }>;
  const { k: _orderingKey, ...fields } = row;
  return { ...fields, uk: unique.key, us: unique.scope, up: unique.periodMs };
}

function debounceRow(item: Prepared, json: string): DebounceRow {
  const { q, pr, ma, mr, tc, v, g } = item.row;
  const { key, delayMs, maxWaitMs } = debounceOf(item);
  return { q, json, pr, ma, mr, tc, v, g, dk: key, d: delayMs, mw: maxWaitMs };
}

const isKey = (value: unknown): value is string => typeof value === 'string' && value.length >= 1 && value.length <= 256;
const isMs = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value) && value >= 0 && value <= Number.MAX_SAFE_INTEGER;

/**
 * `unique` and `debounce`, validated (with the options they cannot be combined with): what the
 * job's deduplication is, or undefined without either. `options` is an object (toRow checked it).
 */
function dedupeOf(options: EnqueueOptions & DeduplicationOptions, where: string): Dedupe | undefined {
  const { unique, debounce, orderingKey, runAt, delayMs } = options;
  const bad = (option: string, value: unknown, expected: string) =>
    new InvalidJobError('INVALID_JOB_OPTION', JOB_OPTION_INVALID(where, option, describe(value), expected));
  const conflict = (option: string, other: string, fix: string) => new InvalidJobError('INVALID_JOB_OPTION', JOB_OPTIONS_CONFLICT(where, option, other, fix));
  if (unique !== undefined && debounce !== undefined) throw conflict('unique', 'debounce', UNIQUE_OR_DEBOUNCE_FIX());
  if (unique !== undefined) {
    if (unique === null || typeof unique !== 'object') throw bad('unique', unique, "an object { key, while: 'pending' | 'unfinished' | 'ever', periodMs? }");
    if (!isKey(unique.key)) throw bad('unique.key', unique.key, 'a string of 1-256 characters');
    if (!UNIQUE_SCOPES.includes(unique.while)) {
      throw bad('unique.while', unique.while, "'pending' (until claimed), 'unfinished' (until it succeeds or is cancelled) or 'ever' (while the job is kept)");
    }
    const { periodMs } = unique;
    if (periodMs !== undefined && !(Number.isInteger(periodMs) && periodMs >= 1 && periodMs <= PERIOD_MAX_MS)) {
      throw bad('unique.periodMs', periodMs, `an integer number of milliseconds from 1 to ${PERIOD_MAX_MS} (10 years)`);
    }
    if (orderingKey !== undefined) throw conflict('unique', 'orderingKey', UNIQUE_WITH_ORDERING_KEY_FIX());
    return { kind: 'unique', key: unique.key, scope: unique.while, periodMs: periodMs ?? null };
  }
  if (debounce !== undefined) {
    if (debounce === null || typeof debounce !== 'object') throw bad('debounce', debounce, 'an object { key, delayMs, maxWaitMs?, merge? }');
    if (!isKey(debounce.key)) throw bad('debounce.key', debounce.key, 'a string of 1-256 characters');
    if (!isMs(debounce.delayMs)) throw bad('debounce.delayMs', debounce.delayMs, 'a finite number of milliseconds >= 0');
    const { maxWaitMs, merge } = debounce;
    if (maxWaitMs !== undefined && !(isMs(maxWaitMs) && maxWaitMs >= debounce.delayMs)) {
      throw bad('debounce.maxWaitMs', maxWaitMs, `a finite number of milliseconds >= debounce.delayMs (${describe(debounce.delayMs)}), or omitted`);
    }
    if (merge !== undefined && typeof merge !== 'function') throw bad('debounce.merge', merge, 'a function (previous, next) => payload, or omitted');
    if (orderingKey !== undefined) throw conflict('debounce', 'orderingKey', UNIQUE_WITH_ORDERING_KEY_FIX());
    if (runAt !== undefined) throw conflict('debounce', 'runAt', DEBOUNCE_SETS_RUN_TIME_FIX());
    if (delayMs !== undefined) throw conflict('debounce', 'delayMs', DEBOUNCE_SETS_RUN_TIME_FIX());
    return {
      kind: 'debounce',
      key: debounce.key,
      delayMs: Math.round(debounce.delayMs),
      maxWaitMs: maxWaitMs === undefined ? null : Math.round(maxWaitMs),
      merge: merge as ((previous: unknown, next: unknown) => unknown) | undefined,
    };
  }
  return undefined;
}
