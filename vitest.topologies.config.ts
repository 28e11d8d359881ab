import { suiteConfig } from './vitest.suite.js';

// `npm run test:topologies`: the engine through a real PgBouncer (test/topologies/). Not part of
// `npm test` (vitest.config.ts excludes the folder): it needs the `pgbouncer` package, and starts
// a PostgreSQL and PgBouncers of its own, so it needs no DATABASE_URL and no global setup. Its
// files run one at a time: each case's bound is relative to its poll interval, and a second file
// competing for the two cores would only make the machine noisier.

export default suiteConfig(['test/topologies/**/*.spec.ts'], { testTimeout: 120_000, fileParallelism: false, globalSetup: [] });
