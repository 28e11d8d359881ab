import { describe, expect, it } from 'vitest';
import { findSchedulerRegistry } from '../../lib/nest/scheduler-registry.js';

const missing = (code: string, module = '@nestjs/schedule') => () => Promise.reject(Object.assign(new Error(`Cannot find module '${module}'`), { code }));

describe('findSchedulerRegistry when @nestjs/schedule cannot be loaded', () => {
  it('reads MODULE_NOT_FOUND (jest, CommonJS) like ERR_MODULE_NOT_FOUND (Node ESM): no ScheduleModule, not a failed start', async () => {
    await expect(findSchedulerRegistry({} as never, missing('ERR_MODULE_NOT_FOUND'))).resolves.toBeUndefined();
    await expect(findSchedulerRegistry({} as never, missing('MODULE_NOT_FOUND'))).resolves.toBeUndefined();
  });

  it('does not hide a broken install (a module it needs is missing)', async () => {
    await expect(findSchedulerRegistry({} as never, missing('ERR_MODULE_NOT_FOUND', 'cron'))).rejects.toThrow(/cron/);
  });
});
