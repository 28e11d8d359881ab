/**
 * Test signals, after River's `testsignal`: the engine's long-running services say when something
 * happened (a pass ran, a batch was claimed, an attempt ended) so that a test awaits that moment
 * instead of polling the database or sleeping a guessed time.
 *
 * They cost nothing unless a test turns them on: a service holds its group as `undefined` and
 * signals through optional chaining (`this.testSignals?.passRan.signal({ … })`), which skips the
 * whole call, argument included, so production allocates nothing per event. Tests turn them on
 * with `testSignals(engine)` from `lib/testing` (not part of the package's root exports).
 */

import { PgQueueError } from './errors.js';
import { TEST_SIGNAL_TIMEOUT } from './messages.js';

/**
 * A test's wait on a signal gave up: `TEST_SIGNAL_TIMEOUT`, nothing matching was signalled in time
 * (the message names the signal and what it saw); `ENGINE_NOT_FOUND`, `testSignals(app)` was given
 * an application without a PgQueue engine. For the project's own tests, like the signals.
 */
export class TestSignalError extends PgQueueError {
  constructor(
    readonly code: 'TEST_SIGNAL_TIMEOUT' | 'ENGINE_NOT_FOUND',
    message: string,
  ) {
    super(message);
  }
}

/** How long a wait lasts when the test gives no timeout: long, since a noisy machine is slow, not wrong. */
export const TEST_SIGNAL_TIMEOUT_DEFAULT_MS = 10_000;

/**
 * Values kept for waits that have not come yet. A test that never waits on a busy signal would
 * otherwise grow it forever; past the bound, the oldest are dropped and the next wait that finds
 * nothing says so.
 */
const KEPT_MAX = 10_000;

interface Waiter<T> {
  readonly match: (value: T) => boolean;
  readonly resolve: (value: T) => void;
}

/**
 * One kind of event. Every value signalled since the signal was turned on is kept until a wait
 * takes it, so a wait that starts after the event still sees it (no race between "do" and "wait").
 */
export class TestSignal<T> {
  private readonly kept: T[] = [];
  private readonly waiters = new Set<Waiter<T>>();
  private dropped = 0;
  private seen = 0;

  constructor(readonly name: string) {}

  /** How many values were signalled since the signal was turned on (taken or not). */
  get count(): number {
    return this.seen;
  }

  /** Called by the engine. Hands the value to the first wait it matches, or keeps it. */
  signal(value: T): void {
    this.seen += 1;
    for (const waiter of this.waiters) {
      if (!waiter.match(value)) continue;
      this.waiters.delete(waiter);
      waiter.resolve(value);
      return;
    }
    if (this.kept.length >= KEPT_MAX) {
      this.kept.shift();
      this.dropped += 1;
    }
    this.kept.push(value);
  }

  /** The next value not taken by an earlier wait (River's WaitOrTimeout). */
  next(timeoutMs = TEST_SIGNAL_TIMEOUT_DEFAULT_MS): Promise<T> {
    return this.waitFor(() => true, timeoutMs);
  }

  /**
   * The first value not taken yet that `match` accepts, kept or still to come; values it skips stay
   * for other waits. Rejects after `timeoutMs`, naming the signal and what it did see.
   */
  waitFor(match: (value: T) => boolean, timeoutMs = TEST_SIGNAL_TIMEOUT_DEFAULT_MS): Promise<T> {
    const at = this.kept.findIndex(match);
    if (at !== -1) return Promise.resolve(this.kept.splice(at, 1)[0]!);
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new TestSignalError('TEST_SIGNAL_TIMEOUT', TEST_SIGNAL_TIMEOUT(this.name, timeoutMs, this.seen, this.kept.length, this.dropped)));
      }, timeoutMs);
      const waiter: Waiter<T> = {
        match,
        resolve: (value) => {
          clearTimeout(timer);
          resolve(value);
        },
      };
      this.waiters.add(waiter);
    });
  }

  /** Values signalled and not taken by any wait yet, oldest first (they stay kept). */
  unread(): readonly T[] {
    return [...this.kept];
  }

  /** Forgets what was kept (only the values `match` accepts, when given): later waits see what comes after. */
  clear(match?: (value: T) => boolean): void {
    if (match) {
      for (let i = this.kept.length - 1; i >= 0; i--) if (match(this.kept[i]!)) this.kept.splice(i, 1);
      return;
    }
    this.kept.length = 0;
    this.dropped = 0;
  }
}

/** A bounded maintenance pass ran to its end (from its own timer, or a host's direct call). */
export interface PassSignals<R> {
  readonly passRan: TestSignal<R>;
}

export type AttemptOutcome = 'succeeded' | 'retried' | 'dead' | 'released' | 'cancelled' | 'lost';

export interface WorkerTestSignals {
  /** A claim statement returned (an empty batch too: the claim ran and found nothing). */
  readonly batchClaimed: TestSignal<{ queue: string; jobIds: readonly string[] }>;
  /**
   * An attempt is over for this worker and its outcome written: succeeded, retried or dead (the
   * failure written), released (handed back), cancelled (the cancelled attempt ended), or lost
   * (the fence refused the write: the job is someone else's).
   */
  readonly attemptEnded: TestSignal<{ queue: string; jobId: string; outcome: AttemptOutcome }>;
}

export interface NotifierTestSignals {
  /** The listener heard its probe after a (re)connect: it listens. */
  readonly listening: TestSignal<{ at: number }>;
  /** The listener connection was lost (and reconnects on its backoff). */
  readonly lost: TestSignal<{ why: 'unreachable' | 'dropped' | 'deaf' }>;
  /** A notification for subscribers (not the listener's own probe) arrived. */
  readonly notification: TestSignal<{ topic: string; argument: string }>;
}

export interface CompleterTestSignals {
  /** One completion statement was written: the ids it carried and how many were applied. */
  readonly flushed: TestSignal<{ jobIds: readonly string[]; applied: number }>;
}

export interface ClusterEventsTestSignals {
  /** A flush of cross-process events ended: how many events, in how many NOTIFYs, and whether they committed. */
  readonly flushed: TestSignal<{ events: number; payloads: number; published: boolean }>;
}

/** Every service's signals of one engine. */
export interface EngineTestSignals {
  readonly worker: WorkerTestSignals;
  readonly reaper: PassSignals<{ reaped: number; dead: number; batches: number; cancelsEnded: number }>;
  readonly scheduler: PassSignals<{ promoted: number }>;
  readonly pruner: PassSignals<{ removed: number }>;
  readonly keyHandoffs: PassSignals<{ handed: number; waiting: number }>;
  /** The ticker's pass: what this process did with the due schedules. */
  readonly ticker: PassSignals<{ schedules: number; enqueued: number; missed: number; skipped: number }>;
  readonly notifier: NotifierTestSignals;
  readonly completer: CompleterTestSignals;
  readonly clusterEvents: ClusterEventsTestSignals;
}

export function createEngineTestSignals(): EngineTestSignals {
  return {
    worker: { batchClaimed: new TestSignal('worker.batchClaimed'), attemptEnded: new TestSignal('worker.attemptEnded') },
    reaper: { passRan: new TestSignal('reaper.passRan') },
    scheduler: { passRan: new TestSignal('scheduler.passRan') },
    pruner: { passRan: new TestSignal('pruner.passRan') },
    keyHandoffs: { passRan: new TestSignal('keyHandoffs.passRan') },
    ticker: { passRan: new TestSignal('ticker.passRan') },
    notifier: { listening: new TestSignal('notifier.listening'), lost: new TestSignal('notifier.lost'), notification: new TestSignal('notifier.notification') },
    completer: { flushed: new TestSignal('completer.flushed') },
    clusterEvents: { flushed: new TestSignal('clusterEvents.flushed') },
  };
}

/**
 * The key under which a PgQueue turns its services' signals on. A symbol that only the engine and
 * `lib/testing` import: not a method of the public class, so it is no part of the API.
 */
export const ENABLE_TEST_SIGNALS = Symbol('pg-queue:enable-test-signals');
