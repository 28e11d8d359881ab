import { createHash } from 'node:crypto';
import { quoteIdentifier, validateSchemaName } from './identifiers.js';
import { BACKOFF_MAX_EXPONENT } from './retry.js';

/**
 * Every SQL statement of the engine, named after what it does. The schema is the only text
 * interpolated into SQL; it is validated and quoted first. Everything else is a bound parameter.
 *
 * Statements are prepared by name per connection (the name includes the schema, so two engines
 * with different schemas on one pool never share a plan), unless `preparedStatements` is false:
 * through a transaction pooler consecutive statements of one client run on different server
 * connections, so a name prepared on one is unknown on the next (and already taken on another).
 */

/**
 * The fence. A worker may change a job only while all of these hold: it is the job it claimed
 * (`id`), it is still the claimant (`lease_owner`), no later claim happened (`lease_token`: every
 * claim increments it, nothing resets it), the job is still running, and the lease has not expired
 * by the database's clock. Zero rows matched means the worker lost the job and must not write it.
 */
function fence(job: string, id: string, owner: string, token: string): string {
  return `${job}.id = ${id} AND ${job}.lease_token = ${token} AND ${fenceHolds(job, owner)}`;
}

/**
 * The fence without its id and token, for a statement that matches those itself (complete-many
 * matches a batch's (id, token) pairs through a hashed subplan).
 */
function fenceHolds(job: string, owner: string): string {
  // `status::text`, not `status`: the same test, but one the reaper's partial index
  // (lease_expires_at WHERE status = 'running') cannot serve. With it, a planner misled by stale
  // statistics walks every running row for each fenced write; without it, the row is found by its
  // primary key, whatever the statistics say.
  //
  // clock_timestamp(), not now(): now() is the start of the transaction, and a fenced statement
  // can run long after it began: inside a caller's transaction (ctx.complete with { client }),
  // or after waiting for a row lock. A lease that expired meanwhile must refuse the write.
  return `${job}.lease_owner = ${owner} AND ${job}.status::text = 'running' AND ${job}.lease_expires_at > clock_timestamp()`;
}

/**
 * Why a fenced write matched nothing, read from the row as the statement saw it. Cancelled wins;
 * "finished" only when this claim finished it (a second completion: the job succeeded or died by
 * its own worker's write, under the same token and owner; the reaper and operators clear
 * lease_owner when they end a job); everything else is a lost lease (expired, reaped, or
 * reclaimed under a newer token).
 */
function fenceLossCode(job: string, token: string, owner: string): string {
  return `CASE WHEN ${job}.status = 'cancelled' THEN 'CANCELLED'
    WHEN ${job}.lease_token = ${token} AND ${job}.lease_owner = ${owner} AND ${job}.status IN ('succeeded', 'dead') THEN 'FINISHED'
    ELSE 'LEASE_LOST' END`;
}

/** `ms` (a bound parameter or column) as an interval. */
function ms(value: string): string {
  return `(${value} * interval '1 millisecond')`;
}

/** Backoff with full jitter, in SQL, for the reaper: uniform in [0, min(max, base * 2^(attempt-1))], as in retry.ts. */
function jitteredBackoffMs(job: string): string {
  return `floor(random() * least(${job}.backoff_max_ms::float8,
    ${job}.backoff_base_ms::float8 * power(2::float8, least(greatest(${job}.attempt_count - 1, 0), ${BACKOFF_MAX_EXPONENT}))))`;
}

/** The keys of the jobs a CTE (`finished`) finished, with how many of each: what releaseKeys takes. */
function keysOf(finished: string): string {
  return `SELECT queue_name, ordering_key, count(*)::int AS n FROM ${finished} WHERE ordering_key IS NOT NULL GROUP BY 1, 2`;
}

/**
 * Statements that finish jobs (succeeded, cancelled, deleted) release their ordering keys: CTEs
 * that decrement each key's count of unfinished jobs (`released_keys`), and the statement reports
 * the keys (`key_queues`, `key_names`) so that `promoteKeyHeads` can run next in the same
 * transaction, with a snapshot that sees every producer that held the key's row before us.
 *
 * A key's row is never waited for. A producer adding to a key holds the row until its transaction
 * commits, which may take as long as the producer likes; waiting for it would stall this
 * statement, and a completer batch carries many queues' jobs. A key whose row is held is handed
 * off instead (`deferred_keys`, into key_handoffs, in this same transaction) and released by the
 * KeyHandoffs pass once the row is free. Key rows are locked in one global order (queue, key), so
 * two statements never lock two keys in opposite orders (a deadlock), and each is probed by its
 * primary key (LATERAL: one probe per key, O(batch) whatever the planner thinks of the table).
 *
 * `finishedKeys` selects (queue_name, ordering_key, n); `defer: false` (the handoff pass itself)
 * leaves what it cannot release where it is instead of handing it off again.
 */
function releaseKeys(s: string, finishedKeys: string, defer = true): string {
  return `finished_keys AS (
         ${finishedKeys}
       ), locked_keys AS (
         SELECT f.queue_name, f.ordering_key, f.n
         FROM (SELECT * FROM finished_keys ORDER BY queue_name, ordering_key) f
           CROSS JOIN LATERAL (SELECT 1 FROM ${s}.ordering_keys ok
                               WHERE ok.queue_name = f.queue_name AND ok.ordering_key = f.ordering_key
                               FOR UPDATE SKIP LOCKED) o
       ), released_keys AS (
         -- By key, not by the ctid the lock returned: a producer that committed after this
         -- statement's snapshot and before its lock left a row version the snapshot cannot see, so
         -- a ctid match updated nothing (the key's count stayed one too high, and its next job
         -- never became the head). By key, the update finds the version it can see and moves to
         -- the latest one, which this statement already holds.
         UPDATE ${s}.ordering_keys AS ok SET unfinished = ok.unfinished - l.n
         FROM locked_keys l
         WHERE ok.queue_name = l.queue_name AND ok.ordering_key = l.ordering_key
         RETURNING ok.queue_name, ok.ordering_key
       ), deferred_keys AS (
         ${
           defer
             ? `INSERT INTO ${s}.key_handoffs (queue_name, ordering_key, n)
         SELECT f.queue_name, f.ordering_key, f.n FROM finished_keys f
         WHERE NOT EXISTS (SELECT 1 FROM locked_keys l WHERE l.queue_name = f.queue_name AND l.ordering_key = f.ordering_key)
         RETURNING 1`
             : `SELECT 1 FROM finished_keys f
         WHERE NOT EXISTS (SELECT 1 FROM locked_keys l WHERE l.queue_name = f.queue_name AND l.ordering_key = f.ordering_key)`
         }
       )`;
}

const RELEASED_KEYS_COLUMNS = `(SELECT array_agg(queue_name) FROM released_keys) AS key_queues,
              (SELECT array_agg(ordering_key) FROM released_keys) AS key_names,
              (SELECT count(*) FROM deferred_keys)::int AS keys_deferred`;

/**
 * A cancelled job whose attempt may still be running (see migration 0006): it holds its key until
 * its worker confirms the attempt is over or its lease runs out. The same test as the predicate of
 * jobs_key_holder_idx, so the "has a head" probe can use it.
 */
function holdsKey(job: string): string {
  return `(${job}.status IN ('scheduled', 'pending', 'running', 'dead') OR (${job}.status = 'cancelled' AND ${job}.lease_expires_at IS NOT NULL))`;
}

export interface Queries {
  readonly schema: string;
  readonly statementTimeoutMs: number;
  readonly declareQueues: QueryText;
  readonly listQueues: QueryText;
  readonly enqueue: QueryText;
  readonly claim: QueryText;
  readonly completeMany: QueryText;
  readonly promoteKeyHeads: QueryText;
  readonly fail: QueryText;
  readonly heartbeat: QueryText;
  readonly release: QueryText;
  readonly reapExpired: QueryText;
  readonly reapAsDead: QueryText;
  readonly expiredLeaseIds: QueryText;
  readonly promoteScheduled: QueryText;
  readonly nextScheduledInMs: QueryText;
  readonly getJob: QueryText;
  readonly jobEvents: QueryText;
  readonly unfinishedJobs: QueryText;
  readonly setQueuePaused: QueryText;
  readonly lockFence: QueryText;
  readonly requireTransaction: QueryText;
  readonly fenceLoss: QueryText;
  readonly startAttempt: QueryText;
  readonly checkLeases: QueryText;
  readonly endCancelledAttempt: QueryText;
  readonly endExpiredCancels: QueryText;
  readonly handOffKeys: QueryText;
  readonly recordFenceLoss: QueryText;
  readonly beginEffect: QueryText;
  readonly confirmEffect: QueryText;
  readonly jobEffects: QueryText;
  readonly cancel: QueryText;
  readonly replay: QueryText;
  readonly listDead: QueryText;
  readonly listDeadOfQueue: QueryText;
  readonly listDeadWithCode: QueryText;
  readonly listDeadOfQueueWithCode: QueryText;
  readonly deleteJob: QueryText;
  readonly purgeDead: QueryText;
  readonly purgeDeadOfQueue: QueryText;
  readonly pruneSucceeded: QueryText;
  readonly queueStats: QueryText;
  readonly databaseStats: QueryText;
  readonly notify: QueryText;
}

export interface QueryText {
  readonly name: string;
  readonly text: string;
  /** Client-side bound of the statement (pg's per-query `query_timeout`), in ms. */
  readonly query_timeout: number;
  /**
   * Sent unnamed, so planned for its values on every call, instead of prepared once per
   * connection: for the few statements whose right index depends on the values, which the
   * generic plan a prepared statement may switch to after five calls does not know. Only rare
   * (operator) statements, where a planning per call costs nothing that matters. With
   * `preparedStatements: false`, every statement.
   */
  readonly planPerCall?: boolean;
  /**
   * A named statement's name was refused by the server (unknown on the connection, or already
   * taken there): told to the engine, which explains it once (see run()).
   */
  readonly nameRefused?: (error: Error) => void;
}

export interface QueryOptions {
  /** Bound of every statement (see PgQueueOptions.statementTimeoutMs). */
  readonly statementTimeoutMs: number;
  /** false: every statement is sent unnamed (see PgQueueOptions.preparedStatements). Default true. */
  readonly preparedStatements?: boolean;
  /** Told when the server refuses a named statement's name (see QueryText.nameRefused). */
  readonly nameRefused?: (error: Error) => void;
}

export const STATEMENT_TIMEOUT_DEFAULT_MS = 10_000;

/**
 * The client-side timeout waits this much longer than the server's statement_timeout, so that
 * on a live connection the server's own error (57014, with its SQLSTATE) arrives first.
 */
export const CLIENT_TIMEOUT_SLACK_MS = 1_000;

/** PostgreSQL cuts names (prepared statements' too) to this many bytes. */
const NAME_MAX_BYTES = 63;
/** The longest statement name below (`end-cancelled-attempt`), with room to spare. */
const STATEMENT_NAME_MAX = 30;

/**
 * `pgq:<schema>:`, or `pgq:<hash of the schema>:` when a long schema name would push a statement's
 * name past NAME_MAX_BYTES: the server would cut it short, and statements whose names then agree
 * would take each other's name ("already exists"). Schema names are ASCII (validateSchemaName).
 */
function statementPrefix(schema: string): string {
  const plain = `pgq:${schema}:`;
  if (plain.length + STATEMENT_NAME_MAX <= NAME_MAX_BYTES) return plain;
  return `pgq:${createHash('sha256').update(schema).digest('hex').slice(0, 16)}:`;
}

export function createQueries(schemaName: string, options: QueryOptions = { statementTimeoutMs: STATEMENT_TIMEOUT_DEFAULT_MS }): Queries {
  const schema = validateSchemaName(schemaName);
  const s = quoteIdentifier(schema);
  const jobs = `${s}.jobs`;
  const events = `${s}.job_events`;
  const status = `${s}.job_status`;
  const query_timeout = options.statementTimeoutMs + CLIENT_TIMEOUT_SLACK_MS;
  const named = options.preparedStatements ?? true;
  const prefix = statementPrefix(schema);
  const q = (name: string, text: string, extra: { planPerCall?: boolean } = {}): QueryText => {
    // A programmer's error, caught by any test that creates the queries.
    if (name.length > STATEMENT_NAME_MAX) throw new Error(`statement name "${name}" is longer than ${STATEMENT_NAME_MAX} characters`);
    const planPerCall = extra.planPerCall === true || !named;
    return { name: `${prefix}${name}`, text, query_timeout, ...(planPerCall ? { planPerCall } : { nameRefused: options.nameRefused }) };
  };

  /**
   * A page of dead jobs, oldest death first, after a keyset cursor ($1 finished_at, $2 id; NULL
   * for the first page), $3 limit, of the jobs whose `keys` (none, queue_name, last_error_code, or
   * both) are the parameters from $4. Each page reads about what it returns, however many dead
   * jobs are kept (test/serial/flat-reads.spec.ts):
   *
   * - A statement per filter, each with the partial index of dead jobs that starts with its keys
   *   and goes on with (finished_at, id): jobs_dead_age_idx, jobs_dead_idx (queue),
   *   jobs_dead_code_idx (code), jobs_dead_queue_code_idx (both). One statement with
   *   `($4 IS NULL OR queue_name = $4)` has no index condition once it is planned generically:
   *   every page sorted every dead job.
   * - The keys bound a range rather than being equalities, `(keys, finished_at, id) > ($4…,
   *   cursor) AND (keys) <= ($4…)`, ordered by all of them: only the index that starts with the
   *   keys returns that order. With `queue_name = $4`, every index ending in (finished_at, id)
   *   does, and the planner, by its estimates, walked jobs_dead_age_idx filtering by queue: the
   *   first page of a queue whose jobs died last read every older dead job.
   * - Planned per call (planPerCall): a generic plan knows nothing of the keys' frequencies, and
   *   chose jobs_dead_idx and an incremental sort of the queue's every dead job for queue + code.
   *
   * The cursor starts the walk (a row comparison); the first page starts after -infinity (a dead
   * job always has its finished_at).
   */
  const listDeadPage = (name: string, keys: readonly ('queue_name' | 'last_error_code')[]): QueryText => {
    const columns = keys.map((key) => `j.${key}`);
    const values = keys.map((_, i) => `$${i + 4}`);
    const order = [...columns, 'j.finished_at', 'j.id'].join(', ');
    const after = [...values, `coalesce($1::timestamptz, '-infinity')`, 'coalesce($2::bigint, 0)'].join(', ');
    return q(
      name,
      `SELECT id::text AS id, queue_name, priority, attempt_count, max_attempts, last_error_code, last_error_message,
              created_at, finished_at, lease_token::text AS lease_token,
              -- The cursor keeps the full microsecond precision a JS Date would lose.
              finished_at::text || '|' || id AS cursor
       FROM ${jobs} j
       WHERE j.status = 'dead' AND (${order}) > (${after})
         ${keys.length > 0 ? `AND (${columns.join(', ')}) <= (${values.join(', ')})` : ''}
       -- j.id, not id: a bare name in ORDER BY means the output column (id::text), whose order
       -- ('10' < '9') is not the cursor's bigint order, so pages would skip and repeat jobs that
       -- died together (one reaper batch shares its finished_at).
       ORDER BY ${order}
       LIMIT $3`,
      { planPerCall: true },
    );
  };

  /**
   * An explicit purge of dead jobs that died before $1, of all queues or (`ofQueue`) of queue $5,
   * one bounded batch ($2), oldest first, recorded in purges with the ids it removed. Never run by
   * a timer. $3 actor, $4 reason. A statement per case, written and planned as listDeadPage is
   * and for the same reasons: the batch is the head of jobs_dead_age_idx, or of jobs_dead_idx for
   * a queue (a range, `queue_name >= $5 AND (queue_name, finished_at) < ($5, $1)`, in the index's
   * order). Its rows are deleted by ctid: the batch holds their row locks, so nothing can move them
   * before the delete, and a batch costs the same however large the table (a join may hash the
   * whole table; a probe of the primary key per row costs a level more per row as the table grows).
   */
  const purgeDeadBatch = (name: string, ofQueue: boolean): QueryText =>
    q(
      name,
      `WITH doomed AS (
         SELECT ctid FROM ${jobs}
         WHERE status = 'dead'
           AND ${ofQueue ? 'queue_name >= $5 AND (queue_name, finished_at) < ($5, $1)' : 'finished_at < $1'}
         ORDER BY ${ofQueue ? 'queue_name, ' : ''}finished_at, id
         LIMIT $2
         FOR UPDATE SKIP LOCKED
       ), removed AS (
         DELETE FROM ${jobs} AS j WHERE j.ctid = ANY (ARRAY(SELECT ctid FROM doomed)) RETURNING j.id, j.queue_name, j.ordering_key
       ), ${releaseKeys(s, keysOf('removed'))}, logged AS (
         INSERT INTO ${s}.purges (actor, reason, status, queue_name, older_than, removed, removed_ids)
         SELECT $3, $4, 'dead', ${ofQueue ? '$5' : 'NULL'}, $1, count(*), array_agg(id ORDER BY id) FROM removed HAVING count(*) > 0
         RETURNING removed
       )
       SELECT coalesce((SELECT removed FROM logged), 0)::int AS removed, ${RELEASED_KEYS_COLUMNS}`,
      { planPerCall: true },
    );

  return {
    schema,
    statementTimeoutMs: options.statementTimeoutMs,

    declareQueues: q(
      'declare-queues',
      `INSERT INTO ${s}.queues (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING`,
    ),

    listQueues: q('list-queues', `SELECT name FROM ${s}.queues`),

    /**
     * One NOTIFY on its own (autocommit: delivered at once). The listener's probe goes through the
     * pool this way, as producers' wake-ups do. $1 the channel, $2 the payload.
     */
    notify: q('notify', `SELECT pg_notify($1, $2)`),

    /**
     * Inserts a batch in one round trip and wakes workers in the same transaction: NOTIFY is
     * delivered only when the transaction commits, so a worker never wakes for a job it cannot see.
     * Jobs not yet due go to 'scheduled' (database time decides) and wake the scheduler instead.
     * $1 is a JSON array of { q, p, pr, at, d, ma, mr, tc, k }; $2 the channel; $3 the scheduler's payload.
     */
    enqueue: q(
      'enqueue',
      `WITH input AS (
         SELECT t.*, coalesce(t.at, now() + ${ms('coalesce(t.d, 0)')}) AS available_at,
                row_number() OVER (PARTITION BY t.q, t.k ORDER BY t.ord) AS rank_in_key
         FROM ROWS FROM (jsonb_to_recordset($1::jsonb)
                AS (q text, p jsonb, pr integer, at timestamptz, d bigint, ma integer, mr integer, tc jsonb, k text))
              WITH ORDINALITY AS t(q, p, pr, at, d, ma, mr, tc, k, ord)
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
                              trace_context, ordering_key, key_waiting)
         SELECT i.q, i.p, i.pr,
                CASE WHEN i.available_at > now() THEN 'scheduled'::${status} ELSE 'pending'::${status} END,
                i.available_at, i.ma, i.mr, i.tc, i.k,
                -- The key's head is its first job while it had no unfinished one; the rest wait.
                coalesce(kk.unfinished - bk.n + i.rank_in_key > 1, false)
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
    ),

    /**
     * The claim: one statement, committed before any handler runs. SKIP LOCKED lets concurrent
     * claimers pass each other's rows; the UPDATE increments the fencing token and starts the
     * lease from database time. Policy the row lacks comes from the handler ($4..$8); the lease
     * never reaches past the attempt's deadline.
     *
     * What is claimable: due work is 'pending' (delayed work waits in 'scheduled'), and a job of
     * an ordering key only while it is the key's head (the others wait with key_waiting), so the
     * index walks read claimable rows only, and a batch can never hold two jobs of one key.
     *
     * Fairness: $9 of the batch is taken oldest-first whatever the priority (jobs_claimable_age_idx),
     * the rest by priority; so a flood of high-priority work cannot starve older low-priority jobs.
     * $9 = 0 is strict priority. $1 queue, $2 owner, $3 limit, $4 lease ms, $5 max runtime ms,
     * $6 max attempts, $7 backoff base ms, $8 backoff max ms, $9 jobs to take oldest-first.
     */
    claim: q(
      'claim',
      `WITH open AS (
         -- A paused queue claims nothing (evaluated once per statement, not per row).
         SELECT NOT EXISTS (SELECT 1 FROM ${s}.queues WHERE name = $1 AND paused_at IS NOT NULL) AS yes
       ), by_age AS (
         SELECT id FROM ${jobs}
         WHERE queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()
           AND (SELECT yes FROM open)
         ORDER BY available_at, id
         LIMIT $9
         FOR UPDATE SKIP LOCKED
       ), by_priority AS (
         SELECT id FROM ${jobs}
         WHERE queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()
           AND (SELECT yes FROM open)
           AND id NOT IN (SELECT id FROM by_age)
         ORDER BY priority DESC, available_at, id
         LIMIT (SELECT $3 - count(*) FROM by_age)
         FOR UPDATE SKIP LOCKED
       ), candidate AS (
         SELECT id FROM by_age UNION ALL SELECT id FROM by_priority
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
       -- = ANY(ARRAY(…)) rather than a join: the planner cannot size the candidates (their LIMIT is
       -- an expression), and a misjudged join turns the update into a scan of the whole table.
       WHERE j.id = ANY (ARRAY(SELECT id FROM candidate))
       RETURNING j.id, j.queue_name, j.payload, j.priority, j.attempt_count, j.max_attempts, j.max_runtime_ms,
                 j.lease_token::text AS lease_token, j.created_at, j.deadline_at, j.ordering_key,
                 (extract(epoch FROM j.lease_expires_at - now()) * 1000)::float8 AS lease_ms_left,
                 j.lease_expires_at >= j.deadline_at AS lease_at_deadline,
                 j.trace_context,
                 (extract(epoch FROM now() - j.available_at) * 1000)::float8 AS waited_ms`,
    ),

    /**
     * Completes a batch of jobs in one statement, each row still fenced on its own: a stale row is
     * refused (and recorded as a lost fence) while the others complete. Reports every row's outcome
     * by (id, token): one batch may hold a stale and a current completion of the same job, and only
     * the current one is applied. `status` is the row's status before this statement (a retried
     * write learns from it whether its earlier try committed). The worker's lease_owner stays on
     * the row: it says who finished the job (see fenceLossCode).
     * $1 ids, $2 tokens, $3 owner.
     */
    completeMany: q(
      'complete-many',
      `WITH input AS (
         SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
       ), done AS (
         UPDATE ${jobs} AS j
         SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
         -- = ANY($1): a primary-key probe per id, however the planner sizes unnest(). The token is
         -- matched through a hashed subplan, not a join with the input: the planner made that join
         -- a nested loop, O(batch²) comparisons (35 ms of a 500-row batch). coalesce() keeps the IN
         -- a subplan (a bare IN is turned into the same nested-loop semi-join).
         WHERE j.id = ANY ($1::bigint[]) AND coalesce((j.id, j.lease_token) IN (SELECT id, token FROM input), false)
           AND ${fenceHolds('j', '$3')}
         RETURNING j.id, j.lease_token AS token, j.queue_name, j.ordering_key
       ), ${releaseKeys(s, keysOf('done'))}, lost AS (
         INSERT INTO ${events} (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT j.id, 'lost_fence', j.status, j.attempt_count, i.token, $3, ${fenceLossCode('j', 'i.token', '$3')}
         FROM input i JOIN ${jobs} j ON j.id = i.id
         WHERE (i.id, i.token) NOT IN (SELECT id, token FROM done)
       )
       SELECT i.id::text AS id, i.token::text AS token, (i.id, i.token) IN (SELECT id, token FROM done) AS applied,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 'i.token', '$3')} END AS loss,
              j.status::text AS status,
              ${RELEASED_KEYS_COLUMNS}
       FROM input i LEFT JOIN ${jobs} j ON j.id = i.id`,
    ),

    /**
     * After jobs of ordering keys finished: for each key that has no head any more (no unfinished
     * job that is not waiting; a dead head still holds its key), the lowest waiting job becomes
     * the head, and its queue's workers are woken. Keys with nothing unfinished are forgotten.
     * Runs in the transaction of the statement that finished the jobs (see releaseKeys).
     * $1 queue names, $2 ordering keys, $3 channel.
     */
    promoteKeyHeads: q(
      'promote-key-heads',
      `WITH keys AS (
         SELECT DISTINCT q, k FROM unnest($1::text[], $2::text[]) AS t(q, k)
       ), next AS (
         SELECT (SELECT w.id FROM ${jobs} w
                 WHERE w.queue_name = keys.q AND w.ordering_key = keys.k AND w.key_waiting
                   AND w.status IN ('scheduled', 'pending')
                 ORDER BY w.id LIMIT 1) AS id
         FROM keys
         -- "No head left", as a scalar subquery with LIMIT rather than NOT EXISTS: the planner
         -- cannot turn it into an anti-join, which stale statistics make a hash of every head in
         -- the queue. Each key is one probe of the head index.
         WHERE (SELECT 1 FROM ${jobs} h
                WHERE h.queue_name = keys.q AND h.ordering_key = keys.k AND NOT h.key_waiting
                  AND ${holdsKey('h')}
                LIMIT 1) IS NULL
       ), promoted AS (
         -- = ANY(ARRAY(…)), as in the claim, for the same reason: a join can become a walk of
         -- every waiting job.
         UPDATE ${jobs} AS j SET key_waiting = false
         WHERE j.id = ANY (ARRAY(SELECT id FROM next)) AND j.key_waiting
         RETURNING j.queue_name, j.status
       ), forgotten AS (
         -- Each key row is found by its primary key, one probe per key, and deleted by its ctid:
         -- given a join (even with = ANY on both columns) the planner may read every key row of
         -- the queue per batch, O(keys) instead of O(batch). A row a producer updates meanwhile
         -- has a new ctid and unfinished > 0: it is rechecked and kept.
         DELETE FROM ${s}.ordering_keys AS ok
         WHERE ok.ctid = ANY (ARRAY(
                 SELECT (SELECT o.ctid FROM ${s}.ordering_keys o
                         WHERE o.queue_name = keys.q AND o.ordering_key = keys.k AND o.unfinished = 0)
                 FROM keys))
           AND ok.unfinished = 0
       ), woken AS (
         SELECT count(pg_notify($3, d.queue_name)) AS n
         FROM (SELECT DISTINCT queue_name FROM promoted WHERE status = 'pending') d
       )
       SELECT (SELECT count(*) FROM promoted)::int AS promoted, (SELECT n FROM woken) AS woken`,
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
             -- A job this worker ends keeps its owner: the record of who finished it.
             lease_owner = CASE WHEN $4::boolean THEN j.lease_owner END, lease_expires_at = NULL, deadline_at = NULL,
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
         SELECT j.id, 'lost_fence', j.status, NULL, j.attempt_count, t.token, t.owner, ${fenceLossCode('j', 't.token', 't.owner')}, NULL
         FROM target t JOIN ${jobs} j ON j.id = t.id
         WHERE NOT EXISTS (SELECT 1 FROM moved)
       )
       SELECT (SELECT count(*) FROM moved)::int AS applied,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token', 't.owner')} END AS loss,
              -- Refused, but this very failure happened: an earlier try of this write committed
              -- and its reply was lost (a retried write learns it from here). Its retry is in the
              -- history (only this statement writes 'retry_scheduled'), or its death is on the row
              -- (a worker's own 'dead' keeps its owner; the reaper's clears it).
              CASE WHEN NOT EXISTS (SELECT 1 FROM moved) THEN
                coalesce(j.status = 'dead' AND j.lease_token = t.token AND j.lease_owner = t.owner, false)
                OR EXISTS (SELECT 1 FROM ${events} e WHERE e.job_id = t.id AND e.lease_token = t.token AND e.worker = t.owner
                             AND e.kind = 'retry_scheduled') END AS already
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
         SELECT j.id, 'lost_fence', j.status, j.attempt_count, t.token, t.owner, ${fenceLossCode('j', 't.token', 't.owner')}
         FROM target t JOIN ${jobs} j ON j.id = t.id
         WHERE NOT EXISTS (SELECT 1 FROM renewed)
       )
       SELECT r.lease_ms_left, r.lease_at_deadline,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token', 't.owner')} END AS loss
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
             lease_owner = CASE WHEN $4::boolean AND j.release_count >= $5 AND j.attempt_count >= j.max_attempts
                                THEN j.lease_owner END,
             lease_expires_at = NULL, deadline_at = NULL
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING j.id, j.status, j.attempt_count, j.release_count
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code, message)
         SELECT r.id, 'released', 'running', r.status, r.attempt_count, t.token, t.owner, 'RELEASED',
                'released at shutdown (' || r.release_count || ' so far)'
         FROM released r CROSS JOIN target t
       )
       SELECT (SELECT count(*) FROM released)::int AS applied,
              -- As in fail: an earlier try of this release committed and its reply was lost.
              CASE WHEN NOT EXISTS (SELECT 1 FROM released) THEN EXISTS (
                SELECT 1 FROM ${events} e WHERE e.job_id = t.id AND e.lease_token = t.token AND e.worker = t.owner
                  AND e.kind = 'released') END AS already
       FROM target t`,
    ),

    /**
     * The reaper's pass: expired leases go back to 'scheduled' after a jittered backoff (the row
     * carries its policy, filled at claim), or to 'dead' when attempts are exhausted. Bounded ($1)
     * so one pass is a short transaction even after a mass crash, and SKIP LOCKED so concurrent
     * reapers split the work instead of queueing on each other. Database time only.
     * $1 limit, $2 ids to leave alone (rows a pass could not recover, see Reaper), $3 only this id
     * (NULL: any).
     */
    reapExpired: q(
      'reap-expired',
      `WITH expired AS (
         SELECT id, lease_owner, lease_token, lease_expires_at >= deadline_at AS at_deadline
         FROM ${jobs}
         WHERE status = 'running' AND lease_expires_at <= now()
           AND id <> ALL ($2::bigint[]) AND ($3::bigint IS NULL OR id = $3)
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
       SELECT id::text AS id, queue_name, status::text AS status, last_error_code, attempt_count FROM reaped`,
    ),

    /** Expired leases, oldest first, without locking them: what the reaper tries one by one. $1 limit, $2 ids to leave alone. */
    expiredLeaseIds: q(
      'expired-lease-ids',
      `SELECT id::text AS id FROM ${jobs}
       WHERE status = 'running' AND lease_expires_at <= now() AND id <> ALL ($2::bigint[])
       ORDER BY lease_expires_at LIMIT $1`,
    ),

    /**
     * The reaper's last resort for one expired lease whose normal recovery failed (see Reaper):
     * the job goes dead with code REAP_FAILED and the database's error as its message, so it is
     * visible and replayable instead of 'running' forever. Nothing here computes anything that
     * could fail. $1 id, $2 message.
     */
    reapAsDead: q(
      'reap-as-dead',
      `WITH reaped AS (
         UPDATE ${jobs} AS j
         SET status = 'dead', finished_at = now(), last_error_code = 'REAP_FAILED', last_error_message = $2,
             lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         FROM (SELECT id, lease_owner, lease_token FROM ${jobs}
               WHERE id = $1 AND status = 'running' AND lease_expires_at <= now() FOR UPDATE SKIP LOCKED) e
         WHERE j.id = e.id
         RETURNING j.id, j.queue_name, j.attempt_count, e.lease_owner, e.lease_token
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, error_code, message)
         SELECT id, 'dead', 'running', 'dead', attempt_count, lease_token, lease_owner, 'REAP_FAILED', $2 FROM reaped
       )
       SELECT id::text AS id, queue_name, 'dead' AS status, 'REAP_FAILED' AS last_error_code, attempt_count FROM reaped`,
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

    /**
     * What is left to do in some queues: pending and running jobs, and scheduled ones that fall
     * due within $2 ms (database time), per queue and status with the first few ids. For tests
     * and drains; read-only. $1 queues.
     */
    unfinishedJobs: q(
      'unfinished-jobs',
      `SELECT queue_name, status::text AS status, count(*)::int AS n, (array_agg(id::text ORDER BY id))[1:10] AS ids
       FROM ${jobs}
       WHERE queue_name = ANY($1::text[])
         AND (status IN ('pending', 'running') OR (status = 'scheduled' AND available_at <= now() + ${ms('$2::bigint')}))
       GROUP BY queue_name, status ORDER BY queue_name, status`,
    ),

    /**
     * Takes the fence as a row lock, inside a handler's transactional completion: the row is
     * locked with the full fence predicate, so from here to COMMIT no one else can change the job
     * (the reaper and the claim skip locked rows, a cancellation waits). Never waits itself (SKIP
     * LOCKED): a row someone else holds gives NULL, and the caller tells "held" from "lost" with
     * fenceLoss and tries again for a bounded time, so no lock_timeout is set in the caller's
     * transaction and no lock error aborts it.
     * $1 id, $2 owner, $3 token.
     */
    lockFence: q(
      'lock-fence',
      `SELECT (SELECT j.id FROM ${jobs} AS j WHERE ${fence('j', '$1', '$2', '$3')} FOR UPDATE OF j SKIP LOCKED)::text AS locked`,
    ),

    /**
     * Fails (25P01) unless the connection is inside a transaction block: a caller's client in
     * autocommit would let ctx.complete's lock end with its statement and its work commit on its
     * own. One round trip, no parameters (simple protocol, two statements), nothing left behind.
     */
    requireTransaction: q('require-transaction', `SAVEPOINT pgq_complete; RELEASE SAVEPOINT pgq_complete`),

    /**
     * Why a fence was refused, for a caller that learnt it from a statement without reasons, and
     * the row's status. $1 id, $2 token, $3 owner.
     */
    fenceLoss: q(
      'fence-loss',
      `SELECT CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', '$2::bigint', '$3::text')} END AS loss,
              j.status::text AS status,
              -- The fence still holds (the row may be locked by someone else, see lockFence).
              coalesce(${fence('j', '$1::bigint', '$3::text', '$2::bigint')}, false) AS owned
       FROM (SELECT 1) AS one LEFT JOIN ${jobs} AS j ON j.id = $1`,
    ),

    /**
     * A prefetched job's attempt starts: its lease is renewed to a full length and its deadline set
     * from now, so time spent waiting in the worker's buffer is neither lease nor runtime the
     * handler loses. Fenced; run only when the buffered lease is too short to be useful.
     * $1 id, $2 owner, $3 token, $4 lease ms.
     */
    startAttempt: q(
      'start-attempt',
      `WITH target AS (SELECT $1::bigint AS id, $2::text AS owner, $3::bigint AS token),
       started AS (
         UPDATE ${jobs} AS j
         SET deadline_at = now() + ${ms('j.max_runtime_ms')},
             lease_expires_at = now() + ${ms('least($4::bigint, j.max_runtime_ms)')}
         FROM target t
         WHERE ${fence('j', 't.id', 't.owner', 't.token')}
         RETURNING (extract(epoch FROM j.lease_expires_at - now()) * 1000)::float8 AS lease_ms_left,
                   j.lease_expires_at >= j.deadline_at AS lease_at_deadline, j.deadline_at
       )
       SELECT s.lease_ms_left, s.lease_at_deadline, s.deadline_at,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token', 't.owner')} END AS loss
       FROM target t LEFT JOIN started s ON true LEFT JOIN ${jobs} j ON j.id = t.id`,
    ),

    /**
     * A worker's leases that are no longer its own (cancelled, reaped, reclaimed), with why: run
     * once per poll, so a cancel reaches the handler even when its NOTIFY is lost. Read-only.
     * $1 ids, $2 tokens, $3 owner.
     */
    checkLeases: q(
      'check-leases',
      `SELECT i.id::text AS id, i.token::text AS token,
              CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 'i.token', '$3')} END AS loss
       FROM unnest($1::bigint[], $2::bigint[]) AS i(id, token) LEFT JOIN ${jobs} j ON j.id = i.id
       WHERE j.id IS NULL OR j.status <> 'running' OR j.lease_token <> i.token OR j.lease_owner <> $3`,
    ),

    /**
     * The worker of a cancelled job confirms that the job's attempt is over (its handler settled,
     * or it never started): the job lets go of its lease and of its ordering key. Not a fenced
     * write of the job's state (that is final already); matched on this attempt's token and owner.
     * $1 id, $2 owner, $3 token.
     */
    endCancelledAttempt: q(
      'end-cancelled-attempt',
      `WITH ended AS (
         UPDATE ${jobs} AS j SET lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         -- status::text, as in fence(): a test jobs_cancelled_lease_idx cannot serve, so the row is
         -- found by its primary key (after a mass cancel the partial index is large, and stale
         -- statistics made every confirmation walk it).
         WHERE j.id = $1 AND j.status::text = 'cancelled' AND j.lease_owner = $2 AND j.lease_token = $3
           AND j.lease_expires_at IS NOT NULL
         RETURNING j.id, j.queue_name, j.ordering_key
       ), ${releaseKeys(s, keysOf('ended'))}
       SELECT (SELECT count(*) FROM ended)::int AS ended, ${RELEASED_KEYS_COLUMNS}`,
    ),

    /**
     * The reaper's pass over cancelled attempts whose worker never confirmed them (it crashed, or
     * its handler ignores its signal): once the lease has run out the attempt is over by the
     * fence's own rule, and the job lets go of its key. Bounded, SKIP LOCKED, as reapExpired.
     * $1 limit.
     */
    endExpiredCancels: q(
      'end-expired-cancels',
      `WITH expired AS (
         SELECT id FROM ${jobs}
         WHERE status = 'cancelled' AND lease_expires_at <= now()
         ORDER BY lease_expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
       ), ended AS (
         UPDATE ${jobs} AS j SET lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL
         FROM expired e WHERE j.id = e.id
         RETURNING j.id, j.queue_name, j.ordering_key
       ), ${releaseKeys(s, keysOf('ended'))}
       SELECT (SELECT count(*) FROM ended)::int AS ended, ${RELEASED_KEYS_COLUMNS}`,
    ),

    /**
     * The KeyHandoffs pass: key releases that had to be handed off because a producer held the
     * key's row (see releaseKeys) are applied now, for each key whose row is free; the rest wait
     * for the next pass. Bounded, SKIP LOCKED, safe in every process. A pass walks the table by id
     * ($2: after this id), so keys a long producer transaction still holds never hide the free
     * ones behind them.
     * $1 limit, $2 after id.
     */
    handOffKeys: q(
      'hand-off-keys',
      `WITH pending AS (
         SELECT id, queue_name, ordering_key, n FROM ${s}.key_handoffs WHERE id > $2 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
       ), ${releaseKeys(s, 'SELECT queue_name, ordering_key, sum(n)::int AS n FROM pending GROUP BY 1, 2', false)}, handed AS (
         DELETE FROM ${s}.key_handoffs h
         USING pending p
         WHERE h.id = p.id
           AND EXISTS (SELECT 1 FROM locked_keys l WHERE l.queue_name = p.queue_name AND l.ordering_key = p.ordering_key)
         RETURNING h.id
       )
       SELECT (SELECT count(*) FROM pending)::int AS pending, (SELECT count(*) FROM handed)::int AS handed,
              (SELECT max(id) FROM pending)::text AS last_id, ${RELEASED_KEYS_COLUMNS}`,
    ),


    /**
     * fenceLoss for a fenced write refused by a statement that records nothing (ctx.complete's
     * fenced row lock): reports why and records the refusal in the job's history as 'lost_fence',
     * as the fenced completion, failure and heartbeat statements do. $1 id, $2 token, $3 owner.
     */
    recordFenceLoss: q(
      'record-fence-loss',
      `WITH target AS (SELECT $1::bigint AS id, $2::bigint AS token, $3::text AS owner),
       lost AS (
         INSERT INTO ${events} (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT j.id, 'lost_fence', j.status, j.attempt_count, t.token, t.owner, ${fenceLossCode('j', 't.token', 't.owner')}
         FROM target t JOIN ${jobs} j ON j.id = t.id
       )
       SELECT CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 't.token', 't.owner')} END AS loss
       FROM target t LEFT JOIN ${jobs} j ON j.id = t.id`,
    ),

    /**
     * Before an external call: records the effect as started (or, for an effect a previous
     * attempt started but never confirmed, counts another try), fenced on the current lease, and
     * reports what an earlier attempt left: nothing, 'started' (an uncertain outcome) or
     * 'confirmed' (with its result; the call is not repeated).
     * $1 id, $2 owner, $3 token, $4 effect name, $5 idempotency key.
     */
    beginEffect: q(
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
    ),

    /**
     * After an external call: the effect is confirmed with its (bounded) result, or as happened
     * without it ($7 false: the result could not be stored). Not fenced on purpose: the call
     * happened, with the effect's idempotency key, whoever holds the lease now; the record states
     * a fact about the outside world, not the job's state. An effect confirmed without its result
     * may get it later (a reconciliation).
     * $1 id, $2 worker, $3 token, $4 effect name, $5 result, $6 event kind, $7 result stored.
     */
    confirmEffect: q(
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
    ),

    jobEffects: q(
      'job-effects',
      `SELECT name, idempotency_key, status, result, result_stored, attempts, lease_token::text AS lease_token, started_at, confirmed_at
       FROM ${s}.job_effects WHERE job_id = $1 ORDER BY started_at, name`,
    ),

    /**
     * Pauses ($2 = true) or resumes a queue for every process. Resuming wakes its workers.
     * $1 queue, $2 paused?, $3 channel.
     */
    setQueuePaused: q(
      'set-queue-paused',
      `WITH changed AS (
         UPDATE ${s}.queues SET paused_at = CASE WHEN $2::boolean THEN coalesce(paused_at, now()) END
         WHERE name = $1 RETURNING name, paused_at
       ), woken AS (
         SELECT count(pg_notify($3, name)) AS n FROM changed WHERE paused_at IS NULL
       )
       SELECT c.name, c.paused_at FROM changed c CROSS JOIN woken`,
    ),

    /**
     * An operator ends a job: cancel (scheduled, pending or running) or discard (dead), as given
     * by $2. It waits for the row lock (no SKIP LOCKED): a transactional completion in progress
     * decides first. A running job is cancelled at once in the table, so its worker's late writes
     * are refused by the fence with the reason "cancelled"; a NOTIFY tells that worker to abort
     * the handler's signal now rather than at its next heartbeat (and its worker checks its leases
     * every poll, in case the NOTIFY is lost).
     *
     * A running job's attempt is not over when it is cancelled: its handler may still be running,
     * so the job keeps its lease (owner, token, expiry) and its ordering key until its worker
     * confirms the attempt ended (endCancelledAttempt) or the lease runs out (the reaper's
     * endExpiredCancels). Its key's next job cannot start beside it.
     * $1 id, $2 allowed statuses, $3 event kind, $4 actor, $5 reason, $6 channel.
     */
    cancel: q(
      'cancel',
      `WITH target AS (
         SELECT id, status, lease_owner, lease_token, attempt_count FROM ${jobs} WHERE id = $1 FOR UPDATE
       ), ended AS (
         UPDATE ${jobs} AS j
         SET status = 'cancelled', finished_at = now(),
             lease_owner = CASE WHEN t.status = 'running' THEN j.lease_owner END,
             lease_expires_at = CASE WHEN t.status = 'running' THEN j.lease_expires_at END,
             deadline_at = CASE WHEN t.status = 'running' THEN j.deadline_at END,
             key_waiting = false
         FROM target t
         WHERE j.id = t.id AND t.status = ANY($2::${status}[])
         RETURNING j.id, j.queue_name, CASE WHEN t.status = 'running' THEN NULL ELSE j.ordering_key END AS ordering_key
       ), ${releaseKeys(s, keysOf('ended'))}, audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, worker, actor, message)
         SELECT t.id, $3, t.status, 'cancelled', t.attempt_count, t.lease_token, t.lease_owner, $4, $5
         FROM target t JOIN ended e ON e.id = t.id
       ), woken AS (
         SELECT count(pg_notify($6, '*cancel:' || t.id)) AS n
         FROM target t JOIN ended e ON e.id = t.id WHERE t.status = 'running'
       )
       SELECT t.status::text AS previous_status, EXISTS (SELECT 1 FROM ended) AS applied, ${RELEASED_KEYS_COLUMNS}
       FROM target t CROSS JOIN woken`,
    ),

    /**
     * Replays dead jobs in place: same id, same history (plus a 'replayed' row saying who and
     * why), a fresh attempt budget, and a token that keeps growing (the next claim increments it,
     * so a worker from before the replay can never complete the new attempt). Jobs that are not
     * dead are reported, not touched. $1 ids, $2 actor, $3 reason, $4 channel.
     */
    replay: q(
      'replay',
      `WITH input AS (
         SELECT DISTINCT unnest($1::bigint[]) AS id
       ), target AS (
         SELECT j.id, j.attempt_count, j.lease_token, j.last_error_code
         FROM ${jobs} j JOIN input i ON i.id = j.id
         WHERE j.status = 'dead'
         FOR UPDATE OF j
       ), replayed AS (
         UPDATE ${jobs} AS j
         SET status = 'pending', attempt_count = 0, release_count = 0, available_at = now(), finished_at = NULL
         FROM target t
         WHERE j.id = t.id
         RETURNING j.id, j.queue_name
       ), audit AS (
         INSERT INTO ${events} (job_id, kind, from_status, to_status, attempt, lease_token, actor, error_code, message)
         SELECT t.id, 'replayed', 'dead', 'pending', t.attempt_count, t.lease_token, $2, t.last_error_code, $3
         FROM target t
       ), woken AS (
         SELECT count(pg_notify($4, d.queue_name)) AS n FROM (SELECT DISTINCT queue_name FROM replayed) d
       )
       SELECT i.id::text AS id, r.id IS NOT NULL AS replayed, j.status::text AS status
       FROM input i
         LEFT JOIN replayed r ON r.id = i.id
         LEFT JOIN ${jobs} j ON j.id = i.id
         CROSS JOIN woken
       ORDER BY i.id`,
    ),

    // Dead jobs, oldest death first, a page at a time: one statement per filter (see listDeadPage).
    listDead: listDeadPage('list-dead', []),
    listDeadOfQueue: listDeadPage('list-dead-of-queue', ['queue_name']),
    listDeadWithCode: listDeadPage('list-dead-with-code', ['last_error_code']),
    listDeadOfQueueWithCode: listDeadPage('list-dead-of-queue-with-code', ['queue_name', 'last_error_code']),

    /**
     * Deletes one finished job on an operator's explicit request, and records that it did.
     * $1 id, $2 actor, $3 reason.
     */
    deleteJob: q(
      'delete-job',
      `WITH removed AS (
         DELETE FROM ${jobs} WHERE id = $1 AND status IN ('succeeded', 'dead', 'cancelled')
         RETURNING id, status, queue_name, finished_at,
                   -- Only a dead job, or a cancelled one whose attempt is not over, still holds its
                   -- key; succeeded and other cancelled ones released it.
                   CASE WHEN status = 'dead' OR lease_expires_at IS NOT NULL THEN ordering_key END AS ordering_key
       ), ${releaseKeys(s, keysOf('removed'))}, logged AS (
         INSERT INTO ${s}.purges (actor, reason, status, queue_name, older_than, removed, removed_ids)
         SELECT $2, $3, status, queue_name, finished_at, 1, ARRAY[id] FROM removed
       )
       SELECT (SELECT count(*) FROM removed)::int AS removed,
              (SELECT status::text FROM ${jobs} WHERE id = $1) AS status, ${RELEASED_KEYS_COLUMNS}`,
    ),

    // An explicit purge of dead jobs, a bounded batch at a time (see purgeDeadBatch).
    purgeDead: purgeDeadBatch('purge-dead', false),
    purgeDeadOfQueue: purgeDeadBatch('purge-dead-of-queue', true),

    /**
     * Retention: deletes succeeded jobs that finished more than $1 ms ago, oldest first, one
     * bounded batch ($2) per statement. Dead, running and pending jobs are never touched.
     */
    pruneSucceeded: q(
      'prune-succeeded',
      `WITH doomed AS (
         SELECT id FROM ${jobs}
         WHERE status = 'succeeded' AND finished_at < now() - ${ms('$1::bigint')}
         ORDER BY finished_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED
       ), removed AS (
         DELETE FROM ${jobs} AS j USING doomed d WHERE j.id = d.id RETURNING j.id
       )
       SELECT count(*)::int AS removed FROM removed`,
    ),

    /**
     * Per-queue figures whose cost follows what is live, never what is retained. Succeeded and
     * cancelled jobs are history (kept for days, or forever), so they are counted only when they
     * finished within the last $2 ms: a range of jobs_finished_idx per status, bounded by
     * throughput x window. (One range per status, `status = 'succeeded'`, not `status IN (…)`:
     * that IN is the index's own predicate, so the planner drops it as implied and, with no
     * condition left on the index's first column, walks all of the index, all of the history.)
     * Everything else comes from partial indexes that hold only live or dead rows: pending from
     * two (the claimable heads, and the jobs waiting for their ordering key: no index holds both),
     * each other status from its own. Each part is one row per queue, joined to the declared
     * queues. Ages are by database time. $1 "near expiry" window in ms, $2 the recent window in ms.
     */
    queueStats: q(
      'queue-stats',
      `WITH parts AS (
         SELECT queue_name, 'pending' AS status, count(*) AS n, min(available_at) AS oldest FROM ${jobs}
         WHERE status = 'pending' AND NOT key_waiting GROUP BY 1
         UNION ALL
         SELECT queue_name, 'pending', count(*), min(available_at) FROM ${jobs} WHERE status = 'pending' AND key_waiting GROUP BY 1
         UNION ALL
         SELECT queue_name, 'scheduled', count(*), NULL FROM ${jobs} WHERE status = 'scheduled' GROUP BY 1
         UNION ALL
         SELECT queue_name, 'running', count(*), NULL FROM ${jobs} WHERE status = 'running' GROUP BY 1
         UNION ALL
         SELECT queue_name, 'dead', count(*), min(finished_at) FROM ${jobs} WHERE status = 'dead' GROUP BY 1
         UNION ALL
         SELECT queue_name, 'succeeded', count(*), NULL FROM ${jobs}
         WHERE status = 'succeeded' AND finished_at > now() - ${ms('$2::bigint')} GROUP BY 1
         UNION ALL
         SELECT queue_name, 'cancelled', count(*), NULL FROM ${jobs}
         WHERE status = 'cancelled' AND finished_at > now() - ${ms('$2::bigint')} GROUP BY 1
       ), counts AS (
         SELECT queue_name,
                sum(n) FILTER (WHERE status = 'scheduled') AS scheduled,
                sum(n) FILTER (WHERE status = 'pending') AS pending,
                sum(n) FILTER (WHERE status = 'running') AS running,
                sum(n) FILTER (WHERE status = 'dead') AS dead,
                sum(n) FILTER (WHERE status = 'succeeded') AS recent_succeeded,
                sum(n) FILTER (WHERE status = 'cancelled') AS recent_cancelled,
                min(oldest) FILTER (WHERE status = 'pending') AS oldest_pending,
                min(oldest) FILTER (WHERE status = 'dead') AS oldest_dead
         FROM parts GROUP BY 1
       ), blocked_keys AS (
         SELECT queue_name, count(DISTINCT ordering_key) AS n FROM ${jobs}
         WHERE status = 'dead' AND ordering_key IS NOT NULL AND NOT key_waiting GROUP BY 1
       ), near_expiry AS (
         SELECT queue_name, count(*) AS n FROM ${jobs}
         WHERE status = 'running' AND lease_expires_at < now() + ${ms('$1::bigint')} GROUP BY 1
       )
       SELECT q.name AS queue, q.paused_at,
              coalesce(c.scheduled, 0)::int AS scheduled, coalesce(c.pending, 0)::int AS pending,
              coalesce(c.running, 0)::int AS running, coalesce(c.dead, 0)::int AS dead,
              coalesce(c.recent_succeeded, 0)::int AS recent_succeeded, coalesce(c.recent_cancelled, 0)::int AS recent_cancelled,
              (extract(epoch FROM now() - c.oldest_pending) * 1000)::float8 AS oldest_claimable_age_ms,
              (extract(epoch FROM now() - c.oldest_dead) * 1000)::float8 AS oldest_dead_age_ms,
              coalesce(ne.n, 0)::int AS running_near_expiry,
              coalesce(bk.n, 0)::int AS blocked_keys
       FROM ${s}.queues q
         LEFT JOIN counts c ON c.queue_name = q.name
         LEFT JOIN near_expiry ne ON ne.queue_name = q.name
         LEFT JOIN blocked_keys bk ON bk.queue_name = q.name
       ORDER BY q.name`,
    ),

    /** Sessions of this database and how many of them wait on a lock right now. */
    databaseStats: q(
      'database-stats',
      `SELECT count(*)::int AS connections,
              count(*) FILTER (WHERE wait_event_type = 'Lock')::int AS lock_waits
       FROM pg_stat_activity WHERE datname = current_database()`,
    ),

    jobEvents: q(
      'job-events',
      `SELECT id::text AS id, at, kind, from_status::text AS from_status, to_status::text AS to_status, attempt,
              lease_token::text AS lease_token, worker, actor, error_code, message
       FROM ${events} e WHERE e.job_id = $1
       -- e.id, not id: a bare name in ORDER BY means the output column, here id::text, which sorts '10' before '9'.
       ORDER BY e.id`,
    ),
  };
}
