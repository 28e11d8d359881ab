import type { LogThrottle } from '../log-throttle.js';

/** How a pass's failures are told: through the engine's LogThrottle, under the pass's name. */
export interface PassFailures {
  readonly log: LogThrottle;
  /** The kind, and the subject of its lines: "Reaper pass". */
  readonly what: string;
  /** Besides logging (a service that backs off after a failure). */
  readonly onError?: (error: unknown) => void;
}

/**
 * The loop of every pass-running maintenance service, River's lifecycle shape: `start()` runs the
 * pass, then sleeps `nextDelayMs()` and runs it again, until `stop()`; `stop()` is soft (the
 * current pass finishes). `trigger()` cuts the sleep short. Both kinds of service are this loop:
 *
 * - a fixed-interval pass (reaper, pruner): `nextDelayMs` is the interval, nothing triggers it. A
 *   host may drive its pass instead (see HostablePass in service.ts), and then never starts it;
 * - a sleep-until-due-or-woken pass (scheduler, key handoffs): the pass computes its own next
 *   delay (when the next job falls due, a backoff), and a NOTIFY or a statement triggers it early.
 *
 * Passes never overlap.
 */
export class PeriodicRunner {
  private timer: NodeJS.Timeout | undefined;
  private current: Promise<unknown> | undefined;
  private stopped = true;
  /** A trigger arrived during a pass: run again as soon as it ends. */
  private again = false;

  constructor(
    private readonly pass: () => Promise<unknown>,
    private readonly nextDelayMs: () => number,
    private readonly failures: PassFailures,
  ) {}

  get running(): boolean {
    return !this.stopped;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /** Runs a pass now, or right after the one in progress. */
  trigger(): void {
    if (this.stopped) return;
    if (this.current) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.current;
  }

  private schedule(delayMs: number): void {
    this.timer = setTimeout(() => {
      const { log, what, onError } = this.failures;
      this.current = this.pass()
        .then(
          () => log.recovered(what),
          (error: unknown) => {
            onError?.(error);
            // Every interval while the database is away: bounded (see LogThrottle).
            log.failed(what, (error as Error).message);
          },
        )
        .finally(() => {
          this.current = undefined;
          const again = this.again;
          this.again = false;
          if (!this.stopped) this.schedule(again ? 0 : this.nextDelayMs());
        });
    }, delayMs);
    this.timer.unref();
  }
}
