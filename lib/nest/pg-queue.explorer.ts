import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModulesContainer } from '@nestjs/core';
import { HANDLER_DEFAULTS, InvalidOptionError, isQueueName, PgQueue, resolveHandlerOptions, type HandlerOptions, type Job, type JobContext } from '../engine/index.js';
import type { JobHandlerMetadata, PgQueueModuleOptions } from '../interfaces/index.js';
import { PG_QUEUE_ENGINE, PG_QUEUE_LOGGER_CONTEXT, PG_QUEUE_MODULE_OPTIONS } from '../pg-queue.constants.js';
import { DUPLICATE_HANDLER, DUPLICATE_HANDLER_FIX, FOR_ROOT_TWICE, FOR_ROOT_TWICE_FIX, HANDLERS_FOUND, NON_STATIC_HANDLER } from '../pg-queue.messages.js';
import { Queue } from '../queue.handle.js';
import { PgQueueMetadataAccessor } from './pg-queue-metadata.accessor.js';
import { toHandlerOptions } from './pg-queue.options.js';

/** A discovered handler: where it is (for messages) and what it handles. */
export interface DiscoveredHandler {
  readonly queue: string;
  /** `Class.method`, as messages name it. */
  readonly name: string;
  /** The module that declares the provider. */
  readonly moduleName: string | undefined;
}

/**
 * Finds `@JobHandler()` methods when the module initialises and registers them with the engine.
 * Discovery never starts anything: the orchestrator starts the engine at bootstrap, after every
 * provider's `onModuleInit` has run.
 *
 * Every provider and controller is scanned (`DiscoveryService.getProviders({ metadataKey })` does
 * not index method decorators).
 */
@Injectable()
export class PgQueueExplorer implements OnModuleInit {
  private readonly logger = new Logger(PG_QUEUE_LOGGER_CONTEXT);
  private readonly found = new Map<string, DiscoveredHandler>();
  private readonly scheduled: string[] = [];
  private readonly registered = new Set<string>();

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly metadataScanner: MetadataScanner,
    private readonly accessor: PgQueueMetadataAccessor,
    private readonly modules: ModulesContainer,
    @Inject(PG_QUEUE_ENGINE) private readonly engine: PgQueue,
    @Inject(PG_QUEUE_MODULE_OPTIONS) private readonly options: PgQueueModuleOptions,
  ) {}

  /** The handlers registered with the engine, one per queue. */
  get handlers(): readonly DiscoveredHandler[] {
    return [...this.found.values()];
  }

  /** The queues this process has handlers for. */
  get handledQueues(): string[] {
    return [...this.found.keys()];
  }

  /**
   * The app's `@Cron`/`@Interval`/`@Timeout` methods, as `Class.method (@Cron)`: the orchestrator
   * warns when they exist and no ScheduleModule is there to run them.
   */
  get scheduledMethods(): readonly string[] {
    return this.scheduled;
  }

  /** The queues of `registerQueue` handles in the application: declared at start. */
  get registeredQueues(): readonly string[] {
    return [...this.registered];
  }

  onModuleInit(): void {
    this.refuseSecondRoot();
    this.explore();
  }

  /**
   * A second forRoot (the @nestjs/bullmq habit of importing the module in each feature module)
   * would build a second engine, pool and set of passes: two reapers under one interval name is
   * the crash users saw, with a message that never named this module. Refused before anything
   * starts, naming the modules that import it.
   */
  private refuseSecondRoot(): void {
    const roots = this.discovery.getProviders().filter((wrapper) => wrapper.token === PgQueueExplorer);
    if (roots.length < 2) return;
    const hosts = new Set(roots.map((wrapper) => wrapper.host));
    const importers = [...this.modules.values()]
      .filter((module) => [...module.imports].some((imported) => hosts.has(imported)))
      .map((module) => module.metatype.name);
    throw new InvalidOptionError('PgQueueModule.forRoot', FOR_ROOT_TWICE(roots.length, [...new Set(importers)]), FOR_ROOT_TWICE_FIX());
  }

  private explore(): void {
    // Validated once here (the engine does the same) so a handler's bad option names its method.
    const defaults = resolveHandlerOptions('handlerDefaults', toHandlerOptions(this.options.handlerDefaults), HANDLER_DEFAULTS);
    const wrappers = [...this.discovery.getProviders(), ...this.discovery.getControllers()];
    for (const wrapper of wrappers) {
      const instance: unknown = wrapper.instance;
      if (instance === null || typeof instance !== 'object') continue;
      if (instance instanceof Queue) {
        this.registered.add(instance.name);
        continue;
      }
      const prototype: object | null = Object.getPrototypeOf(instance);
      if (!prototype) continue;
      for (const method of this.metadataScanner.getAllMethodNames(prototype)) {
        const fn = (instance as Record<string, unknown>)[method];
        if (typeof fn !== 'function') continue;
        const name = `${instance.constructor?.name ?? 'anonymous'}.${method}`;
        const schedule = this.accessor.getScheduleDecorator(fn);
        if (schedule) this.scheduled.push(`${name} (${schedule})`);
        const metadata = this.accessor.getJobHandlerMetadata(fn);
        if (!metadata) continue;
        if (!wrapper.isDependencyTreeStatic()) {
          this.logger.warn(NON_STATIC_HANDLER(name, metadata.queue));
          continue;
        }
        const handler = (job: Job, ctx: JobContext) => (fn as (job: Job, ctx: JobContext) => unknown).call(instance, job, ctx);
        this.register(metadata, { queue: metadata.queue, name, moduleName: wrapper.host?.name }, handler, defaults);
      }
    }
    this.logger.log(HANDLERS_FOUND(this.found.size, this.handledQueues));
  }

  private register(
    metadata: JobHandlerMetadata,
    handler: DiscoveredHandler,
    fn: (job: Job, ctx: JobContext) => unknown,
    defaults: HandlerOptions,
  ): void {
    if (!isQueueName(metadata.queue)) {
      throw new InvalidOptionError(
        `${handler.name} @JobHandler queue`,
        `${JSON.stringify(String(metadata.queue).slice(0, 80))} is not a valid queue name`,
        'Use 1-128 characters: letters, digits, "_", ".", ":" or "-", starting with a letter or digit.',
      );
    }
    const existing = this.found.get(metadata.queue);
    if (existing) {
      throw new InvalidOptionError('@JobHandler', DUPLICATE_HANDLER(metadata.queue, describe(existing), describe(handler)), DUPLICATE_HANDLER_FIX());
    }
    // The engine labels option errors with the queue; validating first under the method's name
    // ("EmailJobs.send.leaseMs") tells the user which decorator to fix.
    resolveHandlerOptions(handler.name, toHandlerOptions(metadata.options), defaults);
    this.engine.work(metadata.queue, fn, toHandlerOptions(metadata.options));
    this.found.set(metadata.queue, handler);
  }
}

function describe(handler: DiscoveredHandler): string {
  return handler.moduleName ? `${handler.name} (in ${handler.moduleName})` : handler.name;
}
