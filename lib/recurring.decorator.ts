import type { CodeScheduleOptions } from './engine/index.js';
import { RECURRING_METADATA } from './pg-queue.constants.js';

/** What `@Recurring()` records: one entry per decorator, in the order they apply. */
export interface RecurringMetadata {
  readonly cron: string;
  readonly options: CodeScheduleOptions;
}

/**
 * Runs the handler's queue on a schedule: a job per tick, `payload` as its payload, exactly one
 * whatever the number of processes (docs/recurring-jobs.md). Put it on a `@JobHandler` method, or
 * on a `@Processor` class (or its `process` method); the queue is the handler's.
 *
 * ```ts
 * @JobHandler('reports')
 * @Recurring('0 3 * * *', { tz: 'Europe/Paris', payload: { kind: 'nightly' } })
 * async nightly(job: Job<{ kind: string }>) { … }
 * ```
 *
 * The schedule is a row in the database, declared when the application starts: a deploy that
 * changes it wins over the release before it (an older process restarting never brings its
 * version back), and one whose decorator is gone is paused, not deleted. Its name defaults to the
 * queue's; a second schedule of one queue needs `name`. Raise `version` to bring back a
 * definition that was replaced (a rollback). Schedules created at run time
 * (`QueueService.schedules.upsert`) are never touched by these.
 *
 * @publicApi
 */
export function Recurring(cron: string, options: CodeScheduleOptions = {}): MethodDecorator & ClassDecorator {
  return ((target: object, _key?: string | symbol, descriptor?: PropertyDescriptor) => {
    // On a method the metadata goes on the function (as SetMetadata does), on a class on the class.
    const holder: object = descriptor ? (descriptor.value as object) : target;
    const list = (Reflect.getMetadata(RECURRING_METADATA, holder) as RecurringMetadata[] | undefined) ?? [];
    Reflect.defineMetadata(RECURRING_METADATA, [...list, { cron, options }], holder);
    return descriptor;
  }) as MethodDecorator & ClassDecorator;
}
