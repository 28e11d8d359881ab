/**
 * The one lifecycle of the engine's long-running maintenance services (River's start/stop shape),
 * so the Maintainer starts and stops them as a list: the listener, the scheduler, the ticker, the
 * key handoff pass, the reaper and the pruner. Where a component does not fit (the workers, the completer),
 * docs/decisions.md says why.
 */
export interface MaintenanceService {
  /** Its name in the engine: `listener`, `scheduler`, `ticker`, `keyHandoffs`, `reaper`, `pruner`. */
  readonly name: string;
  /**
   * Starts the service's loop; a second call does nothing. It may resolve late (the listener
   * resolves once it hears its probe, or after its first failure): the Maintainer waits for it.
   */
  start(): void | Promise<void>;
  /** Soft stop: no new pass starts; resolves once the one in progress has finished. */
  stop(): Promise<void>;
  /**
   * Set by a service whose pass runs at a fixed interval (the reaper, the pruner): a host may run
   * that pass on a timer of its own instead (the Nest module, on the app's SchedulerRegistry), and
   * the Maintainer then leaves the service's own loop off, so one timer only ever runs it.
   * Sleep-until-due-or-woken services (the scheduler, the ticker, key handoffs) have none: their next pass
   * depends on the last one and on wake-ups, which a fixed host timer cannot follow.
   */
  readonly fixedInterval?: FixedIntervalPass;
}

/** A bounded pass at a fixed interval. */
export interface FixedIntervalPass {
  /** For log lines: "Reaper" (its failures read "Reaper pass failed: …"). */
  readonly label: string;
  readonly intervalMs: number;
  /** One bounded pass: what the service's own loop runs every `intervalMs`. */
  runOnce(): Promise<unknown>;
}

/** A fixed-interval pass a host may schedule (PgQueue.hostablePasses): the service's name and its pass. */
export interface HostablePass extends FixedIntervalPass {
  /** The service's name, as `StartOptions.hostedPasses` takes it. */
  readonly name: string;
}
