import { integer, resolveSection, section } from './config.js';
import type pg from 'pg';
import { retryWhile } from './retrying.js';
import { lost, type CompletionRow, type FencedOutcome, type Store } from './store/index.js';
import type { CompleterTestSignals } from './test-signals.js';

export interface CompleterConfig {
  /** Most completions written by one statement. */
  maxBatch: number;
  /** Statements in flight at once; completions arriving meanwhile wait and form the next batch. */
  maxInFlight: number;
}

export const COMPLETER_DEFAULTS: CompleterConfig = { maxBatch: 1000, maxInFlight: 2 };

export const COMPLETER_OPTIONS = section<CompleterConfig>(
  'the completer',
  { maxBatch: integer(1, 50_000), maxInFlight: integer(1, 64) },
  COMPLETER_DEFAULTS,
  // Completion writes are retried while the lease lasts now, not a fixed number of times.
  { writeAttempts: { use: 'nothing (completion writes are retried while the lease lasts)' } },
);

/** Each completion's own row: applied, or refused with the reason the store decoded. */
export type CompletionOutcome = FencedOutcome;

const APPLIED: CompletionOutcome = { ok: true };

/** Something whose lease lasts `msLeft` more milliseconds (a Lease): a write is retried until then. */
export interface LeaseClock {
  readonly msLeft: number;
}

/**
 * Told once how a completion ended: its row's outcome, or (outcome undefined) the error that kept
 * the write from happening while any of its batch's leases lasted.
 */
export type CompletionCallback = (outcome: CompletionOutcome | undefined, error?: unknown) => void;

interface Pending {
  id: string;
  token: string;
  /** The job has an ordering key: its completion also hands the key to the next job. */
  keyed: boolean;
  lease: LeaseClock;
  done: CompletionCallback;
}

/** When the caller cannot say how long its lease lasts: retried for 30 s at most. */
const UNKNOWN_LEASE_MS = 30_000;

/**
 * Groups successful completions into one fenced `UPDATE … FROM unnest(…)`. Like group commit:
 * at low load each completion goes alone at once; under load, completions that arrive while a
 * statement is in flight ride the next one. Every row is still fenced on its own, and each caller
 * learns its own row's outcome. A write that fails for a transient reason (a database restart)
 * is tried again while any of its jobs' leases lasts: finished work is not thrown away.
 */
export class Completer {
  private readonly config: CompleterConfig;
  private readonly waiting: Pending[] = [];
  private inFlight = 0;
  private idle: (() => void)[] = [];
  /** @internal Off (undefined) unless a test turned it on: see test-signals.ts. */
  testSignals: CompleterTestSignals | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly store: Store,
    private readonly owner: string,
    private readonly channel: string,
    config?: Partial<CompleterConfig>,
    private readonly keysDeferred: () => void = () => {},
  ) {
    this.config = resolveSection(COMPLETER_OPTIONS, config, 'completer');
    this.secondStatementAt = Math.ceil(this.config.maxBatch / 4);
  }

  /** Completions waiting before a statement starts beside one in flight (see pump). */
  private readonly secondStatementAt: number;

  complete(id: string, token: string, keyed = false, lease?: LeaseClock): Promise<CompletionOutcome> {
    return new Promise((resolve, reject) => {
      this.add(id, token, keyed, lease, (outcome, error) => (outcome === undefined ? reject(error) : resolve(outcome)));
    });
  }

  /**
   * `complete` without a promise: `done` is called once with the outcome (the worker's hot path,
   * where a promise and its reactions per job were measurable).
   */
  add(id: string, token: string, keyed: boolean, lease: LeaseClock | undefined, done: CompletionCallback): void {
    this.waiting.push({ id, token, keyed, lease: lease ?? unknownLease(), done });
    this.pump();
  }

  /** Resolves once every completion handed over so far has been written. */
  drained(): Promise<void> {
    if (this.inFlight === 0 && this.waiting.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  private pump(): void {
    while (this.inFlight < this.config.maxInFlight && this.waiting.length > 0) {
      // Group commit: with nothing in flight a completion goes at once (no latency at low load);
      // with a statement in flight, another starts only for a quarter batch or more. A second slot
      // taken by whatever arrived since the first went made batches of ~130 rows under load (each
      // its own commit and WAL flush); these now wait the few ms for the in-flight one, and ride
      // the next statement together.
      if (this.inFlight > 0 && this.waiting.length < this.secondStatementAt) return;
      const batch = this.waiting.splice(0, this.config.maxBatch);
      this.inFlight += 1;
      void this.write(batch).finally(() => {
        this.inFlight -= 1;
        this.pump();
        if (this.inFlight === 0 && this.waiting.length === 0) {
          for (const resolve of this.idle.splice(0)) resolve();
        }
      });
    }
  }

  private async write(batch: Pending[]): Promise<void> {
    const params = { ids: batch.map((p) => p.id), tokens: batch.map((p) => p.token), owner: this.owner };
    let tries = 0;
    let rows: CompletionRow[];
    try {
      ({ rows } = await retryWhile(
        () => Math.max(...batch.map((p) => p.lease.msLeft)),
        () => {
          tries += 1;
          // Jobs without an ordering key complete in one autocommit statement; a batch with keyed
          // jobs also promotes the keys' next heads, in the same transaction.
          return batch.some((p) => p.keyed)
            ? this.store.releasingKeys(this.pool, this.channel, (db) => this.store.completeMany(db, params), this.keysDeferred)
            : this.store.completeMany(this.pool, params);
        },
      ));
    } catch (error) {
      for (const pending of batch) settle(pending, undefined, error);
      return;
    }
    // By (id, token): a stale and a current completion of one job may share a batch (rare: the
    // map is by id, and only a job seen twice is told apart by its token).
    const byId = new Map<string, CompletionRow | CompletionRow[]>();
    for (const row of rows) {
      const seen = byId.get(row.id);
      byId.set(row.id, seen === undefined ? row : Array.isArray(seen) ? [...seen, row] : [seen, row]);
    }
    let appliedCount = 0;
    for (const pending of batch) {
      const found = byId.get(pending.id);
      const row = Array.isArray(found) ? found.find((r) => r.token === pending.token) : found?.token === pending.token ? found : undefined;
      if (row?.ok) {
        appliedCount += 1;
        settle(pending, APPLIED);
        continue;
      }
      // No row for it: the statement did not match it at all, a lost lease (the store's decoder says so).
      const refusal = row ?? lost(null);
      // A retried write whose earlier try committed finds the job succeeded by this very claim
      // (same token and owner); that, and only that, counts as applied.
      const applied = tries > 1 && refusal.reason === 'finished' && row?.status === 'succeeded';
      if (applied) appliedCount += 1;
      settle(pending, applied ? APPLIED : { ok: false, reason: refusal.reason });
    }
    this.testSignals?.flushed.signal({ jobIds: batch.map((p) => p.id), applied: appliedCount });
  }
}

/**
 * Calls a completion's callback. One that throws must not keep the rest of its batch from being
 * told: its error is rethrown on its own, as an unhandled rejection of a promise's reaction was.
 */
function settle(pending: Pending, outcome: CompletionOutcome | undefined, error?: unknown): void {
  try {
    pending.done(outcome, error);
  } catch (thrown) {
    queueMicrotask(() => {
      throw thrown;
    });
  }
}

function unknownLease(): LeaseClock {
  const startedAt = performance.now();
  return {
    get msLeft() {
      return UNKNOWN_LEASE_MS - (performance.now() - startedAt);
    },
  };
}
