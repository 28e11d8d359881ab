import fc from 'fast-check';
import pg from 'pg';
import { expect } from 'vitest';
import { JobStateError, PermanentJobError, RetryableJobError, type PgQueue } from '../../lib/engine/index.js';
import { wakeChannel } from '../../lib/engine/identifiers.js';
import { engineInternals } from '../../lib/engine/internals.js';
import { classifyFailure, decideRetry } from '../../lib/engine/retry.js';
import { createStore, type Store } from '../../lib/engine/store/index.js';
import { expireLease, makeDue } from '../support/time-travel.js';

/**
 * Randomized model-based runs of the real engine (issue 14, part 2): fast-check generates lists of
 * operations (`Op`), each is run against the real engine on a real PostgreSQL and against a small
 * reference model (`Model`), and after every step the database is compared with the model and
 * checked against the invariants of spec/queue.pml.
 *
 * Nothing runs on its own: the engine is never started (no worker loop, reaper, scheduler or
 * listener timer), its passes run once when a command says so (reapOnce, the scheduler's and the
 * key handoffs' runOnce), workers are owners whose claims, completions, failures, heartbeats and
 * releases the test sends through the store's statements, and time moves only by SQL
 * (expireLease, makeDue), never by waiting: leases are a minute long and delays an hour, so no
 * lease or delay runs out during a run by itself. A seed therefore replays exactly, and a shrunk
 * list is a scenario that can be read.
 */

export const QUEUE = 'm';
export const WORKERS = ['w0', 'w1', 'w2'] as const;
const KEYS = ['a', 'b'] as const;
const LEASE_MS = 60_000;
const MAX_RUNTIME_MS = 600_000;
/** A row without its own max attempts gets this from the claim (the handler's setting). */
const HANDLER_MAX_ATTEMPTS = 3;
const UNKNOWN_ERROR_ATTEMPTS = 2;
/** A failed attempt's backoff (the worker's): an hour at least, so it never falls due during a run by itself. */
const BACKOFF = { baseMs: 3_600_000, maxMs: 2_147_483_647 };
/**
 * The reaper's backoff, filled into the row by the claim: none. The reaper's jitter is random() in
 * SQL, so any other base gives a retry time a seed cannot replay (a delay of a few milliseconds
 * falls due during the run); with base 0 a reaped job is due at once, and the next scheduler pass
 * makes it pending.
 */
const REAPER_BACKOFF_BASE_MS = 0;
const MAX_FREE_RELEASES = 1;
const DELAY_MS = 3_600_000;

type Status = 'scheduled' | 'pending' | 'running' | 'succeeded' | 'dead' | 'cancelled';
type Lease = 'live' | 'expired' | null;
type ErrorClass = 'permanent' | 'retryable' | 'retryable-now' | 'unknown';
type Worker = (typeof WORKERS)[number];

/** One generated operation: plain data, so a failing list prints as code that replays it. */
export type Op =
  | { op: 'enqueue'; key: string | null; priority: number; delayed: boolean; maxAttempts: number | null }
  | { op: 'claim'; worker: Worker; limit: number }
  | { op: 'complete'; worker: Worker; picks: number[] }
  | { op: 'fail'; worker: Worker; pick: number; error: ErrorClass }
  | { op: 'heartbeat'; worker: Worker; pick: number }
  | { op: 'release'; worker: Worker; pick: number; started: boolean }
  | { op: 'endCancelledAttempt'; worker: Worker; pick: number }
  | { op: 'crash'; worker: Worker }
  | { op: 'killSession'; worker: Worker; pick: number }
  | { op: 'expireLease'; job: number }
  | { op: 'makeDue'; job: number }
  | { op: 'reap' }
  | { op: 'promote' }
  | { op: 'cancel'; job: number }
  | { op: 'replay'; job: number }
  | { op: 'discard'; job: number; delete: boolean }
  | { op: 'pause' }
  | { op: 'resume' };

/** What the model believes of one job. */
interface ModelJob {
  id: string;
  status: Status;
  token: number;
  owner: string | null;
  lease: Lease;
  key: string | null;
  keyWaiting: boolean;
  attempts: number;
  /** The row's own max attempts (null until a claim fills the handler's). */
  maxAttempts: number | null;
  releases: number;
  /** A scheduled job whose time has come (makeDue). */
  due: boolean;
  priority: number;
}

/** A claim a worker holds (and may write under long after it went stale). */
interface Attempt {
  id: string;
  token: number;
  attempt: number;
  maxAttempts: number;
}

export interface Model {
  jobs: ModelJob[];
  held: Record<Worker, Attempt[]>;
  paused: boolean;
  /** Successes applied per job: at most one, ever. */
  successes: Map<string, number>;
}

export interface Real {
  engine: PgQueue;
  pool: pg.Pool;
  url: string;
  store: Store;
  channel: string;
  lastEventId: number;
}

export function newModel(): Model {
  return { jobs: [], held: { w0: [], w1: [], w2: [] }, paused: false, successes: new Map() };
}

export function newReal(engine: PgQueue, url: string): Real {
  return { engine, pool: engineInternals(engine).pool, url, store: createStore(engine.schema), channel: wakeChannel(engine.schema), lastEventId: 0 };
}

/** Empties the tables between runs (identities restarted, so a seed gets the same ids). */
export async function resetDatabase(real: Real): Promise<void> {
  await real.pool.query(`TRUNCATE pgqueue.jobs, pgqueue.jobs_succeeded, pgqueue.job_events, pgqueue.job_effects, pgqueue.ordering_keys, pgqueue.key_handoffs, pgqueue.purges RESTART IDENTITY CASCADE`);
  await real.pool.query(`UPDATE pgqueue.queues SET paused_at = NULL WHERE name = $1`, [QUEUE]);
  real.lastEventId = 0;
}

// ---------------------------------------------------------------------------------------------
// The model's rules: what each statement does to the jobs, as the store's SQL says it.

const holdsKey = (j: ModelJob) => ['scheduled', 'pending', 'running', 'dead'].includes(j.status) || (j.status === 'cancelled' && j.lease !== null);

/** The fence: the worker is the claimant under the current token, running, lease live by the clock now. */
const fenceHolds = (j: ModelJob | undefined, a: Attempt, worker: string) => j !== undefined && j.status === 'running' && j.token === a.token && j.owner === worker && j.lease === 'live';

/** fenceLossCode, read from the row as the statement's snapshot had it. */
function lossOf(j: ModelJob | undefined, a: Attempt, worker: string): string {
  if (!j) return 'lease_lost';
  if (j.status === 'cancelled') return 'cancelled';
  if (j.token === a.token && j.owner === worker && (j.status === 'succeeded' || j.status === 'dead')) return 'finished';
  return 'lease_lost';
}

/** promote-key-heads for released keys: a key with no head left hands its key to its lowest waiting job. */
function promoteKeys(model: Model, keys: Iterable<string | null>): void {
  for (const key of new Set(keys)) {
    if (key === null) continue;
    const ofKey = model.jobs.filter((j) => j.key === key);
    if (ofKey.some((j) => !j.keyWaiting && holdsKey(j))) continue;
    const next = ofKey.filter((j) => j.keyWaiting && (j.status === 'scheduled' || j.status === 'pending')).sort((x, y) => Number(x.id) - Number(y.id))[0];
    if (next) next.keyWaiting = false;
  }
}

interface Expected {
  /** Audit rows this step must have written: job, kind, from, to. */
  events: string[];
  /** Jobs an operator's replay or discard may move out of a terminal state this step. */
  terminalMayChange: Set<string>;
}

// ---------------------------------------------------------------------------------------------
// The database as it is, and the checks.

interface Row {
  id: string;
  status: Status;
  lease_token: string;
  lease_owner: string | null;
  lease: Lease;
  lease_past_deadline: boolean;
  ordering_key: string | null;
  key_waiting: boolean;
  attempt_count: number;
  release_count: number;
  due: boolean;
  max_attempts: number | null;
}

// Both reads below sort by the table's bigint id (j.id, e.id), not by the selected id::text:
// ORDER BY a bare `id` sorts the text alias, which puts "10" before "9" (a harness defect the
// runs of seed 1414 found after job_events passed nine rows).
async function rows(real: Real): Promise<Map<string, Row>> {
  const { rows } = await real.pool.query<Row>(
    `SELECT id::text, status::text, lease_token::text, lease_owner,
            CASE WHEN lease_expires_at IS NULL THEN NULL WHEN lease_expires_at > clock_timestamp() THEN 'live' ELSE 'expired' END AS lease,
            coalesce(lease_expires_at > deadline_at, false) AS lease_past_deadline,
            ordering_key, key_waiting, attempt_count, release_count, available_at <= clock_timestamp() AS due, max_attempts
     FROM pgqueue.job_rows j ORDER BY j.id`,
  );
  return new Map(rows.map((r) => [r.id, r]));
}

const TERMINAL: readonly Status[] = ['succeeded', 'dead', 'cancelled'];

/** Compares the database with the model and checks the spec's invariants; throws on any difference. */
async function check(real: Real, model: Model, before: Map<string, Row>, expected: Expected): Promise<void> {
  const now = await rows(real);
  // Every job in exactly one state, none lost, none appearing from nowhere.
  expect([...now.keys()], 'the jobs in the database').toEqual(model.jobs.map((j) => j.id));
  for (const j of model.jobs) {
    const r = now.get(j.id)!;
    const seen = {
      status: r.status,
      token: Number(r.lease_token),
      owner: r.lease_owner,
      lease: r.lease,
      keyWaiting: r.key_waiting,
      attempts: r.attempt_count,
      releases: r.release_count,
      maxAttempts: r.max_attempts,
      ...(j.status === 'scheduled' ? { due: r.due } : {}),
    };
    const want = {
      status: j.status,
      token: j.token,
      owner: j.owner,
      lease: j.lease,
      keyWaiting: j.keyWaiting,
      attempts: j.attempts,
      releases: j.releases,
      maxAttempts: j.maxAttempts,
      ...(j.status === 'scheduled' ? { due: j.due } : {}),
    };
    expect(seen, `job ${j.id} in the database against the model`).toEqual(want);
    // A running job has a claimant and a lease, never past its deadline.
    if (r.status === 'running') expect(r.lease_owner !== null && r.lease !== null && !r.lease_past_deadline, `running job ${j.id} has a lease within its deadline`).toBe(true);
  }
  // Terminal states change only by replay (dead -> pending) and discard (dead -> cancelled, or deleted).
  for (const [id, was] of before) {
    if (!TERMINAL.includes(was.status)) continue;
    const is = now.get(id)?.status;
    if (is !== was.status) expect(expected.terminalMayChange.has(id), `job ${id} left terminal state ${was.status} for ${is ?? 'nothing'}`).toBe(true);
  }
  // Two jobs of one key never run at once; a cancelled attempt counts as running until it is over.
  const holders = new Map<string, string[]>();
  for (const r of now.values()) {
    if (r.ordering_key === null) continue;
    if (r.status === 'running' || (r.status === 'cancelled' && r.lease !== null)) holders.set(r.ordering_key, [...(holders.get(r.ordering_key) ?? []), r.id]);
  }
  for (const [key, ids] of holders) expect(ids.length, `jobs of key ${key} running at once: ${ids.join(', ')}`).toBeLessThanOrEqual(1);
  // The key's count of unfinished jobs, which enqueue decides key_waiting from.
  const { rows: keys } = await real.pool.query<{ ordering_key: string; unfinished: number }>(`SELECT ordering_key, unfinished FROM pgqueue.ordering_keys WHERE queue_name = $1`, [QUEUE]);
  const counted = Object.fromEntries(keys.filter((k) => k.unfinished > 0).map((k) => [k.ordering_key, k.unfinished]));
  const modelled: Record<string, number> = {};
  for (const j of model.jobs) if (j.key !== null && holdsKey(j)) modelled[j.key] = (modelled[j.key] ?? 0) + 1;
  expect(counted, 'ordering_keys.unfinished against the jobs that hold each key').toEqual(modelled);
  // At most one success applied per job.
  for (const [id, n] of model.successes) expect(n, `successes applied to job ${id}`).toBeLessThanOrEqual(1);
  // The audit rows this step wrote agree with its transitions.
  const { rows: events } = await real.pool.query<{ id: string; job_id: string; kind: string; from_status: string | null; to_status: string | null }>(
    `SELECT id::text, job_id::text, kind, from_status::text, to_status::text FROM pgqueue.job_events e WHERE e.id > $1 ORDER BY e.id`,
    [real.lastEventId],
  );
  if (events.length > 0) real.lastEventId = Number(events.at(-1)!.id);
  expect(events.map((e) => `${e.job_id} ${e.kind} ${e.from_status ?? '-'}>${e.to_status ?? '-'}`).sort(), 'job_events written by this step').toEqual([...expected.events].sort());
}

// ---------------------------------------------------------------------------------------------
// The operations: each runs on the real engine, predicts its effect on the model, then checks.

const ev = (id: string, kind: string, from: string | null, to: string | null) => `${id} ${kind} ${from ?? '-'}>${to ?? '-'}`;
const job = (model: Model, id: string) => model.jobs.find((j) => j.id === id);
const pick = <T>(list: readonly T[], n: number): T | undefined => (list.length === 0 ? undefined : list[n % list.length]);
/**
 * A worker's attempt, counted from its newest: pick 0 is its latest claim, pick 1 the one before.
 * From the oldest, a worker past four claims could never reach its current ones, and the attempt
 * that matters most (a stale one just beside its job's new claim) was rarely drawn.
 */
const attempt = (model: Model, worker: Worker, n: number): Attempt | undefined => {
  const held = model.held[worker];
  return held.length === 0 ? undefined : held[held.length - 1 - (n % held.length)];
};
const fenceKey = (a: Attempt, worker: string) => ({ id: a.id, owner: worker, token: String(a.token) });

function errorOf(kind: ErrorClass): unknown {
  if (kind === 'permanent') return new PermanentJobError('bad payload', { code: 'BAD_PAYLOAD' });
  if (kind === 'retryable') return new RetryableJobError('dependency down', { code: 'DEPENDENCY_DOWN' });
  if (kind === 'retryable-now') return new RetryableJobError('try again at once', { code: 'TRY_AGAIN', retryAfterMs: 0 });
  return new Error('something unexpected');
}

async function expectRefusal(call: Promise<unknown>, code: string): Promise<void> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, `refused with ${code}`).toBeInstanceOf(JobStateError);
  expect((error as JobStateError).code).toBe(code);
}

async function apply(o: Op, model: Model, real: Real, x: Expected): Promise<void> {
  const { store, pool, engine } = real;
  switch (o.op) {
    case 'enqueue': {
      const id = await engine.enqueue(
        QUEUE,
        { n: model.jobs.length },
        { priority: o.priority, ...(o.key !== null ? { orderingKey: o.key } : {}), ...(o.delayed ? { delayMs: DELAY_MS } : {}), ...(o.maxAttempts !== null ? { maxAttempts: o.maxAttempts } : {}) },
      );
      const keyTaken = o.key !== null && model.jobs.some((j) => j.key === o.key && holdsKey(j));
      model.jobs.push({
        id,
        status: o.delayed ? 'scheduled' : 'pending',
        token: 0,
        owner: null,
        lease: null,
        key: o.key,
        keyWaiting: keyTaken,
        attempts: 0,
        maxAttempts: o.maxAttempts,
        releases: 0,
        due: false,
        priority: o.priority,
      });
      return;
    }
    case 'claim': {
      const claimable = model.paused ? [] : model.jobs.filter((j) => j.status === 'pending' && !j.keyWaiting);
      const claimed = await store.claim(pool, {
        queue: QUEUE,
        owner: o.worker,
        limit: o.limit,
        leaseMs: LEASE_MS,
        maxRuntimeMs: MAX_RUNTIME_MS,
        maxAttempts: HANDLER_MAX_ATTEMPTS,
        backoffBaseMs: REAPER_BACKOFF_BASE_MS,
        backoffMaxMs: BACKOFF.maxMs,
        oldestFirst: 0,
      });
      expect(claimed.length, 'jobs claimed').toBe(Math.min(o.limit, claimable.length));
      const ids = claimed.map((c) => c.id);
      for (const id of ids) expect(claimable.map((j) => j.id), `claimed job ${id} was claimable`).toContain(id);
      // Strict priority (oldestFirst 0): no job left behind outranks one taken.
      const lowest = Math.min(...claimed.map((c) => c.priority));
      for (const j of claimable) if (!ids.includes(j.id)) expect(j.priority, `job ${j.id} left behind outranks a claimed one`).toBeLessThanOrEqual(lowest);
      for (const c of claimed) {
        const j = job(model, c.id)!;
        j.status = 'running';
        j.token += 1;
        j.owner = o.worker;
        j.lease = 'live';
        j.attempts += 1;
        j.maxAttempts ??= HANDLER_MAX_ATTEMPTS;
        expect({ token: c.leaseToken, attempt: c.attempt }, `claim of job ${c.id}`).toEqual({ token: String(j.token), attempt: j.attempts });
        model.held[o.worker].push({ id: c.id, token: j.token, attempt: j.attempts, maxAttempts: j.maxAttempts });
      }
      return;
    }
    case 'complete': {
      const batch = [...new Set(o.picks.map((p) => attempt(model, o.worker, p)!).filter(Boolean))];
      if (batch.length === 0) return;
      if (new Set(batch.map((a) => a.id)).size < batch.length) STATS.set('complete: two attempts of one job in a batch', (STATS.get('complete: two attempts of one job in a batch') ?? 0) + 1);
      // Decided against the rows as the statement's snapshot has them, then applied.
      const decided = batch.map((a) => ({ a, j: job(model, a.id), was: job(model, a.id)?.status, applied: fenceHolds(job(model, a.id), a, o.worker), loss: lossOf(job(model, a.id), a, o.worker) }));
      const result = await store.releasingKeys(pool, real.channel, (db) => store.completeMany(db, { ids: batch.map((a) => a.id), tokens: batch.map((a) => String(a.token)), owner: o.worker }));
      // One row per input, in no particular order.
      const told = result.rows.map((r) => `${r.id}:${r.token} ${r.ok ? 'applied' : r.reason}`).sort();
      expect(told, 'each completion told its own outcome, by (id, token)').toEqual(decided.map((d) => `${d.a.id}:${d.a.token} ${d.applied ? 'applied' : d.loss}`).sort());
      const released: (string | null)[] = [];
      for (const d of decided) {
        if (!d.j) continue;
        if (!d.applied) {
          x.events.push(ev(d.a.id, 'lost_fence', d.was!, null));
          continue;
        }
        d.j.status = 'succeeded';
        d.j.lease = null;
        model.successes.set(d.j.id, (model.successes.get(d.j.id) ?? 0) + 1);
        released.push(d.j.key);
      }
      promoteKeys(model, released);
      return;
    }
    case 'fail': {
      const a = attempt(model, o.worker, o.pick);
      if (!a) return;
      const j = job(model, a.id);
      const failure = classifyFailure(errorOf(o.error));
      const decision = decideRetry(failure, a.attempt, a.maxAttempts, UNKNOWN_ERROR_ATTEMPTS, BACKOFF, () => 0.5);
      const holds = fenceHolds(j, a, o.worker);
      const outcome = await store.fail(pool, { ...fenceKey(a, o.worker), dead: decision.dead, delayMs: decision.delayMs, code: failure.code, message: failure.message });
      if (!j) return void expect(outcome.ok, 'a failure of a deleted job').toBe(false);
      if (holds) {
        expect(outcome, 'fenced failure').toEqual({ ok: true, already: false });
        const to: Status = decision.dead ? 'dead' : decision.delayMs > 0 ? 'scheduled' : 'pending';
        x.events.push(ev(j.id, decision.dead ? 'dead' : 'retry_scheduled', 'running', to));
        j.status = to;
        j.owner = decision.dead ? j.owner : null;
        j.lease = null;
        j.due = false;
        return;
      }
      // Refused; "already" when this very failure (token, owner) committed before (a retried write).
      x.events.push(ev(j.id, 'lost_fence', j.status, null));
      const already = (j.status === 'dead' && j.token === a.token && j.owner === o.worker) || (await retriedBefore(real, a, o.worker));
      expect(outcome, 'refused failure').toEqual(already ? { ok: true, already: true } : { ok: false, reason: lossOf(j, a, o.worker) });
      return;
    }
    case 'heartbeat': {
      const a = attempt(model, o.worker, o.pick);
      if (!a) return;
      const j = job(model, a.id);
      const holds = fenceHolds(j, a, o.worker);
      const outcome = await store.heartbeat(pool, { ...fenceKey(a, o.worker), leaseMs: LEASE_MS });
      expect(outcome.ok ? 'applied' : outcome.reason, 'heartbeat').toBe(holds ? 'applied' : lossOf(j, a, o.worker));
      if (j && !holds) x.events.push(ev(j.id, 'lost_fence', j.status, null));
      return;
    }
    case 'release': {
      const a = attempt(model, o.worker, o.pick);
      if (!a) return;
      const j = job(model, a.id);
      const holds = fenceHolds(j, a, o.worker);
      const outcome = await store.release(pool, { ...fenceKey(a, o.worker), started: o.started, maxFreeReleases: MAX_FREE_RELEASES });
      if (!j) return void expect(outcome.ok).toBe(false);
      if (!holds) {
        const already = await releasedBefore(real, a, o.worker);
        expect(outcome, 'refused release').toEqual(already ? { ok: true, already: true } : { ok: false, reason: 'lease_lost' });
        return;
      }
      expect(outcome, 'fenced release').toEqual({ ok: true, already: false });
      const charged = o.started && j.releases >= MAX_FREE_RELEASES;
      const dead = charged && j.attempts >= (j.maxAttempts ?? HANDLER_MAX_ATTEMPTS);
      if (!charged) j.attempts -= 1;
      if (o.started) j.releases += 1;
      j.status = dead ? 'dead' : 'pending';
      j.owner = dead ? j.owner : null;
      j.lease = null;
      x.events.push(ev(j.id, 'released', 'running', j.status));
      return;
    }
    case 'endCancelledAttempt': {
      const a = attempt(model, o.worker, o.pick);
      if (!a) return;
      const j = job(model, a.id);
      const ends = j !== undefined && j.status === 'cancelled' && j.owner === o.worker && j.token === a.token && j.lease !== null;
      const result = await store.releasingKeys(pool, real.channel, (db) => store.endCancelledAttempt(db, fenceKey(a, o.worker)));
      expect(result.ended, 'cancelled attempt ended').toBe(ends ? 1 : 0);
      if (ends) {
        j.owner = null;
        j.lease = null;
        promoteKeys(model, [j.key]);
      }
      return;
    }
    case 'crash':
      // The worker's process is gone: it holds its leases and never writes again.
      model.held[o.worker] = [];
      return;
    case 'killSession': {
      // A completion whose session is terminated while the statement waits for a row lock: the
      // statement dies with its session and changes nothing (deterministic: the test holds the lock
      // until it has seen the statement wait for it, then kills that backend).
      const a = attempt(model, o.worker, o.pick);
      if (!a || !fenceHolds(job(model, a.id), a, o.worker)) return;
      await killedMidStatement(real, a.id, (client) => store.completeMany(client, { ids: [a.id], tokens: [String(a.token)], owner: o.worker }));
      return;
    }
    case 'expireLease': {
      const j = pick(
        model.jobs.filter((m) => m.lease === 'live'),
        o.job,
      );
      if (!j) return;
      await expireLease(pool, j.id);
      j.lease = 'expired';
      return;
    }
    case 'makeDue': {
      const j = pick(
        model.jobs.filter((m) => m.status === 'scheduled' || m.status === 'pending'),
        o.job,
      );
      if (!j) return;
      await makeDue(pool, j.id);
      j.due = true;
      return;
    }
    case 'reap': {
      await engine.reapOnce();
      const released: (string | null)[] = [];
      for (const j of model.jobs) {
        if (j.status === 'running' && j.lease === 'expired') {
          const dead = j.attempts >= (j.maxAttempts ?? HANDLER_MAX_ATTEMPTS);
          x.events.push(ev(j.id, dead ? 'dead' : 'lease_expired', 'running', dead ? 'dead' : 'scheduled'));
          j.status = dead ? 'dead' : 'scheduled';
          j.owner = null;
          j.lease = null;
          j.due = true;
        } else if (j.status === 'cancelled' && j.lease === 'expired') {
          // end-expired-cancels: the attempt is over by the fence's rule; the key goes.
          j.owner = null;
          j.lease = null;
          released.push(j.key);
        }
      }
      promoteKeys(model, released);
      return;
    }
    case 'promote': {
      const internals = engineInternals(engine);
      await internals.scheduler.runOnce();
      await internals.keyHandoffs.runOnce();
      for (const j of model.jobs) if (j.status === 'scheduled' && j.due) j.status = 'pending';
      return;
    }
    case 'cancel': {
      const j = pick(model.jobs, o.job);
      if (!j) return;
      if (!['scheduled', 'pending', 'running'].includes(j.status)) return expectRefusal(engine.cancel(j.id), 'JOB_NOT_CANCELLABLE');
      await engine.cancel(j.id);
      x.events.push(ev(j.id, 'cancelled', j.status, 'cancelled'));
      const wasRunning = j.status === 'running';
      j.status = 'cancelled';
      j.keyWaiting = false;
      // A running job keeps its lease (and key) until its attempt is over.
      if (!wasRunning) {
        j.owner = null;
        j.lease = null;
        promoteKeys(model, [j.key]);
      }
      return;
    }
    case 'replay': {
      const j = pick(model.jobs, o.job);
      if (!j) return;
      if (j.status !== 'dead') return expectRefusal(engine.replay(j.id), 'JOB_NOT_DEAD');
      await engine.replay(j.id);
      x.events.push(ev(j.id, 'replayed', 'dead', 'pending'));
      x.terminalMayChange.add(j.id);
      j.status = 'pending';
      j.attempts = 0;
      j.releases = 0;
      return;
    }
    case 'discard': {
      const j = pick(model.jobs, o.job);
      if (!j) return;
      if (o.delete) {
        if (!TERMINAL.includes(j.status)) return expectRefusal(engine.discard(j.id, { delete: true }), 'JOB_NOT_FINISHED');
        await engine.discard(j.id, { delete: true });
        x.terminalMayChange.add(j.id);
        model.jobs.splice(model.jobs.indexOf(j), 1);
        // Only a dead job, or a cancelled one whose attempt is not over, still held its key.
        if (holdsKey(j)) promoteKeys(model, [j.key]);
        return;
      }
      if (j.status !== 'dead') return expectRefusal(engine.discard(j.id), 'JOB_NOT_DEAD');
      await engine.discard(j.id);
      x.events.push(ev(j.id, 'discarded', 'dead', 'cancelled'));
      x.terminalMayChange.add(j.id);
      j.status = 'cancelled';
      j.owner = null;
      j.lease = null;
      promoteKeys(model, [j.key]);
      return;
    }
    case 'pause':
      await engine.pauseQueue(QUEUE);
      model.paused = true;
      return;
    case 'resume':
      await engine.resumeQueue(QUEUE);
      model.paused = false;
      return;
  }
}

/** fail's "already": this attempt's retry is in the history (only fail writes 'retry_scheduled'). */
async function retriedBefore(real: Real, a: Attempt, worker: string): Promise<boolean> {
  const { rows } = await real.pool.query(`SELECT 1 FROM pgqueue.job_events WHERE job_id = $1 AND lease_token = $2 AND worker = $3 AND kind = 'retry_scheduled'`, [a.id, a.token, worker]);
  return rows.length > 0;
}

/** release's "already": this attempt was released before. */
async function releasedBefore(real: Real, a: Attempt, worker: string): Promise<boolean> {
  const { rows } = await real.pool.query(`SELECT 1 FROM pgqueue.job_events WHERE job_id = $1 AND lease_token = $2 AND worker = $3 AND kind = 'released'`, [a.id, a.token, worker]);
  return rows.length > 0;
}

/**
 * Runs `statement` on a session of its own while the test holds job `id`'s row lock, waits until
 * the server shows that session waiting for the lock, terminates it (pg_terminate_backend), and
 * only then lets the lock go. The statement must fail with its session.
 */
async function killedMidStatement(real: Real, id: string, statement: (client: pg.Client) => Promise<unknown>): Promise<void> {
  const holder = await real.pool.connect();
  const victim = new pg.Client({ connectionString: real.url });
  victim.on('error', () => {}); // the terminated session's error arrives here as well
  await victim.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM pgqueue.jobs WHERE id = $1 FOR UPDATE', [id]);
    const pid = (await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const outcome = statement(victim).then(
      () => 'completed',
      (e: unknown) => (e as Error).message,
    );
    for (let tries = 0; ; tries++) {
      const { rows } = await real.pool.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, [pid]);
      if (rows.length > 0) break;
      if (tries > 2_000) throw new Error(`killSession: the statement never waited for job ${id}'s row lock`);
      await new Promise((r) => setTimeout(r, 5));
    }
    await real.pool.query('SELECT pg_terminate_backend($1)', [pid]);
    expect(await outcome, 'the killed statement').not.toBe('completed');
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    holder.release();
    await victim.end().catch(() => {});
  }
}

/**
 * Whether an operation can do anything in this state: fast-check skips a command whose check is
 * false, so a list is not mostly steps that find nothing to act on (an expireLease with no lease,
 * a reap with nothing expired). Refusals are still drawn: completions of stale attempts, cancels
 * of finished jobs, claims of a paused queue.
 */
function applicable(o: Op, model: Readonly<Model>): boolean {
  switch (o.op) {
    case 'claim':
      return model.jobs.some((j) => j.status === 'pending' && !j.keyWaiting);
    case 'complete':
    case 'fail':
    case 'heartbeat':
    case 'release':
    case 'killSession':
    case 'crash':
      return model.held[o.worker].length > 0;
    case 'endCancelledAttempt':
      return model.held[o.worker].some((a) => model.jobs.some((j) => j.id === a.id && j.status === 'cancelled' && j.lease !== null));
    case 'expireLease':
      return model.jobs.some((j) => j.lease === 'live');
    case 'makeDue':
      return model.jobs.some((j) => (j.status === 'scheduled' && !j.due) || j.status === 'pending');
    case 'reap':
      return model.jobs.some((j) => j.lease === 'expired');
    case 'promote':
      return model.jobs.some((j) => j.status === 'scheduled' && j.due);
    case 'cancel':
    case 'replay':
    case 'discard':
      return model.jobs.length > 0;
    case 'pause':
      return !model.paused;
    case 'resume':
      return model.paused;
    case 'enqueue':
      return true;
  }
}

/** Names the operation a failure happened in: fast-check prints the list, not the step. */
function annotated(e: unknown, o: Op): unknown {
  if (e instanceof Error) e.message = `at ${JSON.stringify(o)}: ${e.message}`;
  return e;
}

/** What the runs did, by operation, audit kind and job state after each step (printed by the spec). */
export const STATS = new Map<string, number>();

/** One operation as a fast-check command; its toString is the op literal, so a failure prints replayable code. */
export class OpCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly o: Op) {}
  check(model: Readonly<Model>): boolean {
    return applicable(this.o, model);
  }
  async run(model: Model, real: Real): Promise<void> {
    const before = await rows(real);
    const expected: Expected = { events: [], terminalMayChange: new Set() };
    await apply(this.o, model, real, expected).catch((e: unknown) => {
      throw annotated(e, this.o);
    });
    STATS.set(this.o.op, (STATS.get(this.o.op) ?? 0) + 1);
    for (const e of expected.events) STATS.set(`event ${e.split(' ')[1]}`, (STATS.get(`event ${e.split(' ')[1]}`) ?? 0) + 1);
    for (const j of model.jobs) STATS.set(`state ${j.status}`, (STATS.get(`state ${j.status}`) ?? 0) + 1);
    await check(real, model, before, expected).catch((e: unknown) => {
      throw annotated(e, this.o);
    });
  }
  toString(): string {
    return JSON.stringify(this.o);
  }
}

/**
 * w0 is drawn as often as the other two together: a job that comes back is then often claimed
 * again by the worker that holds its stale attempt, the shape in which a fence without its token
 * (or outcomes told by id) goes wrong.
 */
const worker = fc.constantFrom<Worker>('w0', 'w0', 'w1', 'w2');
const index = fc.nat({ max: 3 });

/**
 * The generators of every operation, with weights: time moving (expireLease, makeDue), the passes
 * and claims are drawn more often than operator calls, so that leases run out, jobs come back and
 * are claimed again (stale attempts beside current ones) within a list of 40.
 */
const OP_WEIGHTS: [number, fc.Arbitrary<Op>][] = [
  [5, fc.record({ op: fc.constant('enqueue' as const), key: fc.constantFrom(null, ...KEYS), priority: fc.nat({ max: 2 }), delayed: fc.constantFrom(false, false, false, true), maxAttempts: fc.constantFrom(null, 1, 2) })],
  [6, fc.record({ op: fc.constant('claim' as const), worker, limit: fc.integer({ min: 1, max: 3 }) })],
  [5, fc.record({ op: fc.constant('complete' as const), worker, picks: fc.oneof(fc.constant<number[]>([0, 1, 2, 3]), fc.tuple(index), fc.array(index, { minLength: 2, maxLength: 3 })) })],
  [2, fc.record({ op: fc.constant('fail' as const), worker, pick: index, error: fc.constantFrom<ErrorClass>('permanent', 'retryable', 'retryable-now', 'unknown') })],
  [1, fc.record({ op: fc.constant('heartbeat' as const), worker, pick: index })],
  [1, fc.record({ op: fc.constant('release' as const), worker, pick: index, started: fc.boolean() })],
  [1, fc.record({ op: fc.constant('endCancelledAttempt' as const), worker, pick: index })],
  [1, fc.record({ op: fc.constant('crash' as const), worker: fc.constantFrom(...WORKERS) })],
  [1, fc.record({ op: fc.constant('killSession' as const), worker, pick: index })],
  [4, fc.record({ op: fc.constant('expireLease' as const), job: index })],
  [3, fc.record({ op: fc.constant('makeDue' as const), job: index })],
  [4, fc.record({ op: fc.constant('reap' as const) })],
  [4, fc.record({ op: fc.constant('promote' as const) })],
  [1, fc.record({ op: fc.constant('cancel' as const), job: index })],
  [1, fc.record({ op: fc.constant('replay' as const), job: index })],
  [1, fc.record({ op: fc.constant('discard' as const), job: index, delete: fc.boolean() })],
  [1, fc.record({ op: fc.constant('pause' as const) })],
  [2, fc.record({ op: fc.constant('resume' as const) })],
];

export const OPS: fc.Arbitrary<fc.AsyncCommand<Model, Real>>[] = OP_WEIGHTS.flatMap(([weight, arb]) => Array.from({ length: weight }, () => arb.map((o) => new OpCommand(o))));

/** Runs a fixed list of operations (a shrunk counterexample kept as a regression test). */
export async function replayOps(real: Real, ops: readonly Op[]): Promise<void> {
  await resetDatabase(real);
  await fc.asyncModelRun(() => ({ model: newModel(), real }), ops.map((o) => new OpCommand(o)));
}
