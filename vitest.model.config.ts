import { defineConfig } from 'vitest/config';

// `npm run test:model -- --runs N [--seed S]`: the randomized model-based runs of the engine
// (test/model/), as many as asked; `npm test` runs a bounded number of them with the rest.
const oxc = { decorator: { legacy: true, emitDecoratorMetadata: true } } as const;

export default defineConfig({
  oxc,
  test: {
    globals: true,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    globalSetup: ['./test/support/global-setup.ts'],
    include: ['test/model/**/*.spec.ts'],
  },
});
