import { fence, fenceLossOrMissing, lost, type FencedOutcome, type FenceParams } from './fence.js';
import { ms, none, type StatementContext } from './statement.js';

/**
 * Flows (docs/flows.md): a parent job that waits for its children. A waiting parent is
 * 'scheduled' with available_at 'infinity' and awaiting_children (never due, never claimed). A
 * child's completion writes only the child; settleParents, run after it committed (and by the
 * flows pass, for what a crash left), makes a parent whose children are all resolved 'pending'.
 * Taken after the commit, the last child to commit always sees every sibling resolved, so no
 * counter on the parent is needed, and no completion ever waits on a parent's row.
 */

/** One node of a flow level, as insertFlowLevel reads it (a JSON document, as enqueue's). */
export interface FlowRow {
  q: string;
  /** The payload's JSON text, spliced in as it is. */
  json: string;
  pr: number;
  d: number | null;
  ma: number | null;
  mr: number | null;
  tc: unknown;
  v: number | null;
  g: string | null;
  /** The parent's id (a node of the level above), or null for the root. */
  parent: string | null;
  /** It has children: it waits for them. */
  waits: boolean;
  /** A dead child fails it (code CHILD_DEAD) instead of blocking it. */
  failOnDead: boolean;
}

/** A child as its parent's handler reads it. */
export interface ChildResultRow {
  id: string;
  queue: string;
  status: string;
  result: unknown;
  /** Resolved without succeeding: discarded (or cancelled) by an operator; its result is null. */
  discarded: boolean;
}

export interface CompleteChildParams extends FenceParams {
  /** The handler's return value, as JSON text (null: none). */
  result: string | null;
}

/** Unresolved: a child that may still succeed (a dead one waits for an operator). */
const UNRESOLVED = `('scheduled', 'pending', 'running', 'dead')`;

function toFlowDocument(rows: readonly FlowRow[]): string {
  return `[${rows.map(({ json, ...fields }) => `{"p":${json},${JSON.stringify(fields).slice(1)}`).join(',')}]`;
}

export function flowStatements({ define, jobs, events, status }: StatementContext) {
  return {
    /**
     * One level of a flow, in the transaction that inserts the whole flow (parents before their
     * children, so a child names its parent's id). A node with children waits; the others are
     * pending (or scheduled when delayed) and wake their queue's workers when the flow commits.
     * $1 the level as a JSON array of FlowRow, $2 the channel, $3 the scheduler's payload.
     */
    insertFlowLevel: define(
      'insert-flow-level',
      `WITH input AS (
         SELECT t.*, now() + ${ms('coalesce(t.d, 0)')} AS due
         FROM ROWS FROM (jsonb_to_recordset($1::jsonb)
                AS (q text, p jsonb, pr integer, d bigint, ma integer, mr integer, tc jsonb, v integer, g text, parent bigint, waits boolean, "failOnDead" boolean))
              WITH ORDINALITY AS t(q, p, pr, d, ma, mr, tc, v, g, parent, waits, fail_on_dead, ord)
       ), inserted AS (
         INSERT INTO ${jobs} (queue_name, payload, priority, status, available_at, max_attempts, max_runtime_ms, trace_context,
                              payload_version, group_key, parent_id, awaiting_children, fail_on_dead_child)
         SELECT i.q, coalesce(i.p, 'null'::jsonb), i.pr,
                CASE WHEN i.waits OR i.due > now() THEN 'scheduled'::${status} ELSE 'pending'::${status} END,
                CASE WHEN i.waits THEN 'infinity'::timestamptz ELSE i.due END,
                i.ma, i.mr, i.tc, i.v, i.g, i.parent, i.waits, i.fail_on_dead
         FROM input i ORDER BY i.ord
         RETURNING id, queue_name, status, awaiting_children
       ), woken AS (
         SELECT count(pg_notify($2, w.payload)) AS n
         FROM (SELECT DISTINCT CASE WHEN status = 'pending' THEN queue_name ELSE $3 END AS payload
               FROM inserted WHERE NOT awaiting_children) w
       )
       SELECT i.id::text AS id FROM inserted i CROSS JOIN woken ORDER BY i.id`,
      (p: { rows: readonly FlowRow[]; channel: string; schedulerTopic: string }) => [toFlowDocument(p.rows), p.channel, p.schedulerTopic],
      (rows: { id: string }[]) => rows.map((r) => r.id),
    ),

    /**
     * A flow child's completion, fenced as every completion, with the handler's result. It writes
     * the child only (settleParents follows, after it committed).
     * $1 id, $2 owner, $3 token, $4 result (JSON text or NULL).
     */
    completeChild: define(
      'complete-child',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       done AS (
         UPDATE ${jobs} AS j SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL, result = $4::jsonb
         FROM target t WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING j.id, j.parent_id
       ), lost AS (
         INSERT INTO ${events} (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT j.id, 'lost_fence', j.status, j.attempt_count, t.token, t.owner, ${fenceLossOrMissing('j', 't.token', 't.owner')}
         FROM target t JOIN ${jobs} j ON j.id = t.id WHERE NOT EXISTS (SELECT 1 FROM done)
       )
       SELECT d.parent_id::text AS parent_id, ${fenceLossOrMissing('j', 't.token', 't.owner')} AS loss, d.id IS NOT NULL AS applied
       FROM target t LEFT JOIN done d ON true LEFT JOIN ${jobs} j ON j.id = t.id`,
      (p: CompleteChildParams) => [p.id, p.owner, p.token, p.result],
      (rows: { parent_id: string | null; loss: string; applied: boolean }[]): FencedOutcome<{ parentId: string | null }> => {
        const row = rows[0];
        if (row?.applied) return { ok: true, parentId: row.parent_id };
        return lost(row?.loss);
      },
    ),

    /**
     * Parents ($1) that still wait: each whose children are all resolved becomes 'pending' (its
     * workers woken); each with a dead child and fail_on_dead_child goes dead (CHILD_DEAD); the
     * others go on waiting. A parent another statement holds is skipped (SKIP LOCKED): whoever holds
     * it settles it, or the flows pass does. Audited.
     * $1 parent ids, $2 the channel.
     */
    settleParents: define(
      'settle-parents',
      `WITH waiting AS (
         SELECT id FROM ${jobs} WHERE id = ANY ($1::bigint[]) AND awaiting_children AND status = 'scheduled'
         FOR UPDATE SKIP LOCKED
       ), judged AS (
         SELECT w.id,
                EXISTS (SELECT 1 FROM ${jobs} c WHERE c.parent_id = w.id AND c.status IN ${UNRESOLVED}) AS unresolved,
                EXISTS (SELECT 1 FROM ${jobs} c WHERE c.parent_id = w.id AND c.status = 'dead') AS child_dead
         FROM waiting w
       ), settled AS (
         UPDATE ${jobs} AS j
         SET status = CASE WHEN NOT jd.unresolved THEN 'pending'::${status} ELSE 'dead'::${status} END,
             available_at = CASE WHEN NOT jd.unresolved THEN now() ELSE j.available_at END,
             finished_at = CASE WHEN jd.unresolved THEN now() END,
             last_error_code = CASE WHEN jd.unresolved THEN 'CHILD_DEAD' ELSE j.last_error_code END,
             last_error_message = CASE WHEN jd.unresolved THEN 'a child of this flow is dead (fail_on_dead_child)' ELSE j.last_error_message END,
             awaiting_children = false
         FROM judged jd
         WHERE j.id = jd.id AND (NOT jd.unresolved OR (jd.child_dead AND j.fail_on_dead_child))
         RETURNING j.id, j.queue_name, j.status
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, error_code)
         SELECT id, CASE WHEN status = 'pending' THEN 'children_resolved' ELSE 'dead' END, 'scheduled', status,
                CASE WHEN status = 'dead' THEN 'CHILD_DEAD' END
         FROM settled
       ), woken AS (
         SELECT count(pg_notify($2, q.queue_name)) AS n FROM (SELECT DISTINCT queue_name FROM settled WHERE status = 'pending') q
       )
       SELECT (SELECT count(*) FROM settled WHERE status = 'pending')::int AS released,
              (SELECT count(*) FROM settled WHERE status = 'dead')::int AS failed
       FROM woken`,
      (p: { ids: readonly string[]; channel: string }) => [p.ids, p.channel],
      (rows: { released: number; failed: number }[]) => ({ released: rows[0]?.released ?? 0, failed: rows[0]?.failed ?? 0 }),
    ),

    /** Waiting parents by id, from after $1 (a page of $2): what the flows pass settles. */
    waitingParents: define(
      'waiting-parents',
      `SELECT id::text AS id FROM ${jobs} WHERE awaiting_children AND id > $1::bigint ORDER BY id LIMIT $2`,
      (p: { after: string; limit: number }) => [p.after, p.limit],
      (rows: { id: string }[]) => rows.map((r) => r.id),
    ),

    /** A parent's children, by id, from after $2 (a page of $3), with their results. */
    childResults: define(
      'child-results',
      `SELECT id::text AS id, queue_name, status::text AS status, result, status = 'cancelled' AS discarded
       FROM ${jobs} WHERE parent_id = $1 AND id > $2::bigint ORDER BY id LIMIT $3`,
      (p: { parent: string; after: string; limit: number }) => [p.parent, p.after, p.limit],
      (rows: { id: string; queue_name: string; status: string; result: unknown; discarded: boolean }[]): ChildResultRow[] =>
        rows.map((r) => ({ id: r.id, queue: r.queue_name, status: r.status, result: r.result ?? null, discarded: r.discarded })),
    ),

    /** The unfinished descendants of a job (children, theirs, …), at most $2: what cancelling the job cancels. */
    unfinishedDescendants: define(
      'unfinished-descendants',
      `WITH RECURSIVE tree(id) AS (
         SELECT id FROM ${jobs} WHERE parent_id = $1
         UNION ALL
         SELECT c.id FROM ${jobs} c JOIN tree t ON c.parent_id = t.id
       )
       SELECT j.id::text AS id FROM tree t JOIN ${jobs} j ON j.id = t.id
       WHERE j.status IN ('scheduled', 'pending', 'running') ORDER BY j.id LIMIT $2`,
      (p: { id: string; limit: number }) => [p.id, p.limit],
      (rows: { id: string }[]) => rows.map((r) => r.id),
    ),

    /** Waiting parents with a dead child: flows blocked until an operator replays or discards it. */
    blockedFlows: define(
      'blocked-flows',
      `SELECT p.queue_name AS queue, count(*)::int AS n FROM ${jobs} p
       WHERE p.awaiting_children AND EXISTS (SELECT 1 FROM ${jobs} c WHERE c.parent_id = p.id AND c.status = 'dead')
       GROUP BY 1`,
      none,
      (rows: { queue: string; n: number }[]) => new Map(rows.map((r) => [r.queue, r.n])),
    ),
  };
}
