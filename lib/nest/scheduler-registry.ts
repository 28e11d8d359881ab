import type { ModuleRef } from '@nestjs/core';
// Types only: erased from the emitted JavaScript, so loading the library never needs the package.
import type { SchedulerRegistry } from '@nestjs/schedule';

/**
 * The application's `SchedulerRegistry`, or undefined when it has none. `@nestjs/schedule` is an
 * optional peer: it is imported here, lazily, and only here (a static import anywhere would make
 * every app install it). The module never imports `ScheduleModule.forRoot()` itself: a second
 * `ScheduleModule` in an app that has its own mounts each of the app's `@Cron`/`@Interval`
 * methods twice. So the registry is the app's, found wherever it was imported (`strict: false`;
 * `ScheduleModule` is global).
 */
export async function findSchedulerRegistry(
  moduleRef: ModuleRef,
  load: () => Promise<typeof import('@nestjs/schedule')> = () => import('@nestjs/schedule'),
): Promise<SchedulerRegistry | undefined> {
  let schedule: typeof import('@nestjs/schedule');
  try {
    schedule = await load();
  } catch (error) {
    // Not installed: the app has no ScheduleModule. Any other failure (a broken install) is not
    // hidden.
    // ERR_MODULE_NOT_FOUND from Node's ESM loader; MODULE_NOT_FOUND from jest's module system
    // (and CommonJS resolution), which would otherwise fail every jest user without it.
    const code = (error as NodeJS.ErrnoException).code;
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && String((error as Error).message).includes('@nestjs/schedule')) return undefined;
    throw error;
  }
  try {
    return moduleRef.get(schedule.SchedulerRegistry, { strict: false });
  } catch {
    // Installed, but no module of the app imports ScheduleModule (get throws for an unknown token).
    return undefined;
  }
}
