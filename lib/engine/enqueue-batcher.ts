import { isConnectionError, sqlState } from './pg-errors.js';

/** Most jobs one shared statement carries; a call of this many or more goes alone. */
export const ENQUEUE_BATCH_MAX = 1_000;

/**
 * Most payload characters one shared statement carries; a call of more goes alone. Payloads are
 * bounded one by one (maxPayloadBytes, up to 64 MiB), not together: without this, a thousand
 * calls each within the bound could build one document past what V8 can hold in a string, or past
 * jsonb's 256 MB, and fail together although each alone would be written.
 */
export const ENQUEUE_BATCH_MAX_CHARS = 8 * 1024 * 1024;

/** Statements in flight at once; calls arriving meanwhile wait and ride the next one together. */
const MAX_IN_FLIGHT = 2;

/** One caller's jobs: written together, all or none, and told their own ids. */
interface Unit<R> {
  rows: R[];
  chars: number;
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

  /**
   * `write` inserts rows in one statement and returns their ids in order; `shape` tells what a row
   * weighs (its payload's characters) and whether it may share a statement at all.
   */
  constructor(
    private readonly write: (rows: R[]) => Promise<string[]>,
    private readonly shape: (row: R) => { readonly chars: number; readonly shareable: boolean },
  ) {}

  add(rows: R[]): Promise<string[]> {
    let chars = 0;
    for (const row of rows) {
      const { chars: rowChars, shareable } = this.shape(row);
      // A row that takes a lock another transaction may hold (an ordering key's row) goes alone,
      // outside the statements in flight: shared, it would hold up every plain call behind it.
      if (!shareable) return this.write(rows);
      chars += rowChars;
    }
    if (rows.length >= ENQUEUE_BATCH_MAX || chars > ENQUEUE_BATCH_MAX_CHARS) return this.write(rows);
    return new Promise((resolve, reject) => {
      this.waiting.push({ rows, chars, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < MAX_IN_FLIGHT && this.waiting.length > 0) {
      const batch: Unit<R>[] = [];
      let size = 0;
      let chars = 0;
      while (this.waiting.length > 0 && size + this.waiting[0]!.rows.length <= ENQUEUE_BATCH_MAX && chars + this.waiting[0]!.chars <= ENQUEUE_BATCH_MAX_CHARS) {
        const unit = this.waiting.shift()!;
        batch.push(unit);
        size += unit.rows.length;
        chars += unit.chars;
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
      const refusedWhole = batch.length > 1 && refusedForItsRows(error);
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

/**
 * The server refused the statement for what its rows hold (a data exception, a constraint, a
 * trigger's RAISE, a size limit), so each call alone may fare otherwise. Anything else (a timeout,
 * a read-only server, a full disk, a lost connection) would fail each call alone too: retrying
 * hundreds of calls one by one would only crowd the pool that claims and completions need.
 */
function refusedForItsRows(error: unknown): boolean {
  const state = sqlState(error);
  if (state === undefined || isConnectionError(error)) return false;
  return ['22', '23', 'P0', '54'].includes(state.slice(0, 2));
}
