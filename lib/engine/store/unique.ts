import type { TraceCarrier } from '../tracing.js';
import { toBatchDocument } from './enqueue.js';
import { ms, type StatementContext } from './statement.js';

/**
 * Unique and debounced jobs (migration 0012): inserts that a key can turn into "deduplicated", and
 * the reads that find a key's holder. Jobs without a key never come here (the plain enqueue
 * statement is unchanged), so the feature costs them nothing.
 */

/** The scopes a unique key is held in (see 0011's comment for what each is in states and tokens). */
export type UniqueScope = 'pending' | 'unfinished' | 'ever';

/** One job with a unique key (a batch's jobs without one go through the plain enqueue). */
export interface UniqueRow {
  q: string;
  /** The payload's JSON text, spliced into the batch document as it is. */
  json: string;
  pr: number;
  at: string | null;
  d: number | null;
  ma: number | null;
  mr: number | null;
  tc: TraceCarrier | null;
  v: number | null;
  g: string | null;
  uk: string;
  us: UniqueScope;
  /** The key's period in ms (its buckets start at multiples of it since the epoch), or null. */
  up: number | null;
}

/**
 * A unique row's outcome: the job's id and whether this statement inserted it, or `id` null when
 * the key was held by a job this statement could not see (a concurrent producer's, committed
 * while it waited: see enqueueUnique). `periodMs` is the start of the key's bucket in epoch ms
 * (null without a period), for the follow-up read.
 */
export interface UniqueOutcome {
  id: string | null;
  created: boolean;
  periodMs: number | null;
}

/** One debounce key of a batch (the batch's enqueues of a key collapsed into one: the last one's fields). */
export interface DebounceRow {
  q: string;
  json: string;
  pr: number;
  ma: number | null;
  mr: number | null;
  tc: TraceCarrier | null;
  v: number | null;
  g: string | null;
  dk: string;
  /** The run time from now, in ms. */
  d: number;
  /** The run time is never later than this long after the job's first enqueue (null: no bound). */
  mw: number | null;
}

/** What a debounce upsert did to a key: the job inserted (`created`) or updated; absent: refused by the guard. */
export interface DebounceOutcome {
  q: string;
  dk: string;
  id: string;
  created: boolean;
}

/** A debounced job locked for a merge: its id and stored payload. */
export interface DebouncedJob {
  q: string;
  dk: string;
  id: string;
  payload: unknown;
}

// The index predicates of 0011, written once: a read that looks a key up uses its index only if
// its WHERE implies the predicate, so the reads repeat it as it is.
const UNIQUE_HELD = (j: string) => `${j}.unique_key IS NOT NULL
         AND (${j}.unique_scope = 'ever'
              OR (${j}.status IN ('scheduled', 'pending') AND ${j}.lease_token = 0)
              OR (${j}.unique_scope = 'unfinished' AND ${j}.status IN ('scheduled', 'pending', 'running', 'dead')))`;
const DEBOUNCE_OPEN = (j?: string) => {
  const c = j ? `${j}.` : '';
  return `${c}debounce_key IS NOT NULL AND ${c}status IN ('scheduled', 'pending') AND ${c}lease_token = 0`;
};

/**
 * A key without a period is stored with this bucket, so that (queue, key, bucket) is a plain
 * equality for the unique index and its lookups (a NULL would need NULLS NOT DISTINCT, which a
 * lookup cannot use as an equality).
 */
const NO_PERIOD = `'-infinity'::timestamptz`;

/**
 * A debounced job's new run time in the upsert's DO UPDATE (j the job, excluded the new row): the
 * new enqueue's, but never later than its max wait after the job's first enqueue, nor before now.
 * The max wait is the new enqueue's, read from the statement's input (excluded has the table's
 * columns only).
 */
const MOVED_RUN_TIME = `least(excluded.available_at,
                              greatest(now(), coalesce(j.created_at + (SELECT ${ms('i.mw')} FROM input i WHERE i.q = excluded.queue_name AND i.dk = excluded.debounce_key),
                                                       'infinity'::timestamptz)))`;

export function uniqueStatements({ define, jobs, status }: StatementContext) {
  return {
    /**
     * Inserts a batch of jobs with unique keys in one round trip, and wakes workers as the plain
     * enqueue does. A key held by a job this statement sees is not inserted at all (its holder's
     * id comes back); of the batch's own jobs with one key (and bucket), the first is inserted and
     * the others share its outcome. Jobs are inserted in key order, so two batches of the same
     * keys never wait on each other in opposite orders (a deadlock).
     *
     * ON CONFLICT DO NOTHING settles a race with a concurrent producer of the key (it waits for
     * the other transaction), but the winner's row is newer than this statement's snapshot: such
     * a row comes back with id null, and the caller reads the holder in a following statement
     * (uniqueHolders). $1 a JSON array of UniqueRow; $2 the channel; $3 the scheduler's payload.
     */
    enqueueUnique: define(
      'enqueue-unique',
      `WITH input AS (
         SELECT t.*, coalesce(t.at, now() + ${ms('coalesce(t.d, 0)')}) AS available_at,
                CASE WHEN t.up IS NULL THEN ${NO_PERIOD} ELSE date_bin(${ms('t.up')}, now(), timestamptz 'epoch') END AS period
         FROM ROWS FROM (jsonb_to_recordset($1::jsonb)
                AS (q text, p jsonb, pr integer, at timestamptz, d bigint, ma integer, mr integer, tc jsonb, v integer, g text,
                    uk text, us text, up bigint))
              WITH ORDINALITY AS t(q, p, pr, at, d, ma, mr, tc, v, g, uk, us, up, ord)
       ), ranked AS (
         SELECT i.*, row_number() OVER (PARTITION BY i.q, i.uk, i.period ORDER BY i.ord) AS key_rank FROM input i
       ), held AS (
         SELECT r.ord, h.id
         FROM ranked r
           CROSS JOIN LATERAL (SELECT j.id FROM ${jobs} j
                               WHERE j.queue_name = r.q AND j.unique_key = r.uk AND j.unique_period = r.period AND ${UNIQUE_HELD('j')}
                               LIMIT 1) h
         WHERE r.key_rank = 1
       ), inserted AS (
         INSERT INTO ${jobs} (queue_name, payload, priority, status, available_at, max_attempts, max_runtime_ms,
                              trace_context, payload_version, group_key, unique_key, unique_scope, unique_period)
         SELECT r.q, coalesce(r.p, 'null'::jsonb), r.pr,
                CASE WHEN r.available_at > now() THEN 'scheduled'::${status} ELSE 'pending'::${status} END,
                r.available_at, r.ma, r.mr, r.tc, r.v, r.g, r.uk, r.us, r.period
         FROM ranked r
         WHERE r.key_rank = 1 AND NOT EXISTS (SELECT 1 FROM held WHERE held.ord = r.ord)
         ORDER BY r.q, r.uk, r.period
         ON CONFLICT DO NOTHING
         RETURNING id, queue_name, status, unique_key, unique_period
       ), woken AS (
         SELECT count(pg_notify($2, w.payload)) AS n
         FROM (SELECT DISTINCT CASE WHEN status = 'pending' THEN queue_name ELSE $3 END AS payload FROM inserted) w
       ), firsts AS (
         SELECT r.q, r.uk, r.period, coalesce(n.id, h.id) AS id, n.id IS NOT NULL AS created
         FROM ranked r
           LEFT JOIN inserted n ON n.queue_name = r.q AND n.unique_key = r.uk AND n.unique_period = r.period
           LEFT JOIN held h ON h.ord = r.ord
         WHERE r.key_rank = 1
       )
       SELECT f.id::text AS id, f.created AND r.key_rank = 1 AS created,
              CASE WHEN r.up IS NULL THEN NULL ELSE (extract(epoch FROM r.period) * 1000)::float8 END AS period_ms
       FROM ranked r
         JOIN firsts f ON f.q = r.q AND f.uk = r.uk AND f.period = r.period
         CROSS JOIN woken
       ORDER BY r.ord`,
      (p: { jobs: readonly UniqueRow[]; channel: string; schedulerTopic: string }) => [toBatchDocument(p.jobs), p.channel, p.schedulerTopic],
      (rows: { id: string | null; created: boolean; period_ms: number | null }[]): UniqueOutcome[] =>
        rows.map((r) => ({ id: r.id, created: r.created, periodMs: r.period_ms })),
    ),

    /**
     * The jobs holding keys now (each `{ q, uk, pe }`: queue, key, bucket start in epoch ms or
     * null), in input order; null where none does (the holder a producer raced has already let go
     * of the key: the caller inserts again). A statement of its own, so it sees what committed
     * while enqueueUnique waited.
     */
    uniqueHolders: define(
      'unique-holders',
      `SELECT h.id::text AS id
       FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (q text, uk text, pe bigint)) WITH ORDINALITY AS k(q, uk, pe, ord)
         LEFT JOIN LATERAL (SELECT j.id FROM ${jobs} j
                            WHERE j.queue_name = k.q AND j.unique_key = k.uk
                              AND j.unique_period = CASE WHEN k.pe IS NULL THEN ${NO_PERIOD} ELSE timestamptz 'epoch' + ${ms('k.pe')} END
                              AND ${UNIQUE_HELD('j')}
                            LIMIT 1) h ON true
       ORDER BY k.ord`,
      (p: { keys: readonly { q: string; uk: string; pe: number | null }[] }) => [JSON.stringify(p.keys)],
      (rows: { id: string | null }[]) => rows.map((r) => r.id),
    ),

    /**
     * Inserts each debounce key's job, or moves the one that holds the key (scheduled or pending,
     * never claimed): its run time becomes the new one, never later than `mw` after its first
     * enqueue (created_at) nor earlier than now; its payload and options become the new ones. A
     * job that is due again stays pending, one whose run time moved on goes back to scheduled (not
     * claimable, the scheduler promotes it when due). A claimed job is out of the index's scope:
     * the key then gets a new job. Keys in (queue, key) order, so batches never deadlock. With
     * `guarded`, a key's job is moved only if it is one of `locked` (a merge read it under lock):
     * a job that appeared since is locked here and left as it was, and the key is missing from the
     * result (the caller merges again). Wakes workers or the scheduler as the plain enqueue does.
     */
    enqueueDebounced: define(
      'enqueue-debounced',
      `WITH input AS (
         SELECT t.*, now() + ${ms('least(t.d, coalesce(t.mw, t.d))')} AS available_at
         FROM jsonb_to_recordset($1::jsonb)
                AS t(q text, p jsonb, pr integer, ma integer, mr integer, tc jsonb, v integer, g text, dk text, d bigint, mw bigint)
       ), upserted AS (
         INSERT INTO ${jobs} AS j (queue_name, payload, priority, status, available_at, max_attempts, max_runtime_ms,
                                   trace_context, payload_version, group_key, debounce_key)
         SELECT i.q, coalesce(i.p, 'null'::jsonb), i.pr,
                CASE WHEN i.available_at > now() THEN 'scheduled'::${status} ELSE 'pending'::${status} END,
                i.available_at, i.ma, i.mr, i.tc, i.v, i.g, i.dk
         FROM input i
         ORDER BY i.q, i.dk
         ON CONFLICT (queue_name, debounce_key) WHERE ${DEBOUNCE_OPEN()}
         DO UPDATE SET payload = excluded.payload, priority = excluded.priority, max_attempts = excluded.max_attempts,
                       max_runtime_ms = excluded.max_runtime_ms, trace_context = excluded.trace_context,
                       payload_version = excluded.payload_version, group_key = excluded.group_key,
                       available_at = ${MOVED_RUN_TIME},
                       status = CASE WHEN ${MOVED_RUN_TIME} > now() THEN 'scheduled'::${status} ELSE 'pending'::${status} END
         WHERE NOT $4::boolean OR j.id = ANY ($5::bigint[])
         RETURNING j.id, j.queue_name, j.debounce_key, j.status, j.xmax = 0 AS created
       ), woken AS (
         SELECT count(pg_notify($2, w.payload)) AS n
         FROM (SELECT DISTINCT CASE WHEN status = 'pending' THEN queue_name ELSE $3 END AS payload FROM upserted) w
       )
       SELECT u.id::text AS id, u.queue_name, u.debounce_key, u.created FROM upserted u CROSS JOIN woken`,
      (p: { jobs: readonly DebounceRow[]; channel: string; schedulerTopic: string; locked: readonly string[] | null }) => [
        toBatchDocument(p.jobs),
        p.channel,
        p.schedulerTopic,
        p.locked !== null,
        p.locked ?? [],
      ],
      (rows: { id: string; queue_name: string; debounce_key: string; created: boolean }[]): DebounceOutcome[] =>
        rows.map((r) => ({ q: r.queue_name, dk: r.debounce_key, id: r.id, created: r.created })),
    ),

    /**
     * Locks the jobs holding debounce keys (`{ q, dk }`) and reads their payloads, for a merge:
     * in (queue, key) order, so two merging producers never deadlock. A job a claim takes while
     * this waits is read again and left out (it is running: the key gets a new job). Claims skip
     * a locked job (SKIP LOCKED) until the caller's transaction ends.
     */
    lockDebounced: define(
      'lock-debounced',
      `SELECT j.id::text AS id, j.queue_name, j.debounce_key, j.payload
       FROM ${jobs} j JOIN jsonb_to_recordset($1::jsonb) AS k(q text, dk text) ON j.queue_name = k.q AND j.debounce_key = k.dk
       WHERE ${DEBOUNCE_OPEN('j')}
       ORDER BY j.queue_name, j.debounce_key
       FOR UPDATE OF j`,
      (p: { keys: readonly { q: string; dk: string }[] }) => [JSON.stringify(p.keys)],
      (rows: { id: string; queue_name: string; debounce_key: string; payload: unknown }[]): DebouncedJob[] =>
        rows.map((r) => ({ q: r.queue_name, dk: r.debounce_key, id: r.id, payload: r.payload })),
    ),
  };
}
