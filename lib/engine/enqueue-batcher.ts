import { isConnectionError, sqlState } from './pg-errors.js';

/** Most jobs one shared statement carries; a call of this many or more goes alone. */
export const ENQUEUE_BATCH_MAX = 1_000;

/** Statements in flight at once; calls arriving meanwhile wait and ride the next one together. */
const MAX_IN_FLIGHT = 2;

/** One caller's jobs: written together, all or none, and told their own ids. */
interface Unit<R> {
  rows: R[];
  resolve: (ids: string[]) => void;
  reject: (error: unknown) => void;
}

/**
 * Group commit for producers: concurrent `enqueue` calls on the engine's own pool (no caller's
 * transaction) share one INSERT and one commit, as the completer does for completions. With
 * nothing in flight a call is written at once (no latency at low load); calls that arrive while
 * statements are in flight ride the next one. Each call's jobs are still one unit, all or none:
 * the statement is atomic, and when the server refuses a shared statement (an error it raised:
 * nothing was committed) each call is written again alone, so one caller's bad job never fails
 * another's. When the connection failed mid-statement the outcome is unknown, exactly as for a
 * call written alone: every call of the statement gets that error, none is written twice.
 *
 * Without it, sixteen producers paid sixteen commits (each a WAL flush) for sixteen jobs.
 */
export class EnqueueBatcher<R> {
  private readonly waiting: Unit<R>[] = [];
  private inFlight = 0;

  /** `write` inserts rows in one statement and returns their ids in order. */
  constructor(private readonly write: (rows: R[]) => Promise<string[]>) {}

  add(rows: R[]): Promise<string[]> {
    if (rows.length >= ENQUEUE_BATCH_MAX) return this.write(rows);
    return new Promise((resolve, reject) => {
      this.waiting.push({ rows, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < MAX_IN_FLIGHT && this.waiting.length > 0) {
      const batch: Unit<R>[] = [];
      let size = 0;
      while (this.waiting.length > 0 && size + this.waiting[0]!.rows.length <= ENQUEUE_BATCH_MAX) {
        const unit = this.waiting.shift()!;
        batch.push(unit);
        size += unit.rows.length;
      }
      this.inFlight += 1;
      void this.send(batch).finally(() => {
        this.inFlight -= 1;
        this.pump();
      });
    }
  }

  private async send(batch: Unit<R>[]): Promise<void> {
    let ids: string[];
    try {
      ids = await this.write(batch.length === 1 ? batch[0]!.rows : batch.flatMap((unit) => unit.rows));
    } catch (error) {
      const refusedWhole = batch.length > 1 && sqlState(error) !== undefined && !isConnectionError(error);
      if (!refusedWhole) {
        for (const unit of batch) unit.reject(error);
        return;
      }
      // The server refused the shared statement: nothing of it was committed. Each call alone now,
      // so the error reaches only the call(s) it belongs to.
      await Promise.all(batch.map((unit) => this.write(unit.rows).then(unit.resolve, unit.reject)));
      return;
    }
    let at = 0;
    for (const unit of batch) {
      unit.resolve(ids.slice(at, at + unit.rows.length));
      at += unit.rows.length;
    }
  }
}
