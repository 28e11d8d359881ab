// Issue 15: the SQL floor of processing a backlog, no JS handler work, and what other per-job write
// shapes make of it. N connections, each loops: claim B → complete the rows in chunks of C (one
// statement each, sequentially) until the queue is empty. Each run is one variant on a schema of its
// own (the engine's migrations, then the variant's setup, then the fill); the variants are
// interleaved run by run, and the table gives medians [min–max].
//
//   DATABASE_URL=… node bench/probes/sql-floor.mjs [--runs 3] [--jobs 50000] [--conns 3]
//        [--variants base,hist,...] [--shapes 50/50,500/125,500/500]
//   DATABASE_URL=… node bench/probes/sql-floor.mjs --pin 60 [--pin-jobs 2000000] [--variants …]
//
// Server time and WAL per statement come from pg_stat_statements: the server of DATABASE_URL must
// have it in shared_preload_libraries (the probe creates the extension in its own database; without
// it those columns are empty). Never reconfigure a shared server for it: start a throwaway one.
//
// --pin S (pinned xmin): per variant one run of a backlog of --pin-jobs, filled by INSERT … SELECT;
// 10 s of work, then another session opens a REPEATABLE READ snapshot and holds it S seconds (no
// dead row version can be removed, vacuum is blocked), then 10 s more after its release. Reported
// per 10-s window: jobs/s, server µs per claimed and per completed job, and the index entries read
// per job (idx_tup_read of the schema's indexes): does the claim rate collapse, and does it recover?
//
// Each variant's statements are checked after its run, the same way for every shape: getJob finds
// a succeeded job by id, and completing it again is refused as FINISHED (the history keeps the
// token and owner that the fence's loss code needs) and audited as 'lost_fence' in job_events.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { PgQueue } from '../../dist/engine/index.js';
import { createStore } from '../../dist/engine/store/index.js';
import { fenceHolds, fenceLossCode } from '../../dist/engine/store/fence.js';
import { keysOf, releaseKeys, RELEASED_KEYS_COLUMNS } from '../../dist/engine/store/finish.js';
import { ms } from '../../dist/engine/store/statement.js';
import { createBenchDatabase, withClient } from '../lib/db.mjs';

const args = process.argv.slice(2);
const arg = (name, d) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : d;
};
const RUNS = Number(arg('runs', 3));
const JOBS = Number(arg('jobs', 50_000));
const CONNS = Number(arg('conns', 3));
const PIN = Number(arg('pin', 0));
const PIN_JOBS = Number(arg('pin-jobs', 2_000_000));
const SHAPES = arg('shapes', PIN ? '500/125' : '50/50,500/125,500/500').split(',').map((s) => s.split('/').map(Number));
const OWNER = 'floor-worker';

const INPUT = `WITH input AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token))`;
const matched = (j) => `${j}.id = ANY ($1::bigint[]) AND coalesce((${j}.id, ${j}.lease_token) IN (SELECT id, token FROM input), false)`;
/** Every completion reports applied rows as the engine's complete-many does (with the key columns). */
const APPLIED = (from) => `SELECT d.id::text AS id, d.token::text AS token, true AS applied, NULL AS loss, 'running' AS status, ${RELEASED_KEYS_COLUMNS} FROM ${from} d`;
const REFUSED = `SELECT r.id::text, r.token::text, false, r.loss, r.status::text, ${RELEASED_KEYS_COLUMNS} FROM refused r`;
/** The lost-fence audit of refused rows, as complete-many writes it. */
const lostAudit = (s) => `lost AS (
         INSERT INTO ${s}.job_events (job_id, kind, from_status, attempt, lease_token, worker, error_code)
         SELECT r.job_id, 'lost_fence', r.status, r.attempt_count, r.token, $3, r.loss
         FROM refused r WHERE r.job_id IS NOT NULL
       )`;
/** Marks each statement's text, so its pg_stat_statements row is found whatever the variant. */
const mark = (kind, text) => `/* floor:${kind} */ ${text}`;

// ---------------------------------------------------------------------------------------------
// The claim, as the engine writes it today (lib/engine/store/claim.ts), with the knobs the shapes
// below turn. `claimSql(s)` with no options is the engine's statement; the run warns when the two
// drift apart (the engine's claim is being worked on beside this probe).
//   target: 'id'   — the UPDATE finds the locked rows again by primary key (= ANY of their ids);
//           'ctid' — by the tuple id the lock returned (a TID scan, no second b-tree descent per row:
//                    the rows are locked by this statement, so their version cannot change).
//   epoch:  'extract'   — extract(epoch …) is numeric since PostgreSQL 14, then cast to float8;
//           'date_part' — float8 all along.
// ---------------------------------------------------------------------------------------------
function claimSql(s, { target = 'id', epoch = 'extract', jobs = `${s}.jobs` } = {}) {
  const t = (x) => (epoch === 'extract' ? `(extract(epoch FROM ${x}) * 1000)::float8` : `(date_part('epoch', ${x}) * 1000)`);
  const key = target === 'ctid' ? 'id, ctid' : 'id';
  return `WITH open AS (
         SELECT NOT EXISTS (SELECT 1 FROM ${s}.queues WHERE name = $1 AND paused_at IS NOT NULL) AS yes
       ), by_age AS (
         SELECT ${key} FROM ${jobs}
         WHERE queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()
           AND (SELECT yes FROM open)
         ORDER BY available_at, id
         LIMIT $9
         FOR UPDATE SKIP LOCKED
       ), by_priority AS (
         SELECT ${key} FROM ${jobs}
         WHERE queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()
           AND (SELECT yes FROM open)
           AND id NOT IN (SELECT id FROM by_age)
         ORDER BY priority DESC, available_at, id
         LIMIT (SELECT $3 - count(*) FROM by_age)
         FOR UPDATE SKIP LOCKED
       ), candidate AS (
         SELECT ${key} FROM by_age UNION ALL SELECT ${key} FROM by_priority
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
       WHERE ${target === 'ctid' ? 'j.ctid = ANY (ARRAY(SELECT ctid FROM candidate))' : 'j.id = ANY (ARRAY(SELECT id FROM candidate))'}
       RETURNING j.id, j.queue_name, j.payload, j.priority, j.attempt_count, j.max_attempts, j.max_runtime_ms,
                 j.lease_token::text AS lease_token,
                 ${t('j.created_at')} AS created_ms,
                 ${t('j.deadline_at')} AS deadline_ms, j.ordering_key,
                 ${t('j.lease_expires_at - now()')} AS lease_ms_left,
                 j.lease_expires_at >= j.deadline_at AS lease_at_deadline,
                 j.trace_context, j.payload_version,
                 ${t('now() - j.available_at')} AS waited_ms`;
}
const normalized = (sql) => sql.replace(/--[^\n]*/g, '').replace(/\s+/g, ' ').trim();

// ---------------------------------------------------------------------------------------------
// Shape (b): a completion moves the job out of `jobs`. One statement: DELETE … WHERE <fence>
// RETURNING the row, INSERT it into jobs_succeeded as succeeded. `jobs` then holds only live
// (and dead, cancelled) jobs; the history is written once and never updated, and needs no index
// but its primary key (getJob by id) — plus, for the pruner and the recent-window stats, either
// a BRIN on finished_at (rows arrive in finished_at order, so a BRIN summarises them almost for
// free) or time partitions dropped whole. The fence, the refusal report and the lost-fence audit
// are the engine's, the refused rows being looked up in both tables (a second completion of a
// job that already succeeded is FINISHED: the history keeps its token and owner).
// ---------------------------------------------------------------------------------------------
let jobColumns; // the jobs table's columns, read after the migrations
function intoHistory(s, { from = 'done d', overrides = {} } = {}) {
  const value = (c) =>
    overrides[c] ?? (c === 'status' ? `'succeeded'::${s}.job_status` : c === 'finished_at' ? 'now()' : c === 'lease_expires_at' ? 'NULL::timestamptz' : `d.${c}`);
  return `INSERT INTO ${s}.jobs_succeeded (${jobColumns.join(', ')})
         SELECT ${jobColumns.map(value).join(', ')} FROM ${from}`;
}
/** The refused rows of a batch, looked up in jobs and then in the history; `kept` has (id, token). */
function refusedInBoth(s) {
  return `refused AS (
         SELECT i.id, i.token, j.id AS job_id, j.status, j.attempt_count,
                CASE WHEN j.id IS NULL THEN 'LEASE_LOST' ELSE ${fenceLossCode('j', 'i.token', '$3')} END AS loss
         FROM input i
           LEFT JOIN LATERAL (
             SELECT x.id, x.status, x.attempt_count, x.lease_token, x.lease_owner FROM ${s}.jobs x WHERE x.id = i.id
             UNION ALL
             SELECT h.id, h.status, h.attempt_count, h.lease_token, h.lease_owner FROM ${s}.jobs_succeeded h WHERE h.id = i.id
             LIMIT 1) j ON true
         WHERE (i.id, i.token) NOT IN (SELECT id, token FROM kept)
       )`;
}
function completeIntoHistory(s) {
  return `${INPUT}, done AS (
         DELETE FROM ${s}.jobs AS j
         WHERE ${matched('j')} AND ${fenceHolds('j', '$3')}
         RETURNING j.*
       ), kept AS (
         ${intoHistory(s)}
         RETURNING id, lease_token AS token, queue_name, ordering_key
       ), ${releaseKeys(s, keysOf('kept'))}, ${refusedInBoth(s)}, ${lostAudit(s)}
       ${APPLIED('kept')} UNION ALL ${REFUSED}`;
}
/** getJob over both tables: one snapshot, so a job is seen in exactly one of them. */
const getJobBoth = (s) => `SELECT id::text AS id, status::text AS status, lease_token::text AS lease_token, lease_owner FROM ${s}.jobs WHERE id = $1
  UNION ALL SELECT id::text, status::text, lease_token::text, lease_owner FROM ${s}.jobs_succeeded WHERE id = $1 LIMIT 1`;

async function historyTable(c, s, { index = 'none', partitions = 0, unlogged = false } = {}) {
  if (partitions) {
    // Range partitions of finished_at, one a day (retention = partitions - 2 days): pruning is a
    // DROP of the oldest. The primary key must hold the partition key, so id alone is no longer
    // unique by constraint (it is by the identity of jobs), and getJob(id) probes every partition.
    await c.query(`CREATE TABLE ${s}.jobs_succeeded (LIKE ${s}.jobs INCLUDING DEFAULTS, PRIMARY KEY (id, finished_at)) PARTITION BY RANGE (finished_at)`);
    for (let d = -(partitions - 2); d <= 1; d++) {
      const { rows } = await c.query(`SELECT date_trunc('day', now()) + $1 * interval '1 day' AS a, date_trunc('day', now()) + ($1 + 1) * interval '1 day' AS b`, [d]);
      await c.query(`CREATE TABLE ${s}."jobs_succeeded_${d + partitions}" PARTITION OF ${s}.jobs_succeeded FOR VALUES FROM ('${rows[0].a.toISOString()}') TO ('${rows[0].b.toISOString()}')`);
    }
  } else {
    await c.query(`CREATE ${unlogged ? 'UNLOGGED ' : ''}TABLE ${s}.jobs_succeeded (LIKE ${s}.jobs INCLUDING DEFAULTS, PRIMARY KEY (id))`);
  }
  if (index === 'brin') await c.query(`CREATE INDEX ON ${s}.jobs_succeeded USING brin (finished_at) WITH (autosummarize = on)`);
  if (index === 'btree') await c.query(`CREATE INDEX ON ${s}.jobs_succeeded (finished_at)`);
}

// ---------------------------------------------------------------------------------------------
// Shape (d), HOT claims: a claim is a HOT update (a new version on the same page, no index entry
// at all) when no column it writes is named by any index of jobs, key or predicate. Today every
// partial predicate names status and the reaper's index is on lease_expires_at, so none is. Here:
// jobs keeps only its primary key and the two claimable indexes, their predicates without status
// (`NOT key_waiting`), so a claimed job stays in them and the claim's walk filters status on the
// heap, stepping over the jobs in flight; fillfactor leaves room on the page for the new versions.
// Completion as (b): the row leaves jobs. An upper bound: the reaper, the scheduler's and the
// dead jobs' indexes are gone, and would need other homes (see docs/performance.md).
// ---------------------------------------------------------------------------------------------
async function hotCapable(c, s, fillfactor) {
  await c.query(`ALTER TABLE ${s}.jobs SET (fillfactor = ${fillfactor})`);
  for (const i of await secondaryIndexes(c, s)) await c.query(`DROP INDEX ${i}`);
  await c.query(`CREATE INDEX jobs_claimable_idx ON ${s}.jobs (queue_name, priority DESC, available_at, id) WHERE NOT key_waiting`);
  await c.query(`CREATE INDEX jobs_claimable_age_idx ON ${s}.jobs (queue_name, available_at, id) WHERE NOT key_waiting`);
}

// ---------------------------------------------------------------------------------------------
// Shape (d), a narrow lease table: the claim leaves the wide jobs row as it is (no new version of
// the payload) and inserts (job_id, token, owner, attempt, lease times, policy) into `leases`; the
// completion deletes the job (under the lease's fence), then the lease, and inserts the job into
// the history as (b). The token comes from a sequence (it grows per job as the fence needs, since it
// grows globally). Because the claimed jobs row does not change, a claimer whose snapshot predates
// another's commit sees the job unleased and can lock it once the other committed: the lease's
// primary key decides (ON CONFLICT DO NOTHING), and the claim returns only the jobs it leased. The
// walks step over leased jobs (still 'pending' in jobs) with one lease probe each.
// ---------------------------------------------------------------------------------------------
async function leaseTable(c, s) {
  await c.query(`CREATE TABLE ${s}.leases (
    job_id bigint PRIMARY KEY, token bigint NOT NULL, owner text NOT NULL, attempt integer NOT NULL,
    claimed_at timestamptz NOT NULL, deadline_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
    max_attempts integer NOT NULL, max_runtime_ms integer NOT NULL, backoff_base_ms integer NOT NULL, backoff_max_ms integer NOT NULL)`);
  await c.query(`CREATE INDEX leases_expires_idx ON ${s}.leases (expires_at)`); // the reaper's
  await c.query(`CREATE SEQUENCE ${s}.lease_tokens`);
}
function claimLeases(s) {
  const walk = (order, limit, extra = '') => `SELECT id FROM ${s}.jobs
         WHERE queue_name = $1 AND status = 'pending' AND NOT key_waiting AND available_at <= now()
           AND (SELECT yes FROM open) ${extra}
           AND NOT EXISTS (SELECT 1 FROM ${s}.leases l WHERE l.job_id = jobs.id)
         ORDER BY ${order} LIMIT ${limit} FOR UPDATE SKIP LOCKED`;
  return `WITH open AS (
         SELECT NOT EXISTS (SELECT 1 FROM ${s}.queues WHERE name = $1 AND paused_at IS NOT NULL) AS yes
       ), by_age AS (${walk('available_at, id', '$9')}
       ), by_priority AS (${walk('priority DESC, available_at, id', '(SELECT $3 - count(*) FROM by_age)', 'AND id NOT IN (SELECT id FROM by_age)')}
       ), claimed AS MATERIALIZED (
         SELECT j.*, nextval('${s}.lease_tokens') AS token,
                now() + ${ms('coalesce(j.max_runtime_ms, $5)')} AS new_deadline,
                now() + ${ms('least($4::bigint, coalesce(j.max_runtime_ms, $5))')} AS new_expiry
         FROM ${s}.jobs j WHERE j.id = ANY (ARRAY(SELECT id FROM by_age UNION ALL SELECT id FROM by_priority))
       ), leased AS (
         INSERT INTO ${s}.leases (job_id, token, owner, attempt, claimed_at, deadline_at, expires_at, max_attempts, max_runtime_ms, backoff_base_ms, backoff_max_ms)
         SELECT id, token, $2, attempt_count + 1, now(), new_deadline, new_expiry,
                coalesce(max_attempts, $6), coalesce(max_runtime_ms, $5), coalesce(backoff_base_ms, $7), coalesce(backoff_max_ms, $8)
         FROM claimed
         ON CONFLICT (job_id) DO NOTHING
         RETURNING job_id
       )
       SELECT c.id, c.queue_name, c.payload, c.priority, c.attempt_count + 1 AS attempt_count, coalesce(c.max_attempts, $6) AS max_attempts,
              coalesce(c.max_runtime_ms, $5) AS max_runtime_ms, c.token::text AS lease_token,
              (extract(epoch FROM c.created_at) * 1000)::float8 AS created_ms,
              (extract(epoch FROM c.new_deadline) * 1000)::float8 AS deadline_ms, c.ordering_key,
              (extract(epoch FROM c.new_expiry - now()) * 1000)::float8 AS lease_ms_left,
              c.new_expiry >= c.new_deadline AS lease_at_deadline,
              c.trace_context, c.payload_version,
              (extract(epoch FROM now() - c.available_at) * 1000)::float8 AS waited_ms
       FROM claimed c WHERE c.id IN (SELECT job_id FROM leased)`;
}
function completeLeases(s) {
  const fromLease = {
    attempt_count: 'e.attempt', lease_token: 'e.token', lease_owner: 'e.owner', claimed_at: 'e.claimed_at', deadline_at: 'e.deadline_at',
    max_attempts: 'e.max_attempts', max_runtime_ms: 'e.max_runtime_ms', backoff_base_ms: 'e.backoff_base_ms', backoff_max_ms: 'e.backoff_max_ms',
  };
  return `${INPUT}, done AS (
         -- The jobs row first, then the lease: the lock order every writer must keep. A claimer
         -- with a stale snapshot may hold this row (locked, not changed) while it tries to insert
         -- the same lease: with the lease deleted first, each would wait for the other (a
         -- deadlock, seen in this probe); this way its insert meets the live lease and gives up.
         -- The fence is on the lease (this claim's id and token, this owner, not expired) and on
         -- the job (not cancelled meanwhile: a cancel writes the jobs row).
         DELETE FROM ${s}.jobs AS j
         WHERE j.id = ANY ($1::bigint[]) AND j.status::text = 'pending'
           AND EXISTS (SELECT 1 FROM ${s}.leases l
                       WHERE l.job_id = j.id AND coalesce((l.job_id, l.token) IN (SELECT id, token FROM input), false)
                         AND l.owner = $3 AND l.expires_at > clock_timestamp())
         RETURNING j.*
       ), ended AS (
         DELETE FROM ${s}.leases AS l WHERE l.job_id = ANY (ARRAY(SELECT id FROM done))
         RETURNING l.*
       ), kept AS (
         ${intoHistory(s, { from: 'done d JOIN ended e ON e.job_id = d.id', overrides: fromLease })}
         RETURNING id, lease_token AS token, queue_name, ordering_key
       ), ${releaseKeys(s, keysOf('kept'))}, ${refusedInBoth(s)}, ${lostAudit(s)}
       ${APPLIED('kept')} UNION ALL ${REFUSED}`;
}

// ---------------------------------------------------------------------------------------------
// The variants. setup(c, s) runs after the engine's migrations and before the fill; claim(s) and
// complete(s) return SQL text ($1..$9 the engine's claim parameters; $1 ids, $2 tokens, $3 owner),
// absent = the engine's statement; getJob(s) reads one job by id ($1) for the check.
// ---------------------------------------------------------------------------------------------
const engineGetJob = (s) => `SELECT id::text AS id, status::text AS status, lease_token::text AS lease_token, lease_owner FROM ${s}.jobs WHERE id = $1`;
const VARIANTS = {
  // (a) Today's statements, today's schema.
  base: {},
  // Earlier probes of today's shape (issue 15's first pass): the completion without its lost/report
  // CTEs, the jobs indexes cut to the pkey and the claimable ones, fillfactor 70, no CHECKs.
  lean: {
    complete: (s) => `${INPUT}
      UPDATE ${s}.jobs AS j SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
      WHERE ${matched('j')} AND ${fenceHolds('j', '$3')}
      RETURNING j.id, j.lease_token, true AS applied`,
    noCheck: 'reports no refused rows',
  },
  fewidx: { setup: (c, s) => dropSecondary(c, s, (i) => !i.includes('claimable')) },
  ff70: { setup: (c, s) => c.query(`ALTER TABLE ${s}.jobs SET (fillfactor = 70)`) },
  'lean+fewidx+nochecks': {
    setup: async (c, s) => {
      await dropSecondary(c, s, (i) => !i.includes('claimable'));
      await dropChecks(c, s);
    },
    complete: (s) => VARIANTS.lean.complete(s),
    noCheck: 'reports no refused rows',
  },
  // (b) The completion moves the job into jobs_succeeded (heap + primary key, nothing else). The
  // foreign keys of job_events and job_effects to jobs(id) are dropped: kept, ON DELETE CASCADE
  // would delete a job's audit trail and effects when it succeeds (and a lost-fence row for a job
  // in the history would violate them).
  hist: {
    setup: async (c, s) => {
      await historyTable(c, s);
      await dropFks(c, s);
    },
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  // (b) with the foreign keys kept, to show what they cost: one cascade trigger per moved job, two
  // foreign keys. Not a shape to ship (see hist).
  'hist-fk': {
    setup: (c, s) => historyTable(c, s),
    complete: completeIntoHistory,
    getJob: getJobBoth,
    noCheck: "the lost-fence row of a job in the history violates the foreign key kept on jobs(id)",
  },
  // (b) with what the retention pruner and stats() read: a BRIN of finished_at, or a b-tree.
  'hist-brin': {
    setup: async (c, s) => {
      await historyTable(c, s, { index: 'brin' });
      await dropFks(c, s);
    },
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  'hist-btree': {
    setup: async (c, s) => {
      await historyTable(c, s, { index: 'btree' });
      await dropFks(c, s);
    },
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  // (b) with a history partitioned by day on finished_at (8 partitions: 6 days kept, today,
  // tomorrow): pruning drops a partition, no DELETE, no dead rows.
  'hist-part': {
    setup: async (c, s) => {
      await historyTable(c, s, { partitions: 8 });
      await dropFks(c, s);
    },
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  // (c) The history UNLOGGED: NOT ACCEPTABLE (a crash empties it, and the job it moved is then in
  // neither table); measured only to show what the durability of the history costs.
  'hist-unlogged': {
    setup: async (c, s) => {
      await historyTable(c, s, { unlogged: true });
      await dropFks(c, s);
    },
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  // The claim's own fat, on today's shape: the UPDATE finds the locked rows by their ctid, and the
  // epoch conversions stay float8 (neither changes the write shape; see claimSql).
  'base+tid': { claim: (s) => claimSql(s, { target: 'ctid', epoch: 'date_part' }) },
  // (b) + the same claim.
  'hist-btree+tid': {
    setup: (c, s) => VARIANTS['hist-btree'].setup(c, s),
    claim: (s) => claimSql(s, { target: 'ctid', epoch: 'date_part' }),
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  'hist-brin+tid': {
    setup: (c, s) => VARIANTS['hist-brin'].setup(c, s),
    claim: (s) => claimSql(s, { target: 'ctid', epoch: 'date_part' }),
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  // (d) HOT claims (see hotCapable), on (b) with the BRIN; fillfactor 50 and 70.
  hot50: {
    setup: async (c, s) => {
      await VARIANTS['hist-brin'].setup(c, s);
      await hotCapable(c, s, 50);
    },
    claim: (s) => claimSql(s, { target: 'ctid', epoch: 'date_part' }),
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  hot70: {
    setup: async (c, s) => {
      await VARIANTS['hist-brin'].setup(c, s);
      await hotCapable(c, s, 70);
    },
    claim: (s) => claimSql(s, { target: 'ctid', epoch: 'date_part' }),
    complete: completeIntoHistory,
    getJob: getJobBoth,
  },
  // (d) The narrow lease table (see leaseTable), with (b)'s history and its BRIN.
  leases: {
    setup: async (c, s) => {
      await VARIANTS['hist-brin'].setup(c, s);
      await leaseTable(c, s);
    },
    claim: claimLeases,
    complete: completeLeases,
    getJob: getJobBoth,
  },
  // graphile-worker 0.18's own write shape, for its floor on the same machine in the same run,
  // reproduced from reading its migrations (sql/000011.sql and later) and its dist/sql/getJobs.js
  // and completeJobs.js: its jobs table (a primary key, the unique `key`, whose NULLs are indexed
  // too, so every new row version gets an entry, and two partial indexes on the generated
  // is_available), its claim for a batch (the named-queue strategy it ships, 2: lock the queues that
  // are free up front; a batch keeps one job per named queue; attempts + 1, locked_by, locked_at;
  // RETURNING *) and its completion of jobs without a named queue (DELETE by id, no fence). A task
  // id of 1, no named queues, nothing of ours (no lease, no token, no history, no audit).
  'gw-shape': {
    setup: (c, s) =>
      c.query(`CREATE TABLE ${s}.gw_job_queues (
        id int PRIMARY KEY GENERATED ALWAYS AS IDENTITY, queue_name text NOT NULL UNIQUE, locked_at timestamptz, locked_by text,
        is_available boolean GENERATED ALWAYS AS (locked_at IS NULL) STORED NOT NULL);
      CREATE TABLE ${s}.gw_jobs (
        id bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY, job_queue_id int, task_id int NOT NULL,
        payload json DEFAULT '{}'::json NOT NULL, priority smallint DEFAULT 0 NOT NULL, run_at timestamptz DEFAULT now() NOT NULL,
        attempts smallint DEFAULT 0 NOT NULL, max_attempts smallint DEFAULT 25 NOT NULL CHECK (max_attempts >= 1), last_error text,
        created_at timestamptz DEFAULT now() NOT NULL, updated_at timestamptz DEFAULT now() NOT NULL,
        key text UNIQUE CHECK (length(key) > 0 AND length(key) <= 512), locked_at timestamptz, locked_by text,
        revision integer DEFAULT 0 NOT NULL, flags jsonb,
        is_available boolean GENERATED ALWAYS AS ((locked_at IS NULL) AND (attempts < max_attempts)) STORED NOT NULL);
      CREATE INDEX ON ${s}.gw_jobs (priority, run_at) INCLUDE (id, task_id, job_queue_id) WHERE is_available = true;
      CREATE INDEX ON ${s}.gw_jobs (priority, run_at) INCLUDE (id, task_id) WHERE is_available = true AND job_queue_id IS NULL`),
    fill: (c, s, jobs) => c.query(`INSERT INTO ${s}.gw_jobs (task_id, payload) SELECT 1, json_build_object('i', g) FROM generate_series(1, $1::int) g`, [jobs]),
    claim: (s) => `WITH j_raw AS (
        SELECT jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.id FROM ${s}.gw_jobs AS jobs
        WHERE jobs.is_available = true AND run_at <= now() AND task_id = ANY ($2::int[])
          AND (jobs.job_queue_id IS NULL
               OR jobs.job_queue_id IN (SELECT id FROM ${s}.gw_job_queues AS q WHERE q.is_available = true FOR UPDATE SKIP LOCKED))
        ORDER BY priority ASC, run_at ASC LIMIT $3 FOR UPDATE SKIP LOCKED
      ), j AS (
        SELECT DISTINCT ON (job_queue_id, CASE WHEN job_queue_id IS NULL THEN id END) job_queue_id, priority, run_at, id
        FROM j_raw ORDER BY job_queue_id, CASE WHEN job_queue_id IS NULL THEN id END, priority ASC, run_at ASC
      ), q AS (
        UPDATE ${s}.gw_job_queues AS job_queues SET locked_by = $1::text, locked_at = now() FROM j WHERE job_queues.id = j.job_queue_id
      )
      UPDATE ${s}.gw_jobs AS jobs SET attempts = jobs.attempts + 1, locked_by = $1::text, locked_at = now()
      FROM j WHERE jobs.id = j.id RETURNING *`,
    claimValues: (p) => [p.owner, [1], p.limit],
    // RETURNING only so that the probe can count what was applied (graphile-worker returns nothing).
    complete: (s) => `DELETE FROM ${s}.gw_jobs AS jobs USING unnest($1::bigint[]) n(n) WHERE id = n RETURNING true AS applied`,
    completeValues: (ids) => [ids],
    noCheck: 'keeps no succeeded job',
  },
  // The lower bound of a delete shape: no history at all (graphile-worker's shape, but fenced).
  // Loses the succeeded jobs: not a candidate, a bound.
  'delete-only': {
    setup: (c, s) => dropFks(c, s),
    complete: (s) => `${INPUT}
      DELETE FROM ${s}.jobs AS j WHERE ${matched('j')} AND ${fenceHolds('j', '$3')} RETURNING j.id, j.lease_token, true AS applied`,
    noCheck: 'keeps no succeeded job',
  },
};

async function secondaryIndexes(c, s) {
  const { rows } = await c.query(
    `SELECT indexrelid::regclass::text AS i FROM pg_index x WHERE x.indrelid = '${s}.jobs'::regclass AND NOT x.indisprimary`,
  );
  return rows.map((r) => r.i);
}
async function dropSecondary(c, s, which) {
  for (const i of await secondaryIndexes(c, s)) if (which(i)) await c.query(`DROP INDEX ${i}`);
}
async function dropChecks(c, s) {
  const { rows } = await c.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${s}.jobs'::regclass AND contype = 'c'`);
  for (const { conname } of rows) await c.query(`ALTER TABLE ${s}.jobs DROP CONSTRAINT "${conname}"`);
}
async function dropFks(c, s) {
  for (const t of ['job_events', 'job_effects']) {
    const { rows } = await c.query(`SELECT conname FROM pg_constraint WHERE conrelid = '${s}.${t}'::regclass AND contype = 'f'`);
    for (const { conname } of rows) await c.query(`ALTER TABLE ${s}.${t} DROP CONSTRAINT ${conname}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Measurement.
// ---------------------------------------------------------------------------------------------
let statsAvailable = true;
/** The floor statements' totals of this database (pg_stat_statements), by kind. */
async function statementTotals(c) {
  if (!statsAvailable) return {};
  const { rows } = await c.query(`SELECT substring(query FROM '^/\\* floor:(\\w+)') AS kind, sum(calls)::float8 AS calls, sum(rows)::float8 AS rows,
      sum(total_exec_time)::float8 AS ms, sum(wal_bytes)::float8 AS wal, sum(shared_blks_hit + shared_blks_read)::float8 AS blks
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE '/* floor:%' GROUP BY 1`);
  return Object.fromEntries(rows.map((r) => [r.kind, r]));
}
const perRow = (a, b, kind, f) => {
  const x = a[kind], y = b[kind] ?? { rows: 0, ms: 0, wal: 0, blks: 0 };
  if (!x || x.rows === y.rows) return NaN;
  return (x[f] - y[f]) / (x.rows - y.rows);
};
async function schemaTotals(c, schemaName) {
  const { rows } = await c.query(
    `SELECT coalesce(sum(n_tup_upd), 0)::float8 AS upd, coalesce(sum(n_tup_hot_upd), 0)::float8 AS hot, coalesce(sum(n_tup_del), 0)::float8 AS del,
            coalesce(sum(n_dead_tup), 0)::float8 AS dead,
            coalesce(sum(pg_relation_size(relid)), 0)::float8 AS heap, coalesce(sum(pg_indexes_size(relid)), 0)::float8 AS idx,
            (SELECT coalesce(sum(idx_tup_read), 0)::float8 FROM pg_stat_user_indexes WHERE schemaname = $1) AS idx_read
     FROM pg_stat_user_tables WHERE schemaname = $1 AND relname NOT IN ('queues', 'purges', 'key_handoffs', 'ordering_keys')`,
    [schemaName],
  );
  return rows[0];
}
const walLsn = (c) => c.query('SELECT pg_current_wal_lsn()::text AS lsn').then((r) => r.rows[0].lsn);
const walDiff = (c, a, b) => c.query('SELECT pg_wal_lsn_diff($1, $2)::float8 AS b', [b, a]).then((r) => r.rows[0].b);
/**
 * CPU time in µs: of the worker connections' backends (/proc/<pid>/stat, utime + stime; the server
 * must run on this machine, else NaN) and of this process (the client's share: the driver, the
 * arrays). Wall-clock figures (jobs/s, pg_stat_statements' µs) swing with the neighbours' load on a
 * shared machine; CPU per job much less, and it bounds the floor: 2 cores do at most
 * 2e6 / (server + client CPU µs per job) jobs/s.
 */
function backendCpuUs(pids) {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields[0] is field 3 (state)
      ticks += Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14, 15)
    } catch {
      return NaN;
    }
  }
  return (ticks * 1e6) / CLOCK_TICKS;
}
const CLOCK_TICKS = 100; // sysconf(_SC_CLK_TCK) on Linux
const clientCpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

async function fill(dbUrl, queue, s, jobs) {
  if (!PIN) {
    for (let i = 0; i < jobs; i += 1000) await queue.enqueueMany(Array.from({ length: Math.min(1000, jobs - i) }, (_, k) => ({ queue: 'bench', payload: { i: i + k } })));
    return;
  }
  // The pinned runs need a backlog that lasts: enqueue()'s row shape, by INSERT … SELECT.
  await withClient(dbUrl, async (c) => {
    for (let i = 0; i < jobs; i += 100_000) {
      await c.query(`INSERT INTO ${s}.jobs (queue_name, payload) SELECT 'bench', jsonb_build_object('i', g) FROM generate_series($1::int, $2::int) g`, [i + 1, Math.min(jobs, i + 100_000)]);
    }
  });
}

/** After a run: the variant still keeps what must be kept (see the header). */
async function check(c, s, variant, sample, statements) {
  if (variant.noCheck) return;
  const getJob = (variant.getJob ?? engineGetJob)(s);
  for (const { id, token } of sample) {
    const { rows } = await c.query(getJob, [id]);
    if (rows[0]?.status !== 'succeeded' || rows[0].lease_token !== token) throw new Error(`getJob(${id}) found ${JSON.stringify(rows[0])}`);
  }
  const again = await c.query({ text: statements.complete.text, values: [sample.map((x) => x.id), sample.map((x) => x.token), OWNER] });
  const losses = again.rows.map((r) => (r.applied ? 'applied' : r.loss));
  if (losses.some((l) => l !== 'FINISHED')) throw new Error(`a second completion was not refused as FINISHED: ${losses}`);
  const { rows: ev } = await c.query(`SELECT count(*)::int AS n FROM ${s}.job_events WHERE kind = 'lost_fence' AND job_id = ANY ($1::bigint[])`, [sample.map((x) => x.id)]);
  if (ev[0].n !== sample.length) throw new Error(`${ev[0].n} lost_fence rows for ${sample.length} refused completions`);
}

async function oneRun(dbUrl, variantName, [B, C], runNo) {
  const variant = VARIANTS[variantName];
  const schemaName = `floor_${runNo}`;
  const s = `"${schemaName}"`;
  const jobs = PIN ? PIN_JOBS : JOBS;
  const queue = new PgQueue({ connectionString: dbUrl, schema: schemaName });
  await queue.migrate();
  await queue.declareQueues(['bench']);
  await withClient(dbUrl, async (c) => {
    const { rows } = await c.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs' ORDER BY ordinal_position`, [schemaName]);
    jobColumns = rows.map((r) => r.column_name);
    await variant.setup?.(c, s);
  });
  const tFill = performance.now();
  if (variant.fill) await withClient(dbUrl, (c) => variant.fill(c, s, jobs));
  else await fill(dbUrl, queue, s, jobs);
  await queue.stop();
  const fillSeconds = (performance.now() - tFill) / 1000;
  await withClient(dbUrl, async (c) => {
    await c.query('ANALYZE');
    await c.query('CHECKPOINT');
  });
  const store = createStore(schemaName);
  if (runNo === 0 && normalized(claimSql(s)) !== normalized(store.statements.claim.text)) {
    console.error(`note: the engine's claim differs from this probe's copy of it (claimSql); 'base' runs the engine's, the other claims the copy`);
  }
  const claim = { name: `floor-claim-${runNo}`, text: mark('claim', variant.claim ? variant.claim(s) : store.statements.claim.text) };
  const complete = { name: `floor-complete-${runNo}`, text: mark('complete', variant.complete ? variant.complete(s) : store.statements.completeMany.text) };
  const claimParams = (variant.claimValues ?? store.statements.claim.values)({
    queue: 'bench', owner: OWNER, limit: B, leaseMs: 30_000, maxRuntimeMs: 900_000, maxAttempts: 25, backoffBaseMs: 1000, backoffMaxMs: 3_600_000, oldestFirst: Math.floor(B * 0.1),
  });
  const completeValues = variant.completeValues ?? ((ids, tokens) => [ids, tokens, OWNER]);
  const clients = await Promise.all(Array.from({ length: CONNS }, async () => {
    const c = new pg.Client({ connectionString: dbUrl, application_name: 'floor-worker' });
    // A run that throws drops the database WITH (FORCE): these then hear the termination, which
    // must not hide the run's own error behind an unhandled 'error' event.
    c.on('error', () => {});
    await c.connect();
    c.backendPid = (await c.query('SELECT pg_backend_pid() AS p')).rows[0].p;
    return c;
  }));
  const pids = clients.map((c) => c.backendPid);
  const monitor = new pg.Client({ connectionString: dbUrl, application_name: 'floor-monitor' });
  monitor.on('error', () => {});
  await monitor.connect();
  if (statsAvailable) await monitor.query('SELECT pg_stat_statements_reset()');
  const lsn0 = await walLsn(monitor);
  const stats0 = await statementTotals(monitor);
  const tables0 = await schemaTotals(monitor, schemaName);
  const cpu0 = { server: backendCpuUs(pids), client: clientCpuUs() };

  let done = 0;
  let stop = false;
  const sample = [];
  const t0 = performance.now();
  const workers = clients.map(async (c) => {
    while (!stop) {
      // The engine's claim answers `gate LEFT JOIN claimed`: one row with a null id when it claimed nothing.
      const rows = (await c.query({ name: claim.name, text: claim.text, values: claimParams })).rows.filter((row) => row.id !== null);
      if (rows.length === 0) return;
      for (let k = 0; k < rows.length; k += C) {
        const chunk = rows.slice(k, k + C);
        const r = await c.query({ name: complete.name, text: complete.text, values: completeValues(chunk.map((x) => x.id), chunk.map((x) => x.lease_token)) });
        const applied = r.rows.filter((x) => x.applied).length;
        if (applied !== chunk.length) throw new Error(`${variantName}: ${applied} of ${chunk.length} applied`);
        done += applied;
        if (sample.length < 3) sample.push({ id: String(chunk[0].id), token: String(chunk[0].lease_token) });
      }
    }
  });

  // Pinned mode: 10-s windows; the snapshot is taken after the first and released PIN s later.
  const windows = [];
  let holder;
  if (PIN) {
    const ended = Promise.all(workers).then(() => 'drained');
    let last = { t: t0, done: 0, stats: stats0, tables: tables0, cpu: cpu0 };
    for (let w = 0; w < PIN / 10 + 2; w++) {
      if ((await Promise.race([ended, new Promise((r) => setTimeout(() => r('tick'), 10_000))])) === 'drained') break;
      const now = { t: performance.now(), done, stats: await statementTotals(monitor), tables: await schemaTotals(monitor, schemaName), cpu: { server: backendCpuUs(pids), client: clientCpuUs() } };
      const n = now.done - last.done;
      windows.push({
        phase: w === 0 ? 'before' : w <= PIN / 10 ? 'held' : 'after',
        jobsPerSec: n / ((now.t - last.t) / 1000),
        claimUs: 1000 * perRow(now.stats, last.stats, 'claim', 'ms'),
        completeUs: 1000 * perRow(now.stats, last.stats, 'complete', 'ms'),
        idxReadPerJob: n ? (now.tables.idx_read - last.tables.idx_read) / n : NaN,
        serverCpu: (now.cpu.server - last.cpu.server) / n,
        dead: now.tables.dead,
      });
      last = now;
      if (w === 0) {
        holder = new pg.Client({ connectionString: dbUrl, application_name: 'floor-pin' });
        await holder.connect();
        await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        await holder.query('SELECT count(*) FROM pg_class'); // takes the snapshot: xmin pinned from here
      }
      if (w === PIN / 10) {
        await holder.query('COMMIT');
        await holder.end();
        holder = undefined;
      }
    }
    stop = true;
  }
  await Promise.all(workers);
  const seconds = (performance.now() - t0) / 1000;
  const cpu1 = { server: backendCpuUs(pids), client: clientCpuUs() };
  if (holder) await holder.end();
  const lsn1 = await walLsn(monitor);
  for (const c of clients) await c.end();
  await new Promise((r) => setTimeout(r, 700)); // pgstat flush of the exited backends
  const stats1 = await statementTotals(monitor);
  const tables1 = await schemaTotals(monitor, schemaName);
  const out = {
    variant: variantName, B, C, done, seconds, jobsPerSec: done / seconds, fillSeconds,
    walPerJob: (await walDiff(monitor, lsn0, lsn1)) / done,
    serverCpu: (cpu1.server - cpu0.server) / done,
    clientCpu: (cpu1.client - cpu0.client) / done,
    claimUs: 1000 * perRow(stats1, stats0, 'claim', 'ms'),
    completeUs: 1000 * perRow(stats1, stats0, 'complete', 'ms'),
    claimWal: perRow(stats1, stats0, 'claim', 'wal'),
    completeWal: perRow(stats1, stats0, 'complete', 'wal'),
    claimBlks: perRow(stats1, stats0, 'claim', 'blks'),
    completeBlks: perRow(stats1, stats0, 'complete', 'blks'),
    hot: tables1.hot - tables0.hot,
    upd: tables1.upd - tables0.upd,
    idxReadPerJob: (tables1.idx_read - tables0.idx_read) / done,
    heapMB: tables1.heap / 1048576,
    idxMB: tables1.idx / 1048576,
    windows,
  };
  await withClient(dbUrl, async (c) => {
    await check(c, s, variant, sample, { complete });
    await c.query(`DROP SCHEMA ${s} CASCADE`);
    await c.query('CHECKPOINT');
  });
  await monitor.end();
  return out;
}

const db = await createBenchDatabase(process.env.DATABASE_URL);
const variants = arg('variants', Object.keys(VARIANTS).join(',')).split(',');
for (const v of variants) if (!VARIANTS[v]) throw new Error(`no variant ${v} (${Object.keys(VARIANTS).join(', ')})`);
const results = [];
try {
  await withClient(db.url, async (c) => {
    try {
      await c.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      await c.query('SELECT pg_stat_statements_reset()');
    } catch (error) {
      statsAvailable = false;
      console.error(`pg_stat_statements unavailable (${error.message}): no server time or WAL per statement`);
    }
  });
  let n = 0;
  for (const shape of SHAPES) {
    for (let run = 0; run < (PIN ? 1 : RUNS); run++) {
      for (const v of variants) {
        const r = await oneRun(db.url, v, shape, n++);
        results.push(r);
        console.error(JSON.stringify(r));
      }
    }
  }
} finally {
  await db.drop();
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const f = (x, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : '-');
if (PIN) {
  console.log(`pinned xmin: ${PIN} s held after 10 s, ${PIN_JOBS} jobs preloaded, conns ${CONNS}, claim/complete ${SHAPES[0].join('/')}`);
  console.log('variant               window   phase    jobs/s  server CPU µs/job  claim µs/job  complete µs/job  idx reads/job  dead tuples');
  for (const r of results) {
    r.windows.forEach((w, i) =>
      console.log(`${r.variant.padEnd(21)} ${`${i * 10}-${i * 10 + 10}s`.padEnd(8)} ${w.phase.padEnd(7)} ${f(w.jobsPerSec).padStart(7)}  ${f(w.serverCpu, 1).padStart(17)}  ${f(w.claimUs, 1).padStart(12)}  ${f(w.completeUs, 1).padStart(15)}  ${f(w.idxReadPerJob, 1).padStart(13)}  ${f(w.dead).padStart(11)}`),
    );
    const held = r.windows.filter((w) => w.phase === 'held');
    const before = r.windows[0]?.jobsPerSec;
    console.log(`${r.variant.padEnd(21)} held/before ${f(held.reduce((a, w) => a + w.jobsPerSec, 0) / held.length / before, 2)}×, last held/before ${f(held.at(-1)?.jobsPerSec / before, 2)}×, after/before ${f(r.windows.find((w) => w.phase === 'after')?.jobsPerSec / before, 2)}×`);
  }
} else {
  console.log(`conns ${CONNS}, jobs ${JOBS}, median of ${RUNS} [min-max]; server µs, WAL bytes and buffers per job per statement (pg_stat_statements)`);
  console.log('variant               B/C      jobs/s [min-max]       CPU µs/job srv+cli  2-core bound  claim µs  compl. µs  WAL B/job  claim WAL  compl. WAL  claim bufs  compl. bufs  hot/upd        idx reads/job  heap+idx MB');
  for (const [B, C] of SHAPES) {
    for (const v of variants) {
      const rs = results.filter((r) => r.variant === v && r.B === B && r.C === C);
      const js = rs.map((r) => r.jobsPerSec);
      const pick = (g) => median(rs.map(g));
      console.log(
        `${v.padEnd(21)} ${`${B}/${C}`.padEnd(8)} ${`${f(median(js)).padStart(6)} [${f(Math.min(...js))}-${f(Math.max(...js))}]`.padEnd(22)}` +
          ` ${`${f(pick((r) => r.serverCpu), 1)} + ${f(pick((r) => r.clientCpu), 1)}`.padStart(18)}  ${f(2e6 / pick((r) => r.serverCpu + r.clientCpu)).padStart(12)}` +
          ` ${f(pick((r) => r.claimUs), 1).padStart(8)}  ${f(pick((r) => r.completeUs), 1).padStart(9)}  ${f(pick((r) => r.walPerJob)).padStart(9)}  ${f(pick((r) => r.claimWal)).padStart(9)}  ${f(pick((r) => r.completeWal)).padStart(10)}` +
          `  ${f(pick((r) => r.claimBlks), 1).padStart(10)}  ${f(pick((r) => r.completeBlks), 1).padStart(11)}  ${`${f(rs[0].hot)}/${f(rs[0].upd)}`.padEnd(13)}  ${f(pick((r) => r.idxReadPerJob), 1).padStart(13)}  ${f(pick((r) => r.heapMB + r.idxMB), 1).padStart(11)}`,
      );
    }
  }
}
