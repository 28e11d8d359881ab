import { Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { JobHandlerMetadata } from '../interfaces/index.js';
import type { QueueEventMetadata } from '../on-queue-event.decorator.js';
import { JOB_HANDLER_METADATA, PROCESSOR_METADATA, QUEUE_EVENT_METADATA, RECURRING_METADATA } from '../pg-queue.constants.js';
import type { RecurringMetadata } from '../recurring.decorator.js';

/**
 * The key that `@nestjs/schedule`'s `@Cron`, `@Interval` and `@Timeout` set on a method, and its
 * values (the package's `SchedulerType` enum). The package does not export the key (its
 * `schedule.constants.js` is not in its `exports`), and importing its enum statically would make
 * the optional peer mandatory, so both are spelled out here, as in
 * node_modules/@nestjs/schedule/dist/schedule.constants.js and dist/enums/scheduler-type.enum.js.
 */
const SCHEDULER_TYPE_METADATA = 'SCHEDULER_TYPE';
const SCHEDULE_DECORATORS: Readonly<Record<number, ScheduleDecorator>> = { 1: '@Cron', 2: '@Timeout', 3: '@Interval' };

export type ScheduleDecorator = '@Cron' | '@Interval' | '@Timeout';

/** Reads the module's metadata (and @nestjs/schedule's); the only place that knows their keys. */
@Injectable()
export class PgQueueMetadataAccessor {
  constructor(private readonly reflector: Reflector) {}

  /** The `@JobHandler()` metadata of a method (the function itself), if it has any. */
  getJobHandlerMetadata(target: Function): JobHandlerMetadata | undefined {
    return this.reflector.get<JobHandlerMetadata | undefined>(JOB_HANDLER_METADATA, target);
  }

  /** The `@Processor()` metadata of a class, if it has any. */
  getProcessorMetadata(target: Function): JobHandlerMetadata | undefined {
    return this.reflector.get<JobHandlerMetadata | undefined>(PROCESSOR_METADATA, target);
  }

  /** The `@Recurring()` schedules of a method or a class (none: an empty list). */
  getRecurringMetadata(target: Function): readonly RecurringMetadata[] {
    return this.reflector.get<RecurringMetadata[] | undefined>(RECURRING_METADATA, target) ?? [];
  }

  /** The `@OnQueueEvent()` metadata of a method, if it has any. */
  getQueueEventMetadata(target: Function): QueueEventMetadata | undefined {
    return this.reflector.get<QueueEventMetadata | undefined>(QUEUE_EVENT_METADATA, target);
  }

  /** Which of `@nestjs/schedule`'s decorators a method (the function itself) has, if any. */
  getScheduleDecorator(target: Function): ScheduleDecorator | undefined {
    const type = this.reflector.get<number | undefined>(SCHEDULER_TYPE_METADATA, target);
    return type === undefined ? undefined : SCHEDULE_DECORATORS[type];
  }
}
