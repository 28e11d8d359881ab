import type { EngineLogger } from './logger.js';

/**
 * How long repeats of one kind of failure are counted before they are summarised: during an
 * outage every loop fails at its own pace (a claim per poll, a pass per interval, a reconnect
 * per backoff step), which is hundreds of lines a minute saying the same thing. 30 s keeps a
 * line a minute or two per kind, and still shows within half a minute that it goes on.
 */
export const FAILURE_LOG_INTERVAL_MS = 30_000;

type Level = 'log' | 'warn' | 'error';
const SEVERITY: Record<Level, number> = { log: 0, warn: 1, error: 2 };

interface Kind {
  /** The highest level of the failures counted in this interval. */
  level: Level;
  /** The interval open for this kind; undefined: none is, and its next failure is logged at once. */
  timer: NodeJS.Timeout | undefined;
  openedAt: number;
  /** Failures of this interval that no line has told yet. */
  unreported: number;
  lastReason: string;
  /** Failures since it last worked, and when the first of them was; undefined: it works. */
  failures: number;
  failingSince: number | undefined;
  /** A recovery line was written in this interval: a second one (it flaps) waits for the summary. */
  recoveryLogged: boolean;
}

/**
 * Bounded logging of repeated failures, one instance per engine, used by every place that logs a
 * failure which repeats while the database is away (claims, passes, the listener, outcome
 * writes). Per kind (its subject, 'Claim on queue "emails"'): the first failure is logged at once
 * and opens an interval; later ones within it are counted, and summarised in one line when it
 * ends ("… failed 57 more times in the last 30 s (last error: …)"). When the kind works again
 * (its caller says so), one line says so with the count ("… works again after 58 failures over
 * 42 s"). So an outage writes, per kind, a first line, one summary per interval and one recovery
 * line. An interval of 0 logs every failure.
 */
export class LogThrottle {
  private readonly kinds = new Map<string, Kind>();

  constructor(
    private readonly logger: EngineLogger,
    readonly intervalMs: number = FAILURE_LOG_INTERVAL_MS,
  ) {}

  /**
   * A failure of `what`: `line` is logged (at `level`) when it is the first of an interval,
   * otherwise it is counted; `reason` (the error's message) goes into the summary.
   */
  failed(what: string, reason: string, level: Level = 'error', line = `${what} failed: ${reason}`): void {
    let kind = this.kinds.get(what);
    if (!kind) {
      kind = { level, timer: undefined, openedAt: 0, unreported: 0, lastReason: reason, failures: 0, failingSince: undefined, recoveryLogged: false };
      this.kinds.set(what, kind);
    }
    kind.lastReason = reason;
    kind.failures += 1;
    kind.failingSince ??= performance.now();
    if (kind.timer === undefined) {
      this.logger[level](line);
      kind.level = level;
      this.open(what, kind);
      return;
    }
    kind.unreported += 1;
    if (SEVERITY[level] > SEVERITY[kind.level]) kind.level = level;
  }

  /** `what` worked: after failures, one line says so (cheap when it had not failed). */
  recovered(what: string): void {
    const kind = this.kinds.get(what);
    if (kind?.failingSince === undefined) return;
    if (!kind.recoveryLogged) {
      const count = `${kind.failures} failure${kind.failures === 1 ? '' : 's'}`;
      this.logger.log(`${what} works again after ${count} over ${formatDuration(performance.now() - kind.failingSince)} (last error: ${kind.lastReason}).`);
      kind.recoveryLogged = true;
      kind.unreported = 0;
    }
    kind.failures = 0;
    kind.failingSince = undefined;
    if (kind.timer === undefined) this.kinds.delete(what);
  }

  /** Writes the summaries still counted and forgets everything (at shutdown). */
  flush(): void {
    for (const [what, kind] of this.kinds) {
      clearTimeout(kind.timer);
      this.summarise(what, kind, performance.now() - kind.openedAt);
    }
    this.kinds.clear();
  }

  private open(what: string, kind: Kind): void {
    kind.openedAt = performance.now();
    kind.unreported = 0;
    kind.recoveryLogged = false;
    if (this.intervalMs === 0) return; // no interval: the next failure is logged at once too
    kind.timer = setTimeout(() => this.close(what, kind), this.intervalMs);
    kind.timer.unref();
  }

  private close(what: string, kind: Kind): void {
    kind.timer = undefined;
    const told = this.summarise(what, kind, this.intervalMs);
    if (kind.failingSince === undefined) this.kinds.delete(what);
    // Still failing after a summary: keep counting, so the next line is the next summary.
    else if (told) this.open(what, kind);
  }

  /** Tells the failures no line has told yet, over the last `ms`. */
  private summarise(what: string, kind: Kind, ms: number): boolean {
    if (kind.unreported === 0) return false;
    const times = `${kind.unreported} more time${kind.unreported === 1 ? '' : 's'}`;
    const since = formatDuration(ms);
    const now = kind.failingSince === undefined ? '; it works again now' : '';
    this.logger[kind.level](`${what} failed ${times} in the last ${since} (last error: ${kind.lastReason})${now}.`);
    kind.unreported = 0;
    return true;
  }
}

function formatDuration(ms: number): string {
  if (Math.round(ms) < 1_000) return `${Math.round(ms)} ms`;
  return `${Number((ms / 1_000).toFixed(ms < 10_000 ? 1 : 0))} s`;
}
