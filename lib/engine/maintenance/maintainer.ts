import { InvalidOptionError } from '../errors.js';
import { HOSTED_PASS_UNKNOWN } from '../messages.js';
import type { HostablePass, MaintenanceService } from './service.js';

/**
 * Starts the engine's maintenance services as a list, in order, and stops them in reverse. A
 * service whose fixed-interval pass a host runs instead (`hosted`) is not started at all.
 */
export class Maintainer {
  private started: MaintenanceService[] = [];

  constructor(private readonly services: readonly MaintenanceService[]) {}

  /** The fixed-interval passes, in start order; `wrap` lets the engine put its error mapping around each. */
  hostablePasses(wrap: (pass: () => Promise<unknown>) => Promise<unknown> = (pass) => pass()): HostablePass[] {
    return this.services.flatMap(({ name, fixedInterval: pass }) =>
      pass ? [{ name, label: pass.label, intervalMs: pass.intervalMs, runOnce: () => wrap(() => pass.runOnce()) }] : [],
    );
  }

  /**
   * Starts each service in turn, waiting for one before the next (the listener is up, or has
   * failed once, before the first pass). When one fails to start, the ones started are stopped.
   */
  async start(hosted: readonly string[] = []): Promise<void> {
    const hostable = new Set(this.hostablePasses().map((p) => p.name));
    for (const name of hosted) {
      if (!hostable.has(name)) throw new InvalidOptionError('hostedPasses', HOSTED_PASS_UNKNOWN(name), `Pass only names of PgQueue.hostablePasses: ${[...hostable].join(', ') || 'none'}.`);
    }
    try {
      for (const service of this.services) {
        if (service.fixedInterval && hosted.includes(service.name)) continue;
        await service.start();
        this.started.push(service);
      }
    } catch (error) {
      await this.stop();
      throw error;
    }
  }

  /**
   * Stops the started services in reverse order. Every stop is begun before any is awaited: a
   * service stopped later would otherwise go on running passes while an earlier one finishes its
   * own. Each stop is soft, so this resolves once every pass in progress has finished.
   */
  async stop(): Promise<void> {
    const stopping = this.started.splice(0).reverse().map((service) => service.stop());
    await Promise.all(stopping);
  }
}
