import type { TraceCarrier } from '../tracing.js';
import { ms, none, type StatementContext } from './statement.js';

/** Queues, producers' inserts, and wake-ups. */

/** One job of an enqueue batch, as the statement reads it (the batch document's fields). */
export interface EnqueueRow {
  q: string;
  /** The payload's JSON text, spliced into the batch document as it is (no second serialisation). */
  json: string;
  pr: number;
  at: string | null;
  d: number | null;
  ma: number | null;
  mr: number | null;
  tc: TraceCarrier | null;
  k: string | null;
  /** The payload shape's version (defineJob), or null. */
  v: number | null;
  /** The job's group, or null. */
  g: string | null;
}

/** The batch as one JSON array: the payloads go in as their JSON text, the rest as JSON values. */
export function toBatchDocument(rows: readonly { json: string }[]): string {
  return `[${rows.map(({ json, ...fields }) => `{"p":${json},${JSON.stringify(fields).slice(1)}`).join(',')}]`;
}

export function enqueueStatements({ define, s, jobs, status }: StatementContext) {
  return {
    declareQueues: define(
      'declare-queues',
      `INSERT INTO ${s}.queues (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING`,
      (p: { queues: string[] }) => [p.queues],
      () => undefined,
    ),

    listQueues: define('list-queues', `SELECT name FROM ${s}.queues`, none, (rows: { name: string }[]) => rows.map((r) => r.name)),

    /**
     * One NOTIFY on its own (autocommit: delivered at once). The listener's probe goes through the
     * pool this way, as producers' wake-ups do. $1 the channel, $2 the payload.
     */
    notify: define('notify', `SELECT pg_notify($1, $2)`, (p: { channel: string; payload: string }) => [p.channel, p.payload], () => undefined),

    /**
     * Several NOTIFYs in one autocommit statement, sent in the array's order (a function scan feeds
     * the aggregate row by row) and delivered when it commits, at once: the cross-process job
     * events of one flush (cluster-events.ts). A notifying commit takes an XID and holds the
     * database's notify lock through its WAL flush; these events are best effort, so the commit
     * does not wait for the flush (`synchronous_commit` off for this transaction only: what
     * `set_config(…, true)` sets ends with it, through a transaction pooler too).
     * $1 the channel, $2 the payloads.
     */
    notifyMany: define(
      'notify-many',
      `SELECT set_config('synchronous_commit', 'off', true) AS sync, count(pg_notify($1, p.payload)) AS n FROM unnest($2::text[]) AS p(payload)`,
      (p: { channel: string; payloads: string[] }) => [p.channel, p.payloads],
      () => undefined,
    ),

    /**
     * Inserts a batch in one round trip and wakes workers in the same transaction: NOTIFY is
     * delivered only when the transaction commits, so a worker never wakes for a job it cannot see.
     * Jobs not yet due go to 'scheduled' (database time decides) and wake the scheduler instead.
     * $1 is a JSON array of { q, p, pr, at, d, ma, mr, tc, k, v, g }; $2 the channel; $3 the scheduler's payload.
     */
    enqueue: define(
      'enqueue',
      `WITH input AS (
         SELECT t.*, coalesce(t.at, now() + ${ms('coalesce(t.d, 0)')}) AS available_at,
                row_number() OVER (PARTITION BY t.q, t.k ORDER BY t.ord) AS rank_in_key
         FROM ROWS FROM (jsonb_to_recordset($1::jsonb)
                AS (q text, p jsonb, pr integer, at timestamptz, d bigint, ma integer, mr integer, tc jsonb, k text, v integer, g text))
              WITH ORDINALITY AS t(q, p, pr, at, d, ma, mr, tc, k, v, g, ord)
       ), batch_keys AS (
         SELECT q, k, count(*)::int AS n FROM input WHERE k IS NOT NULL GROUP BY q, k
       ), key_rows AS (
         -- Producers of one key serialise on its row (ON CONFLICT locks and reads its latest
         -- version), so within a key, ids follow commit order, and the count is exact. Rows are
         -- locked in one global order (queue, key), as every statement that locks key rows does:
         -- two batches of the same keys in opposite orders would otherwise deadlock.
         INSERT INTO ${s}.ordering_keys AS ok (queue_name, ordering_key, unfinished)
         SELECT q, k, n FROM batch_keys ORDER BY q, k
         ON CONFLICT (queue_name, ordering_key) DO UPDATE SET unfinished = ok.unfinished + excluded.unfinished
         RETURNING ok.queue_name, ok.ordering_key, ok.unfinished
       ), inserted AS (
         INSERT INTO ${jobs} (queue_name, payload, priority, status, available_at, max_attempts, max_runtime_ms,
                              trace_context, ordering_key, key_waiting, payload_version, group_key)
         -- A JSON null payload is an SQL NULL out of jsonb_to_recordset: store it as JSON null.
         SELECT i.q, coalesce(i.p, 'null'::jsonb), i.pr,
                CASE WHEN i.available_at > now() THEN 'scheduled'::${status} ELSE 'pending'::${status} END,
                i.available_at, i.ma, i.mr, i.tc, i.k,
                -- The key's head is its first job while it had no unfinished one; the rest wait.
                coalesce(kk.unfinished - bk.n + i.rank_in_key > 1, false),
                i.v, i.g
         FROM input i
           LEFT JOIN batch_keys bk ON bk.q = i.q AND bk.k = i.k
           LEFT JOIN key_rows kk ON kk.queue_name = i.q AND kk.ordering_key = i.k
         ORDER BY i.ord
         RETURNING id, queue_name, status, key_waiting
       ), woken AS (
         SELECT count(pg_notify($2, w.payload)) AS n
         FROM (SELECT DISTINCT CASE WHEN status = 'pending' THEN queue_name ELSE $3 END AS payload
               FROM inserted WHERE NOT (status = 'pending' AND key_waiting)) w
       )
       SELECT i.id FROM inserted i CROSS JOIN woken ORDER BY i.id`,
      (p: { jobs: readonly EnqueueRow[]; channel: string; schedulerTopic: string }) => [toBatchDocument(p.jobs), p.channel, p.schedulerTopic],
      (rows: { id: string }[]) => rows.map((r) => r.id),
    ),
  };
}
