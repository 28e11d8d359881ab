import type { ScheduleQueueStats, ScheduleRecord, LateSchedule } from '../records.js';
import type { MissedPolicy } from '../cron.js';
import { none, type StatementContext } from './statement.js';

/**
 * Recurring jobs: schedules as rows, the ticker's statements, and the code declarations of a
 * deploy (docs/recurring-jobs.md). Times cross this door as epoch milliseconds (the ticker's
 * arithmetic is in ms) and go into SQL as ISO strings, exactly.
 */

/** What a schedule's definition holds, as the runtime API and the code declarations write it. */
export interface ScheduleDefinition {
  name: string;
  queue: string;
  cron: string;
  tz: string;
  /** The payload's JSON text. */
  payloadJson: string;
  priority: number;
  maxAttempts: number | null;
  maxRuntimeMs: number | null;
  group: string | null;
  missedPolicy: MissedPolicy;
  missedAfterMs: number;
  maxMissedRuns: number;
  overlap: boolean;
}

/** A due schedule, as the ticker plans its ticks. */
export interface DueSchedule {
  name: string;
  cron: string;
  tz: string;
  missedPolicy: MissedPolicy;
  missedAfterMs: number;
  maxMissedRuns: number;
  nextTickMs: number;
  /** The database's now(), in ms: what lateness is measured against. */
  nowMs: number;
}

/** What the ticker asks of one due schedule in a pass. */
export interface SchedulePlan {
  name: string;
  /** The next tick the plan was made from: the schedule moves on only if it is still that. */
  expectedMs: number;
  /** The ticks whose job to insert. */
  ticks: readonly number[];
  missed: number;
  nextMs: number | null;
}

/** One schedule the statement advanced (one it did not, another process holds or moved: absent). */
export interface AdvanceOutcome {
  queue: string;
  enqueued: number;
  skipped: number;
  /** The planned ticks whose key this statement claimed; the others already had a row (never a second job). */
  won: number;
}

type ScheduleRow = {
  name: string;
  queue_name: string;
  source: 'code' | 'runtime';
  cron: string;
  tz: string;
  payload: unknown;
  priority: number;
  max_attempts: number | null;
  max_runtime_ms: number | null;
  group_key: string | null;
  missed_policy: MissedPolicy;
  missed_after_ms: number;
  max_missed_runs: number;
  overlap: boolean;
  definition_hash: string | null;
  next_tick_at: Date | null;
  last_tick_at: Date | null;
  last_job_id: string | null;
  ticks_run: string;
  ticks_missed: string;
  ticks_skipped: string;
  paused_at: Date | null;
  paused_reason: 'operator' | 'removed' | null;
  created_at: Date;
  updated_at: Date;
  late_ms: number;
};

/** The columns a ScheduleRecord is read from (the alias of the table is `sc`). */
const RECORD_COLUMNS = `sc.name, sc.queue_name, sc.source, sc.cron, sc.tz, sc.payload, sc.priority, sc.max_attempts, sc.max_runtime_ms,
       sc.group_key, sc.missed_policy, sc.missed_after_ms, sc.max_missed_runs, sc.overlap, sc.definition_hash,
       sc.next_tick_at, sc.last_tick_at, sc.last_job_id::text AS last_job_id, sc.ticks_run::text AS ticks_run,
       sc.ticks_missed::text AS ticks_missed, sc.ticks_skipped::text AS ticks_skipped, sc.paused_at, sc.paused_reason,
       sc.created_at, sc.updated_at,
       CASE WHEN sc.paused_at IS NULL AND sc.next_tick_at <= now()
            THEN extract(epoch FROM now() - sc.next_tick_at) * 1000 ELSE 0 END::float8 AS late_ms`;

function toRecord(r: ScheduleRow): ScheduleRecord {
  return {
    name: r.name,
    queue: r.queue_name,
    source: r.source,
    cron: r.cron,
    tz: r.tz,
    payload: r.payload,
    priority: r.priority,
    maxAttempts: r.max_attempts,
    maxRuntimeMs: r.max_runtime_ms,
    group: r.group_key,
    missed: r.missed_policy,
    missedAfterMs: r.missed_after_ms,
    maxMissedRuns: r.max_missed_runs,
    overlap: r.overlap,
    definitionHash: r.definition_hash,
    nextTickAt: r.next_tick_at,
    lastTickAt: r.last_tick_at,
    lastJobId: r.last_job_id,
    ticks: { run: Number(r.ticks_run), missed: Number(r.ticks_missed), skipped: Number(r.ticks_skipped) },
    paused: r.paused_at !== null,
    pausedAt: r.paused_at,
    pausedReason: r.paused_reason,
    lateMs: Math.max(0, Math.round(r.late_ms)),
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function scheduleStatements({ define, s, jobs, status }: StatementContext) {
  const definitionValues = (d: ScheduleDefinition) => [
    d.name,
    d.queue,
    d.cron,
    d.tz,
    d.payloadJson,
    d.priority,
    d.maxAttempts,
    d.maxRuntimeMs,
    d.group,
    d.missedPolicy,
    d.missedAfterMs,
    d.maxMissedRuns,
    d.overlap,
  ];
  const one = (rows: ScheduleRow[]) => (rows[0] ? toRecord(rows[0]) : undefined);

  return {
    /** The database's clock, in ms: every schedule's next tick is computed from it, never from a process's clock. */
    databaseNowMs: define('database-now', `SELECT (extract(epoch FROM now()) * 1000)::float8 AS now`, none, (rows: { now: number }[]) => rows[0]!.now),

    /** The active schedules whose next tick is due, oldest tick first, with the database's now. */
    dueSchedules: define(
      'due-schedules',
      `SELECT sc.name, sc.cron, sc.tz, sc.missed_policy, sc.missed_after_ms, sc.max_missed_runs,
              (extract(epoch FROM sc.next_tick_at) * 1000)::float8 AS next_ms, (extract(epoch FROM now()) * 1000)::float8 AS now_ms
       FROM ${s}.schedules sc
       WHERE sc.paused_at IS NULL AND sc.next_tick_at <= now()
       ORDER BY sc.next_tick_at
       LIMIT $1`,
      (p: { limit: number }) => [p.limit],
      (rows: { name: string; cron: string; tz: string; missed_policy: MissedPolicy; missed_after_ms: number; max_missed_runs: number; next_ms: number; now_ms: number }[]): DueSchedule[] =>
        rows.map((r) => ({
          name: r.name,
          cron: r.cron,
          tz: r.tz,
          missedPolicy: r.missed_policy,
          missedAfterMs: r.missed_after_ms,
          maxMissedRuns: r.max_missed_runs,
          nextTickMs: r.next_ms,
          nowMs: r.now_ms,
        })),
    ),

    /** Milliseconds until the next tick of any active schedule (negative: one is due), or undefined when none has one. */
    nextScheduleInMs: define(
      'next-schedule-in',
      `SELECT (extract(epoch FROM min(next_tick_at) - now()) * 1000)::float8 AS ms FROM ${s}.schedules WHERE paused_at IS NULL`,
      none,
      (rows: { ms: number | null }[]) => rows[0]?.ms ?? undefined,
    ),

    /**
     * The tick statement: the plans of a pass's due schedules in one statement (one commit and one
     * WAL flush per pass, not per schedule), each schedule's part all or nothing.
     *
     * - `s` takes each planned schedule's row only if its next tick is still the one the ticker
     *   planned from and it is active, with SKIP LOCKED: processes racing the same ticks do not
     *   queue up behind the winner, they find those rows gone and move on; a plan made from a stale
     *   read changes nothing (the compare is re-checked on the row's newest version).
     * - `busy`: without `overlap`, the previous tick's job still scheduled, pending or running
     *   makes every tick of the schedule in this pass a skipped one (counted, no job).
     * - `won` claims the (schedule, tick) keys first, ON CONFLICT DO NOTHING: a tick that already
     *   has a row never gets a second job, whatever moved the schedule back. The job's id is drawn
     *   here (the jobs' identity sequence), so the key row names its job.
     * - `inserted` adds the jobs of the ticks won, due at their tick (a late tick is first in line,
     *   and claim_wait shows how late it ran); `advanced` moves each schedule on: its next tick,
     *   the last one handled, its last job and its counts. `woken` wakes each queue's workers once,
     *   when the transaction commits.
     *
     * $1-$4 per schedule: name, the expected next tick, ticks missed, the new next tick (NULL: none
     * left); $5-$6 per tick to run: its schedule's name, the tick (ISO); $7 the channel.
     */
    advanceSchedules: define(
      'advance-schedules',
      `WITH plan AS (
         SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::timestamptz[]) AS p(name, expected, missed, next)
       ), s AS (
         SELECT sc.name, sc.queue_name, sc.payload, sc.priority, sc.max_attempts, sc.max_runtime_ms, sc.group_key, sc.overlap,
                sc.last_job_id, p.missed, p.next
         FROM ${s}.schedules sc JOIN plan p ON p.name = sc.name
         WHERE sc.next_tick_at = p.expected AND sc.paused_at IS NULL
         ORDER BY sc.name
         FOR UPDATE OF sc SKIP LOCKED
       ), busy AS (
         SELECT s.name, NOT s.overlap AND EXISTS (
                  SELECT 1 FROM ${jobs} j WHERE j.id = s.last_job_id AND j.status IN ('scheduled', 'pending', 'running')
                ) AS b
         FROM s
       ), won AS (
         INSERT INTO ${s}.schedule_ticks (schedule_name, tick_at, job_id, skipped)
         SELECT t.name, t.tick, CASE WHEN busy.b THEN NULL ELSE nextval(pg_get_serial_sequence('${jobs}', 'id')) END, busy.b
         FROM unnest($5::text[], $6::timestamptz[]) AS t(name, tick) JOIN busy ON busy.name = t.name
         ORDER BY t.name, t.tick
         ON CONFLICT (schedule_name, tick_at) DO NOTHING
         RETURNING schedule_name, tick_at, job_id, skipped
       ), inserted AS (
         INSERT INTO ${jobs} (id, queue_name, payload, priority, status, available_at, max_attempts, max_runtime_ms, group_key)
         OVERRIDING SYSTEM VALUE
         SELECT w.job_id, s.queue_name, s.payload, s.priority, 'pending'::${status}, w.tick_at, s.max_attempts, s.max_runtime_ms, s.group_key
         FROM won w JOIN s ON s.name = w.schedule_name
         WHERE w.job_id IS NOT NULL
         ORDER BY w.job_id
         RETURNING id
       ), per AS (
         SELECT w.schedule_name AS name, max(w.tick_at) AS last_tick, max(w.job_id) AS last_job,
                count(w.job_id) AS run, count(*) FILTER (WHERE w.skipped) AS skipped, count(*) AS won
         FROM won w GROUP BY w.schedule_name
       ), advanced AS (
         UPDATE ${s}.schedules AS sc
         SET next_tick_at = s.next,
             last_tick_at = coalesce(per.last_tick, sc.last_tick_at),
             last_job_id = coalesce(per.last_job, sc.last_job_id),
             ticks_run = sc.ticks_run + coalesce(per.run, 0),
             ticks_skipped = sc.ticks_skipped + coalesce(per.skipped, 0),
             ticks_missed = sc.ticks_missed + s.missed,
             updated_at = now()
         FROM s LEFT JOIN per ON per.name = s.name
         WHERE sc.name = s.name
         RETURNING sc.name, sc.queue_name, coalesce(per.run, 0)::int AS enqueued, coalesce(per.skipped, 0)::int AS skipped, coalesce(per.won, 0)::int AS won
       ), woken AS (
         SELECT count(pg_notify($7, q.queue_name)) AS n
         FROM (SELECT DISTINCT a.queue_name FROM advanced a WHERE a.enqueued > 0) q
       )
       SELECT a.name, a.queue_name AS queue, a.enqueued, a.skipped, a.won
       FROM advanced a CROSS JOIN woken`,
      (p: { plans: readonly SchedulePlan[]; channel: string }) => {
        const ticks = p.plans.flatMap((plan) => plan.ticks.map((t) => [plan.name, iso(t)] as const));
        return [
          p.plans.map((plan) => plan.name),
          p.plans.map((plan) => iso(plan.expectedMs)),
          p.plans.map((plan) => plan.missed),
          p.plans.map((plan) => iso(plan.nextMs)),
          ticks.map(([name]) => name),
          ticks.map(([, tick]) => tick),
          p.channel,
        ];
      },
      (rows: { name: string; queue: string; enqueued: number; skipped: number; won: number }[]): Map<string, AdvanceOutcome> =>
        new Map(rows.map((r) => [r.name, { queue: r.queue, enqueued: r.enqueued, skipped: r.skipped, won: r.won }])),
    ),

    /** Tick rows handled longer ago than the retention, a bounded batch: how many it deleted. */
    pruneScheduleTicks: define(
      'prune-schedule-ticks',
      `WITH old AS (
         SELECT schedule_name, tick_at FROM ${s}.schedule_ticks
         WHERE handled_at < now() - $1 * interval '1 millisecond'
         ORDER BY handled_at LIMIT $2
         FOR UPDATE SKIP LOCKED
       )
       DELETE FROM ${s}.schedule_ticks t USING old WHERE t.schedule_name = old.schedule_name AND t.tick_at = old.tick_at
       RETURNING 1 AS deleted`,
      (p: { retentionMs: number; limit: number }) => [p.retentionMs, p.limit],
      (rows: unknown[]) => rows.length,
    ),

    /** One schedule, locked for the caller's transaction (an upsert, a pause, a resume), with the database's now. */
    lockSchedule: define(
      'lock-schedule',
      `SELECT ${RECORD_COLUMNS}, (extract(epoch FROM now()) * 1000)::float8 AS now_ms FROM ${s}.schedules sc WHERE sc.name = $1 FOR UPDATE`,
      (p: { name: string }) => [p.name],
      (rows: (ScheduleRow & { now_ms: number })[]) => (rows[0] ? { record: toRecord(rows[0]), nowMs: rows[0].now_ms } : undefined),
    ),

    getSchedule: define(
      'get-schedule',
      `SELECT ${RECORD_COLUMNS} FROM ${s}.schedules sc WHERE sc.name = $1`,
      (p: { name: string }) => [p.name],
      one,
    ),

    /** A page of schedules by name (of one queue, or all; of one source, or both), after `after`. */
    listSchedules: define(
      'list-schedules',
      `SELECT ${RECORD_COLUMNS} FROM ${s}.schedules sc
       WHERE sc.name > $1 AND ($2::text IS NULL OR sc.queue_name = $2) AND ($3::text IS NULL OR sc.source = $3)
       ORDER BY sc.name LIMIT $4`,
      (p: { after: string; queue: string | null; source: 'code' | 'runtime' | null; limit: number }) => [p.after, p.queue, p.source, p.limit],
      (rows: ScheduleRow[]) => rows.map(toRecord),
      { planPerCall: true },
    ),

    /**
     * Writes a schedule's definition: a new row, or the existing one of the same source (the
     * caller checked the source under the row's lock). `$14` is its next tick (the caller keeps the
     * old one when the pattern and zone did not change), `$15` the code definition's hash. The
     * queue is declared in the same statement.
     */
    writeSchedule: define(
      'write-schedule',
      `WITH q AS (
         INSERT INTO ${s}.queues (name) VALUES ($2) ON CONFLICT (name) DO NOTHING
       )
       INSERT INTO ${s}.schedules AS sc (name, queue_name, cron, tz, payload, priority, max_attempts, max_runtime_ms, group_key,
                                         missed_policy, missed_after_ms, max_missed_runs, overlap, next_tick_at, definition_hash, source)
       VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12, $13, $14::timestamptz, $15, $16)
       ON CONFLICT (name) DO UPDATE SET
         queue_name = excluded.queue_name, cron = excluded.cron, tz = excluded.tz, payload = excluded.payload,
         priority = excluded.priority, max_attempts = excluded.max_attempts, max_runtime_ms = excluded.max_runtime_ms,
         group_key = excluded.group_key, missed_policy = excluded.missed_policy, missed_after_ms = excluded.missed_after_ms,
         max_missed_runs = excluded.max_missed_runs, overlap = excluded.overlap, next_tick_at = excluded.next_tick_at,
         definition_hash = excluded.definition_hash,
         -- Declared again by the code that had dropped it: active again. An operator's pause stays.
         paused_at = CASE WHEN sc.paused_reason = 'removed' THEN NULL ELSE sc.paused_at END,
         paused_reason = CASE WHEN sc.paused_reason = 'removed' THEN NULL ELSE sc.paused_reason END,
         updated_at = now()
       RETURNING ${RECORD_COLUMNS}`,
      (p: { definition: ScheduleDefinition; nextMs: number | null; hash: string | null; source: 'code' | 'runtime' }) => [
        ...definitionValues(p.definition),
        iso(p.nextMs),
        p.hash,
        p.source,
      ],
      (rows: ScheduleRow[]) => toRecord(rows[0]!),
    ),

    /** Pauses (`$2` the reason) or resumes (`$2` NULL, `$3` its next tick from now) a schedule. */
    setSchedulePaused: define(
      'set-schedule-paused',
      `UPDATE ${s}.schedules AS sc
       SET paused_at = CASE WHEN $2::text IS NULL THEN NULL ELSE coalesce(sc.paused_at, now()) END,
           paused_reason = $2,
           next_tick_at = CASE WHEN $2::text IS NULL THEN $3::timestamptz ELSE sc.next_tick_at END,
           updated_at = now()
       WHERE sc.name = $1
       RETURNING ${RECORD_COLUMNS}`,
      (p: { name: string; reason: 'operator' | 'removed' | null; nextMs: number | null }) => [p.name, p.reason, iso(p.nextMs)],
      (rows: ScheduleRow[]) => toRecord(rows[0]!),
    ),

    /** Deletes a schedule (its tick rows stay until their retention: a schedule made again under its name cannot rerun a tick). */
    deleteSchedule: define(
      'delete-schedule',
      `DELETE FROM ${s}.schedules WHERE name = $1 RETURNING name`,
      (p: { name: string }) => [p.name],
      (rows: { name: string }[]) => rows.length > 0,
    ),

    /** Serialises the code declarations of one queue (a transaction's advisory lock, released at its end). */
    lockScheduleDeclarations: define(
      'lock-declarations',
      `SELECT pg_advisory_xact_lock(hashtextextended('pgqueue.schedule-declarations:' || $1 || ':' || $2, 0))`,
      (p: { schema: string; queue: string }) => [p.schema, p.queue],
      () => undefined,
    ),

    /**
     * Records a code declaration of a queue's schedules (stamped the first time it is seen) and
     * says whether it is the newest: the one first seen last. Ties (the same microsecond) go to
     * the greater fingerprint, so every process agrees.
     */
    recordScheduleDeclaration: define(
      'record-declaration',
      `WITH added AS (
         INSERT INTO ${s}.schedule_declarations (queue_name, fingerprint) VALUES ($1, $2)
         ON CONFLICT (queue_name, fingerprint) DO NOTHING
         RETURNING first_seen_at
       ), this AS (
         SELECT first_seen_at FROM added
         UNION ALL
         SELECT first_seen_at FROM ${s}.schedule_declarations WHERE queue_name = $1 AND fingerprint = $2
       ), newest AS (
         SELECT fingerprint, first_seen_at FROM ${s}.schedule_declarations WHERE queue_name = $1
         ORDER BY first_seen_at DESC, fingerprint DESC LIMIT 1
       )
       -- A row added by this statement is not in newest's snapshot: stamped last, it is the newest.
       SELECT (SELECT first_seen_at FROM this LIMIT 1) AS seen,
              EXISTS (SELECT 1 FROM added) OR coalesce((SELECT fingerprint FROM newest) = $2, true) AS is_newest,
              CASE WHEN EXISTS (SELECT 1 FROM added) THEN NULL ELSE (SELECT first_seen_at FROM newest) END AS newest_seen`,
      (p: { queue: string; fingerprint: string }) => [p.queue, p.fingerprint],
      (rows: { seen: Date; is_newest: boolean; newest_seen: Date | null }[]) => {
        const r = rows[0]!;
        return { firstSeenAt: r.seen, newest: r.is_newest, newestFirstSeenAt: r.newest_seen ?? r.seen };
      },
    ),

    /** The code schedules of a queue, by name, locked for the declaration's transaction. */
    codeSchedulesOfQueue: define(
      'code-schedules-of-queue',
      `SELECT ${RECORD_COLUMNS} FROM ${s}.schedules sc WHERE sc.queue_name = $1 AND sc.source = 'code' ORDER BY sc.name FOR UPDATE`,
      (p: { queue: string }) => [p.queue],
      (rows: ScheduleRow[]) => rows.map(toRecord),
    ),

    /** The sources of the named schedules (to refuse a code declaration of a runtime schedule's name). */
    scheduleSources: define(
      'schedule-sources',
      `SELECT name, source, queue_name FROM ${s}.schedules WHERE name = ANY($1::text[])`,
      (p: { names: string[] }) => [p.names],
      (rows: { name: string; source: 'code' | 'runtime'; queue_name: string }[]) => rows.map((r) => ({ name: r.name, source: r.source, queue: r.queue_name })),
    ),

    /** Per queue: schedules active and paused, the latest one's lateness, the next and last ticks, and the tick counts. */
    scheduleQueueStats: define(
      'schedule-queue-stats',
      `SELECT queue_name AS queue,
              count(*) FILTER (WHERE paused_at IS NULL)::int AS active,
              count(*) FILTER (WHERE paused_at IS NOT NULL)::int AS paused,
              coalesce(max(extract(epoch FROM now() - next_tick_at) * 1000) FILTER (WHERE paused_at IS NULL AND next_tick_at <= now()), 0)::float8 AS max_late_ms,
              min(next_tick_at) FILTER (WHERE paused_at IS NULL) AS next_tick_at,
              max(last_tick_at) AS last_tick_at,
              sum(ticks_run)::float8 AS run, sum(ticks_missed)::float8 AS missed, sum(ticks_skipped)::float8 AS skipped
       FROM ${s}.schedules GROUP BY queue_name ORDER BY queue_name`,
      none,
      (rows: { queue: string; active: number; paused: number; max_late_ms: number; next_tick_at: Date | null; last_tick_at: Date | null; run: number; missed: number; skipped: number }[]): ScheduleQueueStats[] =>
        rows.map((r) => ({
          queue: r.queue,
          active: r.active,
          paused: r.paused,
          maxLateMs: Math.max(0, Math.round(r.max_late_ms)),
          nextTickAt: r.next_tick_at,
          lastTickAt: r.last_tick_at,
          ticks: { run: r.run, missed: r.missed, skipped: r.skipped },
        })),
    ),

    /** The active schedules whose next tick is more than `$1` ms late, the latest first, at most `$2`. */
    lateSchedules: define(
      'late-schedules',
      `SELECT name, queue_name AS queue, next_tick_at, (extract(epoch FROM now() - next_tick_at) * 1000)::float8 AS late_ms
       FROM ${s}.schedules
       WHERE paused_at IS NULL AND next_tick_at <= now() - $1 * interval '1 millisecond'
       ORDER BY next_tick_at LIMIT $2`,
      (p: { lateByMs: number; limit: number }) => [p.lateByMs, p.limit],
      (rows: { name: string; queue: string; next_tick_at: Date; late_ms: number }[]): LateSchedule[] =>
        rows.map((r) => ({ name: r.name, queue: r.queue, nextTickAt: r.next_tick_at, lateMs: Math.round(r.late_ms) })),
    ),
  };
}
