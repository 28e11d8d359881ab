import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Nest's DI reads constructor types from decorator metadata; without these switches oxc emits
  // none and injection silently yields undefined.
  oxc: { decorator: { legacy: true, emitDecoratorMetadata: true } },
  test: {
    globals: true,
    include: ['test/**/*.spec.ts', 'lib/**/*.spec.ts'],
    globalSetup: ['./test/support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
