import {
  Inject,
  Injectable,
  Logger,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { InvalidOptionError, LogThrottle, PgQueue, type HostablePass } from '../engine/index.js';
import { PG_QUEUE_ENGINE, PG_QUEUE_LOGGER_CONTEXT, passIntervalName } from '../pg-queue.constants.js';
import {
  INTERVAL_TAKEN,
  INTERVAL_TAKEN_FIX,
  PASS_FAILED,
  PROCESSING_DISABLED,
  PROCESSING_OFF,
  SCHEDULE_MODULE_MISSING,
  START_FAILED,
  STARTED,
  STOPPED,
  STOPPING,
  WORKERS_NOT_AUTOSTARTED,
  WORKERS_STARTED,
} from '../pg-queue.messages.js';
import { PgQueueExplorer } from './pg-queue.explorer.js';
import { PG_QUEUE_RUNTIME_CONFIG } from './pg-queue.providers.js';
import type { ModuleRuntimeConfig } from './pg-queue.options.js';
import { findSchedulerRegistry } from './scheduler-registry.js';

/** A fixed-interval pass of the engine, run from SchedulerRegistry instead of its own timer. */
interface MaintenancePass {
  /** Its interval's name in the registry (`pg-queue:reaper`). */
  readonly name: string;
  /** The pass in progress: passes never overlap, and shutdown waits for it. */
  current: Promise<void> | undefined;
}

/**
 * Runs what the explorer registered. Bootstrap: migrate, start the workers (unless
 * `processing: false`), declare the producer's queues, and run the engine's fixed-interval
 * maintenance passes (`PgQueue.hostablePasses`: the reaper's, the pruner's) on exactly one timer
 * each: when the app imports `ScheduleModule`, every one is registered with its
 * `SchedulerRegistry` as `pg-queue:<name>` (visible and managed like any other interval) and the
 * engine leaves its own loop off; without it, they run on the engine's own timers. The
 * module never imports `ScheduleModule` itself (see `findSchedulerRegistry`). Shutdown, in
 * `beforeApplicationShutdown` (before any provider's `onApplicationShutdown` closes what handlers
 * use): remove the intervals, stop claiming, let running handlers finish within
 * `shutdownTimeoutMs`, abort and release the rest (fenced), then close an owned pool.
 */
@Injectable()
export class PgQueueOrchestrator implements OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown {
  private readonly logger = new Logger(PG_QUEUE_LOGGER_CONTEXT);
  private readonly passes: MaintenancePass[] = [];
  /** The passes fail at every tick while the database is away: logged like the engine's own (bounded). */
  private readonly failures: LogThrottle;
  /** The app's registry, resolved at bootstrap; undefined: the engine's own timers run the passes. */
  private schedulerRegistry: SchedulerRegistry | undefined;
  private stopping: Promise<void> | undefined;

  constructor(
    @Inject(PG_QUEUE_ENGINE) private readonly engine: PgQueue,
    @Inject(PG_QUEUE_RUNTIME_CONFIG) private readonly config: ModuleRuntimeConfig,
    private readonly explorer: PgQueueExplorer,
    private readonly moduleRef: ModuleRef,
  ) {
    this.failures = new LogThrottle(this.logger, config.engine.failureLogIntervalMs);
  }

  async onApplicationBootstrap(): Promise<void> {
    const { processing, autoStart } = this.config;
    try {
      // Before the engine starts: whether the app has a registry decides who runs the timers.
      this.schedulerRegistry = await findSchedulerRegistry(this.moduleRef);
      const hosted = this.schedulerRegistry ? this.engine.hostablePasses : [];
      await this.engine.start({ hostedPasses: hosted.map((pass) => pass.name), workers: processing && autoStart });
      await this.engine.declareQueues([...new Set([...this.config.queues, ...this.explorer.registeredQueues])]);
      const registry = this.schedulerRegistry;
      if (registry) for (const pass of this.engine.hostablePasses) this.schedule(registry, pass);
    } catch (error) {
      this.logger.error(START_FAILED((error as Error).message));
      // The application is not going to run, and Nest does not call the shutdown hooks of an
      // application whose bootstrap failed: take back every interval this registered and stop the
      // engine (its timers, listener and pool) now, so nothing keeps running after the failure.
      this.unschedule();
      await this.engine.stop(0).catch(() => {});
      throw error;
    }
    if (!processing && this.explorer.handledQueues.length > 0) this.logger.warn(PROCESSING_DISABLED(this.explorer.handledQueues));
    if (processing && !autoStart) this.logger.log(WORKERS_NOT_AUTOSTARTED());
    if (!this.schedulerRegistry && this.explorer.scheduledMethods.length > 0) {
      // Without a ScheduleModule these methods never fire, and nothing else says so (an app that
      // relied on the ScheduleModule earlier versions of this module imported for it).
      this.logger.warn(SCHEDULE_MODULE_MISSING(this.explorer.scheduledMethods));
    }
    this.logger.log(STARTED(this.engine.workerId, this.engine.schema, processing));
  }

  /** `QueueService.startProcessing()`: the workers of this process's handlers, when `autoStart` was false or they were stopped. */
  async startProcessing(): Promise<void> {
    if (!this.config.processing) throw new InvalidOptionError('processing', PROCESSING_OFF(), 'Set processing: true where handlers should run.');
    await this.engine.startWorkers();
    this.logger.log(WORKERS_STARTED(this.explorer.handledQueues));
  }

  /** `QueueService.stopProcessing()`: stops claiming; running handlers get `shutdownTimeoutMs`, as at shutdown. */
  stopProcessing(): Promise<void> {
    return this.engine.stopWorkers(this.config.shutdownTimeoutMs);
  }

  beforeApplicationShutdown(): Promise<void> {
    this.stopping ??= this.stop();
    return this.stopping;
  }

  /**
   * Nothing is left to do when `beforeApplicationShutdown` ran (it always does in `app.close()`):
   * the engine already stopped and closed its own pool. Both hooks share one stop, and the
   * engine's `stop()` is idempotent, so the pool is never closed twice; a pool passed in `pool`
   * is never closed.
   */
  onApplicationShutdown(): Promise<void> {
    return this.beforeApplicationShutdown();
  }

  private schedule(registry: SchedulerRegistry, { name, label, intervalMs, runOnce }: HostablePass): void {
    const pass: MaintenancePass = { name: passIntervalName(name), current: undefined };
    const failures = this.failures;
    const what = `${label} pass`;
    const tick = () => {
      if (pass.current) return;
      pass.current = runOnce()
        .then(
          () => failures.recovered(what),
          (error: unknown) => {
            const reason = (error as Error).message;
            failures.failed(what, reason, 'error', PASS_FAILED(label, reason));
          },
        )
        .finally(() => {
          pass.current = undefined;
        });
    };
    const timer = setInterval(tick, intervalMs);
    try {
      registry.addInterval(pass.name, timer);
    } catch (error) {
      // Another interval has the name (the app's own, or a second engine's): this one must not run unregistered.
      clearInterval(timer);
      throw new InvalidOptionError('SchedulerRegistry', INTERVAL_TAKEN(pass.name, (error as Error).message), INTERVAL_TAKEN_FIX());
    }
    this.passes.push(pass);
  }

  /** Removes the intervals this registered (ScheduleModule's own shutdown may have cleared them already). */
  private unschedule(): void {
    const registry = this.schedulerRegistry;
    for (const pass of this.passes) {
      if (registry?.doesExist('interval', pass.name)) registry.deleteInterval(pass.name);
    }
  }

  private async stop(): Promise<void> {
    const startedAt = Date.now();
    this.unschedule();
    await Promise.all(this.passes.map((pass) => pass.current));
    this.failures.flush();
    const inFlight = this.explorer.handledQueues.reduce((sum, queue) => sum + this.engine.inFlight(queue), 0);
    this.logger.log(STOPPING(inFlight, this.config.shutdownTimeoutMs));
    await this.engine.stop(this.config.shutdownTimeoutMs);
    this.logger.log(STOPPED(Date.now() - startedAt));
  }
}
