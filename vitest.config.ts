import { configDefaults, defineConfig } from 'vitest/config';
import { oxc } from './vitest.suite.js';

// oxc (vitest.suite.ts) on every project too: projects do not inherit the root's Vite options.

const shared = {
  globals: true,
  testTimeout: 30_000,
  hookTimeout: 60_000,
};

// Timing-sensitive files (crash, fairness, backlog, latency) live under test/serial/: they run one
// file at a time, after the parallel files have finished (sequence.groupOrder), so they never
// compete with them for the two cores.
const SERIAL = 'test/serial/**/*.spec.ts';
// Through a real PgBouncer, with servers of their own: `npm run test:topologies` (vitest.topologies.config.ts).
const TOPOLOGIES = 'test/topologies/**';

export default defineConfig({
  oxc,
  test: {
    // On the root config, not in the projects: it then runs once per run (not once per project).
    // It starts a throwaway PostgreSQL when DATABASE_URL is unset.
    globalSetup: ['./test/support/global-setup.ts'],
    projects: [
      {
        oxc,
        test: {
          ...shared,
          name: 'parallel',
          include: ['test/**/*.spec.ts', 'lib/**/*.spec.ts'],
          // test/prometheus/ needs promtool (Debian package `prometheus`): `npm run test:prometheus` runs it.
          // test/pg-newest/ checks the server is the newest major: `npm run test:pg-newest` runs it.
          // test/browser/ needs Chromium (Debian package `chromium`): `npm run test:browser` runs it.
          exclude: [...configDefaults.exclude, SERIAL, TOPOLOGIES, 'test/prometheus/**', 'test/pg-newest/**', 'test/browser/**'],
          sequence: { groupOrder: 0 },
        },
      },
      {
        oxc,
        test: {
          ...shared,
          name: 'serial',
          include: [SERIAL],
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
