import { setTimeout as sleep } from 'node:timers/promises';
import { requireInteger, withDefaults } from './config.js';
import type pg from 'pg';
import { run, runReleasingKeys, type ReleasedKeys } from './db.js';
import type { FenceLossReason } from './errors.js';
import { fenceLossReason } from './lease.js';
import type { Queries } from './sql.js';

export interface CompleterConfig {
  /** Most completions written by one statement. */
  maxBatch: number;
  /** Statements in flight at once; completions arriving meanwhile wait and form the next batch. */
  maxInFlight: number;
  /** Attempts at writing a batch when the database errors (the leases are still ticking). */
  writeAttempts: number;
}

export const COMPLETER_DEFAULTS: CompleterConfig = { maxBatch: 1000, maxInFlight: 2, writeAttempts: 3 };

export type CompletionOutcome = { applied: true } | { applied: false; reason: FenceLossReason };

interface Pending {
  id: string;
  token: string;
  /** The job has an ordering key: its completion also hands the key to the next job. */
  keyed: boolean;
  resolve(outcome: CompletionOutcome): void;
  reject(error: unknown): void;
}

/**
 * Groups successful completions into one fenced `UPDATE … FROM unnest(…)`. Like group commit:
 * at low load each completion goes alone at once; under load, completions that arrive while a
 * statement is in flight ride the next one. Every row is still fenced on its own, and each caller
 * learns its own row's outcome.
 */
export class Completer {
  private readonly config: CompleterConfig;
  private readonly waiting: Pending[] = [];
  private inFlight = 0;
  private idle: (() => void)[] = [];

  constructor(
    private readonly pool: pg.Pool,
    private readonly queries: Queries,
    private readonly owner: string,
    private readonly channel: string,
    config?: Partial<CompleterConfig>,
  ) {
    this.config = withDefaults(COMPLETER_DEFAULTS, config);
    requireInteger('completer.maxBatch', this.config.maxBatch, 1, 50_000);
    requireInteger('completer.maxInFlight', this.config.maxInFlight, 1, 64);
    requireInteger('completer.writeAttempts', this.config.writeAttempts, 1, 100);
  }

  complete(id: string, token: string, keyed = false): Promise<CompletionOutcome> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ id, token, keyed, resolve, reject });
      this.pump();
    });
  }

  /** Resolves once every completion handed over so far has been written. */
  drained(): Promise<void> {
    if (this.inFlight === 0 && this.waiting.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  private pump(): void {
    while (this.inFlight < this.config.maxInFlight && this.waiting.length > 0) {
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
    for (let attempt = 1; ; attempt++) {
      try {
        const values = [batch.map((p) => p.id), batch.map((p) => p.token), this.owner];
        type Row = { id: string; token: string; applied: boolean; loss: string; status: string | null } & ReleasedKeys;
        // Jobs without an ordering key complete in one autocommit statement; a batch with keyed
        // jobs also promotes the keys' next heads, in the same transaction.
        const rows = batch.some((p) => p.keyed)
          ? await runReleasingKeys<Row>(this.pool, this.queries, this.channel, this.queries.completeMany, values)
          : await run<Row>(this.pool, this.queries.completeMany, values);
        // By (id, token): a stale and a current completion of one job may share a batch.
        const byAttempt = new Map(rows.map((r) => [`${r.id}:${r.token}`, r]));
        for (const pending of batch) {
          const row = byAttempt.get(`${pending.id}:${pending.token}`);
          const reason = fenceLossReason(row?.loss ?? 'LEASE_LOST');
          // A retried write whose earlier try committed finds the job succeeded by this very claim
          // (same token and owner); that, and only that, counts as applied.
          const applied = row?.applied === true || (attempt > 1 && reason === 'finished' && row?.status === 'succeeded');
          pending.resolve(applied ? { applied: true } : { applied: false, reason });
        }
        return;
      } catch (error) {
        if (attempt >= this.config.writeAttempts) {
          for (const pending of batch) pending.reject(error);
          return;
        }
        await sleep(50 * 4 ** (attempt - 1));
      }
    }
  }
}
