import { fence, type FenceParams } from './fence.js';
import type { StatementContext } from './statement.js';

/** The durable records of handlers' external side effects (ctx.effect). */

export interface BegunEffect {
  /** The fence held and the effect is recorded as started (its reason, when not: fenceLoss). */
  owned: boolean;
  /** What an earlier attempt left: nothing, 'started' (an uncertain outcome) or 'confirmed'. */
  earlier: 'started' | 'confirmed' | null;
  result: unknown;
  resultStored: boolean | null;
}

export function effectStatements({ define, s, jobs, events }: StatementContext) {
  return {
    /**
     * Before an external call: records the effect as started (or, for an effect a previous
     * attempt started but never confirmed, counts another try), fenced on the current lease, and
     * reports what an earlier attempt left: nothing, 'started' (an uncertain outcome) or
     * 'confirmed' (with its result; the call is not repeated).
     * $1 id, $2 owner, $3 token, $4 effect name, $5 idempotency key.
     */
    beginEffect: define(
      'begin-effect',
      `WITH owned AS (
         SELECT j.id, j.attempt_count FROM ${jobs} AS j WHERE ${fence('j', '$1', '$2', '$3')}
       ), earlier AS (
         SELECT status, result, result_stored FROM ${s}.job_effects WHERE job_id = $1 AND name = $4
       ), started AS (
         INSERT INTO ${s}.job_effects AS e (job_id, name, idempotency_key, status, lease_token)
         SELECT id, $4, $5, 'started', $3 FROM owned
         ON CONFLICT (job_id, name) DO UPDATE SET attempts = e.attempts + 1, lease_token = excluded.lease_token
           WHERE e.status = 'started'
         RETURNING e.attempts
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, attempt, lease_token, worker, message)
         SELECT o.id, CASE WHEN s.attempts = 1 THEN 'effect_started' ELSE 'effect_retried' END, o.attempt_count, $3, $2,
                $4 || ' (try ' || s.attempts || ')'
         FROM owned o CROSS JOIN started s
       )
       SELECT EXISTS (SELECT 1 FROM owned) AS owned, (SELECT status FROM earlier) AS earlier,
              (SELECT result FROM earlier) AS result, (SELECT result_stored FROM earlier) AS result_stored`,
      (p: FenceParams & { name: string; idempotencyKey: string }) => [p.id, p.owner, p.token, p.name, p.idempotencyKey],
      (rows: { owned: boolean; earlier: 'started' | 'confirmed' | null; result: unknown; result_stored: boolean | null }[]): BegunEffect => {
        const row = rows[0];
        return { owned: row?.owned === true, earlier: row?.earlier ?? null, result: row?.result, resultStored: row?.result_stored ?? null };
      },
    ),

    /**
     * After an external call: the effect is confirmed with its (bounded) result, or as happened
     * without it ($7 false: the result could not be stored). Not fenced on purpose: the call
     * happened, with the effect's idempotency key, whoever holds the lease now; the record states
     * a fact about the outside world, not the job's state. An effect confirmed without its result
     * may get it later (a reconciliation).
     * $1 id, $2 worker, $3 token, $4 effect name, $5 result, $6 event kind, $7 result stored.
     */
    confirmEffect: define(
      'confirm-effect',
      `WITH confirmed AS (
         UPDATE ${s}.job_effects SET status = 'confirmed', result = $5, result_stored = $7, confirmed_at = now()
         WHERE job_id = $1 AND name = $4 AND (status = 'started' OR (status = 'confirmed' AND NOT result_stored))
         RETURNING job_id
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, lease_token, worker, message)
         SELECT job_id, $6, $3, $2, CASE WHEN $7 THEN $4 ELSE $4 || ' (result not stored)' END FROM confirmed
       )
       SELECT (SELECT count(*) FROM confirmed)::int AS applied`,
      (p: FenceParams & { name: string; result: string | null; kind: string; resultStored: boolean }) => [
        p.id,
        p.owner,
        p.token,
        p.name,
        p.result,
        p.kind,
        p.resultStored,
      ],
      (rows: { applied: number }[]) => ({ applied: rows[0]?.applied ?? 0 }),
    ),
  };
}
