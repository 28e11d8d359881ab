import { defineConfig } from 'vitest/config';

// The shape of every suite's vitest config (npm test's own and the suites it does not run).
// Nest's DI reads constructor types from decorator metadata; without these switches oxc emits none
// and injection silently yields undefined.
export const oxc = { decorator: { legacy: true, emitDecoratorMetadata: true } } as const;

/** A suite of its own: these files, on a real PostgreSQL (global-setup starts one if DATABASE_URL is unset). */
export function suiteConfig(include: string[], test: { testTimeout?: number; fileParallelism?: boolean; globalSetup?: string[] } = {}) {
  return defineConfig({
    oxc,
    test: {
      globals: true,
      testTimeout: 30_000,
      hookTimeout: 60_000,
      globalSetup: ['./test/support/global-setup.ts'],
      include,
      ...test,
    },
  });
}
