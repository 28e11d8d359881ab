#!/usr/bin/env node
// `npm test`: every suite that needs nothing beyond `npm install` (vitest, on a real PostgreSQL:
// DATABASE_URL, or a throwaway embedded one), then one line for each suite it did not run and what
// that suite needs (scripts/suites.mjs). Arguments go to vitest; its exit code is the result.
import { spawnSync } from 'node:child_process';

const vitest = spawnSync(process.execPath, ['scripts/with-postgres.mjs', 'vitest', 'run', ...process.argv.slice(2)], { stdio: 'inherit' });
spawnSync(process.execPath, ['scripts/suites.mjs', '--skipped'], { stdio: 'inherit' });
process.exit(vitest.status ?? 1);
