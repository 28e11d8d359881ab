import { suiteConfig } from './vitest.suite.js';

// `npm run test:browser`: the dashboard in a real headless Chromium (Debian package `chromium`,
// driven by playwright-core with its executablePath), so it is not part of `npm test`.

export default suiteConfig(['test/browser/**/*.spec.ts'], { testTimeout: 60_000, fileParallelism: false });
