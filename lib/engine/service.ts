import type { LogThrottle } from './log-throttle.js';

/** How a pass's failures are told: through the engine's LogThrottle, under the pass's name. */
export interface PassFailures {
  readonly log: LogThrottle;
  /** The kind, and the subject of its lines: "Reaper pass". */
  readonly what: string;
  /** Besides logging (a service that backs off after a failure). */
  readonly onError?: (error: unknown) => void;
}

/**
 * A periodic maintenance pass with River's lifecycle shape: `start()` runs the pass every
 * interval until `stop()`; `stop()` is soft (the current pass finishes). The pass itself is a
 * public method of each service, so a host (tests, or Nest's SchedulerRegistry) can drive it
 * instead of this timer. Passes never overlap.
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

/** Whether `promise` settles within `ms`; it is left running either way. */
export function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  return Promise.race([promise.then(() => true, () => true), timeout]).finally(() => clearTimeout(timer));
}
