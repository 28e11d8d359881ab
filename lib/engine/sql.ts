import { quoteIdentifier, validateSchemaName } from './identifiers.js';

/**
 * Every SQL statement of the engine, named after what it does. The schema is the only text
 * interpolated into SQL; it is validated and quoted first. Everything else is a bound parameter.
 *
 * Statements are prepared by name per connection (the name includes the schema, so two engines
 * with different schemas on one pool never share a plan).
 */

/**
 * The fence. A worker may change a job only while all of these hold: it is the job it claimed
 * (`id`), it is still the claimant (`lease_owner`), no later claim happened (`lease_token`: every
 * claim increments it, nothing resets it), the job is still running, and the lease has not expired
 * by the database's clock. Zero rows matched means the worker lost the job and must not write it.
 */
function fence(job: string, id: string, owner: string, token: string): string {
  return `${job}.id = ${id} AND ${job}.lease_owner = ${owner} AND ${job}.lease_token = ${token}
    AND ${job}.status = 'running' AND ${job}.lease_expires_at > now()`;
}

/**
 * Why a fenced write matched nothing, read from the row as the statement saw it. Cancelled wins;
 * "finished" only when our own claim finished it (a second completion); everything else is a lost
 * lease (expired, reaped, or reclaimed under a newer token).
 */
function fenceLossCode(job: string, token: string): string {
  return `CASE WHEN ${job}.status = 'cancelled' THEN 'CANCELLED'
    WHEN ${job}.lease_token = ${token} AND ${job}.status IN ('succeeded', 'dead') THEN 'FINISHED'
    ELSE 'LEASE_LOST' END`;
}

/** `ms` (a bound parameter or column) as an interval. */
function ms(value: string): string {
  return `(${value} * interval '1 millisecond')`;
}

/** Backoff with full jitter, in SQL, for the reaper: uniform in [0, min(max, base * 2^(attempt-1))]. */
function jitteredBackoffMs(job: string): string {
  return `floor(random() * least(${job}.backoff_max_ms::float8,
    ${job}.backoff_base_ms::float8 * power(2::float8, greatest(${job}.attempt_count - 1, 0))))`;
}

export interface Queries {
  readonly schema: string;
  readonly declareQueues: QueryText;
  readonly listQueues: QueryText;
  readonly enqueue: QueryText;
  readonly claim: QueryText;
  readonly completeMany: QueryText;
  readonly fail: QueryText;
  readonly heartbeat: QueryText;
  readonly release: QueryText;
  readonly reapExpired: QueryText;
  readonly promoteScheduled: QueryText;
  readonly nextScheduledInMs: QueryText;
  readonly getJob: QueryText;
  readonly jobEvents: QueryText;
}

export interface QueryText {
  readonly name: string;
  readonly text: string;
}

export function createQueries(schemaName: string): Queries {
  const schema = validateSchemaName(schemaName);
  const s = quoteIdentifier(schema);
  const jobs = `${s}.jobs`;
  const events = `${s}.job_events`;
  const status = `${s}.job_status`;
  const q = (name: string, text: string): QueryText => ({ name: `pgq:${schema}:${name}`, text });

  return {
    schema,

    declareQueues: q(
      'declare-queues',
      `INSERT INTO ${s}.queues (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING`,
    ),

    listQueues: q('list-queues', `SELECT name FROM ${s}.queues`),

    /**
     * Inserts a batch in one round trip and wakes workers in the same transaction: NOTIFY is
     * delivered only when the transaction commits, so a worker never wakes for a job it cannot see.
     * Jobs not yet due go to 'scheduled' (database time decides) and wake the scheduler instead.
     * $1 is a JSON array of { q, p, pr, at, d, ma, mr }; $2 the channel; $3 the scheduler's payload.
     */
    enqueue: q(
      'enqueue',
      `WITH input AS (
         SELECT t.*, coalesce(t.at, now() + ${ms('coalesce(t.d, 0)')}) AS available_at
         FROM ROWS FROM (jsonb_to_recordset($1::jsonb)
                AS (q text, p jsonb, pr integer, at timestamptz, d bigint, ma integer, mr integer))
              WITH ORDINALITY AS t(q, p, pr, at, d, ma, mr, ord)
       ), inserted AS (
         INSERT INTO ${jobs} (queue_name, payload, priority, status, available_at, max_attempts, max_runtime_ms)
         SELECT q, p, pr, CASE WHEN available_at > now() THEN 'scheduled'::${status} ELSE 'pending'::${status} END,
                available_at, ma, mr
         FROM input ORDER BY ord
         RETURNING id, queue_name, status
       ), woken AS (
         SELECT count(pg_notify($2, w.payload)) AS n
         FROM (SELECT DISTINCT CASE WHEN status = 'pending' THEN queue_name ELSE $3 END AS payload FROM inserted) w
       )
       SELECT i.id FROM inserted i CROSS JOIN woken ORDER BY i.id`,
    ),

    /**
     * The claim: one statement, committed before any handler runs. SKIP LOCKED lets concurrent
     * claimers pass each other's rows; the UPDATE increments the fencing token and starts the
     * lease from database time. Policy the row lacks comes from the handler ($4..$8); the lease
     * never reaches past the attempt's deadline. Only due work is 'pending', so the walk of
     * jobs_claimable_idx reads claimable rows only, however many delayed jobs exist.
     * $1 queue, $2 owner, $3 limit, $4 lease ms, $5 max runtime ms, $6 max attempts,
     * $7 backoff base ms, $8 backoff max ms.
     */
    claim: q(
      'claim',
      `WITH candidate AS (
         SELECT id FROM ${jobs}
         WHERE queue_name = $1 AND status = 'pending' AND available_at <= now()
         ORDER BY priority DESC, available_at, id
         LIMIT $3
         FOR UPDATE SKIP LOCKED
       )
       UPDATE ${jobs} AS j
       SET status = 'running',
           attempt_count = j.attempt_count + 1,
           lease_token = j.lease_token + 1,
           lease_owner = $2,
           claimed_at = now(),
           heartbeat_at = NULL,
           max_attempts = coalesce(j.max_attempts, $6),
           max_runtime_ms = coalesce(j.max_runtime_ms, $5),
           backoff_base_ms = coalesce(j.backoff_base_ms, $7),
           backoff_max_ms = coalesce(j.backoff_max_ms, $8),
           deadline_at = now() + ${ms('coalesce(j.max_runtime_ms, $5)')},
           lease_expires_at = now() + ${ms('least($4::bigint, coalesce(j.max_runtime_ms, $5))')}
       FROM candidate
       WHERE j.id = candidate.id
       RETURNING j.id, j.queue_name, j.payload, j.priority, j.attempt_count, j.max_attempts,
                 j.lease_token::text AS lease_token, j.created_at, j.deadline_at,
                 (extract(epoch FROM j.lease_expires_at - now()) * 1000)::float8 AS lease_ms_left,
                 j.lease_expires_at >= j.deadline_at AS lease_at_deadline`,
    ),

    /**
     * Completes a batch of jobs in one statement, each row still fenced on its own: a stale row is
     * refused (and recorded as a lost fence) while the others complete. Reports every row's outcome.
     * $1 ids, $2 tokens, $3 owner.
     */
    completeMany: q(
      'complete-many',
      `WITH input AS (
         SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
       ), done AS (
         UPDATE ${jobs} AS j
         SET status = 'succeeded', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
         FROM input i
         WHERE ${fence('j', 'i.id', '$3', 'i.token')}
         RETURNING j.id
       ), lost AS (
         INSERT INTO ${events} (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT j.id, 'lost_fence', j.status, j.attempt_count, i.token, $3, ${fenceLossCode('j', 'i.token')}
         FROM input i JOIN ${jobs} j ON j.id = i.id
         WHERE NOT EXISTS (SELECT 1 FROM done d WHERE d.id = i.id)
       )
       SELECT i.id::text AS id, d.id IS NOT NULL AS applied,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 'i.token')} END AS loss
       FROM input i LEFT JOIN done d ON d.id = i.id LEFT JOIN ${jobs} j ON j.id = i.id`,
    ),

    /**
     * A failed attempt: dead, or back to pending/scheduled after the delay the worker computed.
     * Fenced like a completion; the audit row is written by the same statement.
     * $1 id, $2 owner, $3 token, $4 dead?, $5 delay ms, $6 error code, $7 error message.
     */
    fail: q(
      'fail',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       moved AS (
         UPDATE ${jobs} AS j
         SET status = CASE WHEN $4::boolean THEN 'dead'::${status}
                           WHEN $5::bigint > 0 THEN 'scheduled'::${status}
                           ELSE 'pending'::${status} END,
             available_at = CASE WHEN $4::boolean THEN j.available_at ELSE now() + ${ms('$5::bigint')} END,
             finished_at = CASE WHEN $4::boolean THEN now() END,
             lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL,
             last_error_code = $6, last_error_message = $7
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING j.id, j.status, j.attempt_count
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code, message)
         SELECT m.id, CASE WHEN m.status = 'dead' THEN 'dead' ELSE 'retry_scheduled' END, 'running', m.status,
                m.attempt_count, t.token, t.owner, $6, $7
         FROM moved m CROSS JOIN target t
         UNION ALL
         SELECT j.id, 'lost_fence', j.status, NULL, j.attempt_count, t.token, t.owner, ${fenceLossCode('j', 't.token')}, NULL
         FROM target t JOIN ${jobs} j ON j.id = t.id
         WHERE NOT EXISTS (SELECT 1 FROM moved)
       )
       SELECT (SELECT count(*) FROM moved)::int AS applied,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token')} END AS loss
       FROM target t LEFT JOIN ${jobs} j ON j.id = t.id`,
    ),

    /**
     * Renews a lease after progress: to a full lease length from now, but never past the deadline.
     * $1 id, $2 owner, $3 token, $4 lease ms.
     */
    heartbeat: q(
      'heartbeat',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       renewed AS (
         UPDATE ${jobs} AS j
         SET lease_expires_at = least(now() + ${ms('$4::bigint')}, j.deadline_at), heartbeat_at = now()
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING (extract(epoch FROM j.lease_expires_at - now()) * 1000)::float8 AS lease_ms_left,
                   j.lease_expires_at >= j.deadline_at AS lease_at_deadline
       ), lost AS (
         INSERT INTO ${events} (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT j.id, 'lost_fence', j.status, j.attempt_count, t.token, t.owner, ${fenceLossCode('j', 't.token')}
         FROM target t JOIN ${jobs} j ON j.id = t.id
         WHERE NOT EXISTS (SELECT 1 FROM renewed)
       )
       SELECT r.lease_ms_left, r.lease_at_deadline,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token')} END AS loss
       FROM target t LEFT JOIN renewed r ON true LEFT JOIN ${jobs} j ON j.id = t.id`,
    ),

    /**
     * Shutdown hands a job back at once instead of leaving it to the reaper. It gives the attempt
     * back, unless the job has already been released $5 times: then the attempt counts (and may be
     * its last), so a crash-looping deploy cannot retry a job forever. Jobs that never started
     * ($4 = false) give their attempt back without counting a release.
     * $1 id, $2 owner, $3 token, $4 started?, $5 max free releases.
     */
    release: q(
      'release',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       released AS (
         UPDATE ${jobs} AS j
         SET status = CASE WHEN $4::boolean AND j.release_count >= $5 AND j.attempt_count >= j.max_attempts
                           THEN 'dead'::${status} ELSE 'pending'::${status} END,
             finished_at = CASE WHEN $4::boolean AND j.release_count >= $5 AND j.attempt_count >= j.max_attempts
                                THEN now() END,
             attempt_count = CASE WHEN $4::boolean AND j.release_count >= $5 THEN j.attempt_count
                                  ELSE j.attempt_count - 1 END,
             release_count = j.release_count + CASE WHEN $4::boolean THEN 1 ELSE 0 END,
             last_error_code = CASE WHEN $4::boolean THEN 'RELEASED' ELSE j.last_error_code END,
             lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING j.id, j.status, j.attempt_count, j.release_count
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code, message)
         SELECT r.id, 'released', 'running', r.status, r.attempt_count, t.token, t.owner, 'RELEASED',
                'released at shutdown (' || r.release_count || ' so far)'
         FROM released r CROSS JOIN target t
       )
       SELECT (SELECT count(*) FROM released)::int AS applied`,
    ),

    /**
     * The reaper's pass: expired leases go back to 'scheduled' after a jittered backoff (the row
     * carries its policy, filled at claim), or to 'dead' when attempts are exhausted. Bounded ($1)
     * so one pass is a short transaction even after a mass crash, and SKIP LOCKED so concurrent
     * reapers split the work instead of queueing on each other. Database time only.
     * $1 limit.
     */
    reapExpired: q(
      'reap-expired',
      `WITH expired AS (
         SELECT id, lease_owner, lease_token, lease_expires_at >= deadline_at AS at_deadline
         FROM ${jobs}
         WHERE status = 'running' AND lease_expires_at <= now()
         ORDER BY lease_expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
       ), reaped AS (
         UPDATE ${jobs} AS j
         SET status = CASE WHEN j.attempt_count >= j.max_attempts THEN 'dead'::${status} ELSE 'scheduled'::${status} END,
             available_at = CASE WHEN j.attempt_count >= j.max_attempts THEN j.available_at
                                 ELSE now() + ${ms(jitteredBackoffMs('j'))} END,
             finished_at = CASE WHEN j.attempt_count >= j.max_attempts THEN now() END,
             last_error_code = CASE WHEN e.at_deadline THEN 'MAX_RUNTIME' ELSE 'LEASE_EXPIRED' END,
             last_error_message = CASE WHEN e.at_deadline THEN 'the attempt reached its maximum runtime'
                                       ELSE 'the lease expired without a heartbeat' END,
             lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         FROM expired e
         WHERE j.id = e.id
         RETURNING j.id, j.queue_name, j.status, j.attempt_count, j.last_error_code, e.lease_owner, e.lease_token
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code)
         SELECT id, CASE WHEN status = 'dead' THEN 'dead' ELSE 'lease_expired' END, 'running', status,
                attempt_count, lease_token, lease_owner, last_error_code
         FROM reaped
       )
       SELECT id::text AS id, queue_name, status::text AS status, last_error_code FROM reaped`,
    ),

    /**
     * Makes due scheduled jobs claimable, in bounded batches, and wakes their queues' workers.
     * $1 limit, $2 channel.
     */
    promoteScheduled: q(
      'promote-scheduled',
      `WITH due AS (
         SELECT id FROM ${jobs}
         WHERE status = 'scheduled' AND available_at <= now()
         ORDER BY available_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
       ), promoted AS (
         UPDATE ${jobs} AS j SET status = 'pending' FROM due WHERE j.id = due.id RETURNING j.queue_name
       )
       SELECT g.queue_name, g.promoted, pg_notify($2, g.queue_name)
       FROM (SELECT queue_name, count(*)::int AS promoted FROM promoted GROUP BY queue_name) g`,
    ),

    nextScheduledInMs: q(
      'next-scheduled',
      `SELECT (extract(epoch FROM available_at - now()) * 1000)::float8 AS ms_left
       FROM ${jobs} WHERE status = 'scheduled' ORDER BY available_at LIMIT 1`,
    ),

    getJob: q(
      'get-job',
      `SELECT id::text AS id, queue_name, payload, status::text AS status, priority, available_at,
              attempt_count, max_attempts, lease_owner, lease_token::text AS lease_token, lease_expires_at,
              deadline_at, claimed_at, heartbeat_at, release_count, last_error_code, last_error_message,
              created_at, finished_at
       FROM ${jobs} WHERE id = $1`,
    ),

    jobEvents: q(
      'job-events',
      `SELECT id::text AS id, at, kind, from_status::text AS from_status, to_status::text AS to_status, attempt,
              lease_token::text AS lease_token, worker, error_code, message
       FROM ${events} WHERE job_id = $1 ORDER BY id`,
    ),
  };
}
