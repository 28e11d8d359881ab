import { createHash } from 'node:crypto';
import type pg from 'pg';
import { boolean, integer, oneOf, requireInteger, requireObject, requireOneOf, resolveSection, section } from './config.js';
import { MISSED_POLICIES, tickClock, type MissedPolicy } from './cron.js';
import { InvalidOptionError, JobStateError } from './errors.js';
import { checkGroup } from './flow-control.js';
import { isQueueName } from './identifiers.js';
import { payloadJson } from './json.js';
import type { EngineLogger } from './logger.js';
import { MAX_MISSED_RUNS_MAX, MISSED_AFTER_MAX_MS, type TickerConfig } from './maintenance/ticker.js';
import { QUEUE_NAME_FIX, QUEUE_NAME_INVALID, SCHEDULE_NAME_TAKEN, SCHEDULE_NOT_FOUND, SCHEDULE_OWNED_BY_CODE, SCHEDULES_DECLARED, SCHEDULES_OUTRANKED } from './messages.js';
import type { ScheduleRecord } from './records.js';
import { transaction, type ScheduleDefinition, type Store } from './store/index.js';

/**
 * Recurring jobs' schedules: the runtime API (`PgQueue.schedules`) and the code declarations a
 * process makes at start (`PgQueue.recurring`, `@Recurring`). Every argument is checked before
 * any SQL runs; refusals are JobStateError with a code. docs/recurring-jobs.md is the guide.
 */

/** A schedule's job and its policies: what `@Recurring` and `schedules.upsert` take besides the pattern. */
export interface RecurringOptions {
  /** IANA time zone the pattern is read in (default `UTC`). */
  tz?: string;
  /** Every tick's job payload (JSON; default null). */
  payload?: unknown;
  priority?: number;
  maxAttempts?: number;
  maxRuntimeMs?: number;
  /** The jobs' group (flow control). */
  group?: string;
  /** Ticks missed while every process was down: `latest` (default) runs the latest once, `all` each (up to `maxMissedRuns`), `none` none. */
  missed?: MissedPolicy;
  /** A tick handled later than this after it fell due is missed (default: the ticker's `missedAfterMs`, 60 s). */
  missedAfterMs?: number;
  /** `missed: 'all'`: at most this many missed ticks run, the latest (default: the ticker's `maxMissedRuns`, 100). */
  maxMissedRuns?: number;
  /** Let a tick's job start while the previous tick's job is unfinished (default false: the tick is skipped, and counted). */
  overlap?: boolean;
}

/** `schedules.upsert(...)`: a schedule created at run time (per tenant), which no deploy touches. */
export interface ScheduleInput extends RecurringOptions {
  /** Unique among every schedule (code ones too): 1-200 characters. */
  name: string;
  queue: string;
  /** 5 fields (minute hour day month weekday), 6 with seconds first, or a nickname (`@daily`). */
  cron: string;
}

/** `PgQueue.recurring(queue, cron, options)`: a schedule declared in code, kept by deploys. */
export interface CodeScheduleOptions extends RecurringOptions {
  /** Unique among every schedule (default: the queue's name; required for a queue's second one). */
  name?: string;
  /**
   * Part of the definition: raise it to bring back a definition the database has seen before and
   * replaced (a rollback, a schedule removed then added back as it was). Default 0.
   */
  version?: number;
}

/** A schedule declared in code, checked. */
export interface CodeSchedule {
  readonly definition: ScheduleDefinition;
  readonly hash: string;
}

/** A page of `schedules.list()`. */
export interface ScheduleFilter {
  queue?: string;
  source?: 'code' | 'runtime';
  /** The name after which the page starts (the last name of the previous page). */
  after?: string;
  /** Default 100, at most 1,000. */
  limit?: number;
}

const OPTION_FIELDS = {
  tz: { kind: 'string' },
  payload: { kind: 'opaque', type: 'object' },
  priority: integer(-1_000, 1_000),
  maxAttempts: integer(1, 2_147_483_647),
  maxRuntimeMs: integer(1, 2_147_483_647),
  group: { kind: 'string' },
  missed: oneOf(MISSED_POLICIES),
  missedAfterMs: integer(0, MISSED_AFTER_MAX_MS),
  maxMissedRuns: integer(1, MAX_MISSED_RUNS_MAX),
  overlap: boolean(),
} as const;

const INPUT_OPTIONS = section<ScheduleInput>('a schedule', { ...OPTION_FIELDS, name: { kind: 'string' }, queue: { kind: 'string' }, cron: { kind: 'string' } }, {});
const CODE_OPTIONS = section<CodeScheduleOptions>('@Recurring', { ...OPTION_FIELDS, name: { kind: 'string' }, version: integer(0, 2_147_483_647) }, {});

/** A schedule's name: printable, 1-200 characters. */
function checkName(option: string, name: unknown): string {
  if (typeof name !== 'string' || name.length < 1 || name.length > 200 || /[\u0000-\u001f\u007f]/.test(name)) {
    throw new InvalidOptionError(option, `${JSON.stringify(name)} is not a schedule name`, 'Use 1-200 printable characters, unique among schedules.');
  }
  return name;
}

/** Sorted keys, so a payload's key order is not a change of definition. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical((value as Record<string, unknown>)[k])]));
  }
  return value;
}

const sha = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 32);

/** The definition, checked and with the ticker's defaults filled in. `option` names the errors' source. */
function toDefinition(option: string, name: string, queue: string, cron: unknown, options: RecurringOptions, defaults: TickerConfig, maxPayloadBytes: number): ScheduleDefinition {
  if (!isQueueName(queue)) throw new InvalidOptionError(`${option}.queue`, QUEUE_NAME_INVALID(queue), QUEUE_NAME_FIX());
  const clock = tickClock(option, cron, options.tz ?? 'UTC');
  return {
    name,
    queue,
    cron: clock.pattern,
    tz: clock.tz,
    payloadJson: payloadJson(options.payload ?? null, option, maxPayloadBytes),
    priority: options.priority ?? 0,
    maxAttempts: options.maxAttempts ?? null,
    maxRuntimeMs: options.maxRuntimeMs ?? null,
    group: options.group === undefined ? null : checkGroup(`${option}.group`, options.group),
    missedPolicy: options.missed ?? 'latest',
    missedAfterMs: options.missedAfterMs ?? defaults.missedAfterMs,
    maxMissedRuns: options.maxMissedRuns ?? defaults.maxMissedRuns,
    overlap: options.overlap ?? false,
  };
}

/** Checks `resolveSection` would, with `payload` (any JSON, not only an object) taken out first. */
function fields<T extends { payload?: unknown }>(inner: typeof INPUT_OPTIONS | typeof CODE_OPTIONS, given: unknown, option: string): T {
  requireObject(option, given, `the options of ${inner.owner}`);
  const { payload, ...rest } = given as { payload?: unknown };
  return { ...(resolveSection(inner as never, rest, option) as object), payload } as T;
}

/** A code schedule, checked at registration (`PgQueue.recurring`): errors name `option` (`Reports.nightly`). */
export function codeSchedule(option: string, queue: string, cron: unknown, given: CodeScheduleOptions | undefined, defaults: TickerConfig, maxPayloadBytes: number): CodeSchedule {
  const options = fields<CodeScheduleOptions>(CODE_OPTIONS, given ?? {}, option);
  const name = checkName(`${option}.name`, options.name ?? queue);
  const definition = toDefinition(option, name, queue, cron, options, defaults, maxPayloadBytes);
  const { payloadJson: json, ...rest } = definition;
  const hash = sha(JSON.stringify({ ...rest, payload: canonical(JSON.parse(json)), version: options.version ?? 0 }));
  return { definition, hash };
}

/** One queue's code declaration: its schedules' names and hashes, hashed. */
function fingerprint(schedules: readonly CodeSchedule[]): string {
  return sha(JSON.stringify(schedules.map((s) => [s.definition.name, s.hash]).sort((a, b) => (a[0]! < b[0]! ? -1 : 1))));
}

export interface DeclarationOutcome {
  /** false: a newer declaration of the queue's schedules is in force, and this one changed nothing. */
  applied: boolean;
  written: string[];
  paused: string[];
  /** Names this declaration could not take (a runtime schedule's, or another queue's). */
  refused: string[];
}

/** What the schedules' calls need of the engine. */
export interface ScheduleDeps {
  readonly db: pg.Pool;
  readonly store: Store;
  readonly schema: string;
  readonly channel: string;
  /** NOTIFY payload that wakes every process's ticker. */
  readonly tickerTopic: string;
  readonly defaults: () => TickerConfig;
  readonly maxPayloadBytes: number;
  readonly logger: EngineLogger;
}

/**
 * `PgQueue.schedules` and `QueueService.schedules`: schedules created at run time, and every
 * schedule's state. Every call is async: a bad argument rejects (InvalidOptionError) like a refusal.
 */
export class ScheduleCalls {
  constructor(
    private readonly deps: ScheduleDeps,
    /** Wraps each call in the engine's mapping of database failures. */
    private readonly call: <T>(body: () => Promise<T>) => Promise<T>,
  ) {}

  /**
   * Creates or replaces a runtime schedule. A new pattern or zone starts from the next tick after
   * now; a change of anything else keeps the schedule's next tick. A paused schedule stays paused.
   * Refused with `SCHEDULE_OWNED_BY_CODE` for a name declared in code.
   */
  async upsert(input: ScheduleInput): Promise<ScheduleRecord> {
    const given = fields<ScheduleInput>(INPUT_OPTIONS, input, 'schedule');
    const name = checkName('schedule.name', given.name);
    const definition = toDefinition('schedule', name, given.queue, given.cron, given, this.deps.defaults(), this.deps.maxPayloadBytes);
    return this.call(() =>
      this.inTransaction(async (client) => {
        const { store } = this.deps;
        const locked = await store.lockSchedule(client, { name });
        if (locked?.record.source === 'code') throw new JobStateError('SCHEDULE_OWNED_BY_CODE', SCHEDULE_OWNED_BY_CODE(name, 'schedules.upsert()'));
        const nowMs = locked?.nowMs ?? (await store.databaseNowMs(client));
        const old = locked?.record;
        const sameClock = old !== undefined && old.cron === definition.cron && old.tz === definition.tz && old.nextTickAt !== null;
        const nextMs = sameClock ? old.nextTickAt!.getTime() : (tickClock('schedule', definition.cron, definition.tz).next(nowMs) ?? null);
        const record = await store.writeSchedule(client, { definition, nextMs, hash: null, source: 'runtime' });
        await this.wakeTickers(client);
        return record;
      }),
    );
  }

  /** Deletes a runtime schedule (or a code one its code no longer declares). Jobs it enqueued stay. */
  async remove(name: string): Promise<void> {
    checkName('name', name);
    return this.call(() =>
      this.inTransaction(async (client) => {
        const { store } = this.deps;
        const locked = await this.lockExisting(client, name);
        if (locked.record.source === 'code' && locked.record.pausedReason !== 'removed') {
          throw new JobStateError('SCHEDULE_OWNED_BY_CODE', SCHEDULE_OWNED_BY_CODE(name, 'schedules.remove()'));
        }
        await store.deleteSchedule(client, { name });
      }),
    );
  }

  /** Schedules by name, a page at a time (pass the last name as `after`), of one queue or source or all. */
  async list(filter: ScheduleFilter = {}): Promise<ScheduleRecord[]> {
    requireObject('filter', filter, '{ queue?, source?, after?, limit? }');
    const limit = filter.limit === undefined ? 100 : requireInteger('limit', filter.limit, 1, 1_000);
    const source = filter.source === undefined ? null : requireOneOf('source', filter.source, ['code', 'runtime'] as const);
    return this.call(() => this.deps.store.listSchedules(this.deps.db, { after: filter.after ?? '', queue: filter.queue ?? null, source, limit }));
  }

  /** One schedule, or undefined. */
  async get(name: string): Promise<ScheduleRecord | undefined> {
    checkName('name', name);
    return this.call(() => this.deps.store.getSchedule(this.deps.db, { name }));
  }

  /** Stops a schedule's ticks in every process (code ones too: a deploy keeps an operator's pause). */
  async pause(name: string): Promise<ScheduleRecord> {
    checkName('name', name);
    return this.call(() =>
      this.inTransaction(async (client) => {
        const locked = await this.lockExisting(client, name);
        if (locked.record.paused) return locked.record;
        return this.deps.store.setSchedulePaused(client, { name, reason: 'operator', nextMs: null });
      }),
    );
  }

  /**
   * Lets a schedule tick again from its next tick after now: the ticks of the pause are not
   * missed ticks, they are not run. A code schedule paused because its code dropped it is
   * refused (`SCHEDULE_OWNED_BY_CODE`): declare it again.
   */
  async resume(name: string): Promise<ScheduleRecord> {
    checkName('name', name);
    return this.call(() =>
      this.inTransaction(async (client) => {
        const { store } = this.deps;
        const { record, nowMs } = await this.lockExisting(client, name);
        if (!record.paused) return record;
        if (record.pausedReason === 'removed') throw new JobStateError('SCHEDULE_OWNED_BY_CODE', SCHEDULE_OWNED_BY_CODE(name, 'schedules.resume() of a schedule its code no longer declares'));
        const nextMs = tickClock('schedule', record.cron, record.tz).next(nowMs) ?? null;
        const resumed = await store.setSchedulePaused(client, { name, reason: null, nextMs });
        await this.wakeTickers(client);
        return resumed;
      }),
    );
  }

  /**
   * One queue's code declaration, as a process makes it at start (docs/recurring-jobs.md#deploys):
   * under the queue's declaration lock, it is recorded (stamped by the database the first time it
   * is seen) and applied only if it is the newest: its schedules written (those whose definition
   * changed; a new pattern or zone starts from the next tick after now), and the queue's code
   * schedules it no longer has paused. An older declaration (an older release's process) changes
   * nothing, so old and new processes never undo each other.
   */
  async declare(queue: string, schedules: readonly CodeSchedule[]): Promise<DeclarationOutcome> {
    const outcome = await this.inTransaction(async (client): Promise<DeclarationOutcome> => {
      const { store } = this.deps;
      const none: DeclarationOutcome = { applied: false, written: [], paused: [], refused: [] };
      await store.lockScheduleDeclarations(client, { schema: this.deps.schema, queue });
      const existing = await store.codeSchedulesOfQueue(client, { queue });
      // A queue that never had code schedules records no declaration: the first one it gets is news.
      if (schedules.length === 0 && existing.length === 0) return { ...none, applied: true };
      const declaration = await store.recordScheduleDeclaration(client, { queue, fingerprint: fingerprint(schedules) });
      if (!declaration.newest) {
        this.deps.logger.warn(SCHEDULES_OUTRANKED(queue, declaration.firstSeenAt, declaration.newestFirstSeenAt));
        return none;
      }
      const byName = new Map(existing.map((r) => [r.name, r]));
      const others = await store.scheduleSources(client, { names: schedules.map((s) => s.definition.name).filter((n) => !byName.has(n)) });
      const refused: string[] = [];
      for (const other of others) {
        refused.push(other.name);
        this.deps.logger.error(SCHEDULE_NAME_TAKEN(other.name, queue, other.source === 'runtime' ? 'a schedule created at run time' : `a code schedule of queue "${other.queue}"`));
      }
      const nowMs = await store.databaseNowMs(client);
      const written: string[] = [];
      for (const { definition, hash } of schedules) {
        if (refused.includes(definition.name)) continue;
        const old = byName.get(definition.name);
        const back = old?.pausedReason === 'removed';
        if (old && old.definitionHash === hash && !back) continue;
        // Back from 'removed': its next tick is from now (the time it was gone is not missed).
        const keepNext = old !== undefined && !back && old.cron === definition.cron && old.tz === definition.tz && old.nextTickAt !== null;
        const nextMs = keepNext ? old.nextTickAt!.getTime() : (tickClock(definition.name, definition.cron, definition.tz).next(nowMs) ?? null);
        await store.writeSchedule(client, { definition, nextMs, hash, source: 'code' });
        written.push(definition.name);
      }
      const declared = new Set(schedules.map((s) => s.definition.name));
      const paused: string[] = [];
      for (const old of existing) {
        if (declared.has(old.name) || old.paused) continue;
        await store.setSchedulePaused(client, { name: old.name, reason: 'removed', nextMs: null });
        paused.push(old.name);
      }
      if (written.length > 0) await this.wakeTickers(client);
      return { applied: true, written, paused, refused };
    });
    if (outcome.written.length > 0 || outcome.paused.length > 0) this.deps.logger.log(SCHEDULES_DECLARED(queue, outcome.written, outcome.paused));
    return outcome;
  }

  /** The schedule's row, locked for the caller's transaction, with the database's now; SCHEDULE_NOT_FOUND when there is none. */
  private async lockExisting(client: pg.PoolClient, name: string): Promise<{ record: ScheduleRecord; nowMs: number }> {
    const locked = await this.deps.store.lockSchedule(client, { name });
    if (!locked) throw new JobStateError('SCHEDULE_NOT_FOUND', SCHEDULE_NOT_FOUND(name));
    return locked;
  }

  private inTransaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return transaction(this.deps.db, fn, { statementTimeoutMs: this.deps.store.statementTimeoutMs });
  }

  /** In the caller's transaction: the tickers hear of it once it commits. */
  private wakeTickers(client: pg.PoolClient): Promise<void> {
    return this.deps.store.notify(client, { channel: this.deps.channel, payload: this.deps.tickerTopic });
  }
}
