import { Inject, Injectable, Logger, type OnModuleInit, type Type } from '@nestjs/common';
import { ContextIdFactory, DiscoveryService, MetadataScanner, ModuleRef, ModulesContainer } from '@nestjs/core';
import {
  checkUpcasters,
  CLUSTER_EVENT_NOT_PUBLISHED,
  CLUSTER_EVENT_NOT_PUBLISHED_FIX,
  CLUSTER_EVENTS_OFF,
  CLUSTER_EVENTS_OFF_FIX,
  HANDLER_DEFAULTS,
  InvalidOptionError,
  isQueueName,
  PgQueue,
  resolveHandlerOptions,
  type HandlerOptions,
  type Job,
  type JobContext,
  type JobEvent,
} from '../engine/index.js';
import type { JobHandlerMetadata, PgQueueModuleOptions } from '../interfaces/index.js';
import { PG_QUEUE_ENGINE, PG_QUEUE_LOGGER_CONTEXT, PG_QUEUE_MODULE_OPTIONS } from '../pg-queue.constants.js';
import { DUPLICATE_HANDLER, DUPLICATE_HANDLER_FIX, EVENT_LISTENER_FAILED, FOR_ROOT_TWICE, FOR_ROOT_TWICE_FIX, HANDLERS_FOUND, RECURRING_WITHOUT_HANDLER, RECURRING_WITHOUT_HANDLER_FIX } from '../pg-queue.messages.js';
import type { QueueEventMetadata } from '../on-queue-event.decorator.js';
import { Queue } from '../queue.handle.js';
import { PgQueueMetadataAccessor } from './pg-queue-metadata.accessor.js';
import type { RecurringMetadata } from '../recurring.decorator.js';
import { toHandlerOptions } from './pg-queue.options.js';

/** A provider or controller as discovery gives it (Nest's InstanceWrapper, named through the public API). */
type InstanceWrapper = ReturnType<DiscoveryService['getProviders']>[number];

/** A discovered handler: where it is (for messages) and what it handles. */
export interface DiscoveredHandler {
  readonly queue: string;
  /** `Class.method`, as messages name it. */
  readonly name: string;
  /** The module that declares the provider. */
  readonly moduleName: string | undefined;
  readonly decorator: '@JobHandler' | '@Processor';
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
    private readonly moduleRef: ModuleRef,
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
      const className = instance.constructor?.name ?? 'anonymous';
      const processor = typeof wrapper.metatype === 'function' ? this.accessor.getProcessorMetadata(wrapper.metatype) : undefined;
      if (processor) {
        const name = `${className}.process`;
        if (typeof (instance as Record<string, unknown>).process !== 'function') {
          throw new InvalidOptionError(`@Processor('${processor.queue}') ${className}`, `${className} has no process(job, ctx) method`, 'Implement JobProcessor: async process(job, ctx) { … }.');
        }
        this.register(processor, { queue: processor.queue, name, moduleName: wrapper.host?.name, decorator: '@Processor' }, this.bind(wrapper, 'process'), defaults);
        const process = (instance as Record<string, unknown>).process as Function;
        this.schedule(processor.queue, name, [...this.accessor.getRecurringMetadata(wrapper.metatype as Function), ...this.accessor.getRecurringMetadata(process)]);
      }
      for (const method of this.metadataScanner.getAllMethodNames(prototype)) {
        const fn = (instance as Record<string, unknown>)[method];
        if (typeof fn !== 'function') continue;
        const name = `${className}.${method}`;
        const schedule = this.accessor.getScheduleDecorator(fn);
        if (schedule) this.scheduled.push(`${name} (${schedule})`);
        const event = this.accessor.getQueueEventMetadata(fn);
        if (event) this.listen(event, name, this.bind(wrapper, method));
        const metadata = this.accessor.getJobHandlerMetadata(fn);
        const recurring = this.accessor.getRecurringMetadata(fn);
        if (!metadata) {
          // A @Recurring without a handler would never run anything: said at once, not at the first tick.
          if (recurring.length > 0 && !(processor && method === 'process')) {
            throw new InvalidOptionError(`${name} @Recurring`, RECURRING_WITHOUT_HANDLER(name), RECURRING_WITHOUT_HANDLER_FIX());
          }
          continue;
        }
        this.register(metadata, { queue: metadata.queue, name, moduleName: wrapper.host?.name, decorator: '@JobHandler' }, this.bind(wrapper, method), defaults);
        this.schedule(metadata.queue, name, recurring);
      }
    }
    this.logger.log(HANDLERS_FOUND(this.found.size, this.handledQueues));
  }

  /**
   * Calls `method` of the provider. A singleton's is called on its instance. A request-scoped
   * provider (or one that depends on one) gets a provider tree of its own per call, as Nest's
   * microservices build one per message: a context id, `REQUEST` registered as `{ job, ctx }` (or
   * `{ event }` for a listener), and the instance resolved in it.
   */
  private bind(wrapper: InstanceWrapper, method: string): (...args: unknown[]) => unknown {
    if (wrapper.isDependencyTreeStatic()) {
      const instance = wrapper.instance as Record<string, (...args: unknown[]) => unknown>;
      return (...args) => instance[method]!(...args);
    }
    const type = wrapper.metatype as Type<Record<string, (...args: unknown[]) => unknown>>;
    return async (...args) => {
      const contextId = ContextIdFactory.create();
      const [first, second] = args;
      this.moduleRef.registerRequestByContextId(args.length === 1 ? { event: first } : { job: first, ctx: second }, contextId);
      const instance = await this.moduleRef.resolve(type, contextId, { strict: false });
      return instance[method]!(...args);
    };
  }

  /**
   * An `@OnQueueEvent` method: called after each matching event of this process (or, `from:
   * 'cluster'`, of every publishing process); what it throws is logged. A cluster listener that
   * could never hear anything (the option off, or its type not published) fails the start here.
   */
  private listen(event: QueueEventMetadata, name: string, call: (event: JobEvent) => unknown): void {
    const failed = (error: unknown) => this.logger.error(EVENT_LISTENER_FAILED(name, event.type, error instanceof Error ? error.message : String(error)));
    const cluster = event.from === 'cluster';
    if (cluster) {
      const where = `@OnQueueEvent('${event.type}', { from: 'cluster' }) ${name}`;
      const types = this.engine.clusterEventTypes;
      if (types.length === 0) throw new InvalidOptionError('events.crossProcess', CLUSTER_EVENTS_OFF(where), CLUSTER_EVENTS_OFF_FIX());
      if (event.type !== '*' && !types.includes(event.type)) {
        throw new InvalidOptionError('events.crossProcess', CLUSTER_EVENT_NOT_PUBLISHED(where, event.type, types), CLUSTER_EVENT_NOT_PUBLISHED_FIX(event.type));
      }
    }
    const listener = (happened: JobEvent) => {
      if (event.type !== '*' && happened.type !== event.type) return;
      if (event.queue !== undefined && happened.queue !== event.queue) return;
      try {
        const result = call(happened);
        if (result instanceof Promise) result.catch(failed);
      } catch (error) {
        failed(error);
      }
    };
    if (cluster) this.engine.onClusterEvent(listener);
    else this.engine.onJobEvent(listener);
  }

  /** The `@Recurring` schedules of a handler, declared with the engine (errors name the method). */
  private schedule(queue: string, method: string, schedules: readonly RecurringMetadata[]): void {
    for (const { cron, options } of schedules) this.engine.recurring(queue, cron, options, `${method} @Recurring`);
  }

  private register(
    metadata: JobHandlerMetadata,
    handler: DiscoveredHandler,
    fn: (...args: unknown[]) => unknown,
    defaults: HandlerOptions,
  ): void {
    if (!isQueueName(metadata.queue)) {
      throw new InvalidOptionError(
        `${handler.name} ${handler.decorator} queue`,
        `${JSON.stringify(String(metadata.queue).slice(0, 80))} is not a valid queue name`,
        'Use 1-128 characters: letters, digits, "_", ".", ":" or "-", starting with a letter or digit.',
      );
    }
    const existing = this.found.get(metadata.queue);
    if (existing) {
      throw new InvalidOptionError(handler.decorator, DUPLICATE_HANDLER(metadata.queue, describe(existing), describe(handler)), DUPLICATE_HANDLER_FIX());
    }
    // The engine labels option errors with the queue; validating first under the method's name
    // ("EmailJobs.send.leaseMs") tells the user which decorator to fix.
    const { upcast, ...options } = metadata.options;
    resolveHandlerOptions(handler.name, toHandlerOptions(options), defaults);
    const run = fn as (job: Job, ctx: JobContext) => unknown;
    if (metadata.definition) this.engine.work(metadata.definition, run, { ...toHandlerOptions(options), upcast: checkUpcasters(handler.name, metadata.definition, upcast) });
    else if (upcast !== undefined) {
      throw new InvalidOptionError(`${handler.name}.upcast`, 'upcasters need a job definition', `Declare the handler with its defineJob() definition: ${handler.decorator}(MyJob, { upcast }).`);
    } else this.engine.work(metadata.queue, run, toHandlerOptions(options));
    this.found.set(metadata.queue, handler);
  }
}

function describe(handler: DiscoveredHandler): string {
  return handler.moduleName ? `${handler.name} (in ${handler.moduleName})` : handler.name;
}
