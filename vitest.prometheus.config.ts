import { defineConfig } from 'vitest/config';

// `npm run test:prometheus`: the checks that need Prometheus's own tools (Debian package
// `prometheus`, which provides promtool), so they are not part of `npm test`.
const oxc = { decorator: { legacy: true, emitDecoratorMetadata: true } } as const;

export default defineConfig({
  oxc,
  test: {
    globals: true,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    globalSetup: ['./test/support/global-setup.ts'],
    include: ['test/prometheus/**/*.spec.ts'],
  },
});
